//! Opening the person's browser on the authorization URL. Best effort: the URL is
//! always reported too, so a failure here only means the person opens it by hand.
//!
//! `$BROWSER` wins when set (run as a program with the URL as its one argument, no
//! shell); else `open` on macOS, `rundll32 url.dll,FileProtocolHandler` on Windows
//! (it takes the URL as one argument, unlike `cmd /c start`, which would read the
//! `&` in the URL as a command separator), `xdg-open` elsewhere.

use std::process::{Command, Stdio};

/// The program and leading arguments that open a URL here.
fn opener() -> (String, Vec<&'static str>) {
    if let Some(browser) = std::env::var_os("BROWSER").filter(|b| !b.is_empty()) {
        return (browser.to_string_lossy().into_owned(), Vec::new());
    }
    match std::env::consts::OS {
        "macos" => ("open".into(), Vec::new()),
        "windows" => ("rundll32".into(), vec!["url.dll,FileProtocolHandler"]),
        _ => ("xdg-open".into(), Vec::new()),
    }
}

/// Starts the browser on `url` and returns without waiting for it (a thread
/// reaps the opener when it exits).
pub(super) fn open(url: &str) -> Result<(), String> {
    let (program, args) = opener();
    let mut child = Command::new(&program)
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("could not start {program}: {e}"))?;
    std::thread::Builder::new()
        .name("tether-browser".into())
        .spawn(move || {
            let _ = child.wait();
        })
        .map(drop)
        .map_err(|e| format!("could not wait for {program}: {e}"))
}
