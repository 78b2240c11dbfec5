//! What a process under an address-space limit (`ulimit -v`, `prlimit --as`)
//! spends that limit on, and how it says it cannot start.

mod train_support;

use train_support::bounded::{Bounded, QUICK_LIMIT, RUN_LIMIT};
use train_support::{Tiny, bounded_command, capped_command, open_to_all, processes_of, traced, write_tiny};

/// glibc reserves 64 MiB of address space for each new thread's malloc
/// arena, mapping 128 MiB for a moment to align it. Under a tight limit that
/// moment's room was missing to the main thread: one `infer --workers 2` in
/// 60 under 100 MiB failed to map its 4 MB archive ("Cannot allocate
/// memory") and CI failed on it. Every leapgnn process, driver and workers,
/// now keeps glibc to one arena: no thread reserves one.
#[test]
fn no_thread_of_the_driver_or_its_workers_reserves_a_malloc_arena() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let args = ["train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui", "--json"];
    let Some((out, trace)) = traced(d, &["-e", "trace=mmap,clone,clone3"], &args, &d.join("trace")) else { return };
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // The test means something only if threads were started, in three processes.
    let threads = trace.lines().filter(|l| l.contains("clone3(") && l.contains("CLONE_THREAD")).count();
    assert!(threads >= 6, "{threads} threads started: {err}");
    // An arena's reservation: inaccessible, unbacked, 64 or 128 MiB.
    let arenas: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains("PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS|MAP_NORESERVE"))
        .filter(|l| l.contains(", 67108864, ") || l.contains(", 134217728, "))
        .collect();
    assert!(arenas.is_empty(), "{} arena reservation(s), e.g. {}", arenas.len(), arenas[0]);
}

/// A process whose limit left no room for its compute threads' stacks
/// panicked inside rayon at its first parallel loop ("The global thread pool
/// has not been initialized"), after a partition had been begun. It now says
/// at once what it could not start, within which limit, and what to change.
#[test]
fn threads_that_cannot_start_are_reported_before_any_work_not_a_panic() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    // 2000 stacks of 2 MiB cannot fit in 400 MiB, on any machine.
    let out = capped_command(d, &["partition", "tiny", "--parts", "2"], 400 << 20)
        .env("RAYON_NUM_THREADS", "2000")
        .output_in(RUN_LIMIT, "leapgnn partition with 2000 threads in 400 MiB");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{err}");
    for needle in
        ["error: cannot start 2000 compute thread(s)", "(RLIMIT_AS) of 400 MiB", "prlimit --as", "RAYON_NUM_THREADS"]
    {
        assert!(lines[0].contains(needle), "no `{needle}` in {err}");
    }
    assert!(!d.join("tiny").join("parts").exists(), "a partition was begun");
    // The same command within its means partitions.
    let ok = capped_command(d, &["partition", "tiny", "--parts", "2"], 4 << 30)
        .env("RAYON_NUM_THREADS", "2")
        .output_in(RUN_LIMIT, "leapgnn partition with 2 threads in 4 GiB");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}

