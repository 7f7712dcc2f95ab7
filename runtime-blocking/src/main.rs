//! The `tether-blocking` binary: the stdio gateway on plain threads. It reads the
//! same configuration files and takes the same flags as `tether` (stdio only:
//! serving over HTTP needs the `tether` binary).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

use clap::{Args, Parser, Subcommand};
use tether_blocking::{Host, LineReader, PipeWriter};
use tether_host::flags::{config_path, load_config, PolicyFlags};

/// tether-blocking: the tether MCP gateway on plain threads (stdio).
#[derive(Debug, Parser)]
#[command(name = "tether-blocking", version, about, long_about = None)]
struct Cli {
    /// Configuration file (Claude Desktop `mcpServers`, VS Code `servers`, with an optional `tether` section).
    #[arg(long, short, global = true, env = "TETHER_CONFIG")]
    config: Option<PathBuf>,
    /// Write every input to this file as a trace (replay it with `tether replay`).
    #[arg(long, global = true)]
    record: Option<PathBuf>,
    /// Log level for stderr (error, warn, info, debug, trace) or a tracing filter
    /// (default: info, status changes and warnings).
    #[arg(long, global = true, env = "TETHER_LOG")]
    log_level: Option<String>,
    /// More log detail: once for debug (backends' stderr, process starts and exits), twice for trace.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Less log detail: once for warnings only, twice for errors only.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    quiet: u8,
    #[command(flatten)]
    policy: PolicyFlags,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the configured backends as one MCP server over stdio (the default).
    Serve(ServeArgs),
}

#[derive(Debug, Default, Args)]
struct ServeArgs {
    /// Not available on this runtime: use `tether serve --listen`.
    #[arg(long, value_name = "ADDR", hide = true)]
    listen: Option<String>,
}

/// Why `serve` stops.
enum Stop {
    /// The client closed stdin.
    Eof,
    /// SIGTERM or SIGINT (on Windows, the console's Ctrl-C or close): what came.
    Signal(&'static str),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tether_host::logging::init_logging(&tether_host::logging::level(
        cli.log_level.as_deref(),
        "info",
        cli.verbose,
        cli.quiet,
    ));
    // Whatever a backend leaves behind is reparented to tether, which kills it.
    tether_host::process_tree::become_subreaper();
    tether_host::process_tree::sweep_at_start();
    match serve(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tether-blocking: {message}");
            ExitCode::from(2)
        }
    }
}

/// `tether.authorization` protects the HTTP listener, which this binary does not
/// have: a config that sets it says so at start instead of seeming to protect
/// anything (the stdio client is trusted whole, as in `tether`).
fn warn_authorization_unused(path: Option<&std::path::Path>) {
    let Some(path) = path else { return };
    if let Ok(Some(_)) = tether_host::config_file::authorization_section(path) {
        tracing::warn!(
            "tether.authorization has no effect in tether-blocking: it serves stdio only, and the stdio \
             client sees every server; use `tether serve --listen` for OAuth-protected clients"
        );
    }
}

fn serve(cli: &Cli) -> Result<(), String> {
    if let Some(Command::Serve(ServeArgs { listen: Some(_) })) = &cli.command {
        return Err("--listen is not available in tether-blocking (stdio only); use `tether serve --listen`".into());
    }
    let watch = tether_host::reload::watch(config_path(cli.config.as_deref()).as_deref(), &cli.policy);
    let config = load_config(cli.config.as_deref(), &cli.policy)?;
    warn_authorization_unused(config_path(cli.config.as_deref()).as_deref());
    let max_frame = config.limits.max_frame_bytes as usize;
    let backends = config.servers.len();
    let credentials =
        tether_host::credentials::Credentials::from_config_file(config_path(cli.config.as_deref()).as_deref())?;
    let mut builder = Host::builder(config).seed(cli.policy.seed()).credentials(credentials);
    if let Some(path) = &cli.record {
        builder = builder.record(std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let host = builder.start().map_err(|e| e.to_string())?;

    let writer = PipeWriter::stdout().map_err(|e| format!("stdout: {e}"))?;
    let outflow = writer.backlog().clone();
    let writer = Arc::new(Mutex::new(Some(writer)));
    let sink = writer.clone();
    let session = host.attach_bounded(
        move |frame, _| {
            if let Some(w) = sink.lock().expect("stdout writer").as_mut() {
                w.send(&frame);
            }
        },
        outflow.clone(),
    );
    tracing::info!("tether {} serving {backends} backend(s) over stdio (blocking runtime)", env!("CARGO_PKG_VERSION"));

    let (stop, stopped) = channel();
    let (handle, on_eof) = (host.handle(), stop.clone());
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            for line in LineReader::new(std::io::stdin(), max_frame, 64 * 1024) {
                // The answers must be read before more questions are taken.
                outflow.wait_room();
                // The core answers an unreadable frame with the right JSON-RPC error.
                handle.send(session, line.unwrap_or_else(|e| format!("<{e}>")));
            }
            handle.close(session);
            let _ = on_eof.send(Stop::Eof);
        })
        .map_err(|e| format!("cannot start the stdin reader: {e}"))?;

    let path = config_path(cli.config.as_deref());
    let _control = tether_host::control::start(path.as_deref(), cli.policy.no_control, host.handle());
    let (feed, close) = (host.handle(), host.handle());
    tether_host::reload::listen(
        path,
        cli.policy.clone(),
        watch,
        move |input| feed.input(input),
        move |why| {
            close.close(session);
            let _ = stop.send(Stop::Signal(why));
        },
    );

    match stopped.recv() {
        Ok(Stop::Signal(why)) => tracing::info!("{why}: shutting down"),
        Ok(Stop::Eof) | Err(_) => tracing::info!("stdin closed: shutting down"),
    }
    host.shutdown();
    if let Some(w) = writer.lock().expect("stdout writer").take() {
        w.close_within(tether_host::lifecycle::CLIENT_FLUSH);
    }
    Ok(())
}
