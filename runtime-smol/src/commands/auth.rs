//! `tether auth login|status|logout`: a person's side of remote servers that use
//! OAuth. Credentials land in the same store a running tether reads, so a login
//! here brings a backend that waits for one online without a restart.

use std::io::Write;
use std::process::ExitCode;

use tether_host::credentials::Credentials;

use crate::cli::{AuthCommand, Cli};
use crate::serve::load_config;

/// Runs one `tether auth` command.
pub fn run(cli: &Cli, command: &AuthCommand) -> Result<ExitCode, String> {
    let config = load_config(cli)?;
    let path = tether_host::flags::config_path(cli.config.as_deref());
    let mut credentials = Credentials::from_config_file(path.as_deref())?;
    credentials.sync(&config);
    let managed = |name: &str| {
        credentials.authority(name).ok_or_else(|| match config.servers.get(name) {
            None => format!("no server named '{name}' in the configuration"),
            Some(s) if s.transport.is_stdio() => format!("'{name}' is a local (stdio) server: it has no login"),
            Some(_) => format!(
                "tether does not manage a login for '{name}': it sends its own Authorization header or has \"oauth\": false"
            ),
        })
    };
    let mut out = std::io::stdout();
    match command {
        AuthCommand::Login { name } => {
            let summary = managed(name)?.login_blocking(&mut out)?;
            let expiry = summary.expires_at.map(|at| format!(", expires {}", in_from_now(at))).unwrap_or_default();
            let renew = if summary.refreshable { "renews itself" } else { "does not renew itself" };
            let scope = summary.scope.map(|s| format!(" (scope {s:?})")).unwrap_or_default();
            println!("Logged in to {name} at {}{scope}{expiry}; the login {renew}.", summary.issuer);
            Ok(ExitCode::SUCCESS)
        }
        AuthCommand::Logout { name } => {
            managed(name)?.logout()?;
            println!("Logged out of {name}: its stored credential is deleted.");
            Ok(ExitCode::SUCCESS)
        }
        AuthCommand::Status => {
            let names: Vec<&String> = config.servers.keys().filter(|n| credentials.authority(n).is_some()).collect();
            if names.is_empty() {
                println!("No remote server in the configuration uses a login that tether manages.");
                return Ok(ExitCode::SUCCESS);
            }
            // Exit 1 when a server waits for a person: it holds no usable token and
            // asks for a login. A server that has never asked for one (tether holds
            // nothing for it) is asked once; a public server is no failure.
            let mut all_in = true;
            for name in names {
                let authority = credentials.authority(name).expect("listed");
                let status = authority.status();
                let untried = !status.logged_in && status.issuer.is_none() && !status.login_pending;
                if untried && status.person_logs_in {
                    match authority.asks_for_login() {
                        Ok(true) => {
                            all_in = false;
                            let _ = writeln!(
                                out,
                                "{name}: {status}; the server asks for a login: tether auth login {name}"
                            );
                        }
                        Ok(false) => {
                            let _ = writeln!(out, "{name}: no login needed (the server answers without one)");
                        }
                        Err(e) => {
                            let _ =
                                writeln!(out, "{name}: {status}; could not ask the server whether it needs one: {e}");
                        }
                    }
                    continue;
                }
                all_in &= status.logged_in;
                let _ = writeln!(out, "{name}: {status}");
            }
            Ok(if all_in { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
    }
}

/// "in 59 min" / "2 min ago" for a unix time.
fn in_from_now(at: u64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    match at.checked_sub(now) {
        Some(secs) if secs >= 120 => format!("in {} min", secs / 60),
        Some(secs) => format!("in {secs} s"),
        None => format!("{} s ago", now - at),
    }
}
