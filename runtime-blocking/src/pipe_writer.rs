//! Writing frames to a pipe (a backend's stdin, the client's stdout) without ever
//! blocking the core thread.
//!
//! A frame is written at once, on the caller's thread, when nothing is queued
//! before it and the write cannot block: the pipe is ours and non-blocking
//! ([`PipeWriter::new_nonblocking`], a backend's stdin), or the frame fits in one
//! atomic pipe write (`PIPE_BUF`, 4 KiB) and poll(2) says there is room (a shared
//! descriptor such as stdout, whose flags must not change under other users).
//! No thread hop on the hot path. What is left — a full pipe, a peer that stopped
//! reading, a large frame on a shared descriptor — goes to this writer's own
//! thread, which may wait as long as it likes. Order is kept: once something is
//! queued, every later frame queues behind it.
//!
//! What is queued is counted in bytes ([`PipeWriter::backlog`]): whoever produces
//! frames for this pipe waits for room there (the bound is [`WRITE_BACKLOG`]), so
//! a peer that reads slowly slows its producers instead of growing the queue.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use tether_core::codec::encode_line;
use tether_host::backlog::Backlog;

/// How many bytes may wait for the writer's thread before producers that watch
/// [`PipeWriter::backlog`] wait.
pub const WRITE_BACKLOG: usize = 1024 * 1024;

/// Largest write a pipe performs atomically and, with room signalled by poll(2),
/// without blocking (POSIX `PIPE_BUF`; 4096 on Linux).
const ATOMIC_WRITE: usize = 4096;

/// A line writer owning one pipe (or file) and a thread for the slow path.
pub struct PipeWriter {
    fd: RawFd,
    queue: Option<Sender<Vec<u8>>>,
    /// Bytes handed to the thread and not yet written.
    backlog: Arc<Backlog>,
    thread: Option<JoinHandle<()>>,
    /// Reused for every frame written directly.
    buf: Vec<u8>,
    /// The peer closed its end: further frames are dropped.
    broken: bool,
    /// The descriptor is ours and `O_NONBLOCK`: write without asking poll(2).
    nonblocking: bool,
}

impl PipeWriter {
    /// Takes ownership of `out` (a `File` on a copy of fd 1, ...), leaving its
    /// flags alone.
    pub fn new<W: Write + AsRawFd + Send + 'static>(name: &str, out: W) -> std::io::Result<PipeWriter> {
        Self::start(name, out, false)
    }

    /// Takes ownership of a pipe nobody else writes to (a child's stdin) and makes
    /// it non-blocking, so every write is tried in place.
    pub fn new_nonblocking<W: Write + AsRawFd + Send + 'static>(name: &str, out: W) -> std::io::Result<PipeWriter> {
        let fd = out.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own; only its status flags change.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(std::io::Error::last_os_error());
        }
        Self::start(name, out, true)
    }

    fn start<W: Write + AsRawFd + Send + 'static>(name: &str, mut out: W, nonblocking: bool) -> std::io::Result<Self> {
        let fd = out.as_raw_fd();
        let (queue, rx) = channel::<Vec<u8>>();
        let backlog = Arc::new(Backlog::new(WRITE_BACKLOG));
        let done = backlog.clone();
        let thread = std::thread::Builder::new().name(format!("write {name}")).spawn(move || {
            let mut ok = true;
            while let Ok(buf) = rx.recv() {
                if ok {
                    ok = write_all_waiting(&mut out, &buf).is_ok();
                }
                done.sub(buf.len());
            }
            // Nothing more will be written: producers must not wait for it.
            done.close();
            // Dropping `out` closes the pipe: the peer sees end of file.
        })?;
        Ok(PipeWriter {
            fd,
            queue: Some(queue),
            backlog,
            thread: Some(thread),
            buf: Vec::new(),
            broken: false,
            nonblocking,
        })
    }

    /// Writes one frame plus its newline.
    pub fn send(&mut self, frame: &str) {
        if self.broken {
            return;
        }
        self.buf.clear();
        encode_line(frame, &mut self.buf);
        let direct = self.nonblocking || (self.buf.len() <= ATOMIC_WRITE && self.has_room());
        if self.backlog.bytes() == 0 && direct {
            // SAFETY: `fd` stays open while the writer thread holds `out`, which
            // lives until `close` joins it; the buffer is valid for its length.
            let n = unsafe { libc::write(self.fd, self.buf.as_ptr().cast(), self.buf.len()) };
            if n == self.buf.len() as isize {
                return;
            }
            if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE) {
                self.broken = true;
                return;
            }
            // Full, interrupted or short: the thread writes the rest.
            let written = n.max(0) as usize;
            self.buf.drain(..written);
        }
        let Some(queue) = &self.queue else { return };
        let len = self.buf.len();
        self.backlog.add(len);
        if queue.send(std::mem::take(&mut self.buf)).is_err() {
            self.backlog.sub(len);
        }
    }

    /// The bytes waiting for the writer's thread: producers wait for room there.
    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }

    /// Whether a write of up to [`ATOMIC_WRITE`] bytes would not block now.
    fn has_room(&self) -> bool {
        let mut pfd = libc::pollfd { fd: self.fd, events: libc::POLLOUT, revents: 0 };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n == 1 && pfd.revents & libc::POLLOUT != 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP) == 0
    }

    /// Closes the pipe once everything queued is written (or the peer is gone).
    /// Does not wait: a peer that never reads must not hold up shutdown.
    pub fn close(mut self) {
        self.queue.take();
        self.thread.take();
    }

    /// Closes the pipe after everything queued is written, waiting for that at
    /// most `limit` (a peer that stopped reading must not hold up an exit).
    pub fn close_within(mut self, limit: std::time::Duration) {
        self.queue.take();
        let deadline = std::time::Instant::now() + limit;
        while self.backlog.bytes() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if let Some(t) = self.thread.take() {
            if self.backlog.bytes() == 0 {
                let _ = t.join();
            }
        }
    }
}

