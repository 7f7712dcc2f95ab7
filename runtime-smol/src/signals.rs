//! What the operating system asks of `tether serve`: to stop (SIGTERM, SIGINT;
//! on Windows the console's Ctrl-C, Ctrl-Break, close, logoff or shutdown), which
//! ends the session like a closed stdin, or to reload its config (SIGHUP, unix
//! only). The one place the runtime listens for either, per platform.

use tether_core::Input;

use crate::client_stdio::STDIO_SESSION;

/// SIGTERM/SIGINT end the session like a closed stdin; SIGHUP reloads the config.
#[cfg(unix)]
pub async fn handle_signals(
    path: Option<std::path::PathBuf>,
    flags: tether_host::flags::PolicyFlags,
    inputs: async_channel::Sender<Input>,
) {
    use futures_lite::StreamExt;

    let Ok(mut signals) =
        async_signal::Signals::new([async_signal::Signal::Term, async_signal::Signal::Int, async_signal::Signal::Hup])
    else {
        return;
    };
    while let Some(Ok(signal)) = signals.next().await {
        match signal {
            async_signal::Signal::Hup => {
                // The inputs channel is unbounded: the reload is queued at once.
                tether_host::reload::reload_config(path.as_deref(), &flags, |input| {
                    let _ = inputs.try_send(input);
                });
            }
            _ => {
                tracing::info!("signal {signal:?}: shutting down");
                let _ = inputs.send(Input::ClientClosed { session: STDIO_SESSION }).await;
            }
        }
    }
}

/// The console's Ctrl-C, Ctrl-Break or close ends the session like a closed
/// stdin (see [`tether_host::platform::on_console_stop`]). There is no SIGHUP:
/// the config is reloaded by restarting.
#[cfg(windows)]
pub async fn handle_signals(
    _path: Option<std::path::PathBuf>,
    _flags: tether_host::flags::PolicyFlags,
    inputs: async_channel::Sender<Input>,
) {
    let (tx, rx) = async_channel::unbounded::<()>();
    let registered = tether_host::platform::on_console_stop(move || {
        let _ = tx.try_send(());
    });
    if let Err(e) = registered {
        tracing::warn!("cannot listen for the console's Ctrl-C: {e}");
        return;
    }
    while rx.recv().await.is_ok() {
        tracing::info!("console stop request: shutting down");
        let _ = inputs.send(Input::ClientClosed { session: STDIO_SESSION }).await;
    }
}
