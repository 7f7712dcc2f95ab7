//! The client side over stdio: frames from stdin in, frames to stdout out.
//! stdout carries only protocol; logs go to stderr.
//!
//! stdin is read by a thread of its own (`read_stdin`), which feeds each frame
//! to the engine itself; frames for the client are written to stdout by
//! whichever thread has them (a [`tether_host::pipe_writer::PipeWriter`], which
//! hands what would block to its own thread). Both bound what waits in bytes:
//! whatever produces frames for clients (a backend's stdout reader, the client's
//! own stdin reader) waits while the clients' backlog is over its bound, so a
//! client that reads slowly slows its producers instead of growing the queue.
//!
//! An in-process client (the demo) takes its frames from a queue counted in the
//! same backlog ([`ClientSink`], [`ClientFrames`]).

use std::sync::Arc;

use async_channel::{Receiver, Sender};
use tether_core::{Input, SessionId};
use tether_host::backlog::Backlog;
use tether_host::line_reader::LineReader;

use crate::serve::stdio_backend::{FeedBurst, MAX_BURST};

/// The session number of the stdio client.
pub(super) const STDIO_SESSION: SessionId = SessionId(1);

/// How many bytes of frames may wait for the stdio clients before the producers
/// of frames wait.
pub(super) const CLIENT_BACKLOG: usize = 1024 * 1024;

/// Where the host puts frames for one client: never blocks, counts bytes in the
/// backlog its producers wait on.
#[derive(Clone, Debug)]
pub(super) struct ClientSink {
    frames: Sender<String>,
    backlog: Arc<Backlog>,
}

impl ClientSink {
    /// Queues one frame (dropped if the client's writer is gone).
    pub(super) fn send(&self, frame: String) {
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
pub(super) fn client_queue(backlog: Arc<Backlog>) -> (ClientSink, ClientFrames) {
    let (frames, rx) = async_channel::unbounded();
    (ClientSink { frames, backlog: backlog.clone() }, ClientFrames { frames: rx, backlog })
}

/// Starts the thread that reads newline-delimited frames from stdin and feeds
/// each in place (`feed`), after the clients' output backlog (`outflow`) has
/// room (the answers must be read). At the end of stdin it reports the client
/// closed through the host loop's channel (`inputs`), after every frame.
pub(crate) fn read_stdin(
    feed: FeedBurst,
    inputs: Sender<Input>,
    session: SessionId,
    max_frame: usize,
    outflow: Arc<Backlog>,
) -> std::io::Result<()> {
    let read = move || {
        let mut lines = LineReader::new(tether_host::pipe_reader::stdin(), max_frame, 64 * 1024);
        let mut burst = Vec::new();
        while let Some(line) = lines.next() {
            // The core answers an unreadable frame with the right JSON-RPC error.
            let frame = line.unwrap_or_else(|e| format!("<{e}>"));
            burst.push(Input::ClientFrame { session, frame, param_headers: None });
            // Frames read together are fed together (forwarded in one write per backend).
            if !lines.has_line() || burst.len() >= MAX_BURST {
                outflow.wait_room();
                feed(&mut burst);
            }
        }
        let _ = inputs.try_send(Input::ClientClosed { session });
    };
    std::thread::Builder::new().name("stdin".into()).spawn(read).map(drop)
}
