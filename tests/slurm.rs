//! The Slurm launcher over a real Slurm (munged, slurmctld and
//! slurmd on 127.0.0.1, started here as root; `.ci/run` installs them): Cora
//! with 2 tasks trains to the local launcher's loss curve from the script
//! `leapgnn slurm-script` prints, on one node and on two (the second a slurmd
//! in a network namespace of its own, `Slurm::start_two`); a job Slurm
//! requeues resumes its run; `scancel`, or salloc giving its allocation up,
//! stops every task and leaves a checkpoint that loads; exit codes
//! propagate; outside an allocation `--cluster slurm` is refused.

mod dist_support;

use dist_support::bounded::Bounded;
use dist_support::ports::{free_ports, on_fresh_ports};
use dist_support::{LONG_RUN, RUN_LIMIT, cora, fails, json, mib_before};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One Slurm at a time in this binary (the tests share the node name).
static ONE: Mutex<()> = Mutex::new(());

/// How long a command that answers at once may take (ip, kill, munge,
/// `leapgnn slurm-script`) on a loaded machine: bounded's `QUICK_LIMIT`.
/// Jobs waited for (sbatch --wait, srun, salloc) get `RUN_LIMIT`.
const QUICK: Duration = dist_support::bounded::QUICK_LIMIT;

/// How long a query of the Slurm daemons may take (scontrol, squeue, sinfo,
/// scancel, a submission): a client retries a busy slurmctld for a while.
const DAEMON: Duration = Duration::from_secs(120);

/// munged (unless one already answers), slurmctld and slurmd in the
/// foreground, stopped on drop.
struct Slurm {
    dir: tempfile::TempDir,
    daemons: Vec<Child>,
    /// `start_two`'s second node; dropped (deleted) after the daemons stop.
    second: Option<Netns>,
}

/// The first line of every slurm.conf `Slurm` writes.
const CLUSTER_NAME: &str = "ClusterName=leapgnntest";

/// The second node's name in `start_two`'s slurm.conf.
const NODE2: &str = "node2";

/// Under the cluster's directory: `NODE2`'s own directory (`Slurm::node2_dir`).
const NODE2_DIR: &str = "node2-local";

/// The cluster's nodes.
enum Nodes<'a> {
    /// One on 127.0.0.1, named this or else this host's name.
    One(Option<&'a str>),
    /// This host's and `NODE2`, which has a directory of its own at this path.
    Two(Option<&'a Path>),
}

/// A second host on this machine: a network namespace joined to the host by
/// a veth pair, 10.213.X.1/24 on the host's side and 10.213.X.2/24 in the
/// namespace. Only the network is its own: files, processes and munged's
/// socket (a path) are shared. Deleted, with the pair, on drop; one whose
/// test was killed (no drop) is deleted by the next `Netns::new` on this
/// machine, which its name lets prove that test dead.
struct Netns {
    name: String,
    host_if: String,
    net: u8,
}

/// Every `Netns` is named `leapgnn-slurm-X-PID-START`: X its net, PID and
/// START the process that made it (its start time, in clock ticks after
/// boot, tells a pid reused since from that process).
const NETNS_PREFIX: &str = "leapgnn-slurm-";

/// A process as its pid and start time: alive only while both still match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Owner {
    pid: u32,
    start: u64,
}

impl Owner {
    /// `pid`, while it runs (a zombie has finished: nothing it made is used).
    fn of(pid: u32) -> Option<Owner> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // After the command's name (which may hold spaces and parentheses):
        // field 3, the state, then field 22, the start time.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        if fields.first() == Some(&"Z") {
            return None;
        }
        Some(Owner { pid, start: fields.get(19)?.parse().ok()? })
    }

    fn alive(self) -> bool {
        Owner::of(self.pid) == Some(self)
    }

    fn me() -> Owner {
        Owner::of(std::process::id()).expect("this process runs")
    }

    /// `PID-START`, as the names of what this process makes carry it.
    fn tag(self) -> String {
        format!("{}-{}", self.pid, self.start)
    }

    /// The `Owner` a name's next two `-` fields give (as `tag` writes them).
    fn parse<'a>(fields: &mut impl Iterator<Item = &'a str>) -> Option<Owner> {
        Some(Owner { pid: fields.next()?.parse().ok()?, start: fields.next()?.parse().ok()? })
    }
}

/// The entries of `dir` that `parse` reads a maker from (what a test named
/// for itself), where that maker is gone: a test killed before its drop.
/// An entry of a live process, or a name of another shape, is left out.
fn stale<T>(dir: &Path, parse: impl Fn(&str) -> Option<(T, Owner)>) -> Vec<(String, T)> {
    let Ok(names) = std::fs::read_dir(dir) else { return vec![] };
    names
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| {
            let (what, owner) = parse(&name)?;
            (!owner.alive()).then_some((name, what))
        })
        .collect()
}

/// SIGKILLs `pids` and the rest of each `Slurm` cluster one of them belongs
/// to (its processes name the same slurm.conf). Only a cluster of `Slurm`'s:
/// a SLURM_CONF a killed test inherited (a real cluster's) names processes
/// that are no test's to end.
fn kill_clusters_of(pids: Vec<u32>) {
    let ours = |c: &PathBuf| std::fs::read_to_string(c).is_ok_and(|t| t.starts_with(CLUSTER_NAME));
    let mut cluster: Vec<u32> =
        pids.iter().filter_map(|&p| slurm_conf_of(p)).filter(ours).flat_map(|c| processes_of(&c)).collect();
    cluster.extend(pids);
    for pid in cluster {
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(Stdio::null()).status_in(QUICK, "kill");
    }
}

/// Every `Slurm`'s directory (in the temporary directory) is named
/// `leapgnn-slurm-cluster-PID-START-XXXXXX`, for the process that made it
/// (`Owner`), so that the next `Slurm` on this machine can tell one whose
/// test was killed (no drop): `remove_stale_clusters`.
const CLUSTER_DIR_PREFIX: &str = "leapgnn-slurm-cluster-";

