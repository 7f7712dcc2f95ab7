//! mock-mcp: the mock MCP backend the end-to-end tests run (stdio by default,
//! Streamable HTTP with `--http ADDR`). All of it lives in
//! `tether_smol::mock_backend`; `mock-mcp --help` lists the flags.

use std::process::ExitCode;

use tether_smol::mock_backend::{self, MockOptions};

fn main() -> ExitCode {
    match mock_backend::run(MockOptions::from_command_line()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-mcp: {e}");
            ExitCode::FAILURE
        }
    }
}
