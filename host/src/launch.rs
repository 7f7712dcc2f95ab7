//! What a runtime needs to start a stdio backend, from an
//! [`tether_core::Action::Spawn`] and the gateway's config, and the command both
//! runtimes start it with (see [`crate::process_tree`] for what that sets up).

use std::collections::BTreeMap;

use tether_core::redact::Redactor;
use tether_core::ServerName;

use crate::process_tree::{self, Lineage};

/// What to run.
pub struct Launch<'a> {
    /// Backend name (for logs and inputs).
    pub server: &'a ServerName,
    /// Connection generation to tag inputs with.
    pub generation: u64,
    /// Program.
    pub command: &'a str,
    /// Arguments.
    pub args: &'a [String],
    /// Extra environment.
    pub env: &'a BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<&'a str>,
    /// Largest frame accepted from the process.
    pub max_frame: usize,
    /// The config's secrets, blanked in the stderr lines the runtime logs.
    pub redactor: Redactor,
}

impl Launch<'_> {
    /// The command to start: program, arguments, working directory, the configured
    /// environment on top of tether's own minus its `TETHER_*` variables, its own
    /// process group, and a fresh lineage mark (returned too, for its
    /// [`process_tree::ProcessTree`]). Standard streams are left to the caller.
    pub fn command(&self) -> (std::process::Command, Lineage) {
        let lineage = Lineage::next();
        let mut cmd = std::process::Command::new(self.command);
        cmd.args(self.args);
        process_tree::prepare(&mut cmd, &lineage, self.env);
        cmd.envs(self.env);
        if let Some(cwd) = self.cwd {
            cmd.current_dir(cwd);
        }
        (cmd, lineage)
    }
}
