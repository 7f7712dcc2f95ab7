//! The process trees of stdio backends: which processes belong to a backend, so
//! that nothing a backend starts outlives it. The system calls themselves are
//! [`crate::platform`]'s.
//!
//! - A backend runs in its own process group and, on Linux, dies with the thread
//!   that started it (parent-death signal; see [`crate::launch`]). Its environment
//!   carries a lineage mark ([`LINEAGE_VAR`]) that its descendants inherit.
//! - On Linux tether is a child subreaper ([`become_subreaper`]): a process whose
//!   parent dies is reparented to tether instead of to init, so leftovers stay
//!   findable, and a reaper thread collects the ones that exit (no zombies).
//! - [`ProcessTree::signal`] reaches the whole tree: every process in the group
//!   (even after the leader exited), every descendant found by parent pid under
//!   `/proc`, and every process tether adopted that carries the backend's lineage
//!   (a grandchild that left the group with `setsid` and whose parent died).
//!
//! Elsewhere on unix only the process group is reached, and on Windows the job
//! object the backend runs in (see [`crate::platform::Containment`]). Nothing
//! here decides when to signal: the runtimes do what the core asked, plus the
//! mechanics of a process that is already gone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::platform;
pub use crate::platform::Signal;

/// The environment variable marking a backend's processes with their lineage:
/// `<tether pid>.<tether start time>.<serial>`, unique per started process and
/// naming the tether that started it (the start time, in clock ticks since
/// boot on Linux, tells it from a later process with the same pid).
pub const LINEAGE_VAR: &str = "TETHER_LINEAGE";

/// Which started process a tree descends from (the value of [`LINEAGE_VAR`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lineage(String);

impl Lineage {
    /// A lineage no other process started by this tether has.
    pub fn next() -> Lineage {
        static SERIAL: AtomicU64 = AtomicU64::new(1);
        Lineage(format!("{}{}", own_prefix(), SERIAL.fetch_add(1, Ordering::Relaxed)))
    }

    /// The mark as it appears in the environment.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Makes this process the reaper of its orphaned descendants (Linux; elsewhere a
/// no-op returning `false`) and starts the thread that collects the ones that
/// exit. Call once, early, from a binary: a library should not change who reaps
/// its host's orphans.
pub fn become_subreaper() -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    match platform::become_subreaper() {
        Ok(()) => {
            let reaper = std::thread::Builder::new().name("tether-reaper".into()).spawn(|| loop {
                std::thread::sleep(std::time::Duration::from_secs(2));
                reap_orphans();
            });
            if let Err(e) = reaper {
                tracing::warn!("cannot start the orphan reaper: {e}");
            }
            true
        }
        Err(e) => {
            tracing::warn!("cannot become a child subreaper: {e}");
            false
        }
    }
}

/// Starts a child with `spawn` (a command [`crate::launch::prepare`] set up with
/// `lineage`), registers its pid (read by `pid`) as one whose owner reaps it, so
/// [`reap_orphans`] never takes its exit status, and takes hold of it at once
/// (see [`platform::contain`]); the child and its tree. Call
/// [`ProcessTree::leader_reaped`] once the owner has reaped it.
pub fn spawn_owned<T>(
    lineage: Lineage,
    spawn: impl FnOnce() -> std::io::Result<T>,
    pid: impl FnOnce(&T) -> u32,
) -> std::io::Result<(T, ProcessTree)> {
    let mut owned = owned();
    let child = spawn()?;
    let leader = pid(&child);
    let containment = platform::contain(leader);
    owned.insert(leader);
    let tree = ProcessTree { leader, lineage, leader_reaped: Arc::default(), containment: Arc::new(containment) };
    Ok((child, tree))
}

/// The owner of `pid` (from [`spawn_owned`]) has reaped it.
pub fn released(pid: u32) {
    owned().remove(&pid);
}

