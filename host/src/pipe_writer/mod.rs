//! Writing frames to a pipe (a backend's stdin, the client's stdout) without ever
//! blocking the core thread.
//!
//! A frame is written at once, on the caller's thread, when nothing is queued
//! before it and the platform can tell the write will not block (see
//! `unix`: a non-blocking pipe of ours, or a small frame poll(2) says fits).
//! No thread hop on the hot path. What is left — a full pipe, a peer that
//! stopped reading, a large frame on a shared descriptor, and on Windows, where
//! anonymous pipes cannot be written without blocking, every frame — goes to
//! this writer's own thread, which may wait as long as it likes. Order is kept:
//! once something is queued, every later frame queues behind it.
//!
//! What is queued is counted in bytes ([`PipeWriter::backlog`]): whoever produces
//! frames for this pipe waits for room there (the bound is [`WRITE_BACKLOG`]), so
//! a peer that reads slowly slows its producers instead of growing the queue.
//!
//! The platform's part (the direct write, how the writer's thread waits, what
//! stdout is) is in `unix` and `windows`; everything else is shared.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use crate::backlog::Backlog;
use tether_core::codec::encode_line;

#[cfg(unix)]
mod unix;
#[cfg(unix)]
use unix as sys;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
use windows as sys;

pub use sys::Pipe;

/// How many bytes may wait for the writer's thread before producers that watch
/// [`PipeWriter::backlog`] wait.
pub const WRITE_BACKLOG: usize = 1024 * 1024;

/// A backlog of [`WRITE_BACKLOG`] bytes.
fn new_backlog() -> Arc<Backlog> {
    Arc::new(Backlog::new(WRITE_BACKLOG))
}

/// A line writer owning one pipe (or file) and a thread for the slow path.
pub struct PipeWriter {
    /// Writes on the caller's thread, where the platform allows.
    direct: sys::Direct,
    queue: Option<Sender<Vec<u8>>>,
    /// Bytes handed to the thread and not yet written.
    backlog: Arc<Backlog>,
    thread: Option<JoinHandle<()>>,
    /// What is encoded and not yet written or queued (reused for every frame).
    buf: Vec<u8>,
    /// Frames are gathered in `buf` until [`PipeWriter::release`].
    held: bool,
    /// The peer closed its end: further frames are dropped.
    broken: bool,
}

/// How many bytes a held writer gathers before it writes anyway.
const GATHER_LIMIT: usize = 64 * 1024;

/// What a direct write did.
enum Direct {
    /// This many bytes went out (maybe none: the rest goes to the thread).
    Wrote(usize),
    /// The peer closed its end (unix only: on Windows only the writer's
    /// thread writes, and drops what follows a failed write).
    #[cfg_attr(windows, allow(dead_code))]
    Broken,
}

impl PipeWriter {
    /// Takes ownership of `out` (a `File` on a copy of fd 1, ...), leaving its
    /// flags alone.
    pub fn new<W: Pipe>(name: &str, out: W) -> std::io::Result<PipeWriter> {
        Self::counted(name, out, new_backlog())
    }

    /// [`PipeWriter::new`], counting what waits for the thread in `backlog`
    /// (shared with whoever else produces for the same reader).
    pub fn counted<W: Pipe>(name: &str, out: W, backlog: Arc<Backlog>) -> std::io::Result<PipeWriter> {
        let direct = sys::Direct::shared(&out);
        Self::start(name, out, direct, backlog)
    }

    /// Takes ownership of a pipe nobody else writes to (a child's stdin) and, on
    /// unix, makes it non-blocking, so every write is tried in place.
    pub fn new_nonblocking<W: Pipe>(name: &str, out: W) -> std::io::Result<PipeWriter> {
        Self::counted_nonblocking(name, out, new_backlog())
    }

