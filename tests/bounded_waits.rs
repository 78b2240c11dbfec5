//! The bounded waits of tests/support/bounded.rs themselves: what they leave
//! behind when the wait runs out.

#[path = "support/bounded.rs"]
mod bounded;

use bounded::{
    Bounded, alive, descendants_of, ended_within, joined_within, kill_after, kill_tree, wait_within, within,
};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How long a SIGKILLed process may take to be gone on a loaded machine (and
/// a thread that has nothing to wait for to end).
const GONE_WITHIN: Duration = Duration::from_secs(30);

/// `sh -c 'sleep 100 & sleep 100'` once both sleeps run: the shell and
/// every process below it (read now: once the shell is killed, its orphans
/// are found below it no more).
fn two_sleeps() -> (Child, Vec<u32>) {
    let mut child = Command::new("sh").args(["-c", "sleep 100 & sleep 100"]).spawn().unwrap();
    let root = child.id();
    let comm = |p: &u32| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
    // Both sleeps running: the shell's children, or the shell (exec'd into the
    // last one) and its child.
    let tree = within(GONE_WITHIN, || {
        let below = descendants_of(root);
        let sleeping = std::iter::once(root).chain(below.iter().copied()).filter(|p| comm(p).trim() == "sleep");
        (sleeping.count() == 2).then_some(below)
    });
    let Some(below) = tree else {
        kill_tree(root);
        let _ = child.wait();
        panic!("sh -c 'sleep 100 & sleep 100' never ran both sleeps");
    };
    assert!(!below.is_empty(), "the shell started nothing");
    (child, std::iter::once(root).chain(below).collect())
}

/// Asserts that every process of `all` is gone, `GONE_WITHIN` given for it;
/// kills those left either way, so that a failure leaves no sleep behind.
fn assert_gone(all: &[u32], after: &str) {
    let left = || all.iter().copied().filter(|&p| alive(p)).collect::<Vec<u32>>();
    let gone = within(GONE_WITHIN, || left().is_empty().then_some(())).is_some();
    let still = left();
    still.iter().for_each(|&p| drop(kill_tree(p)));
    assert!(gone, "left running after {after}: {still:?} of {all:?}");
}

/// A child that outlives its wait was killed alone: what it had started (a
/// shell's background job, a driver's workers) ran on, reparented, holding
/// the child's pipes and the machine. Its whole tree now goes with it.
#[test]
fn a_wait_past_its_limit_kills_what_the_child_started_too() {
    let (mut child, all) = two_sleeps();
    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_within(&mut child, Duration::from_secs(1), "two sleeps")
    }));
    let said = bounded::panic_message(&*waited.expect_err("a wait past its limit panics"));
    assert!(said.contains("two sleeps did not end within 1s"), "{said}");
    assert_gone(&all, "the wait ran out");
}

/// A `Drop` waits through `ended_within`, which must not panic (a panic in a
/// drop while a test unwinds aborts the binary): past its limit it says None
/// and kills the tree as `wait_within` does; a child that ends gives its status.
#[test]
fn a_wait_that_must_not_panic_says_none_and_kills_the_tree_too() {
    let (mut child, all) = two_sleeps();
    assert_eq!(ended_within(&mut child, Duration::from_secs(1)), None);
    assert_gone(&all, "the wait ran out");
    let quick = Command::new("sh").args(["-c", "exit 3"]).ended_in(Duration::from_secs(60));
    assert_eq!(quick.and_then(|s| s.code()), Some(3));
    assert_eq!(Command::new("/nonexistent/leapgnn-test").ended_in(Duration::from_secs(1)), None);
}

/// `output_as_set_in` keeps the stdio the call set up (a stdout sent to a
/// closed pipe or /dev/full) and captures only what it piped, stdin empty as
/// `output()` has it; `try_output_in` gives a tool that is not there back as
/// the spawn's error, for the test to skip without it.
#[test]
fn an_output_as_set_captures_only_its_pipes_and_a_missing_tool_is_an_error() {
    let mut sh = Command::new("sh");
    sh.args(["-c", "cat; echo out; echo err >&2"]).stdout(Stdio::null()).stderr(Stdio::piped());
    let out = sh.output_as_set_in(GONE_WITHIN, "sh reading an empty stdin");
    assert_eq!((out.stdout, out.stderr), (vec![], b"err\n".to_vec()));
    let found = Command::new("sh").args(["-c", "echo out"]).try_output_in(GONE_WITHIN, "sh").unwrap();
    assert_eq!(found.stdout, b"out\n");
    let missing = Command::new("/nonexistent/leapgnn-test").try_output_in(GONE_WITHIN, "a missing tool");
    assert_eq!(missing.err().map(|e| e.kind()), Some(std::io::ErrorKind::NotFound));
}

