//! mock-mcp: the mock MCP backend the end-to-end tests run (stdio by default,
//! Streamable HTTP with `--http ADDR`). All of it lives in the `tether-mock`
//! crate, built here with its `http` feature; `mock-mcp --help` lists the flags.

use std::process::ExitCode;

use tether_mock::MockOptions;

fn main() -> ExitCode {
    match tether_mock::run(MockOptions::from_command_line()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mock-mcp: {e}");
            ExitCode::FAILURE
        }
    }
}
