//! `tether status` without `--url`: every tether serving the config file,
//! found and asked over the control channel ([`tether_host::control`]), so a
//! tether that runs as a client's stdio child, with no HTTP listener, is seen
//! too. `--watch` asks again every second.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::process::ExitCode;

use tether_host::control::{self, AskError, Request};

use super::table::{self, Report, View};
use super::{fail, terminal_width, use_color, ALL_ONLINE, NOT_ALL_ONLINE, TICK};
use crate::cli::StatusArgs;

/// One tether's answer: its endpoint, the body as sent, and what it says.
struct Answer {
    pid: String,
    body: String,
    report: Report,
}

/// Runs `tether status` over the control channel for `config`.
pub fn run(args: &StatusArgs, config: Option<&Path>) -> ExitCode {
    let terminal = std::io::stdout().is_terminal();
    let color = use_color(args.color, terminal, std::env::var_os("NO_COLOR"), std::env::var_os("CLICOLOR_FORCE"));
    loop {
        let answers = match ask_all(config) {
            Ok(answers) => answers,
            Err(e) if args.watch => {
                redraw(terminal, &format!("tether status: {e}\n"));
                std::thread::sleep(TICK);
                continue;
            }
            Err(e) => return fail(&e),
        };
        let width = terminal.then(terminal_width).flatten();
        let mut text = String::new();
        for answer in &answers {
            if args.json {
                text.push_str(answer.body.trim_end());
                text.push('\n');
                continue;
            }
            if !text.is_empty() {
                text.push('\n');
            }
            let view = View { url: format!("pid {}", answer.pid), color, width, age_ms: 0 };
            text.push_str(&table::render(&answer.report, &view));
        }
        if !args.watch {
            let mut stdout = std::io::stdout().lock();
            let _ = stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush());
            let all_online = answers.iter().all(|a| a.report.all_online());
            return ExitCode::from(if all_online { ALL_ONLINE } else { NOT_ALL_ONLINE });
        }
        redraw(terminal, &text);
        std::thread::sleep(TICK);
    }
}

/// Clears the screen (on a terminal) and shows `text`.
fn redraw(terminal: bool, text: &str) {
    let mut stdout = std::io::stdout().lock();
    let clear = if terminal { "\x1b[H\x1b[2J" } else { "" };
    let _ = write!(stdout, "{clear}{text}").and_then(|()| stdout.flush());
}

/// Every reachable tether serving `config`, asked for its status; `Err` says
/// why there is none.
fn ask_all(config: Option<&Path>) -> Result<Vec<Answer>, String> {
    let mut answers = Vec::new();
    let mut problems = Vec::new();
    for name in control::instances(config) {
        match control::ask(&name, &Request::Status) {
            Ok(reply) => {
                let body = reply["status"].to_string();
                let report = Report::parse(&body).map_err(|e| format!("{name}: {e}"))?;
                let pid = reply["pid"].to_string();
                answers.push(Answer { pid, body, report });
            }
            // One that just exited, or one that crashed and left its endpoint.
            Err(AskError::Unreachable(_)) => {}
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    if answers.is_empty() {
        return Err(match problems.first() {
            Some(problem) => problem.clone(),
            None => not_running(config),
        });
    }
    Ok(answers)
}

/// What to say when no tether serving `config` answers.
pub fn not_running(config: Option<&Path>) -> String {
    let file = config.map_or_else(|| "no config file".to_string(), |p| p.display().to_string());
    format!(
        "no running tether serves {file} (looked for its control channel in {}). Is one running with this \
         --config? One started with --no-control, or elsewhere, can be reached with --url if it serves HTTP",
        control::endpoint_dir()
    )
}
