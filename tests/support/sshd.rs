//! A real OpenSSH server for tests: `sshd -D` on a free 127.0.0.1 port with
//! a fresh host key and one authorized client key, run as this test's own
//! child and stopped by its PID (with every session process it forked).
//! Needs /usr/sbin/sshd (`.ci/run` installs openssh-server).
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::bounded::{Bounded, QUICK_LIMIT, alive, descendants_of, kill_tree, within};
use super::ports::{free_port, on_fresh_ports};

/// How long a test gives what a run started over ssh to go once the run has
/// ended: the remote worker sees its channel close, exits, and its session's
/// sshd process reaps it and closes, three processes each waiting its turn
/// for a core on a loaded machine. Only a leak outlasts it.
pub const LEFT_WITHIN: Duration = Duration::from_secs(30);

pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The authorized client key (private half).
    pub key: PathBuf,
    /// A known_hosts file that already holds this server's key.
    pub known_hosts: PathBuf,
    /// The remote working directory: starts empty.
    pub remote: PathBuf,
    pub user: String,
    child: Option<Child>,
}

pub fn keygen(path: &Path) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "leapgnn-test", "-f"])
        .arg(path)
        .status_in(QUICK_LIMIT, "ssh-keygen (openssh-client must be installed)");
    assert!(st.success(), "ssh-keygen failed for {}", path.display());
}