/// Removes every `Slurm` directory whose maker is gone, after stopping what
/// still runs of that cluster (its munged, slurmctld and slurmd, their steps
/// and tasks: all name its slurm.conf). Those of a live test are left alone.
fn remove_stale_clusters() {
    let tmp = std::env::temp_dir();
    let parse = |name: &str| {
        let mut f = name.strip_prefix(CLUSTER_DIR_PREFIX)?.split('-');
        let owner = Owner::parse(&mut f)?;
        (f.next().is_some() && f.next().is_none()).then_some(((), owner))
    };
    for (name, ()) in stale(&tmp, parse) {
        let dir = tmp.join(name);
        kill_clusters_of(processes_of(&dir.join("slurm.conf")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output_in(QUICK, &format!("ip {args:?}"));
    if out.status.success() { Ok(()) } else { Err(format!("ip {args:?}: {}", text(&out))) }
}

impl Netns {
    /// The first free 10.213.X.0/24 from one the pid picks (tests of other
    /// checkouts may hold some), after deleting those of killed tests.
    fn new() -> Netns {
        Netns::remove_stale();
        Netns::claim(Owner::me())
    }

    /// `new`, named for `owner`, without removing stale namespaces first.
    /// The veth pair claims X: its host end's name is X's, and `ip link add`
    /// fails where another process holds it.
    fn claim(owner: Owner) -> Netns {
        let used = Command::new("ip").args(["-4", "-o", "addr"]).output_in(QUICK, "ip -4 -o addr").stdout;
        let used = String::from_utf8(used).unwrap();
        let start = owner.pid % 250;
        for net in (0..250).map(|i| ((start + i) % 250 + 1) as u8) {
            let (host_if, peer) = (format!("lgs{net}h"), format!("lgs{net}n"));
            if used.contains(&format!("10.213.{net}."))
                || ip(&["link", "add", &host_if, "type", "veth", "peer", "name", &peer]).is_err()
            {
                continue;
            }
            let name = format!("{NETNS_PREFIX}{net}-{}", owner.tag());
            let ns = Netns { name, host_if, net };
            let ns_ip = format!("{}/24", ns.ip(2));
            let host_ip = format!("{}/24", ns.ip(1));
            let n = ns.name.as_str();
            let made = ip(&["netns", "add", n])
                .and_then(|()| ip(&["link", "set", &peer, "netns", n]))
                .and_then(|()| ip(&["addr", "add", &host_ip, "dev", &ns.host_if]))
                .and_then(|()| ip(&["link", "set", &ns.host_if, "up"]))
                .and_then(|()| ip(&["netns", "exec", n, "ip", "addr", "add", &ns_ip, "dev", &peer]))
                .and_then(|()| ip(&["netns", "exec", n, "ip", "link", "set", &peer, "up"]))
                .and_then(|()| ip(&["netns", "exec", n, "ip", "link", "set", "lo", "up"]));
            if let Err(e) = made {
                panic!("cannot join network namespace {n} to this host: {e}");
            }
            return ns;
        }
        panic!("no free 10.213.X.0/24 for a network namespace:\n{used}");
    }

    /// Deletes every `Netns` whose maker is gone (a test killed before its
    /// drop): first what still runs in it, which holds it and its veth pair
    /// (node2's slurmd, its steps and tasks), and the rest of that cluster
    /// (its processes name the same slurm.conf), then the pair and the name.
    /// A live process's namespace, or a name of another shape, is left alone.
    fn remove_stale() {
        for (name, net) in stale(Path::new("/run/netns"), Netns::parse) {
            let Ok(ns) = std::fs::metadata(format!("/run/netns/{name}")) else { continue };
            kill_clusters_of(pids().filter(|&p| in_netns(p, &ns)).collect());
            drop(Netns { name, host_if: format!("lgs{net}h"), net });
        }
    }

    /// X and the maker of a namespace named as `claim` names them.
    fn parse(name: &str) -> Option<(u8, Owner)> {
        let mut f = name.strip_prefix(NETNS_PREFIX)?.split('-');
        let net = f.next()?.parse().ok()?;
        let owner = Owner::parse(&mut f)?;
        f.next().is_none().then_some((net, owner))
    }

    /// 10.213.X.`host`: 1 this host's side, 2 the namespace's.
    fn ip(&self, host: u8) -> String {
        format!("10.213.{}.{host}", self.net)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting one end of the pair deletes both. No panic past the limit
        // (`ended_in`, not `ip`): this may run while a test unwinds.
        for args in [&["link", "del", &self.host_if][..], &["netns", "del", &self.name]] {
            let _ = Command::new("ip").args(args).stdout(Stdio::null()).stderr(Stdio::null()).ended_in(QUICK);
        }
    }
}

fn have(cmd: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {cmd}"))
        .stdout(Stdio::null())
        .status_in(QUICK, &format!("command -v {cmd}"))
        .success()
}

fn munge_works() -> bool {
    Command::new("sh").arg("-c").arg("munge -n | unmunge").output_in(QUICK, "munge -n | unmunge").status.success()
}

/// Whether this machine can run a Slurm cluster (`Slurm::start_with`) and a
/// `Netns`: false (after saying why) where it cannot; CI must not get there.
fn can_run() -> bool {
    let missing: Vec<_> = ["munged", "munge", "slurmctld", "slurmd", "sbatch", "scancel", "squeue", "ip", "nsenter"]
        .into_iter()
        .filter(|c| !have(c))
        .collect();
    let root = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0).unwrap_or(false);
    let why = if !missing.is_empty() {
        format!("missing {missing:?} (apt-get install slurmctld slurmd slurm-client munge)")
    } else if !root {
        "not root (slurmd runs as root)".to_string()
    } else {
        String::new()
    };
    if why.is_empty() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "CI must run the Slurm tests: {why}");
    eprintln!("skipping: {why}");
    false
}

fn until(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    dist_support::bounded::within(limit, || ok().then_some(()))
        .unwrap_or_else(|| panic!("timed out waiting for {what}"));
}

impl Slurm {
    /// None (after saying why) where Slurm cannot run; CI must not get there.
    fn start() -> Option<Slurm> {
        Self::start_as(None)
    }

    /// `start`, the node named `name` in slurm.conf (NodeName, with NodeAddr
    /// 127.0.0.1) instead of this host's name.
    fn start_as(name: Option<&str>) -> Option<Slurm> {
        Self::start_on(name, free_ports())
    }

    /// `start_as`, slurmctld and slurmd told to listen on `ports` first. A
    /// port `free_ports` released can be taken by another socket before the
    /// daemon binds it: the daemon then exits saying so, and both start again
    /// on fresh ports (the node would otherwise never become idle).
    fn start_on(name: Option<&str>, ports: [u16; 2]) -> Option<Slurm> {
        Self::start_with(Nodes::One(name), ports)
    }

    /// Two nodes: this host's (slurmctld beside it) and `NODE2`, a slurmd in
    /// a network namespace of its own (`Netns`), each at its end of the veth
    /// pair, so that a task on `NODE2` reaches the other node and the
    /// controller only as another machine would. With `private`, `NODE2`
    /// has a directory of its own at that path (`node2_dir`), as a
    /// node-local disk is; everything else on it is this host's.
    fn start_two(private: Option<&Path>) -> Option<Slurm> {
        Self::start_with(Nodes::Two(private), free_ports())
    }

    fn start_with(nodes: Nodes, ports: [u16; 2]) -> Option<Slurm> {
        if !can_run() {
            return None;
        }
        remove_stale_clusters();
        let dir =
            tempfile::Builder::new().prefix(&format!("{CLUSTER_DIR_PREFIX}{}-", Owner::me().tag())).tempdir().unwrap();
        let d = dir.path().to_path_buf();
        let host = Command::new("hostname").arg("-s").output_in(QUICK, "hostname -s").stdout;
        let host = String::from_utf8(host).unwrap();
        let host = host.trim();
        let (name, two, private) = match nodes {
            Nodes::One(name) => (name, false, None),
            Nodes::Two(private) => (None, true, private),
        };
        let node = name.unwrap_or(host);
        let second = two.then(Netns::new);
        let addr = second.as_ref().map_or("127.0.0.1".to_string(), |n| n.ip(1));
        let mut nodes = format!("NodeName={node} NodeAddr={addr} CPUs=8 State=UNKNOWN\n");
        let mut names = vec![node];
        if let Some(n) = &second {
            nodes += &format!("NodeName={NODE2} NodeAddr={} CPUs=8 State=UNKNOWN\n", n.ip(2));
            names.push(NODE2);
        }
        let dirs = ["state".to_string(), NODE2_DIR.to_string()].into_iter();
        for sub in dirs.chain(names.iter().map(|n| format!("spool/{n}"))) {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let partition = names.join(",");
        let conf = |[ctld, slurmd]: [u16; 2]| {
            format!(
                "{CLUSTER_NAME}\nSlurmctldHost={host}({addr})\nSlurmctldPort={}\nSlurmdPort={}\n\
             AuthType=auth/munge\nCredType=cred/munge\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nStateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/%n\nSlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\nSlurmUser=root\nSlurmdUser=root\n\
             ReturnToService=2\nMpiDefault=none\nKillWait=20\nOverTimeLimit=0\nSlurmdParameters=config_overrides\n\
             {nodes}PartitionName=test Nodes={partition} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
                ctld,
                slurmd,
                d = d.display()
            )
        };
        std::fs::write(d.join("slurm.conf"), conf(ports)).unwrap();
        let mut s = Slurm { dir, daemons: vec![], second };
        if !munge_works() {
            std::fs::create_dir_all("/run/munge").unwrap();
            s.spawn(Command::new("munged").args(["--foreground", "--force"]));
            until("munged", Duration::from_secs(20), munge_works);
        }
        let munged = s.daemons.len();
        on_fresh_ports(ports, "slurmctld and slurmd", |ports| {
            // The daemons' own logs (from the last try's); what each printed is truncated as it starts.
            for log in
                s.logs().iter().filter(|l| l.file_name().is_some_and(|f| f.to_string_lossy().starts_with("slurm")))
            {
                let _ = std::fs::remove_file(log);
            }
            std::fs::write(s.conf(), conf(ports)).unwrap();
            s.spawn(Command::new("slurmctld").args(["-D", "-i"]));
            s.spawn(Command::new("slurmd").args(["-D", "-N", node]));
            if let Some(n) = &s.second {
                let ns = n.name.clone();
                // Not `ip netns exec`: that mounts a /sys of its own, without the
                // cgroup mounts slurmd needs; nsenter enters the network alone.
                let mut slurmd = Command::new("nsenter");
                slurmd.arg(format!("--net=/run/netns/{ns}"));
                match private {
                    None => slurmd.args(["slurmd", "-D", "-N", NODE2]),
                    // A mount namespace of its own, in which `private` is `node2_dir`;
                    // each command execs the next: the daemon keeps the pid spawned.
                    Some(p) => slurmd
                        .args(["unshare", "--mount", "--propagation", "private", "sh", "-c"])
                        .arg(r#"mount --bind "$1" "$2" && exec slurmd -D -N "$3""#)
                        .arg("sh")
                        .args([s.node2_dir().as_os_str(), p.as_os_str(), NODE2.as_ref()]),
                };
                s.spawn(&mut slurmd);
            }
            let mut lost = None;
            until("the nodes to be idle", Duration::from_secs(60), || {
                lost = s.port_lost(munged);
                lost.is_some() || {
                    let o = s.cmd("sinfo").args(["-h", "-N", "-o", "%t"]).output_in(DAEMON, "sinfo");
                    let states = String::from_utf8_lossy(&o.stdout).to_string();
                    states.lines().count() == names.len() && states.lines().all(|l| l.trim() == "idle")
                }
            });
            match lost {
                Some(log) => {
                    s.stop(munged);
                    Err(log)
                }
                None => Ok(()),
            }
        });
        Some(s)
    }

    /// The daemons' logs where one of those from `first` on exited because its
    /// port was taken; None while they all run. Any other exit panics with the logs.
    fn port_lost(&mut self, first: usize) -> Option<String> {
        let st = self.daemons[first..].iter_mut().find_map(|c| c.try_wait().unwrap())?;
        let logs: String = self
            .logs()
            .iter()
            .map(|f| format!("{}:\n{}", f.display(), std::fs::read_to_string(f).unwrap_or_default()))
            .collect();
        assert!(logs.contains("Address already in use"), "a Slurm daemon exited ({st}) at start:\n{logs}");
        Some(logs)
    }

    /// Stops the daemons from `first` on, last started first.
    fn stop(&mut self, first: usize) {
        for mut c in self.daemons.drain(first..).rev() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .stderr(Stdio::null())
                .status_in(QUICK, "kill");
            let deadline = Instant::now() + Duration::from_secs(20);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn spawn(&mut self, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.path().join(format!("daemon{}.log", self.daemons.len()))).unwrap();
        let child = cmd
            .env("SLURM_CONF", self.conf())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.daemons.push(child);
    }

    /// The daemons' logs: slurmctld's, each slurmd's, and what each daemon printed.
    fn logs(&self) -> Vec<PathBuf> {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.dir.path())
            .unwrap()
            .filter_map(|e| Some(e.ok()?.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "log"))
            .collect();
        logs.sort();
        logs
    }

    /// What `NODE2` sees at `start_two`'s `private` path.
    fn node2_dir(&self) -> PathBuf {
        self.dir.path().join(NODE2_DIR)
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("slurm.conf")
    }

    /// A Slurm client command for this cluster, outside any allocation.
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("SLURM_") {
                c.env_remove(k);
            }
        }
        c.env("SLURM_CONF", self.conf());
        c
    }

    /// Writes `leapgnn slurm-script` for `train` into `data`; returns the file.
    fn script(&self, data: &Path, name: &str, train: &[&str]) -> PathBuf {
        self.script_with(data, name, &[], train)
    }

    /// `script`, with more `slurm-script` options.
    fn script_with(&self, data: &Path, name: &str, opts: &[&str], train: &[&str]) -> PathBuf {
        let out = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
            .args(["--data-dir", data.to_str().unwrap(), "slurm-script", "--tasks-per-node", "2"])
            .args(opts)
            .arg("--output")
            .arg(data.join(format!("{name}.out")))
            .arg("--")
            .args(train)
            .output_in(QUICK, "leapgnn slurm-script");
        assert!(out.status.success(), "slurm-script: {}", String::from_utf8_lossy(&out.stderr));
        let path = data.join(format!("{name}.sh"));
        std::fs::write(&path, out.stdout).unwrap();
        path
    }

    /// Submits `script` on 2 tasks without waiting; returns the job id.
    fn submit(&self, script: &Path) -> String {
        let out = self.sbatch(&["--parsable", "--ntasks=2"], script);
        assert!(out.status.success(), "{}", text(&out));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// `sbatch ARGS SCRIPT`: a job waited for (`--wait`) may take as long as
    /// a run, a submission as long as a daemon query.
    fn sbatch(&self, args: &[&str], script: &Path) -> Output {
        let limit = if args.contains(&"--wait") { RUN_LIMIT } else { DAEMON };
        self.cmd("sbatch").args(args).arg(script).output_in(limit, &format!("sbatch {args:?} {}", script.display()))
    }

    /// `until`, and past the limit a panic that says where `job` stood: what
    /// `scontrol show job` says of it, and the ends of its output `log` and
    /// of the daemons' logs.
    fn until_job(&self, job: &str, log: &Path, what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
        if dist_support::bounded::within(limit, || ok().then_some(())).is_some() {
            return;
        }
        let shown = self.cmd("scontrol").args(["show", "job", job]).output_in(DAEMON, "scontrol show job");
        let tail = |p: &Path| {
            let t = std::fs::read_to_string(p).unwrap_or_else(|e| format!("({e})"));
            let lines: Vec<&str> = t.lines().collect();
            format!("{}:\n{}\n", p.display(), lines[lines.len().saturating_sub(40)..].join("\n"))
        };
        let logs: String = std::iter::once(log.to_path_buf()).chain(self.logs()).map(|p| tail(&p)).collect();
        panic!("timed out waiting for {what} (after {limit:?}); job {job}:\n{}\n{logs}", text(&shown));
    }

    fn gone(&self, job: &str) -> bool {
        let o = self.cmd("squeue").args(["-h", "-j", job]).output_in(DAEMON, &format!("squeue -j {job}"));
        o.stdout.iter().all(|b| b.is_ascii_whitespace())
    }
}

impl Drop for Slurm {
    /// A job still running (its test failed) is cancelled first: its
    /// slurmstepds are no children of slurmd's, ignore SIGTERM, and outlived
    /// the daemons. Then SIGTERM to the daemons, which stop (and reap) what
    /// they forked; whatever of the cluster is left after that is killed.
    fn drop(&mut self) {
        let idle = || {
            unless_it_panics(|| self.cmd("squeue").arg("-h").output_in(DAEMON, "squeue"))
                .is_some_and(|o| o.stdout.iter().all(u8::is_ascii_whitespace))
        };
        if !idle() {
            let scancel =
                || self.cmd("scancel").args(["--partition", "test"]).stderr(Stdio::null()).status_in(DAEMON, "scancel");
            let _ = unless_it_panics(scancel);
            // Bounded, and no panic: this may run while a test unwinds.
            let deadline = Instant::now() + Duration::from_secs(30);
            while !idle() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        self.stop(0);
        for pid in processes_of(&self.conf()) {
            let _ =
                Command::new("kill").args(["-KILL", &pid.to_string()]).stderr(Stdio::null()).status_in(QUICK, "kill");
        }
    }
}

/// What `f` gives, or None where it panicked (a bounded command that hung):
/// for `Drop`, which may run while a test unwinds, where a second panic
/// would abort the whole binary and with it what the first one said.
fn unless_it_panics<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// The processes of the cluster whose slurm.conf is `conf` (its daemons,
/// their steps, the tasks): the environment of each names it.
fn processes_of(conf: &Path) -> Vec<u32> {
    pids().filter(|&pid| pid != std::process::id() && slurm_conf_of(pid).is_some_and(|c| c == conf)).collect()
}

/// The `SLURM_CONF` in the environment `pid` started with.
fn slurm_conf_of(pid: u32) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let conf = env.split(|&b| b == 0).find_map(|v| v.strip_prefix(b"SLURM_CONF="))?;
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(conf)))
}

