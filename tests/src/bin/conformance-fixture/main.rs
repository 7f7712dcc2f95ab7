//! conformance-fixture: a stdio MCP server with exactly the surface the server
//! scenarios of the official conformance suite (`@modelcontextprotocol/conformance`,
//! see `tests/conformance/`) call, so the suite can be run against tether with this
//! program as tether's backend. Two modes, one per era of the protocol, because
//! tether must serve clients of either era from backends of either era:
//!
//! - `conformance-fixture`: MCP 2025-11-25, with the `initialize` handshake and
//!   server-to-client requests ([`handshake`]; runs c and d of
//!   `tests/conformance/run.sh`);
//! - `conformance-fixture --stateless`: MCP 2026-07-28 only, no handshake,
//!   per-request `_meta`, `input_required` results instead of server-to-client
//!   requests, `subscriptions/listen` ([`stateless`]; run e).
//!
//! Both offer the same catalog ([`catalog`]) and the tools of the `tasks-*`
//! scenarios ([`tasks_tools`]: `greet`, `slow_compute`, `failing_job`,
//! `protocol_error_job`, `confirm_delete`, `multi_input`, `test_tool_with_task`).
//! The handshake mode has no tasks: the gateway in front runs those tools as tasks.
//! The stateless mode implements the tasks extension itself ([`tasks`]), so the
//! gateway passes tasks through to it.
//!
//!
//! - Tools: `test_simple_text`, `test_image_content`, `test_audio_content`,
//!   `test_embedded_resource`, `test_multiple_content_types`, `test_tool_with_logging`
//!   and `test_logging_tool` (three `info` log messages 50 ms apart),
//!   `test_tool_with_progress` (progress 0, 50, 100 of 100 on the request's
//!   `progressToken`), `test_error_handling` (an `isError` result), `test_reconnection`
//!   (an ordinary result: closing an SSE stream mid-call is the HTTP front's
//!   business), `test_sampling` and `test_elicitation`, `test_elicitation_sep1034_defaults`,
//!   `test_elicitation_sep1330_enums`, `json_schema_2020_12_tool` (a JSON Schema
//!   2020-12 input schema that must reach the client unchanged), the `input_required`
//!   scenarios' `test_input_required_result_*` (elicitation, sampling, list_roots,
//!   request_state, tampered_state, multi_round, multiple_inputs, capabilities),
//!   the stateless scenario's `test_missing_capability` (needs sampling),
//!   `test_streaming_elicitation`, `test_trigger_tool_change` and
//!   `test_trigger_prompt_change` (add or remove `test_dynamic_tool` /
//!   `test_dynamic_prompt` and announce it), and `test_custom_headers`, whose
//!   `region` carries `x-mcp-header: Region` (SEP-2243 `Mcp-Param-Region`).
//! - Resources: `test://static-text`, `test://static-binary`, `test://watched-resource`
//!   (subscribable; while subscribed it changes every 3 s and a
//!   `notifications/resources/updated` is sent), and the template
//!   `test://template/{id}/data`; stateless mode adds the template
//!   `test://input-required/{topic}`, whose read asks the user. An unknown URI is
//!   error -32602 with `data.uri`.
//! - Prompts: `test_simple_prompt`, `test_prompt_with_arguments`,
//!   `test_prompt_with_embedded_resource`, `test_prompt_with_image`, and
//!   `test_input_required_result_prompt` (asks the user for context).
//! - `completion/complete` for prompt arguments and the template's `id`.
//!
//! Wire: newline-delimited JSON-RPC 2.0 on stdin/stdout, one message per line; stderr
//! carries diagnostics only. Bad input never panics: it is answered with a JSON-RPC
//! error (`id: null` when the request's id cannot be known). End of stdin ends the
//! process.

mod catalog;
mod handshake;
mod request_state;
mod stateless;
mod tasks;
mod tasks_tools;
mod wire;

use std::io::{self, BufRead};
use std::process::ExitCode;
use std::sync::Arc;

fn main() -> ExitCode {
    let mut stateless = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--stateless" => stateless = true,
            "-h" | "--help" => {
                println!("usage: conformance-fixture [--stateless]\n\nA stdio MCP server for the conformance suite: MCP 2025-11-25 (handshake), or with --stateless MCP 2026-07-28 only.");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("conformance-fixture: unknown argument '{other}' (usage: conformance-fixture [--stateless])");
                return ExitCode::from(2);
            }
        }
    }
    let handle: Box<dyn Fn(&str)> = if stateless {
        let server = Arc::new(stateless::Server::default());
        server.start();
        Box::new(move |line| server.handle_line(line))
    } else {
        let fixture = Arc::new(handshake::Fixture::default());
        fixture.start();
        Box::new(move |line| fixture.handle_line(line))
    };
    for line in io::stdin().lock().lines() {
        match line {
            Ok(line) => handle(&line),
            Err(e) => {
                eprintln!("conformance-fixture: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    ExitCode::SUCCESS
}
