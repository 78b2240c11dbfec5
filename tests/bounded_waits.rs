//! The bounded waits of tests/support/bounded.rs themselves: what they leave
//! behind when the wait runs out.

#[path = "support/bounded.rs"]
mod bounded;

use bounded::{Bounded, alive, descendants_of, wait_within, within};
use std::process::Command;
use std::time::Duration;

/// How long a SIGKILLed process may take to be gone on a loaded machine.
const GONE_WITHIN: Duration = Duration::from_secs(30);

/// A child that outlives its wait was killed alone: what it had started (a
/// shell's background job, a driver's workers) ran on, reparented, holding
/// the child's pipes and the machine. Its whole tree now goes with it.
#[test]
fn a_wait_past_its_limit_kills_what_the_child_started_too() {
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
        bounded::kill_tree(root);
        let _ = child.wait();
        panic!("sh -c 'sleep 100 & sleep 100' never ran both sleeps");
    };
    assert!(!below.is_empty(), "the shell started nothing");

    let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_within(&mut child, Duration::from_secs(1), "two sleeps")
    }));
    let said = bounded::panic_message(&*waited.expect_err("a wait past its limit panics"));
    assert!(said.contains("two sleeps did not end within 1s"), "{said}");

    let all: Vec<u32> = std::iter::once(root).chain(below).collect();
    let left = || all.iter().copied().filter(|&p| alive(p)).collect::<Vec<u32>>();
    let gone = within(GONE_WITHIN, || left().is_empty().then_some(())).is_some();
    let still = left();
    // A failure leaves no sleep behind either.
    still.iter().for_each(|&p| drop(bounded::kill_tree(p)));
    assert!(gone, "left running after the wait ran out: {still:?} of {all:?}");
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
    let mut child = Command::new(std::env::current_exe().unwrap());
    child.args(["--ignored", "--exact", "a_scope_with_a_hung_and_a_panicked_thread"]).env(CHILD_VAR, "1");
    let out = child.output_in(bounded::RUN_LIMIT, "the scope with a hung thread");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(libc::SIGABRT),
        "{}: {err}",
        out.status
    );
    assert!(err.contains("thread 1 did not end within 1s"), "{err}");
    assert!(err.contains("thread 0 panicked: gave up"), "{err}");
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
