//! The `serve` and `replay` commands and what they share: logging, loading the
//! configuration, applying command-line policy flags.

use std::path::Path;
use std::process::ExitCode;

use futures_lite::StreamExt;
use tether_core::{Config, Input};

use crate::cli::Cli;
use crate::client_stdio::{read_stdin, write_stdout, STDIO_SESSION};
use crate::config_file;
use crate::host::Host;

/// Logs to stderr only: stdout is the protocol.
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

/// Loads the configuration named on the command line (or the default path) and
/// applies the policy flags.
pub fn load_config(cli: &Cli) -> Result<Config, String> {
    let path = match &cli.config {
        Some(p) => p.clone(),
        None => match config_file::default_path() {
            Some(p) if p.exists() => p,
            Some(p) => return Err(format!("no --config given and no file at the default path {}", p.display())),
            None => return Err("no --config given and no default path (set HOME or TETHER_CONFIG)".into()),
        },
    };
    let mut config = config_file::load(&path).map_err(|e| e.to_string())?;
    apply_flags(cli, &mut config);
    config.validate().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(config)
}

fn apply_flags(cli: &Cli, config: &mut Config) {
    if let Some(t) = cli.policy.failure_threshold {
        config.policy.breaker_threshold = t;
    }
    if let Some(s) = cli.policy.cooldown {
        config.policy.breaker_cooldown_ms = s.saturating_mul(1000);
    }
    if let Some(s) = cli.policy.request_timeout {
        config.policy.request_timeout_ms = s.saturating_mul(1000);
        config.policy.request_timeout_max_ms =
            config.policy.request_timeout_max_ms.max(config.policy.request_timeout_ms);
    }
}

/// The seed from the flags, or one from the clock.
pub fn seed(cli: &Cli) -> u64 {
    cli.policy.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
    })
}

/// Builds a host, recording if asked.
pub fn host(cli: &Cli, config: &Config) -> Result<Host, String> {
    let seed = seed(cli);
    let mut host = Host::new(config.clone(), seed).map_err(|e| e.to_string())?;
    if let Some(path) = &cli.record {
        let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        host.record_to(file, config, seed).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(host)
}

/// `tether serve`: one client over stdio until it leaves or a signal arrives.
/// SIGHUP reloads the configuration file.
pub fn serve(cli: &Cli) -> Result<ExitCode, String> {
    let config = load_config(cli)?;
    let mut host = host(cli, &config)?;
    tracing::info!("tether {} serving {} backend(s) over stdio", env!("CARGO_PKG_VERSION"), config.servers.len());
    let max_frame = config.limits.max_frame_bytes as usize;
    let config_path = cli_config_path(cli);
    // The host loop runs on the executor thread that also runs every I/O task, so
    // handing a frame from a reader to the engine and on to a writer is a queue
    // push, not a cross-thread wake-up.
    smol::block_on(smol::spawn(async move {
        let (frames, frames_rx) = async_channel::unbounded();
        host.attach_client(STDIO_SESSION, frames);
        let inputs = host.inputs();
        smol::spawn(read_stdin(inputs.clone(), max_frame)).detach();
        let writer = smol::spawn(write_stdout(frames_rx));
        smol::spawn(handle_signals(config_path, inputs)).detach();
        host.run(|_, input| matches!(input, Input::ClientClosed { session } if *session == STDIO_SESSION)).await;
        host.shutdown().await;
        drop(host);
        let _ = futures_lite::future::or(writer, async {
            async_io::Timer::after(std::time::Duration::from_millis(500)).await;
        })
        .await;
    }));
    Ok(ExitCode::SUCCESS)
}

fn cli_config_path(cli: &Cli) -> Option<std::path::PathBuf> {
    cli.config.clone().or_else(config_file::default_path)
}

/// SIGTERM/SIGINT end the session like a closed stdin; SIGHUP reloads the config.
async fn handle_signals(path: Option<std::path::PathBuf>, inputs: async_channel::Sender<Input>) {
    let Ok(mut signals) =
        async_signal::Signals::new([async_signal::Signal::Term, async_signal::Signal::Int, async_signal::Signal::Hup])
    else {
        return;
    };
    while let Some(Ok(signal)) = signals.next().await {
        match signal {
            async_signal::Signal::Hup => {
                let Some(path) = &path else { continue };
                match config_file::load(path) {
                    Ok(config) => {
                        tracing::info!("reloading {}", path.display());
                        let _ = inputs.send(Input::ConfigReloaded { config }).await;
                    }
                    Err(e) => tracing::error!("reload failed, keeping the running config: {e}"),
                }
            }
            _ => {
                tracing::info!("signal {signal:?}: shutting down");
                let _ = inputs.send(Input::ClientClosed { session: STDIO_SESSION }).await;
            }
        }
    }
}

/// `tether replay TRACE`: the actions a trace produces, one per line.
pub fn replay(path: &Path, json: bool) -> Result<ExitCode, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let actions = tether_core::trace::replay(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    if json {
        for (at, action) in &actions {
            let line = serde_json::json!({ "at": at, "action": action });
            println!("{line}");
        }
    } else {
        print!("{}", tether_core::trace::render(&actions));
    }
    Ok(ExitCode::SUCCESS)
}
