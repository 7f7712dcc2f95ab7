//! A `redis-server` of a test's own (Debian's package), on a free loopback port
//! with AOF (`appendfsync always`), stopped on drop.
//!
//! [`RedisServer::start`] answers `None` when there is no `redis-server` on the
//! PATH, so the README's test command passes on a machine without it; with
//! `TETHER_REQUIRE_REDIS=1` (CI sets it, after installing the package) that is
//! a failure instead.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `redis-server`.
pub struct RedisServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts one, or `None` without `redis-server` (see the module docs).
    pub fn start() -> Option<RedisServer> {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        match RedisServer::spawn(dir.path(), port) {
            Some(child) => Some(RedisServer { child, port, dir }),
            None if std::env::var("TETHER_REQUIRE_REDIS").as_deref() == Ok("1") => {
                panic!("redis-server is required (TETHER_REQUIRE_REDIS=1) and could not be started")
            }
            None => {
                eprintln!("redis-server not found: this test does not run here (CI runs it)");
                None
            }
        }
    }

    fn spawn(dir: &Path, port: u16) -> Option<Child> {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--dir", dir.to_str()?])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--save", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not listen on port {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(child)
    }

    /// `redis://127.0.0.1:PORT/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Stops it (kill -9).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops it and starts it again on the same port and data (its AOF).
    pub fn restart(&mut self) {
        self.kill();
        self.child = RedisServer::spawn(self.dir.path(), self.port).expect("redis-server starts again");
    }

    /// Every key and value in the keyspace as text (`redis-cli --scan` and
    /// `DUMP`-free reads), to look for what must not be there.
    pub fn dump(&self) -> String {
        let cli = |args: &[&str]| -> String {
            let out = Command::new("redis-cli")
                .args(["-p", &self.port.to_string()])
                .args(args)
                .output()
                .expect("redis-cli (part of Debian's redis-server package)");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let mut text = String::new();
        for key in cli(&["--scan"]).lines().filter(|k| !k.is_empty()) {
            let kind = cli(&["TYPE", key]);
            let value = match kind.trim() {
                "hash" => cli(&["HGETALL", key]),
                _ => cli(&["GET", key]),
            };
            text.push_str(&format!("{key} = {value}\n"));
        }
        text
    }

    /// Its data directory.
    pub fn dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
