//! Reading pipes with blocking reads, each on a thread of its own: a read that
//! waits in the kernel costs one system call per chunk, where a reactor costs a
//! readiness wait, a re-arm and often a read that finds nothing.
//!
//! [`stdin`] is this process's standard input, whatever mode whoever started
//! tether left it in; [`blocking_copy`] (unix) is a private pipe (a child's
//! stdout) made ready for a reading thread.

use std::io::Read;

/// This process's stdin as a blocking reader. On unix a descriptor inherited in
/// non-blocking mode (which tether does not change: others may share it) is
/// waited on with poll(2) when it has nothing, instead of being taken for its end.
pub fn stdin() -> impl Read + Send {
    Stdin
}

struct Stdin;

impl Read for Stdin {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match std::io::stdin().read(buf) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait_readable(),
                other => return other,
            }
        }
    }
}

/// Waits until stdin has data or is closed.
#[cfg(unix)]
fn wait_readable() {
    let mut pfd = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd; waits until stdin is readable, closed or failed.
    unsafe { libc::poll(&mut pfd, 1, -1) };
}

/// Never called: Windows reads do not return `WouldBlock`.
#[cfg(not(unix))]
fn wait_readable() {
    std::thread::sleep(std::time::Duration::from_millis(1));
}

/// A copy of a pipe nobody else reads (a child's stdout), as a file in blocking
/// mode for a reading thread. The mode belongs to the pipe, not the copy: the
/// original must no longer be read through a reactor.
#[cfg(unix)]
pub fn blocking_copy(pipe: &impl std::os::fd::AsFd) -> std::io::Result<std::fs::File> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::from(pipe.as_fd().try_clone_to_owned()?);
    let fd = file.as_raw_fd();
    // SAFETY: fcntl on a descriptor we own; only its status flags change.
    let ok = unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) == 0
    };
    if ok {
        Ok(file)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::io::{Read, Write};
    use std::os::fd::{FromRawFd, OwnedFd};

    #[test]
    fn a_copy_reads_blocking_even_when_the_pipe_was_non_blocking() {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills two fresh descriptors, which we then own; fcntl
        // changes only the read end's status flags.
        unsafe {
            assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
            assert_eq!(libc::fcntl(fds[0], libc::F_SETFL, libc::fcntl(fds[0], libc::F_GETFL) | libc::O_NONBLOCK), 0);
        }
        // SAFETY: both were just created and are owned by nobody else.
        let (read, mut write) = unsafe {
            (std::fs::File::from(OwnedFd::from_raw_fd(fds[0])), std::fs::File::from(OwnedFd::from_raw_fd(fds[1])))
        };
        let mut copy = super::blocking_copy(&read).unwrap();
        drop(read);
        let writer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            write.write_all(b"late\n").unwrap();
        });
        // Non-blocking, this read would fail at once with EAGAIN.
        let mut buf = [0; 16];
        let n = copy.read(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"late\n");
        writer.join().unwrap();
    }
}