/// Whether `pid` runs in the network namespace `ns` (a file under /run/netns).
fn in_netns(pid: u32, ns: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(format!("/proc/{pid}/ns/net")).is_ok_and(|m| (m.dev(), m.ino()) == (ns.dev(), ns.ino()))
}

/// Every process on this machine.
fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
}

/// A SlurmctldPort or SlurmdPort another socket took before the daemon bound
/// it: the daemon exits ("Address already in use"), and the cluster comes up
/// on other ports instead of the node never becoming idle.
#[test]
fn a_slurm_whose_port_was_taken_before_it_bound_comes_up_on_others() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    for (i, key) in ["SlurmctldPort", "SlurmdPort"].into_iter().enumerate() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut ports = free_ports::<2>();
        ports[i] = taken.local_addr().unwrap().port();
        let Some(slurm) = Slurm::start_on(None, ports) else { return };
        let conf = std::fs::read_to_string(slurm.conf()).unwrap();
        let port = |k: &str| conf.lines().find_map(|l| l.strip_prefix(k)?.strip_prefix('=')).unwrap().to_string();
        assert_ne!(port(key), ports[i].to_string(), "{key} is still the taken port:\n{conf}");
        assert_ne!(port("SlurmctldPort"), port("SlurmdPort"), "{conf}");
        let ping = slurm.cmd("scontrol").arg("ping").output_in(DAEMON, "scontrol ping");
        assert!(text(&ping).contains("is UP"), "{}", text(&ping));
    }
}

/// (epoch, iteration, worker, time step) -> loss of every record, sorted.
fn curve(d: &Path, run: &str) -> Vec<(u64, u64, u64, u64, f64)> {
    let text = std::fs::read_to_string(d.join("runs").join(run).join("metrics.jsonl")).unwrap();
    let mut v: Vec<_> = text
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let u = |k: &str| r[k].as_u64().unwrap();
            (u("epoch"), u("iteration"), u("worker"), u("time_step"), r["loss"].as_f64().unwrap())
        })
        .collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

const JOB: [&str; 12] =
    ["cora", "--epochs", "2", "--batch-size", "8", "--hidden", "16", "--fanout", "5,5", "--seed", "4", "--json"];

