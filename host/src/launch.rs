//! Starting a stdio backend: what to run, from an [`Action::Spawn`] and the
//! gateway's config, and the command both runtimes start it with — its
//! environment (tether's own variables stripped, a lineage mark added), its own
//! process group and, on Linux, its parent-death signal (see
//! [`crate::platform::configure_child`]); on Windows its job object, right after
//! the spawn (see [`crate::platform::contain`]).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};

use tether_core::redact::Redactor;
use tether_core::{Action, Gateway, ServerName};

use crate::platform;
use crate::process_tree::{self, Lineage, LINEAGE_VAR};

/// The prefix of environment variables that configure tether itself (and may hold
/// its secrets, such as `TETHER_AUTH_TOKEN`): backends do not inherit them unless
/// their config's `env` sets them explicitly.
pub const TETHER_ENV_PREFIX: &str = "TETHER_";

/// What to run.
pub struct Launch<'a> {
    /// Backend name (for logs and inputs).
    pub server: &'a ServerName,
    /// Connection generation to tag inputs with.
    pub generation: tether_core::Generation,
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

impl<'a> Launch<'a> {
    /// The launch `action` asks for, if it is an [`Action::Spawn`], with the
    /// frame limit and redactor of `gw`'s config.
    pub fn from_action(action: &'a Action, gw: &Gateway) -> Option<Launch<'a>> {
        let Action::Spawn { server, generation, command, args, env, cwd } = action else { return None };
        Some(Launch {
            server,
            generation: *generation,
            command,
            args,
            env,
            cwd: cwd.as_deref(),
            max_frame: gw.config().limits.max_frame_bytes as usize,
            redactor: gw.redactor().clone(),
        })
    }
}

impl Launch<'_> {
    /// The command to start: program, arguments, working directory, the configured
    /// environment on top of tether's own minus its `TETHER_*` variables, its own
    /// process group, and a fresh lineage mark (returned too, for its
    /// [`process_tree::ProcessTree`]). Standard streams are left to the caller.
    pub fn command(&self) -> (Command, Lineage) {
        let lineage = Lineage::next();
        let mut cmd = Command::new(self.command);
        cmd.args(self.args);
        prepare(&mut cmd, &lineage, self.env);
        cmd.envs(self.env);
        if let Some(cwd) = self.cwd {
            cmd.current_dir(cwd);
        }
        (cmd, lineage)
    }
}

/// Sets up `cmd` to run as a backend: its own process group, killed with the
/// thread that starts it (Linux), marked with `lineage`, and without tether's own
/// `TETHER_*` variables unless `explicit_env` (the backend's configured `env`,
/// applied by the caller) names them.
pub fn prepare(cmd: &mut Command, lineage: &Lineage, explicit_env: &BTreeMap<String, String>) {
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(TETHER_ENV_PREFIX) && !explicit_env.contains_key(name) {
            cmd.env_remove(name);
        }
    }
    cmd.env(LINEAGE_VAR, lineage.as_str());
    platform::configure_child(cmd);
}

/// Starts `cmd` (from [`Launch::command`], marked with `lineage`) with its three
/// standard streams piped, registered as a child whose owner reaps it, and its
/// process tree (see [`process_tree::spawn_owned`]).
///
/// On Linux the child's parent-death signal fires when the *thread* that forked
/// it exits: call it on a thread that lives as long as the host.
pub fn spawn_piped(
    mut cmd: Command,
    lineage: Lineage,
) -> std::io::Result<(std::process::Child, process_tree::ProcessTree)> {
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    process_tree::spawn_owned(lineage, || cmd.spawn(), std::process::Child::id)
}