fn owned() -> std::sync::MutexGuard<'static, std::collections::BTreeSet<u32>> {
    static OWNED: std::sync::Mutex<std::collections::BTreeSet<u32>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    OWNED.lock().unwrap_or_else(|p| p.into_inner())
}

/// A started backend process and everything it starts.
#[derive(Clone, Debug)]
pub struct ProcessTree {
    leader: u32,
    /// What its processes are found by under `/proc` (Linux only).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    lineage: Lineage,
    /// The leader's exit status was collected: its pid may belong to someone else now.
    leader_reaped: Arc<AtomicBool>,
    /// What the platform holds the tree with (its group, its job), shared by the
    /// clones; dropped with the last of them. Signalled where there is no `/proc`
    /// to find the tree in (Linux searches instead).
    #[cfg_attr(target_os = "linux", allow(dead_code))]
    containment: Arc<platform::Containment>,
}

impl ProcessTree {
    /// The leader's process id.
    pub fn leader(&self) -> u32 {
        self.leader
    }

    /// Records that the leader's exit status was collected (and releases it from
    /// [`spawn_owned`]'s registry).
    pub fn leader_reaped(&self) {
        self.leader_reaped.store(true, Ordering::SeqCst);
        released(self.leader);
    }

    /// Sends `signal` to every process of the tree (see the module docs); how many
    /// were signalled. With [`Signal::Kill`] the tree is searched again until no
    /// process is left (a few rounds at most), which also catches processes forked
    /// while it was being killed.
    pub fn signal(&self, signal: Signal) -> usize {
        let reaped = self.leader_reaped.load(Ordering::SeqCst);
        #[cfg(target_os = "linux")]
        {
            let rounds = if signal == Signal::Kill { 4 } else { 1 };
            let mut total = 0;
            for _ in 0..rounds {
                let members = linux::members(self.leader, reaped, &self.lineage);
                if members.is_empty() {
                    break;
                }
                total += members.len();
                for pid in members {
                    platform::signal_process(pid, signal);
                }
            }
            reap_orphans();
            total
        }
        #[cfg(not(target_os = "linux"))]
        {
            let _ = reaped;
            self.containment.signal(signal)
        }
    }

    /// The pids in the tree now (Linux; elsewhere empty), for tests and logs.
    pub fn members(&self) -> Vec<u32> {
        #[cfg(target_os = "linux")]
        {
            linux::members(self.leader, self.leader_reaped.load(Ordering::SeqCst), &self.lineage)
        }
        #[cfg(not(target_os = "linux"))]
        {
            Vec::new()
        }
    }
}

