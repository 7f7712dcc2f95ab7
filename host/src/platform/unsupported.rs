//! [`crate::platform`] where tether has no implementation (neither unix nor
//! Windows): processes start without a group of their own, and nothing is
//! signalled or reaped here (the runtimes still close stdin first).

use std::process::Command;

use super::Signal;

/// See [`crate::platform::configure_child`].
pub fn configure_child(_cmd: &mut Command) {}

/// See [`crate::platform::open_for_reading`].
pub fn open_for_reading(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::File::open(path)
}

/// See [`crate::platform::untrusted`].
pub fn untrusted(_meta: &std::fs::Metadata) -> Option<String> {
    None
}

/// See [`crate::platform::Containment`]: nothing here.
#[derive(Debug)]
pub struct Containment;

/// See [`crate::platform::contain`].
pub fn contain(_pid: u32) -> Containment {
    Containment
}

impl Containment {
    /// See [`crate::platform::Containment::signal`].
    pub fn signal(&self, _signal: Signal) -> usize {
        0
    }
}

/// See [`crate::platform::signal_process`].
pub fn signal_process(_pid: u32, _signal: Signal) {}

/// See [`crate::platform::become_subreaper`].
pub fn become_subreaper() -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// See [`crate::platform::try_reap`].
pub fn try_reap(_pid: u32) -> bool {
    false
}

/// See [`crate::platform::on_os_request`].
pub fn on_os_request(_handler: Box<dyn Fn(super::OsRequest) + Send + Sync>) -> std::io::Result<()> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// See [`crate::platform::LocalStream`]: none here.
pub type LocalStream = std::fs::File;

/// See [`crate::platform::LocalListener`]: none here.
pub struct LocalListener;

impl LocalListener {
    /// See [`crate::platform::LocalListener::bind`].
    pub fn bind(_name: &str) -> std::io::Result<LocalListener> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// See [`crate::platform::LocalListener::accept`].
    pub fn accept(&self) -> std::io::Result<LocalStream> {
        Err(std::io::ErrorKind::Unsupported.into())
    }

    /// See [`crate::platform::LocalListener::address`].
    pub fn address(&self) -> String {
        String::new()
    }
}

/// See [`crate::platform::local_connect`].
pub fn local_connect(_name: &str) -> std::io::Result<LocalStream> {
    Err(std::io::ErrorKind::Unsupported.into())
}

/// See [`crate::platform::local_endpoints`].
pub fn local_endpoints(_prefix: &str) -> Vec<String> {
    Vec::new()
}

/// See [`crate::platform::local_endpoint_dir`].
pub fn local_endpoint_dir() -> String {
    String::new()
}

/// See [`crate::platform::limit_io`].
pub fn limit_io(stream: &LocalStream, wait: std::time::Duration) {
    let _ = (stream, wait);
}

/// See [`crate::platform::process_alive`].
pub fn process_alive(_pid: u32) -> bool {
    true
}

/// See [`crate::platform::remove_local_endpoint`].
pub fn remove_local_endpoint(name: &str) {
    let _ = name;
}
