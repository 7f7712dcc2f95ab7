//! `tether restart NAME`, `tether reconnect NAME` and `tether logs NAME`: asked
//! of every running tether serving the config file, over the control channel
//! ([`tether_host::control`]).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use serde_json::Value;
use tether_host::control::{self, AskError, Request};

use crate::commands::status::local::not_running;
use crate::commands::status::table::clean;

/// Exit codes: done; tether refused (an unknown backend); no tether reached.
const DONE: u8 = 0;
const REFUSED: u8 = 1;
const UNREACHABLE: u8 = 2;

/// Sends `request` to every tether serving `config`; prints what each said.
/// `logs` requests print the lines; the others print one line per tether.
pub fn run(config: Option<&Path>, request: &Request) -> ExitCode {
    let mut reached = 0;
    let mut refused = false;
    let instances = control::instances(config);
    let several = instances.len() > 1;
    let mut out = String::new();
    for name in &instances {
        match control::ask(name, request) {
            Ok(reply) => {
                reached += 1;
                let pid = reply["pid"].to_string();
                out.push_str(&describe(request, &reply, several.then_some(pid.as_str())));
            }
            Err(AskError::Unreachable(_)) => {}
            Err(AskError::Refused(message)) => {
                reached += 1;
                refused = true;
                eprintln!("tether: {message}");
            }
        }
    }
    if reached == 0 {
        eprintln!("tether: {}", not_running(config));
        return ExitCode::from(UNREACHABLE);
    }
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush());
    ExitCode::from(if refused { REFUSED } else { DONE })
}

/// What one tether's answer says, as lines (`pid`: which tether, when several).
fn describe(request: &Request, reply: &Value, pid: Option<&str>) -> String {
    let who = pid.map_or_else(String::new, |pid| format!("[pid {pid}] "));
    match request {
        Request::Restart { server } => format!("{who}restarting {server}\n"),
        Request::Reconnect { server } => format!("{who}reconnecting {server}\n"),
        Request::Logs { .. } => {
            let mut out = String::new();
            for line in reply["lines"].as_array().into_iter().flatten() {
                let at = line["at"].as_u64().unwrap_or(0);
                // A backend's stderr, printed to a terminal: its escape sequences
                // are shown, never obeyed.
                let source = clean(line["source"].as_str().unwrap_or("?"));
                let text = clean(line["text"].as_str().unwrap_or(""));
                out.push_str(&format!(
                    "{who}{:>9}  {source:<6}  {text}\n",
                    crate::commands::status::table::human_ms(at)
                ));
            }
            out
        }
        Request::Status => reply["status"].to_string() + "\n",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backends_escape_sequences_are_shown_not_obeyed() {
        // OSC 52 (write the clipboard), a screen clear, a carriage return over the
        // line, a bidirectional override.
        let planted = "ok\u{1b}]52;c;cm0gLXJm\u{7}\u{1b}[2J\rfake\u{202e}txt";
        let reply = serde_json::json!({"lines": [{"at": 1000, "source": "stderr\u{1b}[31m", "text": planted}]});
        let out = describe(&Request::Logs { server: "x".into(), lines: Some(1) }, &reply, None);
        assert!(!out.chars().any(|c| c.is_control() && c != '\n'), "{out:?}");
        assert!(!out.contains('\u{202e}'), "{out:?}");
        assert!(out.contains("\\u{1b}]52;c;cm0gLXJm") && out.contains("\\r") && out.contains("\\u{202e}"), "{out:?}");
    }
}
