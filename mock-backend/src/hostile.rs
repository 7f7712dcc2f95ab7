//! Hostile modes, for the tests that tether survives misbehaving backends: a
//! process left behind, floods on stdout and stderr, a stdout closed early.

use std::io::{self, Write};
use std::sync::Arc;
use std::{fs, process};

use serde_json::json;

use crate::protocol::{notification, Outlet};
use crate::Grandchild;

/// Starts `sleep 3600` holding our stdout and stderr, where `place` says.
pub(crate) fn spawn_grandchild(place: Grandchild, pid_file: Option<&std::path::Path>) -> io::Result<()> {
    let mut sleep = process::Command::new("sleep");
    sleep.arg("3600").stdin(process::Stdio::null());
    #[cfg(unix)]
    if place == Grandchild::NewSession {
        use std::os::unix::process::CommandExt;
        // SAFETY: setsid is async-signal-safe and touches only the new process.
        unsafe {
            sleep.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
    }
    // Elsewhere the grandchild stays in our group (no sessions to leave).
    #[cfg(not(unix))]
    let _ = place;
    let child = sleep.spawn()?;
    let pid = child.id();
    // Not waited for: it is meant to be left behind.
    std::mem::forget(child);
    eprintln!("grandchild pid {pid}");
    if let Some(path) = pid_file {
        let mut file = fs::OpenOptions::new().create(true).append(true).open(path)?;
        writeln!(file, "{pid}")?;
    }
    Ok(())
}

/// Writes numbered lines to stderr as fast as the pipe takes them, forever.
pub(crate) fn flood_stderr() {
    let mut stderr = io::stderr().lock();
    let mut buf = String::new();
    let mut n: u64 = 0;
    loop {
        buf.clear();
        while buf.len() < 64 * 1024 {
            n += 1;
            buf.push_str(&format!("flood {n}: the quick brown fox jumps over the lazy dog\n"));
        }
        if stderr.write_all(buf.as_bytes()).is_err() {
            return;
        }
    }
}

/// Writes `notifications/message` to `outlet` as fast as it takes them, forever.
pub(crate) fn flood_stdout(outlet: Arc<dyn Outlet>) {
    let padding = "x".repeat(1000);
    for n in 0u64.. {
        outlet.send(&notification(
            "notifications/message",
            json!({"level": "info", "logger": "flood", "data": format!("{n} {padding}")}),
        ));
    }
}

/// Points stdout at /dev/null: the pipe to the client closes, and later writes
/// go nowhere (rather than into whatever file would reuse descriptor 1).
pub(crate) fn close_stdout() {
    let _ = io::stdout().flush();
    #[cfg(unix)]
    {
        use std::os::fd::AsRawFd;
        if let Ok(null) = fs::OpenOptions::new().write(true).open("/dev/null") {
            // SAFETY: dup2 onto descriptor 1, which stays valid (now /dev/null).
            unsafe {
                libc::dup2(null.as_raw_fd(), 1);
            }
        }
    }
}

/// Writes `bytes` of `x` to stdout, in 1 MiB writes, with no newline: a line no
/// frame bound admits (the reader must drop it, not hold it).
pub(crate) fn junk_line(bytes: usize) {
    let chunk = vec![b'x'; 1 << 20];
    let mut out = io::stdout().lock();
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        if out.write_all(&chunk[..n]).is_err() {
            return;
        }
        left -= n;
    }
    let _ = out.flush();
}