#[test]
fn cora_over_slurm_trains_the_local_launchers_loss_curve() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let script = slurm.script(d, "ok", &[&JOB[..], &["--run", "slurm"]].concat());
    // Submitted from a directory holding a `slurm/` folder (job scripts, say):
    // the script's `--cluster slurm` is still the allocation, not that folder.
    std::fs::create_dir_all(d.join("slurm")).unwrap();
    let out =
        slurm.cmd("sbatch").args(["--wait", "--ntasks=2"]).arg(&script).current_dir(d).output_in(RUN_LIMIT, "sbatch");
    let log = std::fs::read_to_string(d.join("ok.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    json(
        d,
        &[
            "train",
            "--workers",
            "2",
            "--no-tui",
            "--run",
            "local",
            "cora",
            "--epochs",
            "2",
            "--batch-size",
            "8",
            "--hidden",
            "16",
            "--fanout",
            "5,5",
            "--seed",
            "4",
        ],
    );
    let (s, l) = (curve(d, "slurm"), curve(d, "local"));
    assert_eq!(s.len(), l.len(), "{log}");
    assert_eq!(s, l, "the same records, loss for loss");
    assert!(s.iter().any(|r| r.2 == 1), "two workers trained");

    // The job's exit code is the driver's: bad input is exit 2.
    let script = slurm.script(d, "bad", &["cora", "--hidden", "0"]);
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let log = std::fs::read_to_string(d.join("bad.out")).unwrap();
    assert!(log.contains("--hidden"), "{log}");
    // The batch step's node runs both tasks beside the driver: they are held
    // against its memory before any is started (the driver used to leave
    // every Slurm worker to itself, and the job trained under any limit).
    let script = slurm.script(d, "tight", &["cora", "--epochs", "1", "--memory-limit-mb", "100"]);
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    let log = std::fs::read_to_string(d.join("tight.out")).unwrap_or_default();
    assert_eq!(out.status.code(), Some(2), "{}\njob output:\n{log}", text(&out));
    assert!(log.contains("for the 2 workers and the driver on this machine together"), "{log}");
    // The job already runs with --cluster slurm: it is advised more nodes with
    // fewer tasks each (it was told `--cluster to spread them over machines`).
    assert!(log.contains("fewer tasks per node over more nodes: `slurm-script --nodes N --tasks-per-node M`"), "{log}");
    assert!(!log.contains("--cluster to spread") && !log.contains("(--cluster)"), "{log}");
    assert!(!log.contains("[worker"), "refused before any worker started: {log}");
    // More workers than tasks: refused naming --workers.
    let script = slurm.script(d, "many", &["cora", "--workers", "3"]);
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let log = std::fs::read_to_string(d.join("many.out")).unwrap();
    assert!(log.contains("--workers 3") && log.contains("2 task"), "{log}");
    // One task (sbatch's default): refused saying so, not naming a --parts 1 never given.
    let script = slurm.script(d, "one", &["cora", "--epochs", "1"]);
    let out = slurm.sbatch(&["--wait", "--ntasks=1", "--ntasks-per-node=1"], &script);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let log = std::fs::read_to_string(d.join("one.out")).unwrap();
    assert!(log.contains("1 task") && log.contains("at least 2") && !log.contains("--parts"), "{log}");

    // A run of 4 workers goes on with `--resume --workers 2` in a job of 2
    // tasks (the same global batch over the same 4 parts).
    let four = ["cora", "--epochs", "1", "--batch-size", "4", "--hidden", "16", "--fanout", "5,5", "--run", "four"];
    let script = slurm.script(d, "four", &four);
    let out = slurm.sbatch(&["--wait", "--ntasks=4", "--ntasks-per-node=4"], &script);
    let log = std::fs::read_to_string(d.join("four.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    let script = slurm.script(d, "two", &["train", "--resume", "four", "--epochs", "2", "--workers", "2"]);
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    let log = std::fs::read_to_string(d.join("two.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    let records = curve(d, "four");
    let workers = |epoch: u64| {
        let mut w: Vec<u64> = records.iter().filter(|r| r.0 == epoch).map(|r| r.2).collect();
        w.sort();
        w.dedup();
        w
    };
    assert_eq!((workers(0), workers(1)), (vec![0, 1, 2, 3], vec![0, 1]), "{log}");
}

/// Two nodes, one in a network namespace of its own (`Slurm::start_two`),
/// one task on each: each worker binds and is reached at its own node's
/// address, Cora trains to the local launcher's records, loss for loss, and
/// inference over the two predicts what one process does. (Every other test
/// here has one node, where a task that bound or dialled another node's
/// address would pass.)
#[test]
fn a_worker_on_another_node_trains_the_local_launchers_loss_curve() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start_two(None) else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let run = &JOB[..JOB.len() - 1];
    let script =
        slurm.script(d, "spread", &[run, &["--strategy", "model-centric", "--run", "spread", "--json"]].concat());
    // Before the driver: a step of the job's tasks says where Slurm places each rank.
    let placing = "srun --quiet sh -c 'echo \"slurm places rank $SLURM_PROCID on $SLURMD_NODENAME\"'\nexec ";
    let job = std::fs::read_to_string(&script).unwrap();
    assert!(job.contains("\nexec "), "{job}");
    std::fs::write(&script, job.replacen("\nexec ", &format!("\n{placing}"), 1)).unwrap();
    let spread = ["--wait", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1"];
    let out = slurm.sbatch(&spread, &script);
    let log = std::fs::read_to_string(d.join("spread.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    // Each worker's mesh on its own node's end of the veth pair, one per node.
    let mut meshes: Vec<&str> =
        log.lines().filter_map(|l| l.split_once("mesh listening on ")?.1.split(':').next()).collect();
    meshes.sort();
    let n = slurm.second.as_ref().unwrap();
    assert_eq!(meshes, [n.ip(1), n.ip(2)], "{log}");
    // Each rank on the node Slurm places it on: its worker's mesh at that node's NodeAddr.
    let mut placed: Vec<(usize, &str)> = log
        .lines()
        .filter_map(|l| {
            let (rank, node) = l.strip_prefix("slurm places rank ")?.split_once(" on ")?;
            Some((rank.parse().ok()?, node.trim()))
        })
        .collect();
    placed.sort();
    assert_eq!(placed.iter().map(|p| p.0).collect::<Vec<_>>(), [0, 1], "{log}");
    for (rank, node) in placed {
        let show = slurm.cmd("scontrol").args(["-o", "show", "node", node]).output_in(DAEMON, "scontrol show node");
        let addr = text(&show).split_whitespace().find_map(|w| w.strip_prefix("NodeAddr=")).map(String::from);
        let mesh = log.lines().find_map(|l| {
            let after = l.split_once(&format!("[worker {rank}] "))?.1;
            after.split_once("mesh listening on ")?.1.split(':').next()
        });
        assert_eq!(mesh, addr.as_deref(), "rank {rank}, which Slurm places on {node}: {log}");
    }
    json(d, &[&["train", "--workers", "2", "--no-tui", "--run", "local"][..], run].concat());
    let (s, l) = (curve(d, "spread"), curve(d, "local"));
    assert_eq!(s.len(), l.len(), "{log}");
    assert_eq!(s, l, "the same records, loss for loss");

    // Inference over the two nodes, in an allocation: what one process predicts, bit for bit.
    let (on_nodes, here) = (d.join("on-nodes.safetensors"), d.join("here.safetensors"));
    let out = slurm
        .cmd("salloc")
        .args(["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", env!("CARGO_BIN_EXE_leapgnn")])
        .args(["--data-dir", d.to_str().unwrap(), "infer", "spread", "--cluster", "slurm"])
        .arg("--out")
        .arg(&on_nodes)
        .output_in(RUN_LIMIT, "salloc leapgnn infer spread");
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("(2 worker(s)"), "two workers scored the nodes: {}", text(&out));
    json(d, &["infer", "spread", "--out", here.to_str().unwrap()]);
    assert!(std::fs::read(&on_nodes).unwrap() == std::fs::read(&here).unwrap(), "the same predictions, bit for bit");
}

/// A cluster that names its nodes in slurm.conf only, not in DNS
/// (`NodeName=leapnode NodeAddr=127.0.0.1`): the driver reaches the workers
/// at the node's NodeAddr, as Slurm itself does, and the job trains.
#[test]
fn a_node_whose_name_does_not_resolve_is_reached_at_its_node_addr() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    const NODE: &str = "leapnode";
    assert!(std::net::ToSocketAddrs::to_socket_addrs(&(NODE, 9)).is_err(), "{NODE} must not resolve here");
    let Some(slurm) = Slurm::start_as(Some(NODE)) else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let script = slurm.script(d, "named", &[&JOB[..], &["--run", "named"]].concat());
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    let log = std::fs::read_to_string(d.join("named.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    let mut workers: Vec<u64> = curve(d, "named").iter().map(|r| r.2).collect();
    workers.sort();
    workers.dedup();
    assert_eq!(workers, [0, 1], "both workers trained: {log}");
}

/// `slurm-script ... infer RUN ARGS`: the same #SBATCH block and checks as
/// for train, no time-limit warning (nothing to checkpoint); submitted to the
/// real Slurm on 2 tasks, its predictions are a local `infer`'s, bit for bit.
#[test]
fn slurm_script_infer_predicts_what_a_local_infer_does() {
    let tmp = cora();
    let d = tmp.path();
    let script = |opts: &[&str]| dist_support::leapgnn(d, &[&["slurm-script"][..], opts].concat());
    // Its arguments are checked as infer's; a warning is refused, none is written.
    let out = script(&["infer", "r1", "--outt", "x"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("infer arguments") && e.contains("--outt"), "{e}");
    // Without the run: refused naming it.
    let out = script(&["infer"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("<RUN>") && e.lines().count() == 1, "{e}");
    let out = script(&["--time", "10", "--stop-before", "60", "infer", "r1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--stop-before"), "{}", text(&out));
    // The run must exist (with its checkpoint) for the script to be written.
    json(d, &["train", "--no-tui", "--run", "r1", "cora", "--epochs", "1", "--hidden", "16"]);
    let out = script(&["--time", "10", "--cpus-per-task", "2", "infer", "r1", "--out", "p.safetensors"]);
    assert!(out.status.success(), "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("#SBATCH --time=10\n") && s.contains("#SBATCH --cpus-per-task=2\n"), "{s}");
    assert!(!s.contains("--signal") && !s.contains("trap"), "{s}");
    let exec = s.lines().find(|l| l.starts_with("exec ")).unwrap_or_else(|| panic!("{s}"));
    assert!(exec.ends_with(" infer r1 --out p.safetensors --cluster slurm"), "{exec}");

    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    json(d, &["train", "--workers", "2", "--no-tui", "--run", "trained", "cora", "--epochs", "1", "--hidden", "16"]);
    let (on_nodes, here) = (d.join("on-nodes.safetensors"), d.join("here.safetensors"));
    let script = slurm.script(d, "infer", &["infer", "trained", "--out", on_nodes.to_str().unwrap()]);
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    let log = std::fs::read_to_string(d.join("infer.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    assert!(log.contains("(2 worker(s)"), "two workers scored the nodes: {log}");
    json(d, &["infer", "trained", "--out", here.to_str().unwrap()]);
    assert!(std::fs::read(&on_nodes).unwrap() == std::fs::read(&here).unwrap(), "the same predictions, bit for bit");

    // Both tasks run on the batch step's node beside the driver: over 100 MiB
    // together, refused before any starts, and advised more nodes, not the
    // `--cluster` the job already gives (it was told "machines with --cluster").
    // Refused, neither leaves the partition it would score by behind.
    let parts = d.join("cora/parts/metis-2");
    std::fs::remove_dir_all(&parts).unwrap();
    let tight = infer_refused(&slurm, d, "tight", &[]);
    assert!(tight.contains("for the 2 workers and the driver on this machine together"), "{tight}");
    assert!(tight.contains("more nodes (`slurm-script --nodes N` with fewer --tasks-per-node)"), "{tight}");
    assert!(!tight.contains("--cluster"), "{tight}");
    // With sbcast the tasks read a node-local copy, not the driver's files, and
    // still share its node's memory: held the same (the driver held none of
    // them, and the job scored the graph under the limit).
    let node_local = tempfile::tempdir().unwrap();
    let profile = d.join("sbcast.toml");
    let toml = format!("[cluster]\nlauncher = \"slurm\"\nsbcast = true\nremote_dir = {:?}\n", node_local.path());
    std::fs::write(&profile, toml).unwrap();
    let shipped = infer_refused(&slurm, d, "tight-sbcast", &["--cluster", profile.to_str().unwrap()]);
    assert!(shipped.contains("for the 2 workers and the driver on this machine together"), "{shipped}");
    // The sbcast list was made by cutting the partition before the driver's
    // checks, which then refused the run with the partition written.
    assert!(!parts.exists(), "a refused run left {} behind: {shipped}", parts.display());
}

/// Submits `infer trained --memory-limit-mb 100` (and `args`) on 2 tasks as
/// job `name`; asserts it is refused with exit 2 before any worker started;
/// returns its log.
fn infer_refused(slurm: &Slurm, d: &Path, name: &str, args: &[&str]) -> String {
    let infer = [&["infer", "trained", "--memory-limit-mb", "100"][..], args].concat();
    let script = slurm.script(d, name, &infer);
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    let log = std::fs::read_to_string(d.join(format!("{name}.out"))).unwrap_or_default();
    assert_eq!(out.status.code(), Some(2), "{}\njob output:\n{log}", text(&out));
    assert!(log.contains("infer needs an estimated") && !log.contains("[worker"), "{log}");
    log
}

/// `sbcast = true`: the nodes need not see the data directory. The job's
/// binary, dataset and parts go to a node-local directory with sbcast, and the
/// workers run from there and open only that copy (their mapped archives say
/// so). Rank 0 checkpoints into it and the driver reads the checkpoint back:
/// stopped by the time-limit warning, a new job resumes the run (its
/// checkpoint shipped with sbcast too) and trains on to the local launcher's
/// records, loss for loss; `infer --cluster` with the profile ships the
/// checkpoint too and predicts what one process does; each job's copy is
/// removed when it ends.
#[test]
fn sbcast_ships_the_job_to_the_nodes_and_removes_it_after() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let node_local = tempfile::tempdir().unwrap();
    let profile = d.join("sbcast.toml");
    let toml = format!("[cluster]\nlauncher = \"slurm\"\nsbcast = true\nremote_dir = {:?}\n", node_local.path());
    std::fs::write(&profile, toml).unwrap();
    let run = ["cora", "--batch-size", "8", "--hidden", "16", "--fanout", "5,5", "--seed", "4"];
    let train = [&run[..], &["--epochs", "100000", "--checkpoint-every", "5"]].concat();
    let train = [&train[..], &["--run", "shipped", "--cluster", profile.to_str().unwrap()]].concat();
    let script = slurm.script(d, "ship", &train);
    let job = slurm.submit(&script);
    let mapped = || archives_mapped_by_workers_of(node_local.path());
    until("both workers to map their dataset", Duration::from_secs(120), || {
        mapped().iter().filter(|(_, files)| files.iter().any(|f| f.0.ends_with("dataset.lgnn"))).count() == 2
    });
    for (pid, files) in mapped() {
        for (f, _) in files {
            assert!(f.starts_with(node_local.path()), "worker {pid} opened {} outside the sbcast copy", f.display());
        }
    }
    let (log, state) = stopped_by_the_time_limit_warning(&slurm, d, &job, "shipped", "ship");
    // The binary, the archive, the manifest and the two parts.
    assert!(log.contains("sbcast: copied 5 files"), "{log}");
    until("every task to exit", Duration::from_secs(30), || processes_naming(node_local.path()).is_empty());
    let left: Vec<_> = std::fs::read_dir(node_local.path()).unwrap().collect();
    assert!(left.is_empty(), "the node-local copy was not removed: {left:?}\n{log}");

    // Two epochs past the stop, in a new job with a copy of its own.
    let epochs = (state["progress"]["epoch"].as_u64().unwrap() + 2).to_string();
    let script = slurm.script(d, "reship", &["train", "--resume", "shipped", "--epochs", &epochs]);
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    let log = std::fs::read_to_string(d.join("reship.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    // The job's files, then the checkpoint (its state and tensor files).
    assert!(log.contains("sbcast: copied 5 files") && log.matches("sbcast: copied").count() == 2, "{log}");
    // Rank 0's node holds no copy of this new job yet: nothing newer to fetch, and nothing to warn of.
    assert!(!log.contains("newer checkpoint"), "{log}");
    json(d, &[&["train", "--workers", "2", "--no-tui", "--run", "local", "--epochs", &epochs][..], &run[..]].concat());
    let (shipped, local) = (curve(d, "shipped"), curve(d, "local"));
    assert_eq!(shipped.len(), local.len(), "{log}");
    assert_eq!(shipped, local, "the same records, loss for loss");
    let left: Vec<_> = std::fs::read_dir(node_local.path()).unwrap().collect();
    assert!(left.is_empty(), "the node-local copy was not removed: {left:?}\n{log}");

    // infer with the profile, in an allocation: the run's checkpoint goes with
    // the job's files, and the workers' predictions are those of one process.
    let (on_nodes, here) = (d.join("on-nodes.safetensors"), d.join("here.safetensors"));
    let out = slurm
        .cmd("salloc")
        .env_remove("RAYON_NUM_THREADS")
        .args(["--ntasks=2", env!("CARGO_BIN_EXE_leapgnn"), "--data-dir", d.to_str().unwrap(), "infer", "shipped"])
        .args(["--cluster", profile.to_str().unwrap(), "--out", on_nodes.to_str().unwrap()])
        .output_in(RUN_LIMIT, "salloc leapgnn infer shipped");
    assert!(out.status.success(), "{}", text(&out));
    // The binary, the archive, the manifest and the two parts.
    assert!(text(&out).contains("sbcast: copied 5 files"), "{}", text(&out));
    // salloc sets no RAYON_NUM_THREADS: each worker gets its step's one CPU's worth.
    assert_eq!(text(&out).matches("1 compute thread\n").count(), 2, "{}", text(&out));
    json(d, &["infer", "shipped", "--out", here.to_str().unwrap()]);
    assert!(std::fs::read(&on_nodes).unwrap() == std::fs::read(&here).unwrap(), "the same predictions, bit for bit");
    let left: Vec<_> = std::fs::read_dir(node_local.path()).unwrap().collect();
    assert!(left.is_empty(), "the node-local copy was not removed: {left:?}");
}

/// A test that fails with a job running drops its Slurm there: the job's
/// steps and tasks on both nodes go with the daemons (they were left running:
/// slurmstepd ignores SIGTERM and is no child of slurmd's), and so do the
/// network namespace and the veth pair.
#[test]
fn a_slurm_dropped_with_a_job_running_leaves_nothing_behind() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start_two(None) else { return };
    let conf = slurm.conf();
    let (ns, host_if) = slurm.second.as_ref().map(|n| (n.name.clone(), n.host_if.clone())).unwrap();
    // A task that outlives any test: only cancelling the job ends it.
    let job = ["--parsable", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--wrap", "srun sleep 100000"];
    // Its output in the cluster's directory, not sbatch's default of the test's (the checkout).
    let output = format!("--output={}", slurm.dir.path().join("sleep.out").display());
    let out = slurm.cmd("sbatch").args(job).arg(output).output_in(DAEMON, "sbatch --wrap 'srun sleep 100000'");
    assert!(out.status.success(), "{}", text(&out));
    let sleeping = || {
        let comm = |p: &u32| std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
        processes_of(&conf).iter().filter(|p| comm(p).trim() == "sleep").count()
    };
    until("the job's task on each node", Duration::from_secs(60), || sleeping() == 2);
    drop(slurm);
    assert_eq!(processes_of(&conf), Vec::<u32>::new(), "processes of the dropped cluster are left");
    let netns = Command::new("ip").args(["netns", "list"]).output_in(QUICK, "ip netns list").stdout;
    let netns = String::from_utf8(netns).unwrap();
    assert!(!netns.lines().any(|l| l.split_whitespace().next() == Some(&ns)), "{ns} is left: {netns}");
    assert!(ip(&["link", "show", &host_if]).is_err(), "{host_if} is left");
}

/// A test killed by SIGKILL never drops its `Netns`: the namespace, its
/// veth pair and node2's slurmd in it are left. The next `Netns::new` on
/// this machine deletes them (the name's maker is gone), and leaves alone the
/// namespace of a test still running (another checkout's, say).
#[test]
fn a_killed_tests_network_namespace_goes_with_the_next_and_a_running_ones_stays() {
    if !can_run() {
        return;
    }
    /// Killed on drop: a failed assertion leaves no `sleep` behind.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let running = |c: &std::process::Child| Owner::of(c.id()).expect("just started");
    // The killed test: a process that ran and was reaped.
    let mut killed = Command::new("sleep").arg("100000").spawn().unwrap();
    let dead = running(&killed);
    killed.kill().unwrap();
    killed.wait().unwrap();
    let live = Reaped(Command::new("sleep").arg("100000").spawn().unwrap());
    let (stale, kept) = (std::mem::ManuallyDrop::new(Netns::claim(dead)), Netns::claim(running(&live.0)));
    // What the killed test left running in its namespace (its node2's slurmd);
    // while it runs, deleting the name alone would leave the namespace and the pair.
    let mut inside = Reaped(
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", stale.name))
            .args(["sleep", "100000"])
            .spawn()
            .unwrap(),
    );
    // nsenter joins the namespace only after it has started: one not in it yet
    // when the sweep looks would be left running there for good (CI hung so).
    let stale_ns = std::fs::metadata(format!("/run/netns/{}", stale.name)).unwrap();
    until("the killed test's process to join its namespace", Duration::from_secs(30), || {
        in_netns(inside.0.id(), &stale_ns)
    });
    let listed = || {
        String::from_utf8(Command::new("ip").args(["netns", "list"]).output_in(QUICK, "ip netns list").stdout).unwrap()
    };
    let has = |name: &str| listed().lines().any(|l| l.split_whitespace().next() == Some(name));
    assert!(has(&stale.name) && has(&kept.name), "{}", listed());

    let fresh = Netns::new();
    assert!(!has(&stale.name), "{} is left: {}", stale.name, listed());
    assert!(ip(&["link", "show", &stale.host_if]).is_err(), "{} is left", stale.host_if);
    let mut st = None;
    until("what ran in the deleted namespace to end", Duration::from_secs(30), || {
        st = inside.0.try_wait().unwrap();
        st.is_some()
    });
    let st = st.unwrap();
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(9), "what ran in {}: {st}", stale.name);
    assert!(has(&kept.name), "{} of a running process was deleted: {}", kept.name, listed());
    assert!(ip(&["link", "show", &kept.host_if]).is_ok(), "{} of a running process was deleted", kept.host_if);
    assert_ne!(fresh.net, kept.net);
    drop((fresh, kept, live));
}

/// Set in the test binary run by `a_killed_tests_cluster_goes_with_the_next_and_a_running_ones_stays`.
const CHILD_VAR: &str = "LEAPGNN_SLURM_TEST_CHILD";

/// The killed test of `a_killed_tests_cluster_goes_with_the_next_and_a_running_ones_stays`:
/// starts a cluster, says where, and waits to be killed (stdin never ends).
#[test]
#[ignore = "run by a_killed_tests_cluster_goes_with_the_next_and_a_running_ones_stays"]
fn a_cluster_left_to_be_killed() {
    if std::env::var_os(CHILD_VAR).is_none() {
        return;
    }
    let slurm = Slurm::start().expect("the parent test checked that Slurm can run");
    println!("cluster={}", slurm.dir.path().display());
    let _ = std::io::stdin().read_line(&mut String::new());
    drop(slurm);
}

/// A one-node test killed by SIGKILL never drops its `Slurm`: its directory
/// and daemons are left. The next `Slurm` on this machine stops those daemons
/// and removes the directory (the name's maker is gone), leaves alone those
/// of a test still running (another checkout's, say), and comes up.
#[test]
fn a_killed_tests_cluster_goes_with_the_next_and_a_running_ones_stays() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    if !can_run() {
        return;
    }
    /// Killed on drop: a failed assertion leaves no process behind.
    struct Reaped(Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut killed = Reaped(
        Command::new(std::env::current_exe().unwrap())
            .args(["--ignored", "--exact", "a_cluster_left_to_be_killed", "--nocapture"])
            .env(CHILD_VAR, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = killed.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    std::thread::spawn(move || {
        use std::io::BufRead;
        let found = std::io::BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.strip_prefix("cluster=").map(PathBuf::from));
        let _ = tx.send(found);
    });
    let stale = rx.recv_timeout(Duration::from_secs(120)).ok().flatten().expect("the killed test's cluster");
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    let stale_conf = stale.join("slurm.conf");
    assert!(!processes_of(&stale_conf).is_empty(), "the killed test's daemons stopped without it");

    // A test still running (a sleep here) with a cluster directory and a daemon of its own.
    let live = Reaped(Command::new("sleep").arg("100000").spawn().unwrap());
    let owner = Owner::of(live.0.id()).expect("just started");
    let kept = tempfile::Builder::new().prefix(&format!("{CLUSTER_DIR_PREFIX}{}-", owner.tag())).tempdir().unwrap();
    std::fs::write(kept.path().join("slurm.conf"), format!("{CLUSTER_NAME}\n")).unwrap();
    let daemon =
        Reaped(Command::new("sleep").arg("100000").env("SLURM_CONF", kept.path().join("slurm.conf")).spawn().unwrap());

    let Some(slurm) = Slurm::start() else { return };
    assert!(!stale.exists(), "{} is left", stale.display());
    until("the killed test's daemons to go", Duration::from_secs(10), || processes_of(&stale_conf).is_empty());
    assert!(kept.path().join("slurm.conf").exists(), "a running test's directory was removed");
    assert_eq!(processes_of(&kept.path().join("slurm.conf")), [daemon.0.id()], "a running test's daemon was killed");
    let out = slurm.cmd("srun").args(["--ntasks=1", "true"]).output_in(RUN_LIMIT, "srun true");
    assert!(out.status.success(), "the new cluster runs no job: {}", text(&out));
    drop((slurm, daemon, live));
}

/// `sbcast = true` over two nodes, `remote_dir` node-local on each (on
/// `NODE2` a directory of its own at the same path): each worker maps the
/// dataset and parts of its own node's copy, not the other's nor the driver's
/// files; stopped by the time-limit warning, the driver reads rank 0's
/// checkpoint back from its node; each node's copy is removed at the end.
#[test]
fn sbcast_over_two_nodes_each_worker_reads_its_own_nodes_copy() {
    use std::os::unix::fs::MetadataExt;
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let node_local = tempfile::tempdir().unwrap();
    let Some(slurm) = Slurm::start_two(Some(node_local.path())) else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let profile = d.join("sbcast.toml");
    let toml = format!("[cluster]\nlauncher = \"slurm\"\nsbcast = true\nremote_dir = {:?}\n", node_local.path());
    std::fs::write(&profile, toml).unwrap();
    let run = &JOB[..JOB.len() - 1];
    let train = [run, &["--epochs", "100000", "--checkpoint-every", "5", "--run", "spread"]].concat();
    let script = slurm.script(d, "spread", &[&train[..], &["--cluster", profile.to_str().unwrap()]].concat());
    let out = slurm.sbatch(&["--parsable", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1"], &script);
    assert!(out.status.success(), "{}", text(&out));
    let job = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mapped = || archives_mapped_by_workers_of(node_local.path());
    until("both workers to map their dataset", Duration::from_secs(120), || {
        mapped().iter().filter(|(_, files)| files.iter().any(|f| f.0.ends_with("dataset.lgnn"))).count() == 2
    });
    let ns = std::fs::metadata(format!("/run/netns/{}", slurm.second.as_ref().unwrap().name)).unwrap().ino();
    let mut on_node2 = vec![];
    for (pid, files) in mapped() {
        // Each sees the copy at the same path; which node's it is, the inode says.
        let node2 = std::fs::metadata(format!("/proc/{pid}/ns/net")).unwrap().ino() == ns;
        let copy = if node2 { slurm.node2_dir() } else { node_local.path().to_path_buf() };
        on_node2.push(node2);
        for (f, inode) in files {
            let rel = f.strip_prefix(node_local.path()).unwrap_or_else(|_| panic!("{pid} opened {}", f.display()));
            let own = std::fs::metadata(copy.join(rel)).map(|m| m.ino()).ok();
            assert_eq!(own, Some(inode), "worker {pid} (on {NODE2}: {node2}) mapped {} of another copy", f.display());
        }
    }
    on_node2.sort();
    assert_eq!(on_node2, [false, true], "one worker on each node");
    let (log, _) = stopped_by_the_time_limit_warning(&slurm, d, &job, "spread", "spread");
    assert!(log.contains("sbcast: copied 5 files") && log.contains("on 2 node(s)"), "{log}");
    until("every task to exit", Duration::from_secs(30), || processes_naming(node_local.path()).is_empty());
    for copy in [node_local.path().to_path_buf(), slurm.node2_dir()] {
        let left: Vec<_> = std::fs::read_dir(&copy).unwrap().collect();
        assert!(left.is_empty(), "the node-local copy {} was not removed: {left:?}\n{log}", copy.display());
    }
}

/// Once `run` of job `job` (output `d/NAME.out`) has 30 records, sends the
/// batch step the time-limit warning: the workers checkpoint and stop while
/// the job still runs, and it ends COMPLETED, its checkpoint (read back from
/// rank 0) of the last iteration. Returns the job's output and the
/// checkpoint's state.
fn stopped_by_the_time_limit_warning(
    slurm: &Slurm,
    d: &Path,
    job: &str,
    run: &str,
    name: &str,
) -> (String, serde_json::Value) {
    let runs = d.join("runs").join(run);
    until("training records", Duration::from_secs(60), || {
        std::fs::read_to_string(runs.join("metrics.jsonl")).is_ok_and(|m| m.lines().count() >= 30)
    });
    let usr1 = slurm.cmd("scancel").args(["--batch", "--signal=USR1", job]).output_in(DAEMON, "scancel --batch");
    assert!(usr1.status.success(), "{}", text(&usr1));
    until("the job to end", Duration::from_secs(60), || slurm.gone(job));
    let log = std::fs::read_to_string(d.join(format!("{name}.out"))).unwrap();
    assert_eq!(job_state(slurm, job), ("COMPLETED".into(), "0:0".into()), "{log}");
    assert!(log.contains("stopped for the job's time limit"), "{log}");
    let read =
        |f: &str| -> serde_json::Value { serde_json::from_slice(&std::fs::read(runs.join(f)).unwrap()).unwrap() };
    let (state, stopped) = (read("checkpoint/state.json"), read("summary.json"));
    assert_eq!(state["progress"]["global_iteration"], stopped["iterations"], "the stop's checkpoint came back: {log}");
    (log, state)
}

/// The `.lgnn` files (archives, parts) each worker process run from under
/// `dir` has mapped, as it names them, with their inodes; by pid.
fn archives_mapped_by_workers_of(dir: &Path) -> Vec<(String, Vec<(PathBuf, u64)>)> {
    let needle = dir.to_str().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let p = e.ok()?.path();
            let cmd = std::fs::read(p.join("cmdline")).ok()?;
            let argv: Vec<String> = cmd.split(|&b| b == 0).map(|a| String::from_utf8_lossy(a).to_string()).collect();
            // The worker itself, not the srun that started it.
            let worker = argv.first()?.starts_with(needle) && argv.iter().any(|a| a == "worker");
            let maps = std::fs::read_to_string(p.join("maps")).ok().filter(|_| worker)?;
            let mut files: Vec<(PathBuf, u64)> = maps
                .lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    Some((PathBuf::from(f.get(5).filter(|f| f.ends_with(".lgnn"))?), f[4].parse().ok()?))
                })
                .collect();
            files.sort();
            files.dedup();
            Some((p.file_name()?.to_string_lossy().to_string(), files))
        })
        .collect()
}

/// Processes whose command line names `dir` (the run's workers and driver).
fn processes_naming(dir: &Path) -> Vec<String> {
    let needle = dir.to_str().unwrap();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle) && c.contains("leapgnn"))
        .collect()
}

#[test]
fn scancel_stops_every_task_and_leaves_a_checkpoint_that_loads() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let long = [
        "cora",
        "--epochs",
        "1000",
        "--batch-size",
        "8",
        "--hidden",
        "16",
        "--fanout",
        "5,5",
        "--checkpoint-every",
        "5",
    ];
    // Two CPUs per task: each worker's step gets both (srun does not inherit
    // sbatch's --cpus-per-task; a step of one CPU would run both threads on it).
    let script = slurm.script_with(d, "long", &["--cpus-per-task", "2"], &[&long[..], &["--run", "long"]].concat());
    let job = slurm.submit(&script);
    let metrics = d.join("runs/long/metrics.jsonl");
    until("training records", Duration::from_secs(120), || {
        std::fs::read_to_string(&metrics).is_ok_and(|m| m.lines().count() >= 30)
    });
    let steps = slurm.cmd("scontrol").args(["-o", "show", "step", &job]).output_in(DAEMON, "scontrol show step");
    let steps = String::from_utf8_lossy(&steps.stdout).to_string();
    let workers: Vec<&str> = steps.lines().filter(|l| l.contains("Name=leapgnn-worker-")).collect();
    assert_eq!(workers.len(), 2, "{steps}");
    for step in workers {
        assert!(step.split_whitespace().any(|w| w == "CPUs=2"), "a worker's step has not its task's 2 CPUs: {step}");
    }
    // A time-limit warning sent to the steps, not the batch shell (`--signal=USR1@S`
    // without `B:`), reaches the workers only: they say so and train on.
    let usr1 = slurm.cmd("scancel").args(["--signal=USR1", &job]).output_in(DAEMON, "scancel --signal=USR1");
    assert!(usr1.status.success(), "{}", text(&usr1));
    let log = d.join("long.out");
    until("both workers to ignore SIGUSR1", Duration::from_secs(30), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.matches("SIGUSR1 ignored").count() == 2)
    });
    let lines = std::fs::read_to_string(&metrics).unwrap().lines().count();
    until("training to go on", Duration::from_secs(60), || {
        std::fs::read_to_string(&metrics).is_ok_and(|m| m.lines().count() >= lines + 30)
    });
    assert!(!slurm.gone(&job), "the job still runs");
    // Slurm requeues a job whose node fails (here `scontrol requeue`) and runs
    // its script again: the driver stops with a checkpoint, and the same job
    // then resumes its run instead of failing on the taken --run name.
    let ok = |o: Output| assert!(o.status.success(), "{}", text(&o));
    ok(slurm.cmd("scontrol").args(["requeue", &job]).output_in(DAEMON, "scontrol requeue"));
    slurm.until_job(&job, &log, "the job to be requeued", Duration::from_secs(60), || {
        job_state(&slurm, &job).0 == "PENDING"
    });
    // Not the 2 minutes Slurm waits before a requeued job may start, but not
    // this second either: that wait is there so that the new launch credential
    // postdates, to the second, slurmd's revocation of the job's credentials at
    // the requeue (before this update); a credential of the same second is
    // refused ("Job N already killed, do not launch batch job").
    let starttime = ["update", &format!("jobid={job}"), "starttime=now+1"];
    ok(slurm.cmd("scontrol").args(starttime).output_in(DAEMON, "scontrol update starttime=now+1"));
    let resumed = format!("Slurm requeued job {job} (restart 1): resuming run long");
    slurm.until_job(&job, &log, "the requeued job to resume its run", Duration::from_secs(120), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains(&resumed))
    });
    slurm.until_job(&job, &log, "training to go on after the requeue", Duration::from_secs(60), || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.lines().filter(|l| l.starts_with("epoch")).count() >= 2)
    });
    let c = slurm.cmd("scancel").arg(&job).output_in(DAEMON, "scancel");
    assert!(c.status.success(), "{}", text(&c));
    until("the job to end", Duration::from_secs(60), || slurm.gone(&job));
    until("every task to exit", Duration::from_secs(30), || processes_naming(d).is_empty());
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.contains("stopped on request"), "the driver stopped the workers after a checkpoint: {log}");
    // The checkpoint loads: inference from it covers every node.
    let r = json(d, &["infer", "long"]);
    assert_eq!(r["nodes"], 2708, "{log}");
}

/// Under `salloc` the driver runs outside the allocation: when salloc gives
/// it up (here SIGINT to salloc alone, as when its session goes), Slurm
/// signals the workers' steps and not the driver. The workers tell it, and
/// it stops them after the iteration with a checkpoint, before Slurm's
/// SIGKILL; nothing of the run is left running.
#[test]
fn a_revoked_salloc_allocation_stops_the_run_with_a_checkpoint() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let log = std::fs::File::create(d.join("salloc.log")).unwrap();
    let mut salloc = slurm
        .cmd("salloc")
        .args(["--ntasks=2", env!("CARGO_BIN_EXE_leapgnn"), "--data-dir", d.to_str().unwrap(), "train", "cora"])
        .args(LONG_RUN)
        .args(["--run", "held", "--cluster", "slurm"])
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    let metrics = d.join("runs/held/metrics.jsonl");
    until("training records", Duration::from_secs(120), || {
        std::fs::read_to_string(&metrics).is_ok_and(|m| m.lines().count() >= 30)
    });
    let int = Command::new("kill").args(["-INT", &salloc.id().to_string()]).status_in(QUICK, "kill -INT salloc");
    assert!(int.success());
    until("salloc to end", Duration::from_secs(60), || salloc.try_wait().unwrap().is_some());
    until("every process of the run to exit", Duration::from_secs(30), || processes_naming(d).is_empty());
    let log = std::fs::read_to_string(d.join("salloc.log")).unwrap();
    assert!(log.contains("Slurm signalled this worker's step") && log.contains("--resume held"), "{log}");
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/held/checkpoint/state.json")).unwrap()).unwrap();
    let stopped: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/held/summary.json")).unwrap()).unwrap();
    assert_eq!(state["progress"]["global_iteration"], stopped["iterations"], "the stop's checkpoint: {log}");
    assert!(stopped["iterations"].as_u64().unwrap() < 9000, "stopped before the end: {log}");
}

