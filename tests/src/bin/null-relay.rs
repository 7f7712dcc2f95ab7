//! null-relay: the smallest possible stdio proxy, the baseline `tether-bench`
//! compares tether with.
//!
//! `null-relay COMMAND [ARGS...]` runs COMMAND with piped stdin and stdout (stderr is
//! inherited) and copies bytes, as they arrive, from its own stdin to the child's
//! stdin and from the child's stdout to its own stdout: one thread each way, one
//! read and one write per chunk, no parsing, no buffering beyond the chunk. When its
//! stdin ends it closes the child's stdin; when the child's stdout ends it exits
//! with the child's exit code.

use std::io::{self, Read, Write};
use std::process::{Command, ExitCode, Stdio};
use std::thread;

/// Copies `from` to `to` chunk by chunk until EOF or an error on either side.
fn pump(mut from: impl Read, mut to: impl Write) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).and_then(|()| to.flush()).is_err() {
            return;
        }
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(program) = args.next() else {
        eprintln!("usage: null-relay COMMAND [ARGS...]");
        return ExitCode::from(2);
    };
    let mut child = match Command::new(&program).args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("null-relay: cannot start {}: {e}", program.to_string_lossy());
            return ExitCode::from(2);
        }
    };
    let child_stdin = child.stdin.take().expect("piped stdin");
    let child_stdout = child.stdout.take().expect("piped stdout");
    // Dropping the child's stdin when our stdin ends tells it to stop.
    thread::spawn(move || pump(io::stdin().lock(), child_stdin));
    pump(child_stdout, io::stdout().lock());
    match child.wait() {
        Ok(status) => ExitCode::from(status.code().map_or(1, |c| c as u8)),
        Err(_) => ExitCode::FAILURE,
    }
}
