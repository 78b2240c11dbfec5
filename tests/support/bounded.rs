//! Bounded waits on processes, their pipes, channels and threads. A product
//! that hangs (or a race that goes the wrong way) must fail the one test,
//! naming what it waited for, not hold CI until the job's own limit kills it
//! with nothing said. The limits are generous on purpose: CI is a loaded
//! 2-core machine, and a limit must never make a passing test fail.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::thread::{JoinHandle, ScopedJoinHandle};
use std::time::{Duration, Instant};

/// How long any leapgnn command run to completion may take (`LONG_RUN`s are
/// stopped by the test long before; the slowest runs to the end take minutes).
pub const RUN_LIMIT: Duration = Duration::from_secs(600);

/// How long a process may take to end once sent SIGTERM or SIGINT: it stops
/// its workers with a grace and writes its checkpoint first.
pub const STOP_LIMIT: Duration = Duration::from_secs(120);

/// How long a pipe may stay open after its process ended: only one a
/// process it started (which inherited the pipe) still holds stays open.
pub const PIPE_LIMIT: Duration = Duration::from_secs(60);

/// How long a quick command (pgrep, chmod, cp, a tmux client, python's
/// import of a module) may take: a moment, but for a loaded machine.
pub const QUICK_LIMIT: Duration = Duration::from_secs(60);

/// Short enough to add nothing to a test's time, long enough not to spin.
const POLL: Duration = Duration::from_millis(20);

/// What `poll` gives once it gives something, asked every `POLL` for at most
/// `limit`; None past it. Every bounded wait here (and the tests' own
/// deadline loops) polls through this.
pub fn within<T>(limit: Duration, mut poll: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = poll() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL);
    }
}

/// Waits for `child` to end, at most `limit`; past it, kills the child and
/// every process it started (a shell's background job, a driver's workers:
/// left running, they would hold its pipes and outlive the test) and panics
/// naming `what`.
pub fn wait_within(child: &mut Child, limit: Duration, what: &str) -> ExitStatus {
    match ended_or_killed(child, limit) {
        Some(Ok(status)) => status,
        Some(Err(e)) => panic!("waiting for {what}: {e}"),
        None => panic!("{what} did not end within {limit:?} (killed it and what it started)"),
    }
}

/// `wait_within` for a `Drop`, which must not panic (it may run while a test
/// unwinds, and a panic there aborts the whole test binary): None when the
/// child did not end within `limit` (it and what it started are killed then)
/// or could not be waited for.
pub fn ended_within(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    ended_or_killed(child, limit)?.ok()
}

/// How `child` ended, within `limit`; None past it, once the child and every
/// process it started are killed.
fn ended_or_killed(child: &mut Child, limit: Duration) -> Option<std::io::Result<ExitStatus>> {
    let ended = within(limit, || child.try_wait().transpose());
    if ended.is_none() {
        kill_tree(child.id());
        let _ = child.wait();
    }
    ended
}

/// `Command::output` and `Command::status`, bounded: past `limit` the process
/// and what it started are killed, and the call panics naming `what`.
pub trait Bounded {
    /// `output()`: stdin empty, stdout and stderr captured (`run_within`).
    fn output_in(&mut self, limit: Duration, what: &str) -> Output;
    /// `output_in`, where a command that cannot start is no failure (a tool
    /// a test skips without): the spawn's error.
    fn try_output_in(&mut self, limit: Duration, what: &str) -> std::io::Result<Output>;
    /// `output()` of a command whose stdout or stderr the call has sent
    /// elsewhere (a closed pipe, /dev/full): stdin empty, and of stdout and
    /// stderr, what the call made `Stdio::piped()` is captured.
    fn output_as_set_in(&mut self, limit: Duration, what: &str) -> Output;
    /// `status()`: stdio as the command has it configured (inherited unless set).
    fn status_in(&mut self, limit: Duration, what: &str) -> ExitStatus;
    /// `status_in` for a `Drop` (see `ended_within`): None, and no panic,
    /// when the command cannot start or does not end within `limit`.
    fn ended_in(&mut self, limit: Duration) -> Option<ExitStatus>;
}

impl Bounded for Command {
    fn output_in(&mut self, limit: Duration, what: &str) -> Output {
        run_within(self, limit, what)
    }

    fn try_output_in(&mut self, limit: Duration, what: &str) -> std::io::Result<Output> {
        let child = self.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        Ok(output_within(child, limit, what))
    }

    fn output_as_set_in(&mut self, limit: Duration, what: &str) -> Output {
        output_within(started(self.stdin(Stdio::null()), what), limit, what)
    }

    fn status_in(&mut self, limit: Duration, what: &str) -> ExitStatus {
        wait_within(&mut started(self, what), limit, what)
    }