/// `kill_after` guards a read of a child's pipe: killing the child alone
/// left what it started running (a shell's job, a driver's workers), which
/// held the pipe open, and the read it was to end went on waiting. It now
/// kills the whole tree, as `wait_within` does.
#[test]
fn kill_after_kills_what_the_child_started_too() {
    let (mut child, all) = two_sleeps();
    let watch = kill_after(child.id(), Duration::from_secs(1), "two sleeps");
    assert_gone(&all, "kill_after's limit");
    drop(watch);
    let _ = child.wait();
}

/// A thread joined from a `Drop` (`joined_within`): None past the limit, no
/// panic, the thread left behind; a thread that ended gives what `join` does.
#[test]
fn a_join_that_must_not_panic_says_none_past_its_limit() {
    let (never, hangs) = std::sync::mpsc::channel::<()>();
    let hung = std::thread::spawn(move || hangs.recv().is_err());
    assert!(joined_within(hung, Duration::from_secs(1)).is_none());
    drop(never);
    let ended = joined_within(std::thread::spawn(|| 7), GONE_WITHIN);
    assert_eq!(ended.map(|r| r.unwrap()), Some(7));
    let panicked = joined_within(std::thread::spawn(|| panic!("gave up")), GONE_WITHIN);
    assert_eq!(bounded::panic_message(&*panicked.expect("it ended").unwrap_err()), "gave up");
}

/// Set in the test binary run by `a_hung_scoped_thread_aborts_naming_it_and_a_panicked_one`.
const CHILD_VAR: &str = "LEAPGNN_BOUNDED_WAITS_CHILD";

/// A scope waits for its threads even while it unwinds: a panic past the
/// limit would leave the test hung on the thread it gave up on. The process
/// aborts instead, and says (past the harness's capture, lost with it) which
/// thread hung and what one that panicked meanwhile said. Run in a child
/// process: the abort ends the whole binary.
#[test]
fn a_hung_scoped_thread_aborts_naming_it_and_a_panicked_one() {
    let err = aborted_child("a_scope_with_a_hung_and_a_panicked_thread");
    assert!(err.contains("thread 1 did not end within 1s"), "{err}");
    assert!(err.contains("thread 0 panicked: gave up"), "{err}");
}

/// The same for a pair of threads of different results: the one left
/// waiting on its peer is named, and so is the peer's panic.
#[test]
fn a_hung_pair_aborts_naming_the_hung_thread_and_its_panicked_peer() {
    let err = aborted_child("a_pair_with_a_hung_and_a_panicked_thread");
    assert!(err.contains("worker 1 did not end within 1s"), "{err}");
    assert!(err.contains("worker 0 panicked: gave up"), "{err}");
}

/// Runs the ignored test `name` of this binary in a child process and
/// asserts it aborted; returns its stderr.
fn aborted_child(name: &str) -> String {
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args(["--ignored", "--exact", name]).env(CHILD_VAR, "1");
    let out = child.output_in(bounded::RUN_LIMIT, name);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGABRT),
        "{}: {err}",
        out.status
    );
    err
}

/// The child of the test above: thread 0 panics, thread 1 waits for a
/// message that never comes (its sender outlives the scope).
#[test]
#[ignore = "run by a_hung_scoped_thread_aborts_naming_it_and_a_panicked_one, in a process of its own"]
fn a_scope_with_a_hung_and_a_panicked_thread() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let (_never, hangs) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let threads = vec![
            s.spawn(|| panic!("gave up")),
            s.spawn(move || {
                let _ = hangs.recv();
            }),
        ];
        bounded::join_all_scoped_within(threads, Duration::from_secs(1), |i| format!("thread {i}"));
    });
}

/// The child of the pair test above: worker 0 panics, worker 1 waits for a
/// message from it that never comes.
#[test]
#[ignore = "run by a_hung_pair_aborts_naming_the_hung_thread_and_its_panicked_peer, in a process of its own"]
fn a_pair_with_a_hung_and_a_panicked_thread() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let (_never, hangs) = std::sync::mpsc::channel::<u32>();
    std::thread::scope(|s| {
        let worker0 = s.spawn(|| -> String { panic!("gave up") });
        let worker1 = s.spawn(move || hangs.recv().ok());
        bounded::join_pair_scoped_within(worker1, worker0, Duration::from_secs(1), ["worker 1", "worker 0"]);
    });
}
