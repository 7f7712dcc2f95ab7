//! [`super::PipeWriter`] on Windows: anonymous pipes cannot be written without
//! blocking (there is no readiness to poll, and `PIPE_NOWAIT` is a legacy mode
//! that drops the guarantees a byte stream needs), so every frame goes to the
//! writer's thread, which blocks in the write as long as the peer makes it. The
//! queue in front of it is bounded in bytes exactly as on unix.

use std::io::Write;

/// What a [`super::PipeWriter`] can own: anything written to (a child's stdin, a
/// file, std's stdout).
pub trait Pipe: Write + Send + 'static {}
impl<W: Write + Send + 'static> Pipe for W {}

/// The caller's side of a writer: never writes on Windows.
pub(super) struct Direct;

impl Direct {
    /// See [`super::PipeWriter::new`].
    pub(super) fn shared<W>(_out: &W) -> Direct {
        Direct
    }

    /// See [`super::PipeWriter::new_nonblocking`]: the same as a shared pipe here.
    pub(super) fn private<W>(_out: &W) -> std::io::Result<Direct> {
        Ok(Direct)
    }

    /// Writes nothing: the writer's thread takes every frame.
    pub(super) fn write(&self, _buf: &[u8]) -> super::Direct {
        super::Direct::Wrote(0)
    }
}

/// `write_all`, blocking, then a flush.
pub(super) fn write_all_waiting<W: Write>(out: &mut W, buf: &[u8]) -> std::io::Result<()> {
    out.write_all(buf)?;
    out.flush()
}

/// See [`super::PipeWriter::stdout`]: std's stdout, which also writes text to a
/// console correctly (as UTF-16).
pub(super) fn stdout(backlog: std::sync::Arc<crate::backlog::Backlog>) -> std::io::Result<super::PipeWriter> {
    super::PipeWriter::counted("stdout", std::io::stdout(), backlog)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::time::Duration;

    use super::super::{PipeWriter, WRITE_BACKLOG};

    /// A peer that takes nothing until told to, then everything.
    struct Gate {
        open: Receiver<()>,
        opened: bool,
        out: Sender<Vec<u8>>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if !self.opened {
                self.open.recv().map_err(|_| std::io::ErrorKind::BrokenPipe)?;
                self.opened = true;
            }
            self.out.send(buf.to_vec()).map_err(|_| std::io::ErrorKind::BrokenPipe)?;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// A peer that reads nothing for a while never blocks the sender, the bytes
    /// waiting are counted, and everything arrives in order once it reads.
    #[test]
    fn frames_arrive_in_order_and_a_slow_reader_never_blocks_the_sender() {
        let (open, gate) = channel();
        let (out, got) = channel();
        let mut w = PipeWriter::new_nonblocking("test", Gate { open: gate, opened: false, out }).unwrap();
        let frames: Vec<String> = (0..400).map(|i| format!(r#"{{"n":{i},"pad":"{}"}}"#, "x".repeat(40))).collect();
        let expected: String = frames.iter().map(|f| format!("{f}\n")).collect();
        for f in &frames {
            w.send(f);
        }
        // Nothing was written yet: all of it waits, counted.
        assert_eq!(w.backlog().bytes(), expected.len());
        assert!(expected.len() < WRITE_BACKLOG);
        open.send(()).unwrap();
        w.close_within(Duration::from_secs(30));
        let written: Vec<u8> = got.try_iter().flatten().collect();
        assert!(written == expected.as_bytes(), "frames reordered or damaged");
    }

    /// A reader that went away: sends are dropped, nothing panics or blocks.
    #[test]
    fn a_closed_peer_drops_frames() {
        let (open, gate) = channel();
        drop(open);
        let (out, _got) = channel();
        let mut w = PipeWriter::new("test", Gate { open: gate, opened: false, out }).unwrap();
        for _ in 0..100 {
            w.send(r#"{"jsonrpc":"2.0","method":"x"}"#);
        }
        let backlog = w.backlog().clone();
        w.close_within(Duration::from_secs(5));
        assert_eq!(backlog.bytes(), 0);
    }
}