pub fn current_user() -> String {
    let out = Command::new("id").arg("-un").output_in(QUICK_LIMIT, "id -un");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

impl Sshd {
    pub fn start() -> Sshd {
        Self::start_on(free_port())
    }

    /// `start` with an sshd_config that offers no SFTP subsystem, as a
    /// minimal or hardened server's may not.
    pub fn start_without_sftp() -> Sshd {
        Self::start_with(free_port(), false)
    }

    /// `start`, trying `port` first. `free_port` releases its port before sshd
    /// binds it, and on a busy machine another test's socket can take it in
    /// between: sshd then exits, and a readiness check that only connects would
    /// reach that other socket. So readiness is sshd's own "Server listening"
    /// line, and a port lost that way is replaced by another.
    pub fn start_on(port: u16) -> Sshd {
        Self::start_with(port, true)
    }

    fn start_with(port: u16, sftp: bool) -> Sshd {
        let sshd = Path::new("/usr/sbin/sshd");
        assert!(sshd.exists(), "/usr/sbin/sshd is missing: apt-get install openssh-server (.ci/run does)");
        let _ = std::fs::create_dir_all("/run/sshd");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("hostkey"));
        keygen(&d.join("id_test"));
        std::fs::copy(d.join("id_test.pub"), d.join("authorized_keys")).unwrap();
        let remote = d.join("remote");
        std::fs::create_dir(&remote).unwrap();
        let (port, child) =
            on_fresh_ports([port], "sshd", |[p]| Self::spawn_listening(sshd, d, p, sftp).map(|c| (p, c)));
        let host_pub = std::fs::read_to_string(d.join("hostkey.pub")).unwrap();
        let mut parts = host_pub.split_whitespace();
        let (kind, b64) = (parts.next().unwrap(), parts.next().unwrap());
        let known_hosts = d.join("known_hosts");
        std::fs::write(&known_hosts, format!("[127.0.0.1]:{port} {kind} {b64}\n")).unwrap();
        Sshd { port, key: d.join("id_test"), known_hosts, remote, user: current_user(), child: Some(child), dir }
    }

    /// sshd on `port`, once it says it listens there; `Err(its log)` where the
    /// port was taken. Any other failure to start panics with the log.
    fn spawn_listening(sshd: &Path, d: &Path, port: u16, sftp: bool) -> Result<Child, String> {
        let cfg = d.join("sshd_config");
        let subsystem = if sftp { "Subsystem sftp internal-sftp\n" } else { "" };
        std::fs::write(
            &cfg,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/hostkey\nPidFile {d}/sshd.pid\n\
                 AuthorizedKeysFile {d}/authorized_keys\nPubkeyAuthentication yes\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPermitRootLogin prohibit-password\n\
                 UseDNS no\nMaxStartups 64\n{subsystem}LogLevel VERBOSE\n",
                d = d.display()
            ),
        )
        .unwrap();
        let log_path = d.join("sshd.log");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut child = Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("cannot start sshd");
        let listening = format!("Server listening on 127.0.0.1 port {port}.");
        let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
        // Generous for a loaded machine; only a start that hangs outlasts it.
        let limit = Duration::from_secs(30);
        let started = within(limit, || {
            if log().contains(&listening) {
                return Some(Ok(()));
            }
            let st = child.try_wait().unwrap()?;
            let text = log();
            assert!(text.contains("Address already in use"), "sshd exited ({st}) at start:\n{text}");
            Some(Err(text))
        });
        match started {
            Some(Ok(())) => Ok(child),
            Some(Err(text)) => Err(text),
            None => {
                kill_tree(child.id());
                let _ = child.wait();
                panic!("sshd did not listen on {port} within {limit:?}:\n{}", log());
            }
        }
    }

    /// The sshd listener's pid (0 once stopped).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A `[[host]]` entry for this server.
    pub fn host_entry(&self, workers: usize) -> String {
        format!(
            "[[host]]\naddress = \"127.0.0.1\"\nport = {}\nuser = \"{}\"\nidentity = \"{}\"\nworkers = {workers}\n",
            self.port,
            self.user,
            self.key.display()
        )
    }

    /// Writes an ssh profile for this server (`extra` goes into [cluster]) and returns its path.
    pub fn profile(&self, workers: usize, extra: &str) -> PathBuf {
        self.profile_with_hosts(&self.host_entry(workers), extra)
    }

    pub fn profile_with_hosts(&self, hosts: &str, extra: &str) -> PathBuf {
        let p = self.dir.path().join(format!("profile-{}.toml", rand_suffix()));
        let mut f = std::fs::File::create(&p).unwrap();
        write!(
            f,
            "[cluster]\nlauncher = \"ssh\"\nremote_dir = \"{}\"\nknown_hosts = \"{}\"\nconnect_timeout = 5\n{extra}\n{hosts}",
            self.remote.display(),
            self.known_hosts.display()
        )
        .unwrap();
        p
    }

    /// Processes forked by sshd (sessions, and anything they started) still alive.
    pub fn descendants(&self) -> Vec<u32> {
        descendants_of(self.pid())
    }

    /// Waits (bounded) until every session has ended; returns what is left.
    pub fn wait_sessions_closed(&self, within: Duration) -> Vec<u32> {
        let deadline = Instant::now() + within;
        loop {
            let left = self.descendants();
            if left.is_empty() || Instant::now() > deadline {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Nothing a test started over this server is left: no process mentions
    /// the remote directory (workers run from it) and every session has closed.
    pub fn assert_nothing_left(&self) {
        let marker = self.remote.display().to_string();
        assert_eq!(wait_none_mentioning(&marker, LEFT_WITHIN), Vec::<u32>::new(), "processes left");
        assert_eq!(self.wait_sessions_closed(LEFT_WITHIN), Vec::<u32>::new(), "ssh sessions left open");
    }

    /// Stops sshd and any session it left; asserts every one of them is gone.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        let left = kill_tree(child.id());
        let _ = child.wait();
        let still = wait_gone(&left, Duration::from_secs(5));
        assert!(still.is_empty(), "processes left behind by sshd: {still:?}");
        assert!(!alive(child.id()), "sshd {} still running", child.id());
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill_tree(c.id());
            let _ = c.wait();
        }
    }
}

/// Waits (bounded) for every pid to be gone; returns those still alive.
pub fn wait_gone(pids: &[u32], within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    N.fetch_add(1, Ordering::Relaxed).to_string()
}

/// Live processes whose command line mentions `marker` (e.g. a test's unique
/// remote directory): what a test started and must not leave behind.
pub fn processes_mentioning(marker: &str) -> Vec<u32> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        if pid == std::process::id() {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        if String::from_utf8_lossy(&cmd).contains(marker) && alive(pid) {
            out.push(pid);
        }
    }
    out
}

/// Waits (bounded) until no process mentions `marker`; returns those left.
pub fn wait_none_mentioning(marker: &str, within: Duration) -> Vec<u32> {
    let deadline = Instant::now() + within;
    loop {
        let left = processes_mentioning(marker);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
