//! The stdio transport: newline-delimited JSON on stdin and stdout, one session
//! per process.

use std::io::{self, BufRead, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::Value;

use crate::hostile::flood_stdout;
use crate::protocol::*;
use crate::server::Mock;

/// Writes every message as one line of `W`.
pub(crate) struct LineOutlet<W> {
    output: Mutex<W>,
}

impl<W: Write> LineOutlet<W> {
    fn write_line(&self, message: &Value) {
        let line = format!("{message}\n");
        let mut output = lock(&self.output);
        // A failed write means the client is gone; EOF on stdin ends the mock.
        let _ = output.write_all(line.as_bytes()).and_then(|()| output.flush());
    }
}

impl<W: Write + Send> Outlet for LineOutlet<W> {
    fn send(&self, message: &Value) {
        self.write_line(message);
    }

    fn finish(&self, response: &Value) {
        self.write_line(response);
    }
}

/// How long the requests in flight at EOF on stdin get to be answered, so that
/// `printf '…' | mock-mcp` shows its answers, while a `hang` delays exit only briefly.
pub(crate) const EOF_GRACE: Duration = Duration::from_secs(1);

/// Serves one session over newline-delimited JSON until `input` reaches EOF, then
/// gives the requests in flight [`EOF_GRACE`] to be answered and abandons the rest.
pub(crate) fn serve_stdio<R: BufRead, W: Write + Send + 'static>(
    mock: Arc<Mock>,
    mut input: R,
    output: W,
) -> io::Result<()> {
    let outlet: Arc<dyn Outlet> = Arc::new(LineOutlet { output: Mutex::new(output) });
    let session = Arc::new(Session::new());
    if mock.options.flood_stdout {
        let (flood, initialized) = (outlet.clone(), session.clone());
        thread::spawn(move || {
            while !initialized.initialized.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            // The answer to initialize goes first.
            thread::sleep(Duration::from_millis(50));
            flood_stdout(flood);
        });
    }
    let mut frame = Vec::new();
    loop {
        frame.clear();
        if input.read_until(b'\n', &mut frame)? == 0 {
            session.end_listens();
            session.drain(EOF_GRACE);
            return Ok(());
        }
        if frame.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match parse_message(&frame) {
            Ok(message) => mock.receive(&session, message, Arc::clone(&outlet)),
            Err(error) => outlet.finish(&error),
        }
    }
}
