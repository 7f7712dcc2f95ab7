//! The client side over stdio: frames from stdin in, frames to stdout out.
//! stdout carries only protocol; logs go to stderr.
//!
//! stdin and stdout are read and written through the reactor when they are
//! pipes, sockets or terminals (no thread hop per frame); a regular file falls
//! back to smol's blocking pool.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use async_channel::{Receiver, Sender};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tether_core::codec::{encode_line, LineDecoder};
use tether_core::{Input, SessionId};

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
    let mut decoder = LineDecoder::new(max_frame);
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        let n = match stdin.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        decoder.push(&chunk[..n]);
        while let Some(line) = decoder.next_line() {
            let frame = match line {
                Ok(frame) => frame,
                // The core answers an unreadable frame with the right JSON-RPC error.
                Err(e) => format!("<{e}>"),
            };
            if inputs.send(Input::ClientFrame { session: STDIO_SESSION, frame }).await.is_err() {
                return;
            }
        }
    }
    while let Some(Ok(frame)) = decoder.finish() {
        let _ = inputs.send(Input::ClientFrame { session: STDIO_SESSION, frame }).await;
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