    /// [`PipeWriter::new_nonblocking`], counting what waits in `backlog`.
    pub fn counted_nonblocking<W: Pipe>(name: &str, out: W, backlog: Arc<Backlog>) -> std::io::Result<PipeWriter> {
        let direct = sys::Direct::private(&out)?;
        Self::start(name, out, direct, backlog)
    }

    /// A writer on this process's stdout (a copy of it: the original stays
    /// open). On unix a pipe that stderr does not share is made non-blocking
    /// ([`PipeWriter::new_nonblocking`]); terminals and files keep their flags.
    pub fn stdout() -> std::io::Result<PipeWriter> {
        sys::stdout(new_backlog())
    }

    /// [`PipeWriter::stdout`], counting what waits in `backlog`.
    pub fn stdout_counted(backlog: Arc<Backlog>) -> std::io::Result<PipeWriter> {
        sys::stdout(backlog)
    }

    fn start<W: Pipe>(name: &str, mut out: W, direct: sys::Direct, backlog: Arc<Backlog>) -> std::io::Result<Self> {
        let (queue, rx) = channel::<Vec<u8>>();
        let done = backlog.clone();
        let thread = std::thread::Builder::new().name(format!("write {name}")).spawn(move || {
            let mut ok = true;
            while let Ok(buf) = rx.recv() {
                if ok {
                    ok = sys::write_all_waiting(&mut out, &buf).is_ok();
                }
                done.sub(buf.len());
            }
            // Nothing more will be written: producers must not wait for it.
            done.close();
            // Dropping `out` closes the pipe: the peer sees end of file.
        })?;
        Ok(PipeWriter {
            direct,
            queue: Some(queue),
            backlog,
            thread: Some(thread),
            buf: Vec::new(),
            held: false,
            broken: false,
        })
    }

    /// Writes one frame plus its newline.
    /// While the writer is held, the frame is gathered with the others instead.
    pub fn send(&mut self, frame: &str) {
        if self.broken {
            return;
        }
        encode_line(frame, &mut self.buf);
        if !self.held || self.buf.len() >= GATHER_LIMIT {
            self.write_gathered();
        }
    }

    /// Gathers the frames sent from now on, to be written together (one system
    /// call for a burst) by [`PipeWriter::release`].
    pub fn hold(&mut self) {
        self.held = true;
    }

    /// Whether frames are being gathered.
    pub fn is_held(&self) -> bool {
        self.held
    }

    /// Writes what was gathered while held, and stops holding.
    pub fn release(&mut self) {
        self.held = false;
        self.write_gathered();
    }

    /// Writes `buf` in place if nothing is queued before it and it can go
    /// without blocking; hands the rest to the thread.
    fn write_gathered(&mut self) {
        if self.buf.is_empty() || self.broken {
            self.buf.clear();
            return;
        }
        if self.backlog.bytes() == 0 {
            match self.direct.write(&self.buf) {
                Direct::Wrote(n) if n == self.buf.len() => {
                    self.buf.clear();
                    return;
                }
                Direct::Wrote(n) => {
                    // Full, interrupted, short or not tried: the thread writes the rest.
                    self.buf.drain(..n);
                }
                Direct::Broken => {
                    self.broken = true;
                    self.buf.clear();
                    return;
                }
            }
        }
        let Some(queue) = &self.queue else {
            self.buf.clear();
            return;
        };
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

    /// Closes the pipe once everything queued is written (or the peer is gone).
    /// Does not wait: a peer that never reads must not hold up shutdown.
    pub fn close(mut self) {
        self.release();
        self.queue.take();
        self.thread.take();
    }

    /// Closes the pipe after everything queued is written, waiting for that at
    /// most `limit` (a peer that stopped reading must not hold up an exit).
    pub fn close_within(mut self, limit: std::time::Duration) {
        self.release();
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

impl Drop for PipeWriter {
    fn drop(&mut self) {
        // Gathered frames are written like queued ones.
        self.release();
        self.queue.take();
    }
}
