//! What the operating system asks of `tether-blocking` while it serves: to stop
//! (SIGTERM, SIGINT; on Windows the console's Ctrl-C, Ctrl-Break, close, logoff
//! or shutdown) or to reload its config (SIGHUP, unix only). The one place the
//! binary differs by platform.

/// One request from the operating system.
pub enum Request {
    /// Stop serving: what asked, for the log ("signal 15", ...).
    Stop(String),
    /// Read the config file again (SIGHUP: unix only).
    #[cfg_attr(windows, allow(dead_code))]
    Reload,
}

/// Calls `on` for every request from now on, on a thread of its own.
#[cfg(unix)]
pub fn listen(mut on: impl FnMut(Request) + Send + 'static) -> Result<(), String> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                on(if signal == SIGHUP { Request::Reload } else { Request::Stop(format!("signal {signal}")) });
            }
        })
        .map_err(|e| format!("cannot start the signal handler: {e}"))?;
    Ok(())
}

/// Calls `on` for every request from now on, on a thread of its own.
#[cfg(windows)]
pub fn listen(mut on: impl FnMut(Request) + Send + 'static) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for () in rx {
                on(Request::Stop("console stop request".into()));
            }
        })
        .map_err(|e| format!("cannot start the signal handler: {e}"))?;
    tether_host::platform::on_console_stop(move || {
        let _ = tx.send(());
    })
    .map_err(|e| format!("cannot listen for the console's Ctrl-C: {e}"))
}
