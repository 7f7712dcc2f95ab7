//! `tether serve` and what the commands share with it: logging, loading the
//! configuration, applying command-line policy flags, building a [`Host`].

use std::process::ExitCode;

use tether_core::{Config, Input};

use crate::cli::{Cli, ServeArgs};
use crate::serve::client_stdio::STDIO_SESSION;
use crate::serve::control::HostControl;
use crate::serve::host::Host;
use crate::serve::http_server::{HttpServer, ResourceGuard, ServerOptions};
use tether_host::resource_auth::{ResourceAuthSettings, TokenValidator};

/// Logs to stderr only: stdout is the protocol.
pub use tether_host::logging::init_logging;

/// Loads the configuration named on the command line (or the default path) and
/// applies the policy flags.
pub fn load_config(cli: &Cli) -> Result<Config, String> {
    tether_host::flags::load_config(cli.config.as_deref(), &cli.policy)
}

/// The seed from the flags, or one from the clock.
pub(super) fn seed(cli: &Cli) -> u64 {
    cli.policy.seed()
}

/// Builds a host (with a cluster's continuation keys, if any), recording if asked.
pub fn host(cli: &Cli, config: &Config, continuation_keys: &[(u8, [u8; 32])]) -> Result<Host, String> {
    let seed = seed(cli);
    let mut host = Host::new(config.clone(), seed).map_err(|e| e.to_string())?;
    host.set_continuation_keys(continuation_keys);
    host.set_credentials(tether_host::credentials::Credentials::from_config_file(cli_config_path(cli).as_deref())?);
    if let Some(path) = &cli.record {
        let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        host.record_to(file, config, seed).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(host)
}

/// `tether serve`: one client over stdio, and/or any number of Streamable HTTP
/// clients with `--listen`, until stdin ends (stdio) or a signal arrives.
/// The configuration file is reloaded when it changes (and on SIGHUP).
pub fn serve(cli: &Cli, args: &ServeArgs) -> Result<ExitCode, String> {
    let watch = tether_host::reload::watch(cli_config_path(cli).as_deref(), &cli.policy);
    let config = load_config(cli)?;
    let authorization = authorization(cli)?;
    if authorization.is_some() && args.auth_token.is_some() {
        return Err("--auth-token and tether.authorization both say how HTTP clients authenticate: keep one".into());
    }
    let oauth = authorization.is_some();
    let guard = |options: &ServerOptions| match &authorization {
        Some(settings) => resource_guard(settings, &config, options).map(Some),
        None => Ok(None),
    };
    let cluster = cluster(cli)?;
    let options = match &args.listen {
        Some(addr) => {
            let options = listen_options("--listen", addr, args, oauth)?;
            let resource_guard = guard(&options)?;
            let cluster = cluster.clone();
            Some(ServerOptions { stateless_clients: config.stateless_clients, resource_guard, cluster, ..options })
        }
        None => None,
    };
    let status_options = match &args.status_listen {
        Some(addr) => {
            let status = listen_options("--status-listen", addr, args, oauth)?;
            // The status endpoints take the MCP listener's tokens.
            let resource_guard = match options.as_ref().and_then(|o| o.resource_guard.clone()) {
                Some(guard) => Some(guard),
                None => guard(&status)?,
            };
            Some(ServerOptions { mcp: false, resource_guard, ..status })
        }
        None => None,
    };
    let stdio = options.is_none() || args.stdio;
    let drains = config.cluster.is_some() && options.is_some();
    let continuation_keys = cluster.as_ref().map(|c| c.keys.continuation_keys()).unwrap_or_default();
    let mut host = host(cli, &config, &continuation_keys)?;
    let max_frame = config.limits.max_frame_bytes as usize;
    let config_path = cli_config_path(cli);
    let flags = cli.policy.clone();
    let backends = config.servers.len();
    let transports = match (stdio, options.is_some()) {
        (true, true) => "stdio and HTTP",
        (true, false) => "stdio",
        _ => "HTTP",
    };
    // The host loop runs on the executor thread that also runs every I/O task, so
    // handing a frame from a reader to the engine and on to a writer is a queue
    // push, not a cross-thread wake-up.
    smol::block_on(smol::spawn(async move {
        let inputs = host.inputs();
        if let Some(options) = options {
            let addr = options.listen;
            let server = match HttpServer::bind(options, inputs.clone()) {
                Ok(server) => server,
                Err(e) => return Err(cannot_listen("--listen", addr, &e)),
            };
            // Scripts wait for this line to learn the port.
            tracing::info!("tether listening on http://{}/mcp", server.local_addr());
            server.serve_status(host.status_handle());
            if let Some(desk) = host.login_desk() {
                tracing::info!("login callback at http://{}{}", server.local_addr(), desk.path());
                server.serve_logins(desk)?;
            }
            host.attach_http(server);
        }
        // Kept alive for the whole run (dropping the handle does not stop it).
        let _status_server = match status_options {
            Some(options) => {
                // Its own session numbers: it never opens one, but keep them apart.
                let options = ServerOptions { first_session: 1 << 40, ..options };
                let addr = options.listen;
                let server = match HttpServer::bind(options, inputs.clone()) {
                    Ok(server) => server,
                    Err(e) => return Err(cannot_listen("--status-listen", addr, &e)),
                };
                tracing::info!("tether status on http://{}/", server.local_addr());
                server.serve_status(host.status_handle());
                Some(server)
            }
            None => None,
        };
        tracing::info!("tether {} serving {backends} backend(s) over {transports}", env!("CARGO_PKG_VERSION"));
        if stdio {
            host.attach_stdio(STDIO_SESSION, max_frame)?;
        }
        let control = HostControl::new(host.status_handle().queries);
        let _control = tether_host::control::start(config_path.as_deref(), flags.no_control, control);
        let (feed, stop) = (inputs.clone(), inputs);
        // A replica behind a balancer drains on a polite stop request; a second
        // request, or an interrupt, stops at once.
        let drains = drains && !stdio;
        let asked = std::sync::atomic::AtomicBool::new(false);
        tether_host::reload::listen(
            config_path,
            flags,
            watch,
            move |input| {
                // Unbounded: the reload is queued at once, from any thread.
                let _ = feed.try_send(input);
            },
            move |why| {
                let polite = matches!(why, "SIGTERM" | "console Ctrl-Break");
                if drains && polite && !asked.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    tracing::info!("{why}: draining (a second request stops at once)");
                    let _ = stop.try_send(Input::Drain);
                    return;
                }
                tracing::info!("{why}: shutting down");
                let _ = stop.try_send(Input::ClientClosed { session: STDIO_SESSION });
            },
        );
        host.run(|gw, closed| closed == Some(STDIO_SESSION) || gw.drained()).await;
        host.shutdown().await;
        Ok(())
    }))?;
    Ok(ExitCode::SUCCESS)
}

