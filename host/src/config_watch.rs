//! Noticing that the configuration file changed, on every system, so that an
//! edit takes effect without a signal (Windows has none) and without restarting
//! the client that runs tether.
//!
//! The file is read every [`POLL`] and compared with the contents last taken.
//! Polling, not change notifications: it sees every way a file can change —
//! written in place, replaced by an editor's rename, a symlink swapped (as
//! container orchestrators update mounted configs), a network or bind-mounted
//! file whose events never arrive — and a config file is small. A change is
//! reported once the file has read the same twice in a row, so a file caught
//! half-written is not taken; a file that is missing or unreadable is waited
//! for, and the running configuration kept. What is reported is only "it
//! changed": reading, validating and reloading it (differentially) is
//! [`crate::reload`]'s job, so an edit that breaks the file is logged and the
//! running configuration kept, exactly as on SIGHUP.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the file is read.
pub const POLL: Duration = Duration::from_millis(500);

/// Files larger than this are not compared (the reader refuses them anyway).
const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// The state of watching one file: what was last taken and what may be coming.
#[derive(Debug)]
pub struct ConfigWatch {
    path: PathBuf,
    /// The contents the running configuration came from (`None`: unreadable).
    taken: Option<Vec<u8>>,
    /// New contents seen once, waiting to be seen again before they count.
    settling: Option<Vec<u8>>,
}

impl ConfigWatch {
    /// Starts watching `path`, taking its contents now as the running ones.
    pub fn new(path: &Path) -> ConfigWatch {
        ConfigWatch { path: path.to_path_buf(), taken: read(path), settling: None }
    }

    /// Reads the file once more; `true` when it has settled on contents other
    /// than the ones last taken (which it now takes).
    pub fn check(&mut self) -> bool {
        let Some(now) = read(&self.path) else {
            // Missing or unreadable (an editor between delete and create, a
            // permission change): wait for it, keep what runs.
            self.settling = None;
            return false;
        };
        if self.taken.as_ref() == Some(&now) {
            self.settling = None;
            return false;
        }
        if self.settling.as_ref() == Some(&now) {
            self.settling = None;
            self.taken = Some(now);
            return true;
        }
        self.settling = Some(now);
        false
    }
}

fn read(path: &Path) -> Option<Vec<u8>> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > MAX_BYTES || !meta.is_file() {
        // Compare what can be compared cheaply: a file this large (or a FIFO, a
        // device) is refused by the reader, which says so once per change of size
        // or time.
        let stamp = format!("{}:{}:{:?}", meta.is_file(), meta.len(), meta.modified().ok());
        return Some(stamp.into_bytes());
    }
    crate::safe_file::read_regular(path, MAX_BYTES).ok()
}

/// Goes on with `watch` on a thread of its own, calling `changed` each time the
/// file settles on contents other than the ones last taken, until the process
/// ends.
pub fn spawn(mut watch: ConfigWatch, changed: impl Fn() + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new().name("config-watch".into()).spawn(move || loop {
        std::thread::sleep(POLL);
        if watch.check() {
            changed();
        }
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_counts_once_it_reads_the_same_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{\"mcpServers\": {}}").unwrap();
        let mut watch = ConfigWatch::new(&path);
        assert!(!watch.check(), "nothing changed");

        std::fs::write(&path, "{\"mcpServers\": {\"a\"").unwrap();
        assert!(!watch.check(), "seen once: may be half-written");
        std::fs::write(&path, "{\"mcpServers\": {\"a\": {}}}").unwrap();
        assert!(!watch.check(), "changed again: still settling");
        assert!(watch.check(), "read the same twice: a change");
        assert!(!watch.check(), "reported once");
    }

    #[test]
    fn touching_or_rewriting_the_same_contents_is_no_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        let mut watch = ConfigWatch::new(&path);
        std::fs::write(&path, "{ }").unwrap();
        assert!(!watch.check());
        std::fs::write(&path, "{}").unwrap();
        assert!(!watch.check(), "back to what runs before it settled");
        assert!(!watch.check());
    }

    #[test]
    fn a_file_replaced_by_rename_is_seen_and_a_missing_one_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        let mut watch = ConfigWatch::new(&path);

        std::fs::remove_file(&path).unwrap();
        assert!(!watch.check(), "missing: keep what runs");
        assert!(!watch.check());

        let next = dir.path().join("config.json.tmp");
        std::fs::write(&next, "{\"x\": 1}").unwrap();
        std::fs::rename(&next, &path).unwrap();
        assert!(!watch.check());
        assert!(watch.check(), "the renamed-in file is a change");
    }

    #[test]
    fn the_thread_reports_a_change() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, "{}").unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        spawn(ConfigWatch::new(&path), move || {
            let _ = tx.send(());
        })
        .unwrap();
        std::fs::write(&path, "{\"x\": 1}").unwrap();
        rx.recv_timeout(Duration::from_secs(20)).expect("the change is reported");
    }
}
