//! What a process under an address-space limit (`ulimit -v`, `prlimit --as`)
//! spends that limit on, and how it says it cannot start.

mod train_support;

use train_support::{Tiny, capped_command, traced, write_tiny};

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
        .output()
        .unwrap();
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
        .output()
        .unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}