/// The config file's `tether.authorization`, when it has one.
fn authorization(cli: &Cli) -> Result<Option<ResourceAuthSettings>, String> {
    let Some(path) = cli_config_path(cli) else { return Ok(None) };
    if !path.exists() {
        return Ok(None);
    }
    let section = tether_host::config_file::authorization_section(&path).map_err(|e| e.to_string())?;
    let Some(value) = section else { return Ok(None) };
    let settings: ResourceAuthSettings =
        serde_json::from_value(value).map_err(|e| format!("{}: tether.authorization: {e}", path.display()))?;
    settings.check().map_err(|e| format!("{}: tether.{e}", path.display()))?;
    Ok(Some(settings))
}

/// The config file's `tether.cluster` key ring, when it has one.
fn cluster(cli: &Cli) -> Result<Option<std::sync::Arc<tether_host::cluster::ClusterSettings>>, String> {
    let Some(path) = cli_config_path(cli).filter(|p| p.exists()) else { return Ok(None) };
    Ok(tether_host::cluster::ClusterSettings::from_file(&path)?.map(std::sync::Arc::new))
}

/// The guard of an OAuth-protected listener. Its resource URL is the configured
/// one, else the listener's own URL when that is a loopback address with a port
/// (behind a proxy or on another address clients use another URL: it must be set).
fn resource_guard(
    settings: &ResourceAuthSettings,
    config: &Config,
    options: &ServerOptions,
) -> Result<std::sync::Arc<ResourceGuard>, String> {
    let resource = match &settings.resource {
        Some(resource) => resource.clone(),
        None if options.listen.ip().is_loopback() && options.listen.port() != 0 => {
            format!("http://{}{}", options.listen, options.path)
        }
        None => {
            return Err(format!(
                "tether.authorization.resource is needed when listening on {}: set it to the URL clients use \
                 for this endpoint (e.g. https://gateway.example.com/mcp)",
                options.listen
            ))
        }
    };
    let mut scopes = settings.required_scopes.clone();
    for scope in config.scopes.keys() {
        if !scopes.contains(scope) {
            scopes.push(scope.clone());
        }
    }
    if let Some(admin) = settings.admin_scope.as_ref().filter(|admin| !scopes.contains(admin)) {
        scopes.push(admin.clone());
    }
    let name = settings.resource_name.clone();
    let validator = TokenValidator::new(settings.clone(), resource);
    ResourceGuard::new(validator, &options.path, scopes, name.as_deref()).map(std::sync::Arc::new)
}

