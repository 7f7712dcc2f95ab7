//! The `tether` binary.

use std::process::ExitCode;

use clap::Parser;
use tether_host::control::Request;
use tether_smol::cli::{Cli, Command};
use tether_smol::commands::{auth, check, control, demo, import, replay, status};
use tether_smol::serve;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let base = match cli.command {
        None | Some(Command::Serve(_)) => "info",
        // They print their own report of what happened.
        Some(Command::Check | Command::Demo) => "error",
        _ => "warn",
    };
    serve::init_logging(&tether_host::logging::level(cli.log_level.as_deref(), base, cli.verbose, cli.quiet));
    if matches!(cli.command, None | Some(Command::Serve(_) | Command::Check | Command::Demo)) {
        // Whatever a backend leaves behind is reparented to tether, which kills it.
        tether_host::process_tree::become_subreaper();
        tether_host::process_tree::sweep_at_start();
    }
    // The file a running tether serves, to find its control channel.
    let config = tether_host::flags::config_path(cli.config.as_deref());
    let result = match cli.command {
        None => serve::serve(&cli, &cli.serve),
        Some(Command::Serve(ref args)) => serve::serve(&cli, args),
        Some(Command::Check) => check::run(&cli),
        Some(Command::Auth(ref command)) => auth::run(&cli, command),
        Some(Command::Status(ref args)) => Ok(status::run(args, config.as_deref())),
        Some(Command::Restart { ref name }) => {
            Ok(control::run(config.as_deref(), &Request::Restart { server: name.clone() }))
        }
        Some(Command::Reconnect { ref name }) => {
            Ok(control::run(config.as_deref(), &Request::Reconnect { server: name.clone() }))
        }
        Some(Command::Logs { ref name, lines }) => {
            Ok(control::run(config.as_deref(), &Request::Logs { server: name.clone(), lines: Some(lines) }))
        }
        Some(Command::Import(ref args)) => import::run(&cli, args),
        Some(Command::Replay { ref trace, json }) => replay::replay(trace, json),
        Some(Command::Demo) => demo::run(),
        Some(Command::MockBackend(ref opts)) => {
            tether_mock::run(opts.clone()).map(|_| ExitCode::SUCCESS).map_err(|e| e.to_string())
        }
    };
    match result {
        Ok(code) => code,
        Err(message) => {
            eprintln!("tether: {message}");
            ExitCode::from(2)
        }
    }
}
