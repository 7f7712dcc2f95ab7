//! The `tether-blocking` binary: the stdio gateway on plain threads. It reads the
//! same configuration files and takes the same flags as `tether` (stdio only:
//! serving over HTTP needs the `tether` binary).

use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

use clap::{Args, Parser, Subcommand};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
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
    /// Log level for stderr (error, warn, info, debug, trace) or a tracing filter.
    #[arg(long, global = true, default_value = "info", env = "TETHER_LOG")]
    log_level: String,
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

/// Whether stdout is a pipe that stderr does not share, so making it
/// non-blocking (a write is then tried in place, without asking poll(2) first)
/// cannot make log lines fail. Terminals and files keep their flags.
fn stdout_is_a_private_pipe() -> bool {
    fn stat(fd: i32) -> Option<libc::stat> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat fills the buffer when it returns 0.
        (unsafe { libc::fstat(fd, st.as_mut_ptr()) } == 0).then(|| unsafe { st.assume_init() })
    }
    let (Some(out), err) = (stat(1), stat(2)) else { return false };
    let fifo = out.st_mode & libc::S_IFMT == libc::S_IFIFO;
    let shared = err.is_some_and(|e| e.st_dev == out.st_dev && e.st_ino == out.st_ino);
    fifo && !shared
}

/// Why `serve` stops.
enum Stop {
    /// The client closed stdin.
    Eof,
    /// SIGTERM or SIGINT.
    Signal(i32),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    tether_host::logging::init_logging(&cli.log_level);
    // Whatever a backend leaves behind is reparented to tether, which kills it.
    tether_host::process_tree::become_subreaper();
    match serve(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("tether-blocking: {message}");
            ExitCode::from(2)
        }
    }
}

fn serve(cli: &Cli) -> Result<(), String> {
    if let Some(Command::Serve(ServeArgs { listen: Some(_) })) = &cli.command {
        return Err("--listen is not available in tether-blocking (stdio only); use `tether serve --listen`".into());
    }
    let config = load_config(cli.config.as_deref(), &cli.policy)?;
    let max_frame = config.limits.max_frame_bytes as usize;
    let backends = config.servers.len();
    let credentials =
        tether_host::credentials::Credentials::from_config_file(config_path(cli.config.as_deref()).as_deref())?;
    let mut builder = Host::builder(config).seed(cli.policy.seed()).credentials(credentials);
    if let Some(path) = &cli.record {
        builder = builder.record(std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?);
    }
    let host = builder.start().map_err(|e| e.to_string())?;

    let stdout = std::io::stdout().as_fd().try_clone_to_owned().map_err(|e| format!("stdout: {e}"))?;
    let stdout = std::fs::File::from(stdout);
    let writer = if stdout_is_a_private_pipe() {
        PipeWriter::new_nonblocking("stdout", stdout)
    } else {
        PipeWriter::new("stdout", stdout)
    };
    let writer = writer.map_err(|e| format!("stdout: {e}"))?;
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
    let (handle, flags) = (host.handle(), cli.policy.clone());
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP]).map_err(|e| e.to_string())?;
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal == SIGHUP {
                    tether_host::reload::reload_config(path.as_deref(), &flags, |input| handle.input(input));
                } else {
                    handle.close(session);
                    let _ = stop.send(Stop::Signal(signal));
                }
            }
        })
        .map_err(|e| format!("cannot start the signal handler: {e}"))?;

    match stopped.recv() {
        Ok(Stop::Signal(signal)) => tracing::info!("signal {signal}: shutting down"),
        Ok(Stop::Eof) | Err(_) => tracing::info!("stdin closed: shutting down"),
    }
    host.shutdown();
    if let Some(w) = writer.lock().expect("stdout writer").take() {
        w.close_within(tether_host::lifecycle::CLIENT_FLUSH);
    }
    Ok(())
}