#[test]
fn cluster_slurm_outside_an_allocation_is_refused() {
    let tmp = cora();
    let d = tmp.path();
    // From a directory holding a `slurm/` folder, which is no profile file.
    let cwd = tempfile::tempdir().unwrap();
    std::fs::create_dir(cwd.path().join("slurm")).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leapgnn"));
    cmd.args(["--data-dir", d.to_str().unwrap(), "train", "cora", "--cluster", "slurm", "--no-tui"]);
    cmd.current_dir(cwd.path());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SLURM_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.output_in(RUN_LIMIT, "leapgnn train --cluster slurm");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(e.contains("--cluster slurm") && e.contains("SLURM_JOB_ID"), "{e}");
    assert!(!d.join("runs").exists(), "nothing is created for a refused run");
    let e = fails(d, &["slurm-script", "--", "cora", "--epochz", "2"], 2);
    assert!(e.contains("--epochz"), "{e}");
}

/// Every value that goes into an `#SBATCH` line: a newline would end sbatch's
/// directives there and put the rest into the script as a command.
#[test]
fn slurm_script_refuses_values_sbatch_would_misread() {
    let tmp = cora();
    let d = tmp.path();
    let run = |opts: &[&str]| {
        let args: Vec<&str> = ["slurm-script"].iter().chain(opts).chain(&["train", "cora"]).copied().collect();
        dist_support::leapgnn(d, &args)
    };
    // Exit 2, no script on stdout, one error line naming the flag.
    let refused = |opts: &[&str], flag: &str| {
        let out = run(opts);
        let e = String::from_utf8_lossy(&out.stderr).to_string();
        assert_eq!(out.status.code(), Some(2), "{opts:?}: {}", text(&out));
        assert!(out.stdout.is_empty(), "{opts:?}: no script is printed: {}", text(&out));
        assert_eq!(e.lines().count(), 1, "{opts:?}: one error line: {e}");
        assert!(e.starts_with("error: ") && e.contains(flag), "{opts:?}: {e}");
        e
    };
    for flag in ["--job-name", "--time", "--partition", "--output"] {
        for value in ["x\ntouch /tmp/PWNED", "x\rtouch", "two words", "a#b", "it's", r"a\b", ""] {
            refused(&[flag, value], flag);
        }
    }
    let e = refused(&["--time", "garbage"], "--time");
    assert!(e.contains("D-HH:MM:SS") && e.contains("MM:SS") && e.contains("minutes"), "{e}");
    for bad in ["1:2:3:4", "1-2:3:4:5", "5-", "1:", "99999999999999", "1.5", "+5", "1-"] {
        refused(&["--time", bad], "--time");
    }
    for (flag, n) in [("--nodes", "99999999999"), ("--nodes", "0"), ("--tasks-per-node", "0"), ("--cpus-per-task", "0")]
    {
        refused(&[flag, n], flag);
    }
    let e = refused(&["--nodes", "1000", "--tasks-per-node", "1000"], "--tasks-per-node");
    assert!(e.contains("1000000 workers"), "{e}");
    // The time-limit warning's lead: within sbatch --signal's range, and
    // below the time limit (the warning would otherwise come at the start).
    for bad in ["65536", "x", "-1", "1.5"] {
        refused(&["--stop-before", bad], "--stop-before");
    }
    let e = refused(&["--time", "2", "--stop-before", "120"], "--stop-before");
    assert!(e.contains("120 s") && e.contains("or 0"), "{e}");

    let directives = |script: &str| -> Vec<String> {
        script.lines().filter(|l| l.starts_with("#SBATCH")).map(String::from).collect()
    };
    for (opts, signal) in [
        (&["--time", "02:00:00"][..], Some("B:USR1@120")),
        (&[][..], Some("B:USR1@120")),
        (&["--time", "2", "--stop-before", "90"][..], Some("B:USR1@90")),
        (&["--time", "2", "--stop-before", "0"][..], None),
        // The default lead is at most half the limit: a 1-minute job is warned 30 s ahead.
        (&["--time", "1"][..], Some("B:USR1@30")),
        (&["--time", "3"][..], Some("B:USR1@90")),
        (&["--time", "UNLIMITED"][..], None),
        // sbatch reads a limit of 0 as none: nothing to warn of, whatever the lead.
        (&["--time", "0", "--stop-before", "60"][..], None),
    ] {
        let out = run(opts);
        assert_eq!(out.status.code(), Some(0), "{opts:?}: {}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        let lines = directives(&script);
        let signals: Vec<&String> = lines.iter().filter(|l| l.starts_with("#SBATCH --signal")).collect();
        match signal {
            Some(sig) => {
                assert_eq!(signals, [&format!("#SBATCH --signal={sig}")], "{opts:?}: {script}");
                // Ignored by the shell before it becomes the driver, which takes it.
                let trap = script.lines().position(|l| l == "trap '' USR1").expect("trap");
                let exec = script.lines().position(|l| l.starts_with("exec ")).expect("exec");
                assert!(trap < exec, "{script}");
            }
            None => assert!(signals.is_empty() && !script.contains("trap"), "{opts:?}: {script}"),
        }
    }
    // A resumed run keeps its saved cluster: --cluster would be refused.
    json(d, &["train", "--no-tui", "--run", "r1", "cora", "--epochs", "1", "--hidden", "16"]);
    let out = dist_support::leapgnn(d, &["slurm-script", "--time", "10", "train", "--resume", "r1", "--epochs", "9"]);
    let script = String::from_utf8_lossy(&out.stdout);
    let exec = script.lines().find(|l| l.starts_with("exec ")).unwrap_or_else(|| panic!("{}", text(&out)));
    assert!(exec.ends_with(" train --resume r1 --epochs 9 --no-tui"), "{exec}");
    // Slurm's own formats are accepted and written as given, every directive
    // in the one block sbatch reads.
    for t in ["90", "90:30", "02:00:00", "1-12", "1-12:30", "2-00:30:00", "UNLIMITED"] {
        let out = run(&["--time", t, "--job-name", "gcn-1.a", "--partition", "gpu_a100"]);
        assert_eq!(out.status.code(), Some(0), "--time {t}: {}", text(&out));
        let script = String::from_utf8_lossy(&out.stdout);
        let block: Vec<&str> =
            script.lines().skip_while(|l| !l.starts_with("#SBATCH")).take_while(|l| l.starts_with("#SBATCH")).collect();
        for line in [format!("#SBATCH --time={t}"), "#SBATCH --output=leapgnn-%j.out".into()] {
            assert!(block.contains(&line.as_str()), "{script}");
        }
        assert_eq!(script.matches("#SBATCH").count(), block.len(), "{script}");
    }
}

/// `slurm-script` run in data dir `d` with `args` is refused before any
/// script is written: exit 2, one error line that says each of `says`.
fn script_refused(d: &Path, args: &[&str], says: &[&str]) {
    let out = dist_support::leapgnn(d, &[&["slurm-script"][..], args].concat());
    let e = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
    assert!(out.stdout.is_empty(), "{args:?}: no script is printed: {}", text(&out));
    assert_eq!(e.lines().count(), 1, "{args:?}: one error line: {e}");
    for s in says {
        assert!(e.starts_with("error: ") && e.contains(s), "{args:?}: `{s}` in {e}");
    }
}

/// `slurm-script --json ARGS` in `d`: its one JSON object (`--json` before
/// the job's arguments: after them it would be the job's).
fn script_json(d: &Path, args: &[&str]) -> serde_json::Value {
    let out = dist_support::leapgnn(d, &[&["--json", "slurm-script"][..], args].concat());
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
}

/// A dataset the job would find missing only after its wait in the queue is
/// refused when the script is made, saying which `leapgnn download` to run:
/// named, or named in `--config`'s file.
#[test]
fn slurm_script_refuses_a_dataset_that_is_not_there() {
    let tmp = cora();
    let d = tmp.path();
    script_refused(d, &["train", "nosuchdataset"], &["nosuchdataset", "leapgnn download --list"]);
    let args = ["--json", "train", "cora-planetoid", "--strategy", "leapgnn"];
    script_refused(d, &args, &["leapgnn download cora-planetoid"]);
    let config = d.join("job.toml");
    std::fs::write(&config, "dataset = \"citeseer-planetoid\"\nepochs = 2\n").unwrap();
    script_refused(d, &["train", "--config", config.to_str().unwrap()], &["leapgnn download citeseer-planetoid"]);
    // The script's own options are checked first, as before.
    script_refused(d, &["--nodes", "0", "train", "nosuchdataset"], &["--nodes"]);
}

/// A run to resume or infer with that does not exist is refused when the
/// script is made, not when the job starts.
#[test]
fn slurm_script_refuses_a_run_that_does_not_exist() {
    let tmp = cora();
    let d = tmp.path();
    script_refused(d, &["train", "--resume", "gone", "--epochs", "3"], &["--resume gone", "does not exist"]);
    script_refused(d, &["infer", "gone"], &["gone", "does not exist"]);
}

/// No dataset named: the script names the built-in default, in a comment
/// and on its exec line (a later default cannot change what a queued job
/// trains); the job generates it, not the script.
#[test]
fn slurm_script_names_the_default_dataset() {
    let default = leapgnn::train::flags::defaults::DATASET;
    let empty = tempfile::tempdir().unwrap();
    let out = dist_support::leapgnn(empty.path(), &["slurm-script", "train", "--epochs", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(script.lines().any(|l| l.starts_with("# Trains on dataset ") && l.contains(default)), "{script}");
    let exec = script.lines().find(|l| l.starts_with("exec ")).unwrap_or_else(|| panic!("{script}"));
    assert!(exec.ends_with(&format!(" train {default} --epochs 1 --cluster slurm --no-tui")), "{exec}");
    assert!(String::from_utf8_lossy(&out.stderr).contains(default), "{}", text(&out));
    assert!(!empty.path().join(default).exists(), "the job generates it, not the script");
    let j = script_json(empty.path(), &["train"]);
    assert_eq!(j["dataset"].as_str(), Some(default), "{j}");
    assert_eq!((j["default_dataset"].as_bool(), j["generated_in_job"].as_bool()), (Some(true), Some(true)), "{j}");
}

/// `--json`: one object with the script (the one printed without it) and
/// what was resolved: dataset, workers, time limit, warning, job name.
#[test]
fn slurm_script_json_carries_the_script_and_what_it_resolved() {
    let tmp = cora();
    let d = tmp.path();
    let opts = ["--nodes", "2", "--tasks-per-node", "3", "--time", "02:00:00", "--job-name", "gcn"];
    let job = ["train", "cora", "--epochs", "2"];
    let plain = dist_support::leapgnn(d, &[&["slurm-script"][..], &opts, &job].concat());
    assert!(plain.status.success(), "{}", text(&plain));
    let j = script_json(d, &[&opts[..], &job].concat());
    assert_eq!(j["script"].as_str(), Some(&*String::from_utf8_lossy(&plain.stdout)), "{j}");
    assert_eq!((j["command"].as_str(), j["dataset"].as_str()), (Some("train"), Some("cora")), "{j}");
    assert_eq!((j["default_dataset"].as_bool(), j["generated_in_job"].as_bool()), (Some(false), Some(false)));
    assert_eq!((j["nodes"].as_u64(), j["tasks_per_node"].as_u64(), j["workers"].as_u64()), (Some(2), Some(3), Some(6)));
    assert_eq!((j["time"].as_str(), j["time_limit_seconds"].as_u64()), (Some("02:00:00"), Some(2 * 3600)), "{j}");
    assert_eq!(j["stop_before"].as_u64(), Some(leapgnn::cluster::slurm::DEFAULT_STOP_BEFORE), "{j}");
    assert_eq!(j["job_name"].as_str(), Some("gcn"), "{j}");
    // A run to infer with: its own dataset, and no warning to ask for.
    json(d, &["train", "--no-tui", "--run", "r1", "cora", "--epochs", "1", "--hidden", "16"]);
    let j = script_json(d, &["infer", "r1"]);
    let got = (j["command"].as_str(), j["run"].as_str(), j["dataset"].as_str());
    assert_eq!(got, (Some("infer"), Some("r1"), Some("cora")), "{j}");
    assert!(j["stop_before"].is_null() && j["time_limit_seconds"].is_null(), "{j}");
}

/// The job's state and exit code as slurmctld keeps them for a while after the end.
fn job_state(slurm: &Slurm, job: &str) -> (String, String) {
    let o = slurm.cmd("scontrol").args(["show", "job", job]).output_in(DAEMON, "scontrol show job");
    let t = String::from_utf8_lossy(&o.stdout).to_string();
    let field = |k: &str| {
        t.split_whitespace().find_map(|w| w.strip_prefix(k)).unwrap_or_else(|| panic!("no {k} in {t}")).to_string()
    };
    (field("JobState="), field("ExitCode="))
}

/// `--stop-before`: Slurm's SIGUSR1 ahead of the time limit (`--time 1`, the
/// shortest) stops the run with a checkpoint before the limit, the job ends
/// COMPLETED and not TIMEOUT, and a new job from `slurm-script train --resume`
/// trains on to the records of a run that was never stopped, loss for loss.
#[test]
fn the_time_limit_warning_stops_with_a_checkpoint_and_a_new_job_resumes_it() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let run = ["cora", "--batch-size", "8", "--hidden", "16", "--fanout", "5,5", "--seed", "4"];
    // Slurm checks time limits about every 30 s (and sends the warning at such
    // a check): 45 s ahead of a 60 s limit comes at the first check after the start.
    let limited = [&run[..], &["--epochs", "100000", "--run", "limited"]].concat();
    let script = slurm.script_with(d, "limited", &["--time", "1", "--stop-before", "45"], &limited);
    let job = slurm.submit(&script);
    // The limit is enforced by the check after the 60 s, at most 90 s in: give it that and the kill.
    until("the job to end", Duration::from_secs(150), || slurm.gone(&job));
    let log = std::fs::read_to_string(d.join("limited.out")).unwrap();
    assert_eq!(job_state(&slurm, &job), ("COMPLETED".into(), "0:0".into()), "{log}");
    assert!(!log.contains("DUE TO TIME LIMIT"), "{log}");
    assert!(
        log.contains("stopped for the job's time limit") && log.contains("train --resume limited"),
        "the driver says why it stopped and how to go on: {log}"
    );
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/limited/checkpoint/state.json")).unwrap()).unwrap();
    let stopped: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("runs/limited/summary.json")).unwrap()).unwrap();
    assert_eq!(state["progress"]["global_iteration"], stopped["iterations"], "the checkpoint is of the last iteration");
    // Two epochs past the stop, in a new job, as the log says.
    let epochs = (state["progress"]["epoch"].as_u64().unwrap() + 2).to_string();
    let script =
        slurm.script_with(d, "resumed", &["--time", "5"], &["train", "--resume", "limited", "--epochs", &epochs]);
    // A job of one task cannot hold the run's two workers: refused at once,
    // naming the run's number of workers (no --workers was given).
    let one = ["--wait", "--ntasks=1", "--ntasks-per-node=1"];
    let out = slurm.sbatch(&one, &script);
    let log = std::fs::read_to_string(d.join("resumed.out")).unwrap_or_default();
    assert_eq!(out.status.code(), Some(2), "{}\n{log}", text(&out));
    assert!(log.contains("the run trains on 2 workers") && log.contains("1 task(s)"), "{log}");
    assert!(!log.contains("--workers 2"), "{log}");
    let out = slurm.sbatch(&["--wait", "--ntasks=2"], &script);
    let log = std::fs::read_to_string(d.join("resumed.out")).unwrap_or_default();
    assert!(out.status.success(), "sbatch: {}\njob output:\n{log}", text(&out));
    json(d, &[&["train", "--workers", "2", "--no-tui", "--run", "whole", "--epochs", &epochs][..], &run[..]].concat());
    let (limited, whole) = (curve(d, "limited"), curve(d, "whole"));
    assert_eq!(limited.len(), whole.len(), "{log}");
    assert_eq!(limited, whole, "the same records, loss for loss");
}

