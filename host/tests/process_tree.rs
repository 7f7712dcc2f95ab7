//! Process trees on Linux, in a test binary of their own (it becomes a child
//! subreaper, which must not change who reaps the children of other tests).

#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tether_host::process_tree::{self, Lineage, ProcessTree, Signal};

fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

fn wait_until(mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Runs `script` under `sh` as a backend would be run; its tree and the pids it prints.
fn start(script: &str) -> (std::process::Child, ProcessTree, Vec<u32>) {
    let lineage = Lineage::next();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null());
    tether_host::launch::prepare(&mut cmd, &lineage, &BTreeMap::new());
    let (mut child, tree) =
        process_tree::spawn_owned(lineage, || cmd.spawn(), std::process::Child::id).expect("sh starts");
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let pids = lines.map_while(Result::ok).take_while(|l| l != "ready").filter_map(|l| l.parse().ok()).collect();
    (child, tree, pids)
}

#[test]
fn the_tree_is_found_and_killed_while_its_leader_runs_and_after_it_exited() {
    assert!(process_tree::become_subreaper());

    // A leader with a child in its group and one in a session of its own.
    let script = "sleep 300 & echo $!; setsid sleep 300 & echo $!; echo ready; wait";
    let (mut leader, tree, pids) = start(script);
    assert_eq!(pids.len(), 2, "{pids:?}");
    assert!(
        wait_until(|| tree.members().len() == 3),
        "members: {:?} (expected the leader and {pids:?})",
        tree.members()
    );
    tree.signal(Signal::Kill);
    leader.wait().unwrap();
    tree.leader_reaped();
    assert!(wait_until(|| pids.iter().all(|p| !running(*p))), "survivors among {pids:?}");
    assert!(tree.members().is_empty());

    // A leader that exits at once, leaving the same two behind: the one in its
    // group is found by group, the other (now ours, as subreaper) by lineage.
    let script = "sleep 300 & echo $!; setsid sleep 300 & echo $!; echo ready";
    let (mut leader, tree, pids) = start(script);
    assert_eq!(pids.len(), 2, "{pids:?}");
    leader.wait().unwrap();
    tree.leader_reaped();
    let mut expected = pids.clone();
    expected.sort();
    // The one that left the session may still be between fork and exec (its
    // environment, which carries the lineage, not readable yet) for a moment.
    let found = || {
        let mut members = tree.members();
        members.sort();
        members
    };
    assert!(wait_until(|| found() == expected), "members {:?}, expected {expected:?}", found());
    tree.signal(Signal::Kill);
    assert!(wait_until(|| pids.iter().all(|p| !running(*p))), "survivors among {pids:?}");
    // Reaped too: no zombie is left under this process.
    assert!(wait_until(|| {
        process_tree::reap_orphans();
        pids.iter().all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
    }));

    // Tether's own variables stay home unless the config names them.
    std::env::set_var("TETHER_TEST_SECRET", "hush");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo ${TETHER_TEST_SECRET:-none} ${TETHER_LINEAGE:+marked}"]);
    tether_host::launch::prepare(&mut cmd, &Lineage::next(), &BTreeMap::new());
    assert_eq!(String::from_utf8(cmd.output().unwrap().stdout).unwrap().trim(), "none marked");
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "echo ${TETHER_TEST_SECRET:-none}"]);
    let explicit = BTreeMap::from([("TETHER_TEST_SECRET".to_string(), "told".to_string())]);
    tether_host::launch::prepare(&mut cmd, &Lineage::next(), &explicit);
    cmd.envs(&explicit);
    assert_eq!(String::from_utf8(cmd.output().unwrap().stdout).unwrap().trim(), "told");
}