/// `write_all` that waits with poll(2) when a non-blocking descriptor is full.
fn write_all_waiting<W: Write + AsRawFd>(out: &mut W, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match out.write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd { fd: out.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd; waits until the pipe has room or fails.
                unsafe { libc::poll(&mut pfd, 1, -1) };
            }
            Err(e) => return Err(e),
        }
    }
    out.flush()
}

impl Drop for PipeWriter {
    fn drop(&mut self) {
        self.queue.take();
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use super::PipeWriter;

    fn pipe() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills two fresh descriptors, which we then own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are owned by nobody else.
        unsafe { (File::from(OwnedFd::from_raw_fd(fds[0])), File::from(OwnedFd::from_raw_fd(fds[1]))) }
    }

    /// Small frames (direct writes) and large ones (the thread) interleave, and
    /// a peer that reads nothing for a while never blocks the sender: everything
    /// arrives, in order, once it reads.
    #[test]
    fn frames_arrive_in_order_and_a_slow_reader_never_blocks_the_sender() {
        in_order_without_blocking(false);
        in_order_without_blocking(true);
    }

    fn in_order_without_blocking(nonblocking: bool) {
        let (mut read, write) = pipe();
        let frames: Vec<String> = (0..400)
            .map(|i| format!(r#"{{"n":{i},"pad":"{}"}}"#, "x".repeat(if i % 7 == 0 { 9000 } else { 40 })))
            .collect();
        let expected: String = frames.iter().map(|f| format!("{f}\n")).collect();
        let (done, sent) = channel();
        std::thread::spawn(move || {
            let mut w = if nonblocking {
                PipeWriter::new_nonblocking("test", write).unwrap()
            } else {
                PipeWriter::new("test", write).unwrap()
            };
            for f in &frames {
                w.send(f);
            }
            done.send(()).unwrap();
            w.close_within(Duration::from_secs(60));
        });
        // 400 frames (over 500 KiB) against a 64 KiB pipe nobody reads yet.
        sent.recv_timeout(Duration::from_secs(30)).expect("send never blocks on a full pipe");
        let mut got = String::new();
        read.read_to_string(&mut got).unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "frames reordered or damaged");
    }

    /// A reader that went away: sends are dropped, nothing panics or blocks.
    #[test]
    fn a_closed_peer_drops_frames() {
        let (read, write) = pipe();
        drop(read);
        let mut w = PipeWriter::new("test", write).unwrap();
        for _ in 0..100 {
            w.send(r#"{"jsonrpc":"2.0","method":"x"}"#);
        }
        w.close_within(Duration::from_secs(5));
    }
}
