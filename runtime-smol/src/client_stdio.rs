//! The client side over stdio: frames from stdin in, frames to stdout out.
//! stdout carries only protocol; logs go to stderr.

use std::io::Write;

use async_channel::{Receiver, Sender};
use futures_lite::AsyncReadExt;
use tether_core::codec::{encode_line, LineDecoder};
use tether_core::{Input, SessionId};

/// The session number of the stdio client.
pub const STDIO_SESSION: SessionId = SessionId(1);

/// Reads newline-delimited frames from stdin until EOF, then reports the client closed.
pub async fn read_stdin(inputs: Sender<Input>, max_frame: usize) {
    let mut stdin = smol::Unblock::new(std::io::stdin());
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

/// Writes frames to stdout, one flush per burst.
pub async fn write_stdout(frames: Receiver<String>) {
    let mut buf = Vec::new();
    while let Ok(frame) = frames.recv().await {
        buf.clear();
        encode_line(&frame, &mut buf);
        while let Ok(more) = frames.try_recv() {
            encode_line(&more, &mut buf);
        }
        let chunk = std::mem::take(&mut buf);
        let ok = smol::unblock(move || {
            let mut out = std::io::stdout().lock();
            out.write_all(&chunk).and_then(|_| out.flush()).map(|_| chunk)
        })
        .await;
        match ok {
            Ok(chunk) => buf = chunk,
            Err(_) => break,
        }
    }
}
