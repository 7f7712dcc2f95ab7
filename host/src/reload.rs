//! Reloading the configuration file on SIGHUP, the same in every runtime: the
//! file is read and validated again with the same command-line flags, and only
//! a good one reaches the engine. The runtimes only listen for the signal.

use std::path::Path;

use tether_core::Input;

use crate::flags::{load_config, PolicyFlags};

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