/// `std::thread::spawn` panics when the OS refuses a thread: under a tight
/// process/thread limit (`ulimit -u`) a `train --workers 2` died with
/// "failed to spawn thread" in the driver, a launcher's log reader, a
/// worker's watchdog or its mesh, and a worker could be left running. Every
/// limit from too few to enough is tried (which thread is refused first
/// depends on how the processes interleave, the outcome must not): each run
/// ends with one error line, exit 1, no panic and no process left behind
/// (every process of the run is the test user's, in whichever process group
/// it runs: the driver's, or each local worker's own), and a refused thread
/// is named with the limit and what to raise. RLIMIT_NPROC is the user's,
/// not a table that frees: it is reported at the first refusal (it was asked
/// again 6 times over 620 ms). A worker's refusal reaches the driver typed
/// (`ToDriver::ThreadRefused`): the driver's line names the worker, its host,
/// the thread and the limit read there, not a worker's text.
#[test]
fn a_refused_thread_is_an_error_naming_it_and_the_limit_never_a_panic() {
    let Some((tmp, uid)) = tiny_for_a_free_user(0) else { return };
    let d = tmp.path();
    let mut named = Vec::new();
    let mut by_worker = Vec::new();
    let host = leapgnn::util::host_name();
    let mut enough = None;
    for limit in 2..64u64 {
        let out = as_user(d, uid, limit, 1, &["train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "limit {limit}: {err}");
        assert_eq!(processes_of(uid), 0, "limit {limit}: processes left behind: {err}");
        if out.status.success() {
            enough = Some(limit);
            break;
        }
        assert_eq!(out.status.code(), Some(1), "limit {limit}: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "limit {limit}: {err}");
        // The address space's advice, for a process limit, by any process of the run.
        assert!(!misled(&err), "limit {limit}: {err}");
        if errors[0].contains("cannot start thread leapgnn-") {
            let nproc = format!("(RLIMIT_NPROC, ulimit -u) of {limit}");
            for needle in [&nproc as &str, "ulimit -u", ": Resource temporarily unavailable (os error 11), within "] {
                assert!(errors[0].contains(needle), "limit {limit}: no `{needle}` in {err}");
            }
            // Asked once, waited 0 ms: the line says "refused N times over M ms" only after retries.
            assert!(!errors[0].contains(" times over "), "limit {limit}: a permanent refusal was retried: {err}");
            named.push(limit);
        }
        // The worker's SpawnError, as the driver received it: its rank, host,
        // thread, OS error and limits, and no restart into the same limit.
        let worker = errors[0].find(" cannot start thread leapgnn-").and_then(|at| {
            let named = errors[0][..at].strip_suffix(&format!(" on {host}"))?;
            named.rsplit_once("worker ")?.1.parse::<usize>().ok()
        });
        if worker.is_some() {
            let needle = format!("raise the limit that is full on {host} (ulimit -u");
            assert!(errors[0].contains(&needle), "limit {limit}: no `{needle}` in {err}");
            assert!(errors[0].ends_with("a restart would meet the same limit"), "limit {limit}: {err}");
            by_worker.push(limit);
        }
    }
    assert!(enough.is_some(), "no limit below 64 was enough to train");
    assert!(!named.is_empty(), "no limit refused a thread (enough from {enough:?})");
    assert!(!by_worker.is_empty(), "no limit refused a worker a thread (refused: {named:?}, enough from {enough:?})");
}

/// A worker whose compute threads (rayon's pool, the first it starts) were
/// refused exited before it connected, with "raise the limit (ulimit -v,
/// prlimit --as)" for a process limit and no limit named, and the driver
/// said only "worker 0 exited with code 1 before finishing". The worker now
/// tells the driver, typed, which names it, its host, the thread and the
/// limit, and does not restart it. With more compute threads than the
/// driver's others, some limit of the sweep refuses a worker's pool.
#[test]
fn a_worker_refused_its_compute_threads_is_named_by_the_driver() {
    let Some((tmp, uid)) = tiny_for_a_free_user(1) else { return };
    let d = tmp.path();
    let host = leapgnn::util::host_name();
    let mut pool_refused = None;
    let mut enough = None;
    for limit in 2..96u64 {
        let args = ["train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui", "--restarts", "1"];
        let out = as_user(d, uid, limit, 8, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "limit {limit}: {err}");
        assert_eq!(processes_of(uid), 0, "limit {limit}: processes left behind: {err}");
        assert!(!misled(&err), "limit {limit}: {err}");
        if out.status.success() {
            enough = Some(limit);
            break;
        }
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "limit {limit}: {err}");
        let Some(at) = errors[0].find(&format!(" on {host} cannot start thread leapgnn-compute-")) else { continue };
        assert!(errors[0][..at].ends_with("worker 0") || errors[0][..at].ends_with("worker 1"), "{err}");
        let nproc = format!("(RLIMIT_NPROC, ulimit -u) of {limit}");
        for needle in [&nproc as &str, ": Resource temporarily unavailable (os error 11), within "] {
            assert!(errors[0].contains(needle), "limit {limit}: no `{needle}` in {err}");
        }
        assert!(errors[0].ends_with("a restart would meet the same limit"), "limit {limit}: {err}");
        assert!(!err.contains("restart 1 of 1"), "limit {limit}: restarted into the same limit: {err}");
        pool_refused = Some(limit);
        // Higher limits reach candle's own pool, which panics on a refusal (not leapgnn's to fix here).
        break;
    }
    assert!(pool_refused.is_some(), "no limit refused a worker's compute threads (enough from {enough:?})");
}

/// The driver's own host refused it a thread (a worker's log reader) or a
/// worker's process (fork's EAGAIN) under a limit no wait frees: CI's
/// `--restarts 1` relaunched the run into the same limit, and won the race
/// against the worker refusal the sweep above looks for. Now neither is
/// restarted, and the line says why; the fork's refusal names the limits as
/// a thread's does, and worker 0, already started, is stopped. A fork
/// refused for a moment (a full kernel table) is asked for again and the
/// run trains. (The test hook stands for the limit: RLIMIT_NPROC does not
/// bind root, as CI runs.)
#[test]
fn a_thread_or_a_worker_process_the_drivers_host_refuses_is_not_restarted_into_the_same_limit() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    write_tiny(d, "tiny", Tiny::default());
    let args = ["train", "tiny", "--workers", "2", "--epochs", "1", "--no-tui", "--restarts", "1"];
    let var = leapgnn::util::threads::REFUSE_THREAD_TEST_VAR;
    for (refused, what) in [("leapgnn-log-1", "thread"), ("leapgnn-worker-1", "process")] {
        let out =
            bounded_command(d, &args).env(var, refused).output_in(RUN_LIMIT, &format!("leapgnn {refused} refused"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(!err.contains("restart 1 of 1"), "restarted into the same limit: {err}");
        let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
        assert_eq!(errors.len(), 1, "{err}");
        let refusal = format!("cannot start {what} {refused}: Resource temporarily unavailable (os error 11)");
        for needle in [
            "not restarted, as a restart on this host would meet the same limit: ",
            "cannot start worker 1: ",
            &refusal,
            "the kernel's pid_max of ",
            "or start fewer workers or threads (RAYON_NUM_THREADS) on this host",
        ] {
            assert!(errors[0].contains(needle), "no `{needle}` in {err}");
        }
        let left = std::process::Command::new("pgrep").arg("-f").arg(d).output_in(QUICK_LIMIT, "pgrep -f");
        assert_eq!(String::from_utf8_lossy(&left.stdout), "", "workers left running after: {err}");
    }
    let out =
        bounded_command(d, &args).env(var, "leapgnn-worker-1:2").output_in(RUN_LIMIT, "leapgnn, a fork refused twice");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "a fork refused twice, then started, failed the run: {err}");
    assert!(!err.contains("restart 1 of 1"), "{err}");
}

/// Root in a user namespace made by an unprivileged user (`unshare -U -r`:
/// uid 0 and every capability inside, the user's uid outside) was taken as
/// exempt from RLIMIT_NPROC, which the kernel applies to it there: a thread
/// refused under that limit was reported without naming it, and asked for
/// again 6 times over 620 ms as if a kernel table might free. The limit is
/// now named, at the first refusal.
#[test]
fn root_in_an_unprivileged_user_namespace_is_told_its_process_limit() {
    let Some((tmp, uid)) = tiny_for_a_free_user(3) else { return };
    let d = tmp.path();
    let in_namespace = |args: &[&str]| {
        let mut c = std::process::Command::new("timeout");
        c.args(["300", "unshare", "-U", "-r", env!("CARGO_BIN_EXE_leapgnn"), "--data-dir"]).arg(d).args(args);
        c
    };
    let roomy = limited(in_namespace(&["info", "tiny"]), d, uid, 64, 1);
    if !roomy.status.success() {
        let err = String::from_utf8_lossy(&roomy.stderr);
        eprintln!("skipped: an unprivileged user cannot make a user namespace here: {err}");
        return;
    }
    let out = limited(in_namespace(&["partition", "tiny", "--parts", "2"]), d, uid, 4, 8);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{err}");
    for needle in ["cannot start thread leapgnn-", "(RLIMIT_NPROC, ulimit -u) of 4"] {
        assert!(errors[0].contains(needle), "no `{needle}` in {err}");
    }
    assert!(!errors[0].contains(" times over "), "a refusal under the process's own limit was retried: {err}");
}

/// Whether a line of `err` gives the address space's advice for an OS's
/// refusal (EAGAIN), which a process limit mostly is.
fn misled(err: &str) -> bool {
    err.lines().any(|l| l.contains("(os error 11)") && l.contains("raise the limit (ulimit -v"))
}

/// A dataset `tiny` open to all, and a uid that runs no process now: the
/// limit is counted per user, so the count is the test's alone. Each test
/// names its own `slot`, so that tests running at once start from different
/// uids. None, said, where this process cannot drop to another user.
fn tiny_for_a_free_user(slot: u32) -> Option<(tempfile::TempDir, u32)> {
    // SAFETY: geteuid reads the process's credentials, nothing else.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: dropping to an unprivileged user needs root (CI runs as root)");
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    write_tiny(tmp.path(), "tiny", Tiny::default());
    let from = 64000 + (std::process::id() + slot * 333) % 1000;
    let uid = (from..from + 1000).find(|&u| processes_of(u) == 0).unwrap();
    open_to_all(tmp.path());
    Some((tmp, uid))
}

/// `leapgnn` run as user and group `uid`, whose processes and threads together
/// may number `limit`, with `threads` compute threads per process.
fn as_user(data: &std::path::Path, uid: u32, limit: u64, threads: usize, args: &[&str]) -> std::process::Output {
    limited(bounded_command(data, args), data, uid, limit, threads)
}

/// `c` run as `as_user` runs leapgnn.
fn limited(
    mut c: std::process::Command,
    data: &std::path::Path,
    uid: u32,
    limit: u64,
    threads: usize,
) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    c.env("RAYON_NUM_THREADS", threads.to_string()).env("HOME", data);
    // SAFETY: between fork and exec the closure only calls setrlimit, setgroups,
    // setgid and setuid, all async-signal-safe, on values it owns; it allocates nothing.
    unsafe {
        c.pre_exec(move || {
            let nproc = libc::rlimit { rlim_cur: limit, rlim_max: limit };
            let ok = libc::setrlimit(libc::RLIMIT_NPROC, &nproc) == 0
                && libc::setgroups(0, std::ptr::null()) == 0
                && libc::setgid(uid) == 0
                && libc::setuid(uid) == 0;
            if ok { Ok(()) } else { Err(std::io::Error::last_os_error()) }
        });
    }
    train_support::bounded::run_within(&mut c, train_support::bounded::RUN_LIMIT, &format!("leapgnn as uid {uid}"))
}
