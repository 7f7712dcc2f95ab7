//! Command-line settings every runtime's binary takes, and loading the
//! configuration they apply to.

use std::path::{Path, PathBuf};

use clap::Args;
use tether_core::config::Mode;
use tether_core::Config;

use crate::config_file;

/// Policy and gateway settings from the command line (they win over the config file).
#[derive(Debug, Default, Clone, Args)]
pub struct PolicyFlags {
    /// Consecutive failures that open a backend's circuit breaker.
    #[arg(long, global = true)]
    pub failure_threshold: Option<u32>,
    /// Seconds an open breaker waits before letting one probe through.
    #[arg(long, global = true)]
    pub cooldown: Option<u64>,
    /// Seconds a backend request may take before it is cancelled.
    #[arg(long, global = true)]
    pub request_timeout: Option<u64>,
    /// Seed of the jitter PRNG (recorded in traces). Random when absent.
    #[arg(long, global = true)]
    pub seed: Option<u64>,
    /// Which tools clients see: `flat` (every backend's, namespaced) or `meta`
    /// (six of tether's own: search_tools, describe_tool, execute_tool, list_servers,
    /// reconnect_server, server_events).
    #[arg(long, global = true, value_parser = ["flat", "meta"])]
    pub mode: Option<String>,
    /// Flat mode: also serve the admin tools list_servers, reconnect_server and server_events.
    #[arg(long, global = true)]
    pub admin_tools: bool,
    /// Do not reload the config file when it changes on disk (on unix SIGHUP
    /// still reloads it).
    #[arg(long, global = true)]
    pub no_watch: bool,
    /// Do not listen on the local control channel (`tether status`, `restart`,
    /// `reconnect` and `logs` then cannot reach this tether without --url).
    #[arg(long, global = true)]
    pub no_control: bool,
}

impl PolicyFlags {
    /// Writes the flags that were given into `config`.
    pub fn apply(&self, config: &mut Config) {
        match self.mode.as_deref() {
            Some("meta") => config.mode = Mode::Meta,
            Some("flat") => config.mode = Mode::Flat,
            _ => {}
        }
        if self.admin_tools {
            config.admin_tools = true;
        }
        if let Some(t) = self.failure_threshold {
            config.policy.breaker_threshold = t;
        }
        if let Some(s) = self.cooldown {
            config.policy.breaker_cooldown_ms = s.saturating_mul(1000);
        }
        if let Some(s) = self.request_timeout {
            config.policy.request_timeout_ms = s.saturating_mul(1000);
            config.policy.request_timeout_max_ms =
                config.policy.request_timeout_max_ms.max(config.policy.request_timeout_ms);
        }
    }

    /// The seed from the flags, or one from the clock.
    pub fn seed(&self) -> u64 {
        self.seed.unwrap_or_else(crate::entropy::seed)
    }
}

/// The configuration file to use: the one given, else the default path.
pub fn config_path(given: Option<&Path>) -> Option<PathBuf> {
    given.map(Path::to_path_buf).or_else(config_file::default_path)
}

/// Loads the configuration file given (or the default path), applies the policy
/// flags and validates the result. Errors name the file, never a secret.
pub fn load_config(given: Option<&Path>, flags: &PolicyFlags) -> Result<Config, String> {
    let path = match given {
        Some(p) => p.to_path_buf(),
        None => match config_file::default_path() {
            Some(p) if p.exists() => p,
            Some(p) => return Err(format!("no --config given and no file at the default path {}", p.display())),
            None => return Err("no --config given and no default path (set HOME or TETHER_CONFIG)".into()),
        },
    };
    let mut config = config_file::load(&path).map_err(|e| e.to_string())?;
    flags.apply(&mut config);
    config.validate().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(config)
}
