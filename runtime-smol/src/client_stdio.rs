//! The client side over stdio: frames from stdin in, frames to stdout out.
//! stdout carries only protocol; logs go to stderr.
//!
//! stdin and stdout are read and written through the reactor when they are
//! pipes, sockets or terminals (no thread hop per frame); a regular file falls
//! back to smol's blocking pool.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use async_channel::{Receiver, Sender};
use futures_lite::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tether_core::codec::encode_line;
use tether_core::{Input, SessionId};

use crate::line_reader::LineReader;

/// The session number of the stdio client.
pub const STDIO_SESSION: SessionId = SessionId(1);

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

/// Reads newline-delimited frames from stdin until EOF, then reports the client closed.
pub async fn read_stdin(inputs: Sender<Input>, max_frame: usize) {
    let Some(mut stdin) = standard_stream(std::io::stdin().as_fd()) else {
        let _ = inputs.send(Input::ClientClosed { session: STDIO_SESSION }).await;
        return;
    };
    let mut lines = LineReader::new(&mut stdin, max_frame, 64 * 1024);
    while let Some(line) = lines.next().await {
        // The core answers an unreadable frame with the right JSON-RPC error.
        let frame = line.unwrap_or_else(|e| format!("<{e}>"));
        if inputs.send(Input::ClientFrame { session: STDIO_SESSION, frame, param_headers: None }).await.is_err() {
            return;
        }
    }
    let _ = inputs.send(Input::ClientClosed { session: STDIO_SESSION }).await;
}

/// Writes frames to stdout, one write and flush per burst.
pub async fn write_stdout(frames: Receiver<String>) {
    let Some(mut stdout) = standard_stream(std::io::stdout().as_fd()) else { return };
    let mut buf = Vec::new();
    while let Ok(frame) = frames.recv().await {
        buf.clear();
        encode_line(&frame, &mut buf);
        while let Ok(more) = frames.try_recv() {
            encode_line(&more, &mut buf);
        }
        if stdout.write_all(&buf).await.is_err() || stdout.flush().await.is_err() {
            break;
        }
    }
}