/// The listener's options from the flags; `flag` names the one that gave `addr`.
/// `ADDR` is `host:port`, or a bare port (loopback). A non-loopback address
/// without a token (or OAuth) is refused unless `--allow-unauthenticated` says
/// it is meant.
fn listen_options(flag: &str, addr: &str, args: &ServeArgs, oauth: bool) -> Result<ServerOptions, String> {
    use std::net::ToSocketAddrs;
    let listen = if let Ok(port) = addr.parse::<u16>() {
        std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port))
    } else {
        addr.to_socket_addrs()
            .map_err(|e| format!("{flag} {addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{flag} {addr}: no address"))?
    };
    if !listen.ip().is_loopback() && args.auth_token.is_none() && !oauth {
        if !args.allow_unauthenticated {
            return Err(format!(
                "{flag} {addr} is reachable from other machines and no --auth-token is set: anyone who can \
                 reach it could use every backend. Set --auth-token (or TETHER_AUTH_TOKEN), listen on \
                 127.0.0.1, or pass --allow-unauthenticated if every machine that can reach it is trusted"
            ));
        }
        tracing::warn!("listening on {listen} without --auth-token: anyone who can reach it can use every backend");
    }
    if args.auth_token.as_deref().is_some_and(|t| t.len() < 16) {
        return Err("--auth-token must be at least 16 characters".into());
    }
    Ok(ServerOptions {
        listen,
        allowed_origins: args.allow_origin.clone(),
        auth_token: args.auth_token.clone(),
        max_body_bytes: args.max_body_bytes,
        get_stream: !args.no_get_stream,
        max_connections: args.max_connections,
        max_connections_per_peer: args.max_connections_per_peer,
        ..ServerOptions::default()
    })
}

/// Why `flag`'s address could not be listened on, and what to do about it.
fn cannot_listen(flag: &str, addr: std::net::SocketAddr, e: &std::io::Error) -> String {
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            "; another program (or another tether) listens there: stop it, or choose another port"
        }
        std::io::ErrorKind::PermissionDenied => "; ports below 1024 need privileges: choose a port from 1024 up",
        std::io::ErrorKind::AddrNotAvailable => "; this machine has no such address: try 127.0.0.1",
        _ => "",
    };
    format!("{flag} {addr}: cannot listen: {e}{hint}")
}

fn cli_config_path(cli: &Cli) -> Option<std::path::PathBuf> {
    tether_host::flags::config_path(cli.config.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_args(extra: &[&str]) -> ServeArgs {
        use clap::Parser;
        let cli = Cli::parse_from(["tether", "serve"].iter().chain(extra));
        match cli.command {
            Some(crate::cli::Command::Serve(args)) => args,
            other => panic!("not serve: {other:?}"),
        }
    }

    #[test]
    fn a_listener_other_machines_can_reach_needs_a_token_or_an_explicit_flag() {
        let refused = listen_options("--listen", "0.0.0.0:0", &serve_args(&[]), false).unwrap_err();
        assert!(refused.contains("--auth-token") && refused.contains("--allow-unauthenticated"), "{refused}");
        let status = listen_options("--status-listen", "0.0.0.0:0", &serve_args(&[]), false).unwrap_err();
        assert!(status.starts_with("--status-listen 0.0.0.0:0"), "{status}");
        let token = ["--auth-token", "0123456789abcdef0123"];
        assert!(listen_options("--listen", "0.0.0.0:0", &serve_args(&token), false).is_ok());
        assert!(listen_options("--listen", "0.0.0.0:0", &serve_args(&["--allow-unauthenticated"]), false).is_ok());
        for loopback in ["127.0.0.1:0", "[::1]:0", "8080", "localhost:0"] {
            assert!(listen_options("--listen", loopback, &serve_args(&[]), false).is_ok(), "{loopback}");
        }
    }

    #[test]
    fn connection_caps_come_from_the_flags() {
        let args = serve_args(&["--max-connections", "10", "--max-connections-per-peer", "3"]);
        let options = listen_options("--listen", "127.0.0.1:0", &args, false).unwrap();
        assert_eq!((options.max_connections, options.max_connections_per_peer), (10, 3));
        let defaults = listen_options("--listen", "127.0.0.1:0", &serve_args(&[]), false).unwrap();
        assert_eq!((defaults.max_connections, defaults.max_connections_per_peer), (512, 128));
    }
}
