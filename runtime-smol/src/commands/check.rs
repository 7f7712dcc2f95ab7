//! `tether check`: start every backend once, wait until each has settled, print a
//! status table, and exit non-zero when any is not online.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use tether_core::{BackendStatus, Event, Status};

use crate::cli::Cli;
use crate::serve;
use crate::serve::Report;

/// Runs the check.
pub fn run(cli: &Cli) -> Result<ExitCode, String> {
    let mut config = serve::load_config(cli)?;
    if config.servers.values().all(|s| s.disabled) {
        let file = cli.config.as_ref().map_or_else(|| "the configuration".into(), |p| p.display().to_string());
        let what = if config.servers.is_empty() { "no servers" } else { "only disabled servers" };
        return Err(format!(
            "{file} has {what}: nothing to check (servers go under \"mcpServers\", each with a \"command\" or a \"url\")"
        ));
    }
    for server in config.servers.values_mut() {
        server.lazy = false;
    }
    let overall = Duration::from_millis(config.policy.connect_timeout_ms + config.policy.request_timeout_ms + 5_000);
    let mut host = serve::build_host(cli, &config, &[])?;
    let reports = host.reports();
    let clock = host.clock();
    let started = clock.now();
    let mut ready_at: BTreeMap<tether_core::ServerName, u64> = BTreeMap::new();
    let mut settled: BTreeMap<String, BackendStatus> = BTreeMap::new();
    smol::block_on(async {
        let ticker = host.inputs();
        // A tick now and then so the loop re-checks even when nothing happens.
        smol::spawn(async move {
            loop {
                async_io::Timer::after(Duration::from_millis(200)).await;
                if ticker.send(tether_core::Input::Tick).await.is_err() {
                    return;
                }
            }
        })
        .detach();
        let deadline = std::time::Instant::now() + overall;
        host.run(|gw, _| {
            while let Ok(report) = reports.try_recv() {
                if let Report::Event(Event::ServerStatusChanged { server, to: Status::Online, .. }) = report {
                    ready_at.entry(server).or_insert_with(|| clock.now().saturating_since(started).as_millis());
                }
            }
            for status in gw.statuses() {
                if !status.status.is_starting() && !config.servers[&status.server].disabled {
                    settled.entry(status.server.clone()).or_insert(status);
                }
            }
            let all = config.servers.iter().filter(|(_, s)| !s.disabled).all(|(n, _)| settled.contains_key(n));
            all || std::time::Instant::now() >= deadline
        })
        .await;
        let _ = host.shutdown().await;
    });
    let statuses = host.statuses();
    println!("{:<20} {:<6} {:<20} {:>6} {:>10}  last error", "server", "via", "status", "tools", "ready");
    let mut failed = false;
    for now in statuses {
        let shown = settled.get(&now.server).unwrap_or(&now);
        let ok = shown.status == Status::Online;
        failed |= !ok && !config.servers[&now.server].disabled;
        let ready = ready_at.get(now.server.as_str()).map_or_else(|| "-".to_string(), |ms| format!("{ms} ms"));
        println!(
            "{:<20} {:<6} {:<20} {:>6} {:>10}  {}",
            now.server,
            now.transport,
            shown.status.as_str(),
            now.tools,
            ready,
            shown.last_error.clone().unwrap_or_default()
        );
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