/// Collects the exit status of every exited process this process adopted as a
/// subreaper (never one registered by [`spawn_owned`]); how many. Linux only.
pub fn reap_orphans() -> usize {
    #[cfg(target_os = "linux")]
    {
        let owned = owned();
        let mut reaped = 0;
        for p in linux::children() {
            if p.zombie && !owned.contains(&p.pid) && platform::try_reap(p.pid) {
                reaped += 1;
            }
        }
        reaped
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// The start of every lineage of this tether: `<pid>.<start time>.`.
fn own_prefix() -> &'static str {
    static PREFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    PREFIX.get_or_init(|| {
        #[cfg(target_os = "linux")]
        let start = linux::start_time(std::process::id()).unwrap_or(0);
        #[cfg(not(target_os = "linux"))]
        let start = 0;
        format!("{}.{start}.", std::process::id())
    })
}

/// Kills what a tether that ended without stopping its backends (killed with
/// SIGKILL, or by the OOM killer) left running: every process of this user whose
/// lineage names a tether that is no longer running, with its descendants, in
/// its backend's group or not (a daemon that called `setsid` keeps the mark).
/// A gateway calls it once at start; how many were killed. Linux only: nothing
/// else lists a process's environment. Processes that cleared their
/// environment carry no mark and are not found.
pub fn kill_leftovers_of_ended_tethers() -> usize {
    #[cfg(target_os = "linux")]
    {
        let mut total = 0;
        for _ in 0..4 {
            let leftovers = linux::orphaned_by_ended_tethers();
            if leftovers.is_empty() {
                break;
            }
            total += leftovers.len();
            for pid in leftovers {
                platform::signal_process(pid, Signal::Kill);
            }
        }
        if total > 0 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            reap_orphans();
        }
        total
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

/// [`kill_leftovers_of_ended_tethers`], saying what it did: call once, from a
/// gateway's binary, before starting backends.
pub fn sweep_at_start() {
    let killed = kill_leftovers_of_ended_tethers();
    if killed > 0 {
        tracing::warn!(
            "killed {killed} processes that a tether which ended without stopping its backends left running"
        );
    }
}

/// Kills every process this tether adopted that descends from one of its
/// backends (by lineage), with its descendants, and reaps them: the last sweep
/// at shutdown, for leftovers of processes already gone. Linux only.
pub fn kill_adopted_leftovers() -> usize {
    #[cfg(target_os = "linux")]
    {
        let prefix = own_prefix();
        let mut total = 0;
        for _ in 0..4 {
            let leftovers = linux::adopted_leftovers(prefix);
            if leftovers.is_empty() {
                break;
            }
            total += leftovers.len();
            for pid in leftovers {
                platform::signal_process(pid, Signal::Kill);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        reap_orphans();
        total
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

#[cfg(target_os = "linux")]
mod linux {
    //! `/proc`: who is whose child, in which group, with which lineage.

    use std::collections::{BTreeSet, HashMap};

    use super::{owned, Lineage, LINEAGE_VAR};

    /// One line of `/proc/<pid>/stat`, the fields we use.
    #[derive(Clone, Copy, Debug)]
    pub(super) struct Proc {
        pub pid: u32,
        pub ppid: u32,
        pub pgrp: u32,
        pub zombie: bool,
        /// When it started, in clock ticks since boot.
        pub start: u64,
    }

    fn stat(pid: u32) -> Option<Proc> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
        let (_, rest) = text.rsplit_once(')')?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let state = *fields.first()?;
        let ppid = fields.get(1)?.parse().ok()?;
        let pgrp = fields.get(2)?.parse().ok()?;
        // Field 22 of the line, the 20th after the command.
        let start = fields.get(19)?.parse().ok()?;
        Some(Proc { pid, ppid, pgrp, zombie: matches!(state, "Z" | "X"), start })
    }

    /// When process `pid` started (clock ticks since boot).
    pub(super) fn start_time(pid: u32) -> Option<u64> {
        stat(pid).map(|p| p.start)
    }

    /// Whether the tether a lineage names (`<pid>.<start>.<serial>`, or the
    /// older `<pid>.<serial>`) is still running.
    fn owner_running(lineage: &str, procs: &HashMap<u32, Proc>) -> bool {
        let mut parts = lineage.split('.');
        let Some(pid) = parts.next().and_then(|p| p.parse::<u32>().ok()) else { return true };
        let (a, b) = (parts.next(), parts.next());
        let Some(owner) = procs.get(&pid).filter(|p| !p.zombie) else { return false };
        match (a.and_then(|s| s.parse::<u64>().ok()), b) {
            // A start time of 0: it could not be read; the pid alone says.
            (Some(start), Some(_)) => start == 0 || owner.start == start,
            _ => true,
        }
    }

    /// Processes of this user marked with the lineage of a tether that is no
    /// longer running, with their descendants.
    pub(super) fn orphaned_by_ended_tethers() -> Vec<u32> {
        use std::os::unix::fs::MetadataExt;
        let me = std::process::id();
        let uid = std::fs::metadata(format!("/proc/{me}")).map(|m| m.uid()).ok();
        let procs = all();
        let by_pid: HashMap<u32, Proc> = procs.iter().map(|p| (p.pid, *p)).collect();
        let seeds = procs
            .iter()
            .filter(|p| p.pid != me && !p.zombie)
            .filter(|p| std::fs::metadata(format!("/proc/{}", p.pid)).map(|m| m.uid()).ok() == uid)
            .filter(|p| lineage_of(p.pid).is_some_and(|l| !owner_running(&l, &by_pid)))
            .map(|p| p.pid)
            .collect();
        with_descendants(&procs, seeds)
    }

    /// Every process visible now.
    fn all() -> Vec<Proc> {
        let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok()).filter_map(stat).collect()
    }

    /// This process's children (its threads' `children` lists, else a scan).
    pub(super) fn children() -> Vec<Proc> {
        let me = std::process::id();
        let mut pids = BTreeSet::new();
        let mut listed = false;
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{me}/task")) {
            for task in tasks.flatten() {
                let Ok(text) = std::fs::read_to_string(task.path().join("children")) else { continue };
                listed = true;
                pids.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
            }
        }
        if !listed {
            return all().into_iter().filter(|p| p.ppid == me).collect();
        }
        pids.into_iter().filter_map(stat).filter(|p| p.ppid == me).collect()
    }

    /// The lineage mark in a process's environment, if readable.
    fn lineage_of(pid: u32) -> Option<String> {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
        let key = format!("{LINEAGE_VAR}=");
        environ
            .split(|b| *b == 0)
            .find_map(|var| var.strip_prefix(key.as_bytes()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// `seeds` and all their descendants among `procs`, zombies left out.
    fn with_descendants(procs: &[Proc], seeds: BTreeSet<u32>) -> Vec<u32> {
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        for p in procs {
            children.entry(p.ppid).or_default().push(p.pid);
        }
        let mut found = seeds.clone();
        let mut stack: Vec<u32> = seeds.into_iter().collect();
        while let Some(pid) = stack.pop() {
            for &child in children.get(&pid).map(Vec::as_slice).unwrap_or(&[]) {
                if found.insert(child) {
                    stack.push(child);
                }
            }
        }
        let me = std::process::id();
        let live: HashMap<u32, bool> = procs.iter().map(|p| (p.pid, p.zombie)).collect();
        found.into_iter().filter(|pid| *pid != me && live.get(pid) == Some(&false)).collect()
    }

    /// The live processes of the tree of `leader` (see the module docs).
    pub(super) fn members(leader: u32, leader_reaped: bool, lineage: &Lineage) -> Vec<u32> {
        let me = std::process::id();
        let procs = all();
        let leader_pid_taken = procs.iter().any(|p| p.pid == leader);
        let mut seeds = BTreeSet::new();
        if !leader_reaped {
            seeds.insert(leader);
        }
        // The group outlives its leader; once the leader is reaped, a process
        // holding its pid is someone else, and so is a group of that number.
        if !leader_reaped || !leader_pid_taken {
            seeds.extend(procs.iter().filter(|p| p.pgrp == leader).map(|p| p.pid));
        }
        let owned = owned().clone();
        for p in procs.iter().filter(|p| p.ppid == me && !owned.contains(&p.pid) && !p.zombie) {
            if lineage_of(p.pid).as_deref() == Some(lineage.as_str()) {
                seeds.insert(p.pid);
            }
        }
        with_descendants(&procs, seeds)
    }

    /// Adopted processes (not started by us) marked with a lineage of ours, with
    /// their descendants.
    pub(super) fn adopted_leftovers(prefix: &str) -> Vec<u32> {
        let me = std::process::id();
        let procs = all();
        let owned = owned().clone();
        let seeds = procs
            .iter()
            .filter(|p| p.ppid == me && !owned.contains(&p.pid) && !p.zombie)
            .filter(|p| lineage_of(p.pid).is_some_and(|l| l.starts_with(prefix)))
            .map(|p| p.pid)
            .collect();
        with_descendants(&procs, seeds)
    }
}
