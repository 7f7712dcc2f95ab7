//! How a stdio backend's connection ends, the same in every runtime: how long
//! its streams and process are waited for, and the kill ladder that stops it —
//! stdin closed, then SIGTERM to its process tree, then SIGKILL, each after a
//! grace period unless it exited.
//!
//! The ladder is a plain state machine ([`Ladder::poll`]): a runtime only
//! supplies its way of waiting ([`stop_blocking`] is the one for threads).

use std::time::{Duration, Instant};

use crate::process_tree::{self, Signal};

/// Grace period after each rung of the ladder when one backend is retired
/// (closed, replaced by a new generation): after closing stdin before SIGTERM,
/// and after SIGTERM before SIGKILL.
pub const GRACE: Duration = Duration::from_millis(1500);

/// Grace period after each rung when every backend stops at once (shutdown):
/// shorter, as tether's own exit waits for it.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// How often a waiting ladder looks whether the processes exited.
pub const EXIT_POLL: Duration = Duration::from_millis(20);

/// How long an exit report waits for the rest of the process's stderr.
pub const STDERR_DRAIN: Duration = Duration::from_millis(500);

/// How long an exit report waits for the rest of the process's stdout (frames it
/// wrote before exiting are reported before the exit).
pub const STDOUT_DRAIN: Duration = Duration::from_secs(2);

/// How long a process whose stdout closed may keep running before it is taken
/// for a lost connection (it may be exiting).
pub const STDOUT_CLOSED_GRACE: Duration = Duration::from_secs(1);

/// How long the exit of a process killed for closing its stdout is waited for
/// before the lost connection is reported anyway.
pub const KILLED_EXIT_WAIT: Duration = Duration::from_secs(5);

/// How many bytes of frames may wait for one backend's stdin before the backend
/// is taken for one that stopped reading.
pub const STDIN_LIMIT: usize = 16 * 1024 * 1024;

/// How long tether's own stdout may take, at exit, to deliver what is queued
/// for the client.
pub const CLIENT_FLUSH: Duration = Duration::from_millis(500);

/// One rung of the kill ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rung {
    /// Close the process's stdin: the polite way to ask a stdio server to stop.
    CloseStdin,
    /// Signal its whole process tree.
    Signal(Signal),
}

/// The rungs, politest first.
pub const RUNGS: [Rung; 3] = [Rung::CloseStdin, Rung::Signal(Signal::Terminate), Rung::Signal(Signal::Kill)];

/// What the kill ladder needs from a running stdio backend.
pub trait Stoppable {
    /// Closes its stdin (idempotent).
    fn close_stdin(&mut self);
    /// Sends `signal` to its process tree, including what is left of it after
    /// the process itself exited.
    fn signal(&self, signal: Signal);
    /// Whether the process has exited and been reaped.
    fn has_exited(&self) -> bool;
}

impl Rung {
    /// Does this rung to `process`.
    pub fn apply<P: Stoppable + ?Sized>(self, process: &mut P) {
        match self {
            Rung::CloseStdin => process.close_stdin(),
            Rung::Signal(signal) => process.signal(signal),
        }
    }
}

/// What a runtime climbing the ladder does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Apply this rung to every process.
    Apply(Rung),
    /// Wait this long, then poll again.
    Wait(Duration),
    /// Done: whether every process exited.
    Done(bool),
}

/// The kill ladder for one or more processes, as a state machine: the runtime
/// calls [`Ladder::poll`] and does what it says until [`Step::Done`].
#[derive(Clone, Debug)]
pub struct Ladder {
    grace: Duration,
    next: usize,
    /// Until when the last rung applied is given to work.
    deadline: Option<Instant>,
}

impl Ladder {
    /// The ladder for retiring one backend (grace [`GRACE`]).
    pub fn retire() -> Ladder {
        Ladder { grace: GRACE, next: 0, deadline: None }
    }

    /// The ladder for stopping every backend at shutdown (grace [`SHUTDOWN_GRACE`]).
    pub fn shutdown() -> Ladder {
        Ladder { grace: SHUTDOWN_GRACE, next: 0, deadline: None }
    }

    /// The next step, given whether every process has exited and the time now.
    pub fn poll(&mut self, exited: bool, now: Instant) -> Step {
        if let Some(deadline) = self.deadline {
            if exited {
                return Step::Done(true);
            }
            if now < deadline {
                return Step::Wait(EXIT_POLL.min(deadline - now));
            }
            self.deadline = None;
        }
        match RUNGS.get(self.next) {
            Some(&rung) => {
                self.next += 1;
                self.deadline = Some(now + self.grace);
                Step::Apply(rung)
            }
            None => Step::Done(exited),
        }
    }
}

/// Climbs `ladder` for `processes` on this thread (sleeping between polls);
/// whether they all exited.
pub fn stop_blocking<P: Stoppable>(processes: &mut [P], mut ladder: Ladder) -> bool {
    loop {
        let exited = processes.iter().all(P::has_exited);
        match ladder.poll(exited, Instant::now()) {
            Step::Apply(rung) => processes.iter_mut().for_each(|p| rung.apply(p)),
            Step::Wait(wait) => std::thread::sleep(wait),
            Step::Done(exited) => return exited,
        }
    }
}

/// The end of a shutdown, after the ladder: kills what the stopped processes
/// left running and what escaped their trees (see
/// [`process_tree::kill_adopted_leftovers`]).
pub fn sweep<P: Stoppable>(processes: &[P]) {
    processes.iter().for_each(|p| p.signal(Signal::Kill));
    process_tree::kill_adopted_leftovers();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_closes_stdin_then_terminates_then_kills_a_grace_apart() {
        let start = Instant::now();
        let mut ladder = Ladder::retire();
        assert_eq!(ladder.poll(false, start), Step::Apply(Rung::CloseStdin));
        assert_eq!(ladder.poll(false, start), Step::Wait(EXIT_POLL));
        assert_eq!(ladder.poll(false, start + GRACE), Step::Apply(Rung::Signal(Signal::Terminate)));
        assert_eq!(ladder.poll(false, start + GRACE * 2), Step::Apply(Rung::Signal(Signal::Kill)));
        assert_eq!(
            ladder.poll(false, start + GRACE * 2 + Duration::from_millis(1495)),
            Step::Wait(Duration::from_millis(5))
        );
        assert_eq!(ladder.poll(false, start + GRACE * 3), Step::Done(false));
    }

    #[test]
    fn the_ladder_stops_climbing_once_the_processes_exited() {
        let start = Instant::now();
        let mut ladder = Ladder::shutdown();
        assert_eq!(ladder.poll(false, start), Step::Apply(Rung::CloseStdin));
        assert_eq!(ladder.poll(true, start + Duration::from_millis(10)), Step::Done(true));
    }

    struct Fake {
        rungs: Vec<Rung>,
        exit_on: Rung,
    }

    impl Stoppable for Fake {
        fn close_stdin(&mut self) {
            self.rungs.push(Rung::CloseStdin);
        }
        fn signal(&self, _signal: Signal) {}
        fn has_exited(&self) -> bool {
            self.rungs.contains(&self.exit_on)
        }
    }

    #[test]
    fn a_process_that_leaves_when_its_stdin_closes_is_never_signalled() {
        let mut fake = [Fake { rungs: Vec::new(), exit_on: Rung::CloseStdin }];
        assert!(stop_blocking(&mut fake, Ladder::shutdown()));
        assert_eq!(fake[0].rungs, [Rung::CloseStdin]);
    }
}
