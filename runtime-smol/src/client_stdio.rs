//! The client side over stdio: frames from stdin in, frames to stdout out.
//! stdout carries only protocol; logs go to stderr.
//!
//! On unix stdin and stdout are read and written through the reactor when they
//! are pipes, sockets or terminals (no thread hop per frame); a regular file
//! falls back to smol's blocking pool. On Windows, whose pipes and consoles the
//! reactor cannot poll, std's stdin and stdout always go through the blocking
//! pool ([`smol::Unblock`]). That is the one platform split here (`sys`).
//!
//! Frames for a client wait in a queue counted in bytes ([`ClientSink`],
//! [`ClientFrames`]); whatever produces frames for clients (a backend's stdout
//! reader, the client's own stdin reader) waits while that backlog is over its
//! bound, so a client that reads slowly slows its producers instead of growing
//! the queue.

use std::sync::Arc;

use async_channel::{Receiver, Sender};
use futures_lite::AsyncWriteExt;
use tether_core::codec::encode_line;
use tether_core::{Input, SessionId};
use tether_host::backlog::Backlog;

use crate::line_reader::LineReader;

/// The session number of the stdio client.
pub const STDIO_SESSION: SessionId = SessionId(1);

/// How many bytes of frames may wait for the stdio clients before the producers
/// of frames wait.
pub const CLIENT_BACKLOG: usize = 1024 * 1024;

/// Where the host puts frames for one client: never blocks, counts bytes in the
/// backlog its producers wait on.
#[derive(Clone, Debug)]
pub struct ClientSink {
    frames: Sender<String>,
    backlog: Arc<Backlog>,
}

impl ClientSink {
    /// Queues one frame (dropped if the client's writer is gone).
    pub fn send(&self, frame: String) {
        let len = frame.len();
        self.backlog.add(len);
        if self.frames.try_send(frame).is_err() {
            self.backlog.sub(len);
        }
    }
}

/// The receiving end of a [`ClientSink`]: what the client's writer takes.
#[derive(Debug)]
pub struct ClientFrames {
    frames: Receiver<String>,
    backlog: Arc<Backlog>,
}

impl ClientFrames {
    /// The next frame, `None` once every sink is gone. Taking it makes room.
    pub async fn recv(&self) -> Option<String> {
        let frame = self.frames.recv().await.ok()?;
        self.backlog.sub(frame.len());
        Some(frame)
    }

    /// The next frame if one is queued now.
    pub fn try_recv(&self) -> Option<String> {
        let frame = self.frames.try_recv().ok()?;
        self.backlog.sub(frame.len());
        Some(frame)
    }

    /// The backlog producers wait on.
    pub fn backlog(&self) -> &Arc<Backlog> {
        &self.backlog
    }
}

impl Drop for ClientFrames {
    fn drop(&mut self) {
        // Nobody will take these: producers must not wait for them.
        self.frames.close();
        self.backlog.close();
    }
}

/// A queue of frames for one client, counted in `backlog`.
pub fn client_queue(backlog: Arc<Backlog>) -> (ClientSink, ClientFrames) {
    let (frames, rx) = async_channel::unbounded();
    (ClientSink { frames, backlog: backlog.clone() }, ClientFrames { frames: rx, backlog })
}

/// The process's standard streams as async streams, per platform.
mod sys {
    use futures_lite::{AsyncRead, AsyncWrite};

    /// An async reader on this process's stdin (`None` if it cannot be had).
    pub(super) fn stdin() -> Option<Box<dyn AsyncRead + Unpin + Send>> {
        imp::stdin()
    }

    /// An async writer on this process's stdout (`None` if it cannot be had).
    pub(super) fn stdout() -> Option<Box<dyn AsyncWrite + Unpin + Send>> {
        imp::stdout()
    }

    #[cfg(unix)]
    mod imp {
        use std::fs::File;
        use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

        use futures_lite::{AsyncRead, AsyncWrite};

        /// A copy of one of the process's standard streams: registered with the
        /// reactor, or, for a regular file, which cannot be polled, plain.
        fn standard_stream(fd: BorrowedFd<'_>) -> Option<Result<async_io::Async<File>, File>> {
            let owned: OwnedFd = fd.try_clone_to_owned().ok()?;
            match async_io::Async::new(File::from(owned)) {
                Ok(stream) => Some(Ok(stream)),
                Err(_) => Some(Err(File::from(fd.try_clone_to_owned().ok()?))),
            }
        }

        pub(super) fn stdin() -> Option<Box<dyn AsyncRead + Unpin + Send>> {
            Some(match standard_stream(std::io::stdin().as_fd())? {
                Ok(stream) => Box::new(stream),
                // Regular files cannot be polled: use the blocking pool.
                Err(file) => Box::new(smol::Unblock::new(file)),
            })
        }

        pub(super) fn stdout() -> Option<Box<dyn AsyncWrite + Unpin + Send>> {
            Some(match standard_stream(std::io::stdout().as_fd())? {
                Ok(stream) => Box::new(stream),
                Err(file) => Box::new(smol::Unblock::new(file)),
            })
        }
    }

    #[cfg(windows)]
    mod imp {
        use futures_lite::{AsyncRead, AsyncWrite};

        pub(super) fn stdin() -> Option<Box<dyn AsyncRead + Unpin + Send>> {
            Some(Box::new(smol::Unblock::new(std::io::stdin())))
        }

        pub(super) fn stdout() -> Option<Box<dyn AsyncWrite + Unpin + Send>> {
            Some(Box::new(smol::Unblock::new(std::io::stdout())))
        }
    }
}

/// Reads newline-delimited frames from stdin until EOF, then reports the client
/// closed. Each frame waits for room in `outflow` (the answers must be read).
pub async fn read_stdin(inputs: Sender<Input>, max_frame: usize, outflow: Arc<Backlog>) {
    let Some(mut stdin) = sys::stdin() else {
        let _ = inputs.send(Input::ClientClosed { session: STDIO_SESSION }).await;
        return;
    };
    let mut lines = LineReader::new(&mut stdin, max_frame, 64 * 1024);
    while let Some(line) = lines.next().await {
        // The core answers an unreadable frame with the right JSON-RPC error.
        let frame = line.unwrap_or_else(|e| format!("<{e}>"));
        outflow.room().await;
        if inputs.send(Input::ClientFrame { session: STDIO_SESSION, frame, param_headers: None }).await.is_err() {
            return;
        }
    }
    let _ = inputs.send(Input::ClientClosed { session: STDIO_SESSION }).await;
}

/// Writes frames to stdout, one write and flush per burst (of at most 256 KiB
/// beyond its first frame).
pub async fn write_stdout(frames: ClientFrames) {
    const BATCH: usize = 256 * 1024;
    let Some(mut stdout) = sys::stdout() else { return };
    let mut buf = Vec::new();
    while let Some(frame) = frames.recv().await {
        buf.clear();
        encode_line(&frame, &mut buf);
        while buf.len() < BATCH {
            let Some(more) = frames.try_recv() else { break };
            encode_line(&more, &mut buf);
        }
        if stdout.write_all(&buf).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}
