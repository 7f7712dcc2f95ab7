//! Reloading the configuration file while tether runs, and stopping when the
//! system asks, the same in every runtime. Reloads come from SIGHUP (unix) and
//! from the file changing on disk (every system; see [`crate::config_watch`]).
//! The file is read and validated again with the same command-line flags, and
//! only a good one reaches the engine, which applies it differentially. The
//! runtimes only say how to hand the engine an input and how to stop.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tether_core::Input;

use crate::config_watch::ConfigWatch;
use crate::flags::{load_config, PolicyFlags};
use crate::platform::OsRequest;

/// Reloads `path` (the config file in use; `None`: there is none, nothing to do)
/// with `flags` and hands the engine the new configuration through `feed` as
/// [`Input::ConfigReloaded`]. A file that cannot be read or is not valid is
/// logged, and the running configuration kept.
pub fn reload_config(path: Option<&Path>, flags: &PolicyFlags, feed: impl FnOnce(Input)) {
    let Some(path) = path else { return };
    match load_config(Some(path), flags) {
        Ok(config) => {
            tracing::info!("reloading {}", path.display());
            feed(Input::ConfigReloaded { config });
        }
        Err(e) => tracing::error!("reload failed, keeping the running config: {e}"),
    }
}

/// Takes the config file's contents as they are now, to watch it from (unless
/// `--no-watch`). Call it before loading the file: an edit made while tether
/// starts is then seen (at worst reloaded twice), never missed.
pub fn watch(path: Option<&Path>, flags: &PolicyFlags) -> Option<ConfigWatch> {
    path.filter(|_| !flags.no_watch).map(ConfigWatch::new)
}

/// Starts listening for everything outside the protocol that asks a running
/// tether to reload or stop: the system's requests (SIGHUP reloads; SIGTERM,
/// SIGINT and the Windows console's Ctrl-C or close stop) and, with a `watch`
/// (see [`watch`]), the config file `path` changing. Reloads reach the engine
/// through `feed`; a stop calls `stop` with what asked. Both may be called from
/// other threads.
pub fn listen(
    path: Option<PathBuf>,
    flags: PolicyFlags,
    watch: Option<ConfigWatch>,
    feed: impl Fn(Input) + Send + Sync + 'static,
    stop: impl Fn(&'static str) + Send + Sync + 'static,
) {
    let shown = path.as_deref().map(|p| p.display().to_string()).unwrap_or_default();
    let reload = Arc::new(move || reload_config(path.as_deref(), &flags, &feed));
    if let Some(watch) = watch {
        let on_change = reload.clone();
        let started = crate::config_watch::spawn(watch, move || {
            tracing::info!("{shown} changed");
            on_change();
        });
        if let Err(e) = started {
            tracing::warn!("cannot watch the config file for changes: {e}");
        }
    }
    let asked = crate::platform::on_os_request(move |request| match request {
        OsRequest::Reload => reload(),
        OsRequest::Stop(why) => stop(why),
    });
    if let Err(e) = asked {
        tracing::warn!("cannot listen for stop and reload requests from the system: {e}");
    }
}
