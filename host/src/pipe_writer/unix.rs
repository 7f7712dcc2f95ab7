//! [`super::PipeWriter`] on unix: the direct write on the caller's thread, with
//! `O_NONBLOCK` on a pipe of ours or poll(2) on a shared one, and a writer thread
//! that waits with poll(2).

use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, RawFd};

/// What a [`super::PipeWriter`] can own: a pipe or file with a descriptor to
/// write to directly and to poll.
pub trait Pipe: Write + AsRawFd + Send + 'static {}
impl<W: Write + AsRawFd + Send + 'static> Pipe for W {}

/// Largest write a pipe performs atomically and, with room signalled by poll(2),
/// without blocking (POSIX `PIPE_BUF`; 4096 on Linux).
const ATOMIC_WRITE: usize = 4096;

/// The caller's side of a writer: where and how it may write without blocking.
pub(super) struct Direct {
    fd: RawFd,
    /// The descriptor is ours and `O_NONBLOCK`: write without asking poll(2).
    nonblocking: bool,
}

impl Direct {
    /// A descriptor others may use too (stdout): its flags stay as they are.
    pub(super) fn shared(out: &impl AsRawFd) -> Direct {
        Direct { fd: out.as_raw_fd(), nonblocking: false }
    }

    /// A pipe nobody else writes to (a child's stdin): made non-blocking.
    pub(super) fn private(out: &impl AsRawFd) -> std::io::Result<Direct> {
        let fd = out.as_raw_fd();
        // SAFETY: fcntl on a descriptor we own; only its status flags change.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Direct { fd, nonblocking: true })
    }

    /// Writes what of `buf` can be written now without blocking: all of it or
    /// part of it on a non-blocking pipe; a frame of up to [`ATOMIC_WRITE`] bytes
    /// that poll(2) says fits on a shared one; else nothing.
    pub(super) fn write(&self, buf: &[u8]) -> super::Direct {
        if !self.nonblocking && (buf.len() > ATOMIC_WRITE || !self.has_room()) {
            return super::Direct::Wrote(0);
        }
        // SAFETY: `fd` stays open while the writer thread holds its owner, which
        // lives as long as the `PipeWriter`; the buffer is valid for its length.
        let n = unsafe { libc::write(self.fd, buf.as_ptr().cast(), buf.len()) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EPIPE) {
            return super::Direct::Broken;
        }
        super::Direct::Wrote(n.max(0) as usize)
    }

    /// Whether a write of up to [`ATOMIC_WRITE`] bytes would not block now.
    fn has_room(&self) -> bool {
        let mut pfd = libc::pollfd { fd: self.fd, events: libc::POLLOUT, revents: 0 };
        // SAFETY: one valid pollfd, zero timeout.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        n == 1 && pfd.revents & libc::POLLOUT != 0 && pfd.revents & (libc::POLLERR | libc::POLLHUP) == 0
    }
}

/// `write_all` that waits with poll(2) when a non-blocking descriptor is full.
pub(super) fn write_all_waiting<W: Write + AsRawFd>(out: &mut W, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        match out.write(buf) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                let mut pfd = libc::pollfd { fd: out.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                // SAFETY: one valid pollfd; waits until the pipe has room or fails.
                unsafe { libc::poll(&mut pfd, 1, -1) };
            }
            Err(e) => return Err(e),
        }
    }
    out.flush()
}

/// Whether stdout is a pipe that stderr does not share, so making it
/// non-blocking (a write is then tried in place, without asking poll(2) first)
/// cannot make log lines fail. Terminals and files keep their flags.
fn stdout_is_a_private_pipe() -> bool {
    fn stat(fd: i32) -> Option<libc::stat> {
        let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
        // SAFETY: fstat fills the buffer when it returns 0.
        (unsafe { libc::fstat(fd, st.as_mut_ptr()) } == 0).then(|| unsafe { st.assume_init() })
    }
    let (Some(out), err) = (stat(1), stat(2)) else { return false };
    let fifo = out.st_mode & libc::S_IFMT == libc::S_IFIFO;
    let shared = err.is_some_and(|e| e.st_dev == out.st_dev && e.st_ino == out.st_ino);
    fifo && !shared
}

/// See [`super::PipeWriter::stdout`]: a copy of fd 1.
pub(super) fn stdout(backlog: std::sync::Arc<crate::backlog::Backlog>) -> std::io::Result<super::PipeWriter> {
    let stdout = std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned()?);
    if stdout_is_a_private_pipe() {
        super::PipeWriter::counted_nonblocking("stdout", stdout, backlog)
    } else {
        super::PipeWriter::counted("stdout", stdout, backlog)
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::io::Read;
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::sync::mpsc::channel;
    use std::time::Duration;

    use super::super::PipeWriter;

    fn pipe() -> (File, File) {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills two fresh descriptors, which we then own.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are owned by nobody else.
        unsafe { (File::from(OwnedFd::from_raw_fd(fds[0])), File::from(OwnedFd::from_raw_fd(fds[1]))) }
    }

    /// Small frames (direct writes) and large ones (the thread) interleave, and
    /// a peer that reads nothing for a while never blocks the sender: everything
    /// arrives, in order, once it reads.
    #[test]
    fn frames_arrive_in_order_and_a_slow_reader_never_blocks_the_sender() {
        in_order_without_blocking(false, false);
        in_order_without_blocking(true, false);
    }

    /// The same with frames gathered ten at a time (held, then released), the
    /// last ten still held when the writer closes.
    #[test]
    fn gathered_frames_arrive_in_order_too() {
        in_order_without_blocking(false, true);
        in_order_without_blocking(true, true);
    }

    fn in_order_without_blocking(nonblocking: bool, gather: bool) {
        let (mut read, write) = pipe();
        let frames: Vec<String> = (0..400)
            .map(|i| format!(r#"{{"n":{i},"pad":"{}"}}"#, "x".repeat(if i % 7 == 0 { 9000 } else { 40 })))
            .collect();
        let expected: String = frames.iter().map(|f| format!("{f}\n")).collect();
        let (done, sent) = channel();
        std::thread::spawn(move || {
            let mut w = if nonblocking {
                PipeWriter::new_nonblocking("test", write).unwrap()
            } else {
                PipeWriter::new("test", write).unwrap()
            };
            for (i, f) in frames.iter().enumerate() {
                if gather && i % 10 == 0 {
                    w.hold();
                }
                w.send(f);
                if gather && i % 10 == 9 && i < 390 {
                    w.release();
                }
            }
            done.send(()).unwrap();
            w.close_within(Duration::from_secs(60));
        });
        // 400 frames (over 500 KiB) against a 64 KiB pipe nobody reads yet.
        sent.recv_timeout(Duration::from_secs(30)).expect("send never blocks on a full pipe");
        let mut got = String::new();
        read.read_to_string(&mut got).unwrap();
        assert_eq!(got.len(), expected.len());
        assert!(got == expected, "frames reordered or damaged");
    }

    /// A reader that went away: sends are dropped, nothing panics or blocks.
    #[test]
    fn a_closed_peer_drops_frames() {
        let (read, write) = pipe();
        drop(read);
        let mut w = PipeWriter::new("test", write).unwrap();
        for _ in 0..100 {
            w.send(r#"{"jsonrpc":"2.0","method":"x"}"#);
        }
        w.close_within(Duration::from_secs(5));
    }
}
