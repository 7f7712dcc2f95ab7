//! Logging to stderr (stdout is the protocol), and how core events are logged.

use tether_core::Event;

/// Logs to stderr only, at `level` (a level name or a tracing filter).
pub fn init_logging(level: &str) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(level).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .try_init();
}

/// Logs one core event: recoveries and discoveries at info, trouble at warn.
pub fn log_event(event: &Event) {
    match event {
        Event::ServerStatusChanged { .. }
        | Event::ServerReconnected { .. }
        | Event::ServerHealthRestored { .. }
        | Event::CircuitClosed { .. }
        | Event::ToolsDiscovered { .. } => tracing::info!("{event}"),
        Event::ServerDisconnected { intentional: true, .. } => tracing::info!("{event}"),
        _ => tracing::warn!("{event}"),
    }
}
