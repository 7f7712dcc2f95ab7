//! What a runtime needs to start a stdio backend, from an
//! [`tether_core::Action::Spawn`] and the gateway's config.

use std::collections::BTreeMap;

use tether_core::redact::Redactor;
use tether_core::ServerName;

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
