//! The client side over stdio: frames from stdin in, frames to stdout out.
//! stdout carries only protocol; logs go to stderr.
//!
//! stdin and stdout are read and written through the reactor when they are
//! pipes, sockets or terminals (no thread hop per frame); a regular file falls
//! back to smol's blocking pool.
//!
//! Frames for a client wait in a queue counted in bytes ([`ClientSink`],
//! [`ClientFrames`]); whatever produces frames for clients (a backend's stdout
//! reader, the client's own stdin reader) waits while that backlog is over its
//! bound, so a client that reads slowly slows its producers instead of growing
//! the queue.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use async_channel::{Receiver, Sender};
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
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

/// An async handle on one of the process's standard streams.
fn standard_stream(fd: std::os::fd::BorrowedFd<'_>) -> Option<Box<dyn AsyncStream>> {
    let owned: OwnedFd = fd.try_clone_to_owned().ok()?;
    let file = File::from(owned);
    match async_io::Async::new(file) {
        Ok(stream) => Some(Box::new(stream)),
        // Regular files cannot be polled: use the blocking pool.
        Err(_) => {
            let owned: OwnedFd = fd.try_clone_to_owned().ok()?;
            Some(Box::new(smol::Unblock::new(File::from(owned))))
        }
    }
}

trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncStream for T {}

/// Reads newline-delimited frames from stdin until EOF, then reports the client
/// closed. Each frame waits for room in `outflow` (the answers must be read).
pub async fn read_stdin(inputs: Sender<Input>, max_frame: usize, outflow: Arc<Backlog>) {
    let Some(mut stdin) = standard_stream(std::io::stdin().as_fd()) else {
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
    let Some(mut stdout) = standard_stream(std::io::stdout().as_fd()) else { return };
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
