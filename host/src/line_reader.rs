//! Reading newline-delimited frames from a blocking stream, with the core's
//! decoder (bounded lines, CRLF, over-long lines reported and skipped).

use std::io::Read;

use tether_core::codec::{LineDecoder, LineError};

/// Yields lines from `input` until end of file or a read error.
pub struct LineReader<R> {
    input: R,
    decoder: LineDecoder,
    chunk: Vec<u8>,
    done: bool,
}

impl<R: Read> LineReader<R> {
    /// Lines of at most `max_line` bytes, read `chunk` bytes at a time.
    pub fn new(input: R, max_line: usize, chunk: usize) -> Self {
        LineReader { input, decoder: LineDecoder::new(max_line), chunk: vec![0; chunk], done: false }
    }
}

impl<R: Read> Iterator for LineReader<R> {
    type Item = Result<String, LineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.done {
                return self.decoder.finish();
            }
            if let Some(line) = self.decoder.next_line() {
                return Some(line);
            }
            match self.input.read(&mut self.chunk) {
                Ok(0) => self.done = true,
                Ok(n) => self.decoder.push(&self.chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => self.done = true,
            }
        }
    }
}