    fn ended_in(&mut self, limit: Duration) -> Option<ExitStatus> {
        ended_within(&mut self.spawn().ok()?, limit)
    }
}

/// What `Child::wait_with_output` gives, with the wait bounded by `limit`
/// and each pipe's end after the exit by `PIPE_LIMIT`.
pub fn output_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let status = wait_within(&mut child, limit, what);
    let rest = |pipe: Option<mpsc::Receiver<Vec<u8>>>, name: &str| {
        pipe.map(|r| recv_within(&r, PIPE_LIMIT, &format!("{what}'s {name} to close after it ended ({status})")))
            .unwrap_or_default()
    };
    Output { status, stdout: rest(stdout, "stdout"), stderr: rest(stderr, "stderr") }
}

/// `cmd` started, or a panic naming `what` and why it cannot start.
fn started(cmd: &mut Command, what: &str) -> Child {
    or_cannot_start(cmd.spawn(), what)
}

/// What a command that had to start (`what`) gave; a panic saying why it
/// could not start.
fn or_cannot_start<T>(started: std::io::Result<T>, what: &str) -> T {
    started.unwrap_or_else(|e| panic!("{what} cannot start: {e}"))
}

/// What `Command::output` gives (stdin empty, stdout and stderr captured),
/// bounded as `output_within` is.
pub fn run_within(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    or_cannot_start(cmd.try_output_in(limit, what), what)
}

/// All of `pipe`, on a channel once it closes (read on its own thread so
/// that neither pipe of a process fills while the other is read).
pub fn drain(mut pipe: impl Read + Send + 'static) -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::sync_channel(1);
    std::thread::spawn(move || {
        let mut all = Vec::new();
        let _ = pipe.read_to_end(&mut all);
        let _ = tx.send(all);
    });
    rx
}

/// The next message on `rx`, at most `limit` away; panics naming `what`
/// past it or when every sender is gone.
pub fn recv_within<T>(rx: &mpsc::Receiver<T>, limit: Duration, what: &str) -> T {
    match rx.recv_timeout(limit) {
        Ok(v) => v,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: nothing within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: its sender ended without sending"),
    }
}

/// `handle.join()`, at most `limit` away; panics naming `what` past it (the
/// thread is left behind: a thread cannot be killed) or with the thread's
/// own panic when it panicked.
pub fn join_within<T>(handle: JoinHandle<T>, limit: Duration, what: &str) -> T {
    resumed(joined_within(handle, limit).unwrap_or_else(|| panic!("{what} did not end within {limit:?}")))
}

/// `handle.join()` for a `Drop` (see `ended_within`): what `join` gives, or
/// None, and no panic, when the thread did not end within `limit` (it is
/// left behind).
pub fn joined_within<T>(handle: JoinHandle<T>, limit: Duration) -> Option<std::thread::Result<T>> {
    within(limit, || handle.is_finished().then_some(()))?;
    Some(handle.join())
}

/// `handle.join()` for a thread of a `std::thread::scope`, at most `limit`
/// away, else as `join_all_scoped_within` says.
pub fn join_scoped_within<T>(handle: ScopedJoinHandle<'_, T>, limit: Duration, what: &str) -> T {
    let mut joined = join_all_scoped_within(vec![handle], limit, |_| what.to_string());
    joined.pop().expect("one thread joined")
}

/// Every scoped thread of `handles` joined, their results in order, all
/// within `limit`; a thread's panic goes on as the caller's. Past `limit`
/// the process aborts, naming (`what(i)`) each thread not ended and what
/// each ended one that panicked said: a panic would only unwind to the end of
/// the scope, which waits for the hung thread for good. Written straight to
/// stderr, since the test harness's captured output is lost with the process.
pub fn join_all_scoped_within<T>(
    handles: Vec<ScopedJoinHandle<'_, T>>,
    limit: Duration,
    what: impl Fn(usize) -> String,
) -> Vec<T> {
    if within(limit, || handles.iter().all(|h| h.is_finished()).then_some(())).is_none() {
        abort_naming(handles.into_iter().enumerate().filter_map(|(i, h)| held_up(h, &what(i), limit)).collect());
    }
    handles.into_iter().map(|h| resumed(h.join())).collect()
}

/// Two scoped threads of different results joined, as `join_all_scoped_within`
/// joins threads of one: past `limit` the process aborts naming each one not
/// ended and what each ended one that panicked said, so that a thread hung
/// waiting on a peer that panicked is not all that is said.
pub fn join_pair_scoped_within<A, B>(
    a: ScopedJoinHandle<'_, A>,
    b: ScopedJoinHandle<'_, B>,
    limit: Duration,
    what: [&str; 2],
) -> (A, B) {
    if within(limit, || (a.is_finished() && b.is_finished()).then_some(())).is_none() {
        abort_naming([held_up(a, what[0], limit), held_up(b, what[1], limit)].into_iter().flatten().collect());
    }
    (resumed(a.join()), resumed(b.join()))
}