/// The Slurm workers' signal relay is a thread of its own: refused by a
/// worker's OS, the worker returned before reporting and the driver saw an
/// exit code (and restarted into the same limit). It now names the thread.
#[test]
fn a_refused_step_signal_relay_is_named_as_a_thread_refusal() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let failed = train_refused_a_thread(&slurm, "leapgnn-step-signals", &[]);
    assert!(failed.contains("cannot start thread leapgnn-step-signals"), "{failed}");
}

/// Trains Cora on 2 tasks in an salloc shell, every task's OS refusing
/// `thread` (`LEAPGNN_TEST_REFUSE_THREAD`), with `args`; asserts exit 1 with
/// the driver's own line, not the worker's relayed one (the refusal as such),
/// saying that a restart would meet the same limit; returns that line.
fn train_refused_a_thread(slurm: &Slurm, thread: &str, args: &[&str]) -> String {
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let out = slurm
        .cmd("salloc")
        .args(["--ntasks=2", env!("CARGO_BIN_EXE_leapgnn"), "--data-dir", d.to_str().unwrap(), "train"])
        .args(&JOB[..JOB.len() - 1])
        .args(["--run", "refused", "--cluster", "slurm"])
        .args(args)
        .env("LEAPGNN_TEST_REFUSE_THREAD", thread)
        .output_in(RUN_LIMIT, "salloc leapgnn train");
    let err = text(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let failed = err.lines().find(|l| l.starts_with("error: training on cora failed")).unwrap_or_default();
    assert!(failed.contains("a restart would meet the same limit"), "{err}");
    assert!(!err.contains("restart 1 of"), "restarted into the same limit: {err}");
    failed.to_string()
}

/// An salloc shell runs the driver off the job's node: it holds none of the
/// tasks against its own memory, and each task checks its node's. Both tasks
/// of the one node share its MemAvailable (here `LEAPGNN_TEST_MEM_AVAILABLE`,
/// passed on by srun), so each holds the two estimates together: with room
/// for the larger alone, both are refused (bad input: exit 2, and
/// `--restarts` does not relaunch them into the same refusal), naming the
/// node and the 2 tasks; with room for both, it trains. (With each task holding its own estimate
/// alone against the whole node, both started and trained.)
#[test]
fn tasks_on_one_node_hold_their_estimates_together_against_its_memory() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let tmp = cora();
    let d = tmp.path();
    json(d, &["partition", "cora", "--parts", "2"]);
    let train = |run: &str, free_mib: u64| {
        slurm
            .cmd("salloc")
            .args(["--ntasks=2", env!("CARGO_BIN_EXE_leapgnn"), "--data-dir", d.to_str().unwrap(), "train"])
            .args(&JOB[..JOB.len() - 1])
            .args(["--run", run, "--cluster", "slurm", "--restarts", "1"])
            .env(leapgnn::util::MEM_AVAILABLE_TEST_VAR, (free_mib << 20).to_string())
            .output_in(RUN_LIMIT, "salloc leapgnn train")
    };
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let together = format!(" MiB for the 2 workers on {} together", host.trim());
    // Room for the weights, not for a worker: the figures of one and of both.
    let out = train("small", 2);
    let e = text(&out);
    assert!(!out.status.success(), "{e}");
    let (one, both) = (mib_before(&e, " MiB per worker"), mib_before(&e, &together));
    assert!(one < both, "{e}");

    let out = train("tight", one + 1);
    let e = text(&out);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(!e.contains("restart 1 of 1"), "relaunched into the same refusal: {e}");
    let failed = e.lines().find(|l| l.starts_with("error: training on cora failed")).unwrap_or_default();
    assert!(failed.contains(&together) && failed.contains(&format!("but {} MiB are available", one + 1)), "{e}");
    assert!(failed.contains("fewer tasks per node over more nodes"), "{e}");
    let records = std::fs::read_to_string(d.join("runs/tight/metrics.jsonl")).unwrap_or_default();
    assert_eq!(records.lines().count(), 0, "refused before training: {e}");

    let out = train("roomy", both + 1);
    assert!(out.status.success(), "{}", text(&out));
}

/// A Slurm task refused one of its mesh threads (rank 1 dials rank 0 on a
/// thread of its own) reports the refusal as such: the driver's error names
/// the worker, its node and the thread, and `--restarts 1` is not spent on a
/// relaunch into the same limit.
#[test]
fn a_task_refused_a_mesh_thread_is_named_with_its_node_and_not_restarted() {
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(slurm) = Slurm::start() else { return };
    let failed = train_refused_a_thread(&slurm, "leapgnn-mesh-dial-0", &["--restarts", "1"]);
    let host = leapgnn::util::host_name();
    assert!(failed.contains(&format!("worker 1 on {host} cannot start thread leapgnn-mesh-dial-0: ")), "{failed}");
}