/// What holds up a scope past `limit` of a thread (`what`): that it has not
/// ended, or what it panicked with; None for one that ended well.
fn held_up<T>(h: ScopedJoinHandle<'_, T>, what: &str, limit: Duration) -> Option<String> {
    if !h.is_finished() {
        return Some(format!("{what} did not end within {limit:?}"));
    }
    h.join().err().map(|p| format!("{what} panicked: {}", panic_message(&*p)))
}

/// Says `said` straight to stderr and aborts.
fn abort_naming(said: Vec<String>) -> ! {
    let _ = writeln!(std::io::stderr(), "{}; aborting (a scope waits for its threads)", said.join("; "));
    std::process::abort()
}

/// A joined thread's value, or its panic going on as the caller's.
fn resumed<T>(joined: std::thread::Result<T>) -> T {
    joined.unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// What a panic's payload says (`panic!` gives a `&str` or a `String`).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (payload.downcast_ref::<&str>(), payload.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (None, Some(s)) => s.clone(),
        (None, None) => "(a payload that is no string)".to_string(),
    }
}

/// The next connection to `listener`, at most `limit` away; panics naming
/// `what` past it (a process that was to dial and never does).
pub fn accept_within(listener: &std::net::TcpListener, limit: Duration, what: &str) -> std::net::TcpStream {
    listener.set_nonblocking(true).unwrap();
    let conn = within(limit, || match listener.accept() {
        Ok((conn, _)) => Some(conn),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => None,
        Err(e) => panic!("{what}: accept: {e}"),
    })
    .unwrap_or_else(|| panic!("{what}: no connection within {limit:?}"));
    listener.set_nonblocking(false).unwrap();
    // An accepted socket inherits O_NONBLOCK on some systems, never the blocking reads the caller expects.
    conn.set_nonblocking(false).unwrap();
    conn
}

/// While held, a watch that kills process `pid` and every process it started
/// (SIGKILL, as `kill_tree`) `limit` from now, saying that `what` was
/// awaited: for a read of a child's pipe on the test's own thread, which only
/// output or the pipe's end can stop. The kill ends the pipe, and the read's
/// own checks then fail; the child alone would leave what it started (a
/// driver's workers, a shell's job) running, holding the pipe open and the
/// read waiting. Drop it before the child is waited for: its pid may be
/// reused from then on.
pub struct KillAfter {
    _held: mpsc::Sender<()>,
}

pub fn kill_after(pid: u32, limit: Duration, what: &str) -> KillAfter {
    let (held, dropped) = mpsc::channel::<()>();
    let what = what.to_string();
    std::thread::spawn(move || {
        if let Err(mpsc::RecvTimeoutError::Timeout) = dropped.recv_timeout(limit) {
            let below = kill_tree(pid);
            eprintln!("{what}: not within {limit:?}; killed pid {pid} and what it started: {below:?}");
        }
    });
    KillAfter { _held: held }
}

/// True while `/proc/<pid>` exists and is not a zombie.
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')).unwrap_or(false),
        Err(_) => false,
    }
}

/// Every live process below `root` (children, theirs, ...), from each
/// /proc/PID/stat's parent field. Read it before `root` ends: its children
/// then pass to init (or a subreaper) and are found below it no more.
pub fn descendants_of(root: u32) -> Vec<u32> {
    // pid 0 would make every process a descendant (init's parent is 0).
    if root <= 1 {
        return vec![];
    }
    let mut parent = Vec::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
            // Fields after the ")" of the command name: state, ppid, ...
            let Some((_, rest)) = stat.rsplit_once(')') else { continue };
            let mut f = rest.split_whitespace();
            let state = f.next().unwrap_or("");
            if let Some(ppid) = f.next().and_then(|s| s.parse::<u32>().ok())
                && state != "Z"
            {
                parent.push((pid, ppid));
            }
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, pp) in &parent {
            if pp == p && !out.contains(&c) {
                out.push(c);
                frontier.push(c);
            }
        }
    }
    out
}

/// SIGKILLs `pid` and every process below it (read first: see
/// `descendants_of`); returns those below it. Pids 0 and 1 are refused: to
/// kill(2) 0 is this whole process group, and 1 is init.
pub fn kill_tree(pid: u32) -> Vec<u32> {
    if pid <= 1 {
        return vec![];
    }
    let below = descendants_of(pid);
    for p in std::iter::once(pid).chain(below.iter().copied()) {
        // SAFETY: kill(2) takes plain integers and touches no memory.
        unsafe { libc::kill(p as libc::pid_t, libc::SIGKILL) };
    }
    below
}
