//! Workers as Slurm job steps: inside an allocation (`sbatch`, `salloc`) the
//! driver runs in the batch step and starts one `srun` step per worker on the
//! allocation's nodes. No SSH keys: the job token travels as a MUNGE
//! credential (encrypted with the cluster's MUNGE key, usable once, by this
//! user only), because Slurm forwards a step's stdin in clear.

use super::launcher::{
    ChildWorker, Launcher, LogSink, RemoteDir, THREADS_VAR, WorkerProcess, WorkerSpec, stderr_log, threads_preset,
};
use super::ship::ShipItem;
use anyhow::Context;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A token starting with this is a MUNGE credential (`munge --string`).
pub const MUNGE_PREFIX: &str = "MUNGE:";

/// How long a Slurm or MUNGE command may take before we give up on it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reading one file back from a node (an `srun` step, a checkpoint's
/// weights) may take.
const READ_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error(
        "--cluster slurm: not inside a Slurm allocation (SLURM_JOB_ID is not set); run train from an sbatch script \
         (`leapgnn slurm-script` prints one) or inside `salloc`, or use --workers / an ssh profile"
    )]
    NoAllocation,
    #[error("--cluster slurm: {var}={value:?} from the allocation cannot be read: {why}")]
    BadEnv { var: &'static str, value: String, why: String },
    #[error(
        "--workers {asked}: the Slurm allocation has {tasks} task(s) (SLURM_NTASKS); ask sbatch for more or omit --workers"
    )]
    TooFewTasks { asked: usize, tasks: usize },
    #[error(transparent)]
    Command(Box<CommandError>),
    /// A `slurm-script` option that cannot go into an `#SBATCH` line as given.
    #[error("slurm-script {flag} {value}: {why}")]
    ScriptOption { flag: &'static str, value: String, why: String },
}

/// A Slurm or MUNGE command that failed; the advice follows how.
#[derive(Debug, thiserror::Error)]
#[error("`{command}` {}", .failure.explain(.about, .program))]
pub struct CommandError {
    pub command: String,
    pub program: String,
    pub about: Subject,
    pub failure: Failure,
}

/// How a Slurm or MUNGE command failed: a missing client, a command that
/// ran and said no, and one that hung each send the user somewhere else.
#[derive(Debug)]
pub enum Failure {
    /// It could not be started: not there, or not executable.
    NotFound(std::io::Error),
    /// It ran and exited non-zero, or was killed by a signal.
    Exited { status: std::process::ExitStatus, stderr: String },
    /// No answer within the limit, so it was killed.
    TimedOut { after: Duration },
    /// This host could not run it (no process, thread or pipe to be had).
    Local(std::io::Error),
}

/// What a failed command was about: where the user should look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// slurmctld, asked by scontrol.
    Controller,
    /// Slurm's record of a node (`scontrol show node`).
    Node(String),
    /// Steps or copies in a job: on `node` where one is named, else on the job's nodes.
    Job { job: String, node: Option<String> },
    /// This host's munged.
    Munge,
}

impl Subject {
    fn client(&self) -> &'static str {
        if *self == Subject::Munge { "MUNGE" } else { "Slurm's client" }
    }

    /// What to look at when the command ran but failed or hung.
    fn check(&self) -> String {
        match self {
            Subject::Controller => "check that slurmctld answers (`scontrol ping`) and its log".into(),
            Subject::Node(node) => {
                format!("check `scontrol show node {node}` and that slurmctld answers (`scontrol ping`)")
            }
            Subject::Job { job, node: Some(node) } => format!(
                "check the job (`scontrol show job {job}`), node {node} (`scontrol show node {node}`) and the \
                 slurmd log on {node}"
            ),
            Subject::Job { job, node: None } => format!(
                "check the job (`scontrol show job {job}`), its nodes (`scontrol show node NODE`) and their \
                 slurmd logs"
            ),
            Subject::Munge => "check that munged runs on this host (`munge -n | unmunge`) and its log".into(),
        }
    }
}

impl Failure {
    /// The message after the command: what happened and what to do.
    fn explain(&self, about: &Subject, program: &str) -> String {
        match self {
            Failure::NotFound(e) => {
                format!("could not be started: {e}; is {} ({program}) installed and on PATH?", about.client())
            }
            Failure::Exited { status, stderr } => {
                let how = match (status.code(), std::os::unix::process::ExitStatusExt::signal(status)) {
                    (Some(code), _) => format!("exited with code {code}"),
                    (None, Some(sig)) => format!("was killed by signal {sig}"),
                    (None, None) => status.to_string(),
                };
                let said = match stderr.trim() {
                    "" => "and said nothing on stderr".to_string(),
                    e => format!("saying: {e}"),
                };
                format!("{how}, {said}; {}", about.check())
            }
            Failure::TimedOut { after } => format!(
                "timed out: no answer in {} s, so it was stopped; {}, and try again",
                after.as_secs_f64(),
                about.check()
            ),
            Failure::Local(e) => format!(
                "could not be run: {e}; this host is short of processes, threads or memory (check `ulimit -u` and \
                 free memory) and try again"
            ),
        }
    }
}

impl crate::error::Blame for SlurmError {
    fn is_bad_input(&self) -> bool {
        !matches!(self, SlurmError::Command(_))
    }
}

/// The allocation's nodes, one per rank (block distribution: the first node's
/// tasks take the first ranks, as `srun`'s default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    pub job_id: String,
    pub node_of_rank: Vec<String>,
    /// The node this process runs on as Slurm names it (`SLURMD_NODENAME`,
    /// set in the batch step where the driver runs); `None` outside a step,
    /// e.g. a driver started from an `salloc` shell on a login node.
    pub here: Option<String>,
}

impl Allocation {
    /// Reads the allocation from the environment Slurm gives the batch step.
    /// `workers`: how many ranks to place (default: every task).
    pub fn from_env(workers: Option<usize>) -> Result<Self, SlurmError> {
        let var = |name: &'static str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let job_id = var("SLURM_JOB_ID").ok_or(SlurmError::NoAllocation)?;
        let list = var("SLURM_JOB_NODELIST").or_else(|| var("SLURM_NODELIST")).ok_or(SlurmError::BadEnv {
            var: "SLURM_JOB_NODELIST",
            value: String::new(),
            why: "not set".into(),
        })?;
        let per_node = var("SLURM_TASKS_PER_NODE").unwrap_or_else(|| "1".into());
        let counts = tasks_per_node(&per_node).map_err(|why| SlurmError::BadEnv {
            var: "SLURM_TASKS_PER_NODE",
            value: per_node.clone(),
            why,
        })?;
        let nodes = hostnames(&list)?;
        if nodes.len() != counts.len() {
            return Err(SlurmError::BadEnv {
                var: "SLURM_TASKS_PER_NODE",
                value: per_node,
                why: format!("{} node counts for {} nodes in {list}", counts.len(), nodes.len()),
            });
        }
        let mut node_of_rank: Vec<String> =
            nodes.iter().zip(&counts).flat_map(|(n, &c)| std::iter::repeat_n(n.clone(), c)).collect();
        if let Some(ntasks) = var("SLURM_NTASKS").and_then(|n| n.parse::<usize>().ok()) {
            node_of_rank.truncate(ntasks);
        }
        let tasks = node_of_rank.len();
        match workers {
            Some(w) if w > tasks => return Err(SlurmError::TooFewTasks { asked: w, tasks }),
            Some(w) => node_of_rank.truncate(w),
            None => {}
        }
        Ok(Allocation { job_id, node_of_rank, here: var("SLURMD_NODENAME") })
    }

    /// How many of the first `world` ranks run on this process's own node,
    /// sharing its memory with the driver (0 when the node is not known).
    pub fn ranks_here(&self, world: usize) -> usize {
        let Some(here) = &self.here else { return 0 };
        self.node_of_rank.iter().take(world).filter(|n| *n == here).count()
    }

    /// How many distinct nodes the ranks are placed on.
    pub fn nodes(&self) -> usize {
        let mut n: Vec<&String> = self.node_of_rank.iter().collect();
        n.sort();
        n.dedup();
        n.len()
    }

    pub fn world(&self) -> usize {
        self.node_of_rank.len()
    }
}

/// `SLURM_TASKS_PER_NODE` ("2(x3),1"): one count per node.
pub fn tasks_per_node(s: &str) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        let part = part.trim();
        let (count, times) = match part.split_once("(x") {
            Some((c, rest)) => {
                let t = rest.strip_suffix(')').ok_or_else(|| format!("`{part}`: expected N(xM)"))?;
                (c, t.parse::<usize>().map_err(|e| format!("`{part}`: {e}"))?)
            }
            None => (part, 1),
        };
        let count = count.parse::<usize>().map_err(|e| format!("`{part}`: {e}"))?;
        if times > 100_000 || out.len() + times > 100_000 {
            return Err(format!("`{part}`: more than 100000 nodes"));
        }
        out.extend(std::iter::repeat_n(count, times));
    }
    Ok(out)
}

/// Expands a Slurm host list (`node[01-04],gpu7`) with `scontrol show hostnames`.
fn hostnames(list: &str) -> Result<Vec<String>, SlurmError> {
    let out = run(Command::new("scontrol").args(["show", "hostnames", list]), None, Subject::Controller)?;
    let nodes: Vec<String> = out.lines().map(str::trim).filter(|l| !l.is_empty()).map(String::from).collect();
    if nodes.is_empty() {
        return Err(SlurmError::BadEnv { var: "SLURM_JOB_NODELIST", value: list.into(), why: "names no node".into() });
    }
    Ok(nodes)
}

/// Runs a short command with `input` on stdin; its stdout, or why it failed.
fn run(cmd: &mut Command, input: Option<&str>, about: Subject) -> Result<String, SlurmError> {
    run_within(cmd, input, about, COMMAND_TIMEOUT).map(|o| String::from_utf8_lossy(&o).into_owned())
}

/// `run`, allowed `limit`; its stdout as bytes.
fn run_within(cmd: &mut Command, input: Option<&str>, about: Subject, limit: Duration) -> Result<Vec<u8>, SlurmError> {
    run_unless(cmd, input, about, limit, None).map(|o| o.unwrap_or_default())
}

/// `run_within`, except that exit code `unless` gives `None` rather than an
/// error: the command's own word for an outcome that is not a failure.
fn run_unless(
    cmd: &mut Command,
    input: Option<&str>,
    about: Subject,
    limit: Duration,
    unless: Option<i32>,
) -> Result<Option<Vec<u8>>, SlurmError> {
    let command = format!("{cmd:?}").replace('"', "");
    let program = cmd.get_program().to_string_lossy().into_owned();
    let fail = |failure: Failure| {
        SlurmError::Command(Box::new(CommandError {
            command: command.clone(),
            program: program.clone(),
            about: about.clone(),
            failure,
        }))
    };
    let mut child = cmd
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied => fail(Failure::NotFound(e)),
            _ => fail(Failure::Local(e)),
        })?;
    // A command that exits before reading its input breaks the pipe: its exit
    // status and stderr say why, so that is kept for after it ends.
    let mut unread = None;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        unread = stdin.write_all(text.as_bytes()).err();
    }
    let (mut out, mut err) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
    let reader = crate::util::threads::spawn("leapgnn-slurm-output", move || {
        let (mut o, mut e) = (Vec::new(), String::new());
        let _ = out.read_to_end(&mut o);
        let _ = err.read_to_string(&mut e);
        (o, e)
    });
    let reader = match reader {
        Ok(r) => r,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(fail(Failure::Local(std::io::Error::other(e.to_string()))));
        }
    };
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait().map_err(|e| fail(Failure::Local(e)))? {
            Some(s) => break s,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(Failure::TimedOut { after: limit }));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let (o, e) = reader.join().unwrap_or_default();
    if unless.is_some() && status.code() == unless {
        return Ok(None);
    }
    if !status.success() {
        return Err(fail(Failure::Exited { status, stderr: e.trim().to_string() }));
    }
    if let Some(e) = unread {
        return Err(fail(Failure::Local(e)));
    }
    Ok(Some(o))
}

/// Seals `token` for this user with MUNGE: the credential is encrypted with
/// the cluster's key, expires after MUNGE's TTL and is accepted once.
pub fn seal_token(token: &str) -> Result<String, SlurmError> {
    let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m)).unwrap_or(0);
    let cred = run(Command::new("munge").args(["--restrict-uid", &uid.to_string()]), Some(token), Subject::Munge)?;
    Ok(cred.trim().to_string())
}

/// The token inside a credential from `seal_token` (on the worker's node).
pub fn open_token(credential: &str) -> Result<String, SlurmError> {
    let token = run(Command::new("unmunge").arg("--metadata=/dev/null"), Some(credential), Subject::Munge)?;
    Ok(token.trim().to_string())
}

/// Starts worker r as `srun` step on its node of the allocation.
pub struct SlurmLauncher {
    pub alloc: Allocation,
    pub binary: PathBuf,
    /// Flags every worker gets before `worker` (e.g. `--data-dir`).
    pub args: Vec<String>,
    /// Extra `srun` flags (e.g. `--gpus-per-task=1`).
    pub srun_args: Vec<String>,
    pub log: LogSink,
    /// Files to copy to every node with sbcast before the first worker starts.
    sbcast: Option<Sbcast>,
    /// Each node's address and this host's address towards it, by node name.
    routes: std::sync::Mutex<std::collections::HashMap<String, (IpAddr, IpAddr)>>,
}

/// `sbcast = true`: what goes to the nodes, where, and whether it went.
struct Sbcast {
    /// On every node: `dir/leapgnn` is the binary, `dir/data` the data directory.
    dir: PathBuf,
    /// Paths under the data directory.
    items: Vec<ShipItem>,
    /// The outcome of the copy (made once, by the first launch).
    done: std::sync::Mutex<Option<Result<(), String>>>,
    /// Files the next job's workers need besides `items` (a checkpoint to
    /// resume from, `Launcher::ship_with_job`), as (local path, path under
    /// the data directory): copied by that job's first launch.
    job_files: std::sync::Mutex<Vec<(PathBuf, PathBuf)>>,
}

impl SlurmLauncher {
    pub fn new(alloc: Allocation, binary: PathBuf, args: Vec<String>) -> Self {
        SlurmLauncher {
            alloc,
            binary,
            args,
            srun_args: vec![],
            log: stderr_log(),
            sbcast: None,
            routes: Default::default(),
        }
    }

    /// Copies `items` (files under the data directory, `remote` relative to it) and
    /// the binary to `<dir>/job-<id>` on every node of the allocation with sbcast,
    /// and starts the workers from there; the directory is removed when the
    /// launcher is dropped.
    pub fn with_sbcast(mut self, dir: &std::path::Path, items: Vec<ShipItem>) -> Self {
        let dir = dir.join(format!("job-{}", self.alloc.job_id));
        let data = dir.join("data").display().to_string();
        if let Some(i) = self.args.iter().position(|a| a == "--data-dir") {
            let end = (i + 2).min(self.args.len());
            self.args.drain(i..end);
        }
        self.args.splice(0..0, ["--data-dir".to_string(), data]);
        self.sbcast = Some(Sbcast { dir, items, done: Default::default(), job_files: Default::default() });
        self
    }

    /// The binary the steps run: the copy on the nodes with sbcast.
    fn step_binary(&self) -> PathBuf {
        match &self.sbcast {
            Some(s) => s.dir.join("leapgnn"),
            None => self.binary.clone(),
        }
    }

    /// Steps and copies across the job, for a failure's advice.
    fn whole_job(&self) -> Subject {
        Subject::Job { job: self.alloc.job_id.clone(), node: None }
    }

    /// One step on every node of the job (sbcast writes to all of them, not
    /// only those of the ranks placed) running `argv`.
    fn on_every_node(&self, argv: &[&str]) -> Result<String, SlurmError> {
        let nodes = std::env::var("SLURM_JOB_NUM_NODES")
            .ok()
            .and_then(|n| n.trim().parse::<usize>().ok())
            .unwrap_or_else(|| self.alloc.nodes());
        run(
            Command::new("srun")
                .arg(format!("--jobid={}", self.alloc.job_id))
                .arg(format!("--nodes={nodes}"))
                .arg(format!("--ntasks={nodes}"))
                .args(["--ntasks-per-node=1", "--overlap", "--quiet", "--kill-on-bad-exit=1"])
                .args(argv),
            None,
            self.whole_job(),
        )
    }

    /// The sbcast copy, once: the binary and the job's files.
    fn broadcast(&self, s: &Sbcast) -> Result<(), String> {
        let mut files: Vec<(PathBuf, PathBuf)> = vec![(self.binary.clone(), s.dir.join("leapgnn"))];
        files.extend(s.items.iter().map(|i| (i.local.clone(), s.dir.join("data").join(&i.remote))));
        self.copy_to_nodes(s, &files)
    }

    /// Copies each (local, remote) file to every node: the directories
    /// first, then each file (sbcast sends it to all the job's nodes).
    /// Allowed a minute plus 10 MB/s per file.
    fn copy_to_nodes(&self, s: &Sbcast, files: &[(PathBuf, PathBuf)]) -> Result<(), String> {
        let mut dirs: Vec<String> =
            files.iter().filter_map(|(_, r)| r.parent()).map(|d| d.display().to_string()).collect();
        dirs.sort();
        dirs.dedup();
        let mut mkdir = vec!["mkdir", "-p"];
        mkdir.extend(dirs.iter().map(String::as_str));
        self.on_every_node(&mkdir).map_err(|e| e.to_string())?;
        let t = Instant::now();
        let mut bytes = 0u64;
        for (local, remote) in files {
            let size = std::fs::metadata(local).map_err(|e| format!("cannot read {}: {e}", local.display()))?.len();
            bytes += size;
            let limit = Duration::from_secs(60 + size / 10_000_000);
            run_within(
                Command::new("sbcast")
                    .arg(format!("--jobid={}", self.alloc.job_id))
                    .args(["--force", "--preserve"])
                    .arg(local)
                    .arg(remote),
                None,
                self.whole_job(),
                limit,
            )
            .map_err(|e| e.to_string())?;
        }
        (self.log)(format!(
            "sbcast: copied {} files ({:.1} MB) to {} in {:.1} s on {} node(s)",
            files.len(),
            bytes as f64 / 1e6,
            s.dir.display(),
            t.elapsed().as_secs_f64(),
            self.alloc.nodes()
        ));
        Ok(())
    }

    pub fn with_log(mut self, log: LogSink) -> Self {
        self.log = log;
        self
    }

    /// An address of `node` that this host reaches it at, and the address of
    /// the interface this host reaches it from; looked up once per node.
    fn route(&self, node: &str) -> anyhow::Result<(IpAddr, IpAddr)> {
        let mut routes = self.routes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = routes.get(node) {
            return Ok(*r);
        }
        let peer = node_ip(node)?;
        // Connecting a UDP socket sends nothing; it picks the outgoing interface.
        let probe = UdpSocket::bind("0.0.0.0:0")?;
        probe.connect(SocketAddr::new(peer, 9))?;
        let route = (peer, probe.local_addr()?.ip());
        routes.insert(node.to_string(), route);
        Ok(route)
    }
}

/// The IPv4 address Slurm reaches `node` at: its `NodeAddr` (which differs
/// from the node's name where the names are not in DNS, as in
/// `NodeName=node1 NodeAddr=10.0.0.5`), resolved if it is a host name; the
/// node's name itself where scontrol does not say.
fn node_ip(node: &str) -> anyhow::Result<IpAddr> {
    let resolve = |name: &str| -> Result<IpAddr, String> {
        (name, 9)
            .to_socket_addrs()
            .map_err(|e| e.to_string())?
            .map(|a| a.ip())
            .find(IpAddr::is_ipv4)
            .ok_or_else(|| "no IPv4 address".to_string())
    };
    let addr = match run(Command::new("scontrol").args(["-o", "show", "node", node]), None, Subject::Node(node.into()))
    {
        Ok(out) => node_addr(&out).ok_or_else(|| format!("`scontrol show node {node}` gives no NodeAddr")),
        Err(e) => Err(e.to_string()),
    };
    let why = match addr {
        Ok(a) => match resolve(&a) {
            Ok(ip) => return Ok(ip),
            Err(e) => format!("its NodeAddr {a} does not resolve ({e})"),
        },
        Err(e) => e,
    };
    resolve(node).map_err(|e| {
        anyhow::anyhow!(
            "cannot find the address of Slurm node {node}: {why}, and the name {node} does not resolve ({e}); give \
             the node a NodeAddr in slurm.conf that this host can reach (an IP address, or a name in DNS or /etc/hosts)"
        )
    })
}

/// The `NodeAddr=` field of `scontrol -o show node` output.
fn node_addr(scontrol: &str) -> Option<String> {
    scontrol
        .split_whitespace()
        .find_map(|w| w.strip_prefix("NodeAddr="))
        .filter(|a| !a.is_empty() && *a != "(null)")
        .map(String::from)
}

impl Launcher for SlurmLauncher {
    fn host_of(&self, rank: usize) -> String {
        self.alloc.node_of_rank.get(rank).cloned().unwrap_or_else(|| "?".into())
    }

    fn name(&self) -> &'static str {
        "slurm"
    }

    fn kind(&self) -> crate::cluster::profile::LauncherKind {
        crate::cluster::profile::LauncherKind::Slurm
    }

    fn launch(&self, spec: &WorkerSpec) -> anyhow::Result<Box<dyn WorkerProcess>> {
        let node = self.alloc.node_of_rank.get(spec.rank).ok_or_else(|| {
            anyhow::anyhow!("rank {} is outside the allocation's {} tasks", spec.rank, self.alloc.world())
        })?;
        if let Some(s) = &self.sbcast {
            let mut done = s.done.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(why) = done.get_or_insert_with(|| self.broadcast(s)) {
                anyhow::bail!("--cluster: sbcast could not copy the job's files to the nodes: {why}");
            }
            // Taken by the job's first launch: its other workers find them there.
            let extra = std::mem::take(&mut *s.job_files.lock().unwrap_or_else(|e| e.into_inner()));
            let extra: Vec<_> = extra.into_iter().map(|(local, rel)| (local, s.dir.join("data").join(rel))).collect();
            if !extra.is_empty()
                && let Err(why) = self.copy_to_nodes(s, &extra)
            {
                anyhow::bail!("--cluster: sbcast could not copy the checkpoint to resume from to the nodes: {why}");
            }
        }
        let (node_ip, local_ip) = self.route(node)?;
        let driver =
            if spec.driver.ip().is_unspecified() { SocketAddr::new(local_ip, spec.driver.port()) } else { spec.driver };
        let sealed = seal_token(&spec.token)?;
        let mut cmd = Command::new("srun");
        cmd.arg(format!("--jobid={}", self.alloc.job_id))
            .args(["--nodes=1", "--ntasks=1", "--exact", "--overlap", "--quiet", "--kill-on-bad-exit=0"])
            .arg(format!("--nodelist={node}"))
            .arg(format!("--job-name=leapgnn-worker-{}", spec.rank))
            .args(step_cpus().map(|c| format!("--cpus-per-task={c}")))
            .args(&self.srun_args)
            .arg(self.step_binary())
            .args(&self.args)
            .args(["worker", "--driver", &driver.to_string(), "--rank", &spec.rank.to_string()])
            // Peers reach this worker's mesh at the address the driver reaches its node.
            .args(["--bind", &SocketAddr::new(node_ip, 0).to_string()])
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The step's CPUs, unless the operator set the threads (slurm-script's does): left
        // alone, each worker would start a thread per core of its node, whatever it was given.
        if threads_preset().is_none() {
            cmd.env(THREADS_VAR, task_cpus().to_string());
        }
        let mut child = crate::util::threads::start_process(format!("srun-{}", spec.rank), || cmd.spawn())
            .with_context(|| format!("cannot run srun for worker {}", spec.rank))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let stderr = child.stderr.take().expect("piped stderr");
        let (rank, log) = (spec.rank, self.log.clone());
        // SIGTERM makes srun signal its task and wait for it (killing srun itself
        // would leave the task running until Slurm notices); SIGKILL after a grace period.
        // Held from here: should the token or its log thread fail, dropping it kills the worker.
        let worker = ChildWorker::new(rank, child, Some(Duration::from_secs(10)));
        writeln!(stdin, "{sealed}")
            .map_err(|e| anyhow::anyhow!("cannot pass the job token to worker {}: {e}", rank))?;
        drop(stdin);
        crate::util::threads::spawn(format!("leapgnn-log-{rank}"), move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                log(format!("[worker {rank}] {line}"));
            }
        })?;
        Ok(Box::new(worker))
    }

    /// With sbcast the workers' data directory is the node-local copy: the job
    /// names files relative to it, and rank 0's checkpoints are read back.
    fn shares_files(&self) -> bool {
        self.sbcast.is_none()
    }

    /// The ranks on the batch step's node run beside the driver; those on
    /// other nodes check their own memory as they start.
    fn local_workers(&self, world: usize) -> usize {
        self.alloc.ranks_here(world)
    }

    fn open_dir(&self, rank: usize, rel: &std::path::Path) -> Option<anyhow::Result<Box<dyn RemoteDir>>> {
        let s = self.sbcast.as_ref()?;
        let Some(node) = self.alloc.node_of_rank.get(rank) else {
            return Some(Err(anyhow::anyhow!("rank {rank} is outside the allocation's {} tasks", self.alloc.world())));
        };
        let dir = NodeDir { job_id: self.alloc.job_id.clone(), node: node.clone(), dir: s.dir.join("data").join(rel) };
        Some(Ok(Box::new(dir)))
    }

    fn ship_with_job(&self, files: Vec<(PathBuf, PathBuf)>) {
        if let Some(s) = &self.sbcast {
            *s.job_files.lock().unwrap_or_else(|e| e.into_inner()) = files;
        }
    }
}

/// The CPUs each worker's step asks for: the allocation's per task. srun
/// does not take sbatch's `--cpus-per-task` from `SLURM_CPUS_PER_TASK`
/// (since Slurm 22.05; only from `SRUN_CPUS_PER_TASK`, which it reads
/// itself), so an `--exact` step would get one CPU, its `RAYON_NUM_THREADS`
/// threads all on it.
fn step_cpus() -> Option<usize> {
    if std::env::var_os("SRUN_CPUS_PER_TASK").is_some_and(|v| !v.is_empty()) {
        return None;
    }
    cpus_var("SLURM_CPUS_PER_TASK")
}

/// The CPUs of each task: `SRUN_CPUS_PER_TASK` or `SLURM_CPUS_PER_TASK`,
/// else one (a step's default).
fn task_cpus() -> usize {
    cpus_var("SRUN_CPUS_PER_TASK").or_else(|| cpus_var("SLURM_CPUS_PER_TASK")).unwrap_or(1)
}

/// A positive CPU count in environment variable `var`.
fn cpus_var(var: &str) -> Option<usize> {
    std::env::var(var).ok()?.trim().parse().ok().filter(|&n: &usize| n > 0)
}

/// A directory in a node's sbcast copy, read file by file with `srun`.
struct NodeDir {
    job_id: String,
    node: String,
    dir: PathBuf,
}

/// How often a read that srun delivered incomplete is tried.
const READ_ATTEMPTS: usize = 3;

/// Run by `sh` on the node: the file's size, a newline, then the file,
/// both from one open descriptor (a checkpoint renamed over it in between
/// cannot make them disagree). srun under load can lose the end of a
/// step's output with exit status 0 (only its stderr says "io error with
/// slurmstepd"), and the size is how the reader knows. A file that is not
/// there (nor its directory) exits `ABSENT` before the open, so that the
/// reader can tell it from a node, srun or shell that failed (exit 1).
fn sized_cat() -> String {
    format!(r#"[ -e "$1" ] || exit {ABSENT}; exec < "$1" || exit 1; stat -L -c %s /dev/stdin && exec cat"#)
}

/// `sized_cat`'s exit code for a file that is not there: sysexits' EX_NOINPUT,
/// which neither srun (which passes its task's code on) nor sh, stat and cat
/// exit with.
const ABSENT: i32 = 66;

impl NodeDir {
    /// The file `name`, `None` when it is not there.
    fn read_sized(&mut self, name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        let path = self.dir.join(name);
        let fail = |why: String| anyhow::anyhow!("cannot read {} on node {}: {why}", path.display(), self.node);
        let mut lost = String::new();
        for _ in 0..READ_ATTEMPTS {
            let out = run_unless(
                Command::new("srun")
                    .arg(format!("--jobid={}", self.job_id))
                    .args(["--nodes=1", "--ntasks=1", "--overlap", "--quiet"])
                    .arg(format!("--nodelist={}", self.node))
                    .args(["sh", "-c", &sized_cat(), "sh"])
                    .arg(&path),
                None,
                Subject::Job { job: self.job_id.clone(), node: Some(self.node.clone()) },
                READ_TIMEOUT,
                Some(ABSENT),
            )
            .map_err(|e| fail(e.to_string()))?;
            let Some(out) = out else { return Ok(None) };
            match sized_contents(out) {
                Ok(bytes) => return Ok(Some(bytes)),
                Err(why) => lost = why,
            }
        }
        Err(fail(format!(
            "srun delivered it incomplete {READ_ATTEMPTS} times (the last: {lost}); the node or its slurmstepd is \
             overloaded or failing: check `scontrol show node {}` and try again",
            self.node
        )))
    }
}

impl RemoteDir for NodeDir {
    fn read(&mut self, name: &str) -> anyhow::Result<Vec<u8>> {
        self.read_sized(name)?.ok_or_else(|| {
            anyhow::anyhow!(
                "cannot read {} on node {}: there is no such file (the node's sbcast copy lacks it; check the job's \
                 remote_dir on that node)",
                self.dir.join(name).display(),
                self.node
            )
        })
    }

    fn read_if_present(&mut self, name: &str) -> anyhow::Result<Option<Vec<u8>>> {
        self.read_sized(name)
    }
}

/// The file in `sized_cat`'s output: refused unless exactly as long as its size line says.
fn sized_contents(mut out: Vec<u8>) -> Result<Vec<u8>, String> {
    let Some(nl) = out.iter().position(|&b| b == b'\n') else {
        return Err(format!("{} bytes without the size line", out.len()));
    };
    let size: usize = std::str::from_utf8(&out[..nl])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("a size line {:?} that is not a number", String::from_utf8_lossy(&out[..nl])))?;
    let got = out.len() - nl - 1;
    if got != size {
        return Err(format!("{got} of its {size} bytes"));
    }
    out.drain(..=nl);
    Ok(out)
}

impl Drop for SlurmLauncher {
    /// Removes what sbcast copied (the workers have stopped by now).
    fn drop(&mut self) {
        if let Some(s) = &self.sbcast
            && s.done.lock().unwrap_or_else(|e| e.into_inner()).is_some()
        {
            let dir = s.dir.display().to_string();
            if let Err(e) = self.on_every_node(&["rm", "-rf", &dir]) {
                (self.log)(format!("sbcast: could not remove {dir} from the nodes: {e}"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the ranks on the driver's own node share its memory; a driver
    /// that does not know its node holds none of them (they check their own).
    #[test]
    fn the_ranks_beside_the_driver_are_those_on_its_node() {
        let nodes = ["n1", "n1", "n2", "n2", "n3", "n3"].map(String::from).to_vec();
        let at = |here: Option<&str>| Allocation {
            job_id: "7".into(),
            node_of_rank: nodes.clone(),
            here: here.map(String::from),
        };
        assert_eq!(at(Some("n1")).ranks_here(6), 2);
        assert_eq!(at(Some("n2")).ranks_here(6), 2);
        assert_eq!(at(Some("n2")).ranks_here(3), 1, "only the ranks placed count");
        assert_eq!(at(Some("login")).ranks_here(6), 0);
        assert_eq!(at(None).ranks_here(6), 0);
    }

    #[test]
    fn a_node_file_is_taken_only_whole() {
        assert_eq!(sized_contents(b"5\nab\ncd".to_vec()).unwrap(), b"ab\ncd");
        assert_eq!(sized_contents(b"0\n".to_vec()).unwrap(), b"");
        // What srun hands back when it loses the end of the output: a prefix.
        assert_eq!(sized_contents(b"5\nab\n".to_vec()).unwrap_err(), "3 of its 5 bytes");
        assert!(sized_contents(b"5\nab\ncdef".to_vec()).is_err());
        assert!(sized_contents(b"12".to_vec()).is_err());
        assert!(sized_contents(b"x\nab".to_vec()).is_err());
    }

    /// `sized_cat` as the node runs it: the size, then the bytes, from one
    /// descriptor; a missing file, or directory, exits `ABSENT`; a file that
    /// cannot be read fails otherwise.
    #[test]
    fn the_node_side_command_frames_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("blob");
        let bytes: Vec<u8> = (0..70_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        std::fs::write(&f, &bytes).unwrap();
        let frame = |p: &std::path::Path| Command::new("sh").args(["-c", &sized_cat(), "sh"]).arg(p).output().unwrap();
        let out = frame(&f);
        assert!(out.status.success());
        assert_eq!(sized_contents(out.stdout).unwrap(), bytes);
        for gone in [dir.path().join("gone"), dir.path().join("no-dir/state.json")] {
            let out = frame(&gone);
            assert_eq!(out.status.code(), Some(ABSENT), "{}", gone.display());
            assert!(out.stdout.is_empty());
        }
        // There, but no file to read: a failure, not an absence.
        let out = frame(dir.path());
        assert!(!out.status.success() && out.status.code() != Some(ABSENT), "{:?}", out.status);
    }

    /// Only a client that cannot be started is asked about; one that ran and
    /// failed, or hung, points at the job and node it was about instead.
    #[test]
    fn a_failed_command_gets_advice_for_how_it_failed() {
        let job = |node: Option<&str>| Subject::Job { job: "42".into(), node: node.map(String::from) };
        let fails = |cmd: &mut Command, about: Subject, limit: Duration| {
            run_within(cmd, None, about, limit).unwrap_err().to_string()
        };
        let installed = "installed and on PATH?";

        let e = fails(&mut Command::new("leapgnn-no-such-client"), job(None), COMMAND_TIMEOUT);
        assert!(e.contains("could not be started") && e.contains("(os error 2)"), "{e}");
        assert!(e.contains(&format!("is Slurm's client (leapgnn-no-such-client) {installed}")), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let not_executable = dir.path().join("srun");
        std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
        let e = fails(&mut Command::new(&not_executable), Subject::Munge, COMMAND_TIMEOUT);
        assert!(e.contains(&format!("is MUNGE ({}) {installed}", not_executable.display())), "{e}");

        let mut boom = Command::new("sh");
        boom.args(["-c", "echo boom >&2; exit 3"]);
        let e = fails(&mut boom, job(Some("n7")), COMMAND_TIMEOUT);
        assert!(e.contains("exited with code 3, saying: boom;"), "{e}");
        assert!(e.contains("`scontrol show job 42`") && e.contains("`scontrol show node n7`"), "{e}");
        assert!(e.contains("slurmd log on n7") && !e.contains(installed), "{e}");
        let e = fails(Command::new("sh").args(["-c", "exit 1"]), Subject::Node("n7".into()), COMMAND_TIMEOUT);
        assert!(e.contains("exited with code 1, and said nothing on stderr;"), "{e}");
        assert!(e.contains("`scontrol show node n7`") && !e.contains(installed), "{e}");

        let started = Instant::now();
        let e = fails(Command::new("sleep").arg("30"), job(None), Duration::from_secs(1));
        assert!(started.elapsed() < Duration::from_secs(20), "the limit stopped it: {e}");
        assert!(e.contains("timed out: no answer in 1 s, so it was stopped;"), "{e}");
        assert!(e.contains("`scontrol show job 42`") && e.contains("their slurmd logs"), "{e}");
        assert!(!e.contains(installed), "{e}");
    }

    /// A dataset path may hold a newline: in the script's comment it would
    /// end the comment and run the rest as a command.
    #[test]
    fn the_dataset_comment_stays_one_line() {
        let o = ScriptOptions {
            job_name: "j".into(),
            nodes: 1,
            tasks_per_node: 2,
            cpus_per_task: 1,
            gpus_per_task: None,
            time: None,
            partition: None,
            output: "o".into(),
            stop_before: None,
            binary: "/bin/leapgnn".into(),
            data_dir: "/data".into(),
            command: ScriptCommand::Train,
            args: vec![],
        };
        let t = JobTarget {
            dataset: "/d/x\ntouch /tmp/PWNED".into(),
            default_dataset: false,
            generated_in_job: false,
            run: None,
        };
        let script = sbatch_script(&o, &t).unwrap().script;
        let lines: Vec<&str> = script.lines().collect();
        let at = lines.iter().position(|l| l.starts_with("# Trains on dataset")).expect("the comment");
        assert!(lines[at].contains(r"/d/x\ntouch") && lines[at + 1].starts_with("#SBATCH"), "{script}");
    }

    #[test]
    fn tasks_per_node_expands_repeats() {
        assert_eq!(tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        assert_eq!(tasks_per_node("4").unwrap(), [4]);
        assert!(tasks_per_node("2(x3").is_err());
        assert!(tasks_per_node("x").is_err());
        assert!(tasks_per_node("1(x999999999)").is_err());
    }

    #[test]
    fn node_addr_is_read_from_scontrol() {
        let line = "NodeName=node1 Arch=x86_64 CPUTot=8 NodeAddr=10.0.0.5 NodeHostName=node1 Version=22.05.8";
        assert_eq!(node_addr(line).as_deref(), Some("10.0.0.5"));
        assert_eq!(node_addr("NodeName=node1 NodeAddr=(null) State=IDLE"), None);
        assert_eq!(node_addr("Node node1 not found"), None);
    }

    /// `--stop-before` is compared with these: sbatch's fields, in seconds.
    #[test]
    fn time_limits_in_seconds() {
        for (t, s) in [
            ("1", Some(60)),
            ("90:30", Some(5430)),
            ("02:00:00", Some(7200)),
            ("1-2", Some(93_600)),
            ("1-2:3", Some(93_780)),
            ("1-2:3:4", Some(93_784)),
            ("UNLIMITED", None),
            ("0", None),
            ("00:00:00", None),
        ] {
            assert_eq!(time_limit(t).unwrap(), s, "{t}");
        }
    }
}

/// What `leapgnn slurm-script` puts in an sbatch script.
#[derive(Debug, Clone)]
pub struct ScriptOptions {
    pub job_name: String,
    pub nodes: usize,
    pub tasks_per_node: usize,
    pub cpus_per_task: usize,
    pub gpus_per_task: Option<usize>,
    pub time: Option<String>,
    pub partition: Option<String>,
    pub output: String,
    /// Seconds before the time limit at which Slurm sends the driver
    /// `TIME_LIMIT_SIGNAL` (`#SBATCH --signal`); 0 sends none. None: the
    /// default, `DEFAULT_STOP_BEFORE` or half a shorter time limit.
    pub stop_before: Option<u64>,
    /// The leapgnn executable the nodes run (absolute).
    pub binary: PathBuf,
    /// `--data-dir` (absolute; the nodes must see it, e.g. on the shared filesystem).
    pub data_dir: PathBuf,
    /// What the job runs: `train` or `infer`.
    pub command: ScriptCommand,
    /// The command's arguments, as the user gave them.
    pub args: Vec<String>,
}

/// What a `slurm-script` job trains on (or infers with), resolved when the
/// script is made, as `train` (or `infer`) resolves it, so that a job does
/// not wait in the queue only to find its dataset or run missing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobTarget {
    /// The dataset: a name under --data-dir, or a path.
    pub dataset: String,
    /// No NAME was given, here or in `--config`'s file: the built-in default,
    /// which the exec line then names, so that a later default cannot change
    /// what a queued job trains.
    pub default_dataset: bool,
    /// Not on disk yet: a synthetic preset that the batch step generates.
    pub generated_in_job: bool,
    /// The run resumed (`train --resume RUN`) or inferred with (`infer RUN`).
    pub run: Option<String>,
}

/// A `slurm-script`'s script and what it resolved (`--json`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ScriptReport {
    pub script: String,
    pub command: &'static str,
    #[serde(flatten)]
    pub target: JobTarget,
    pub job_name: String,
    pub nodes: usize,
    pub tasks_per_node: usize,
    /// nodes x tasks-per-node: one worker per task.
    pub workers: usize,
    pub cpus_per_task: usize,
    pub gpus_per_task: Option<usize>,
    /// `--time` as given (and as written into the script).
    pub time: Option<String>,
    /// That limit in seconds; None when the job has none.
    pub time_limit_seconds: Option<u64>,
    /// Seconds before the time limit at which the driver is warned; None when no warning is asked for.
    pub stop_before: Option<u64>,
    pub partition: Option<String>,
    pub output: String,
}

/// The leapgnn command a `slurm-script` job runs with `--cluster slurm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptCommand {
    Train,
    /// `infer RUN`: one worker per task scores its part's nodes; nothing to
    /// checkpoint, so no time-limit warning.
    Infer,
}

impl ScriptCommand {
    pub fn name(self) -> &'static str {
        match self {
            ScriptCommand::Train => "train",
            ScriptCommand::Infer => "infer",
        }
    }
}

/// `'...'` quoting for bash where a word needs it.
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if plain { s.to_string() } else { format!("'{}'", s.replace('\'', r"'\''")) }
}

/// The most workers a script may ask for: a run has one part per worker and
/// part ids are 16-bit.
const MAX_WORKERS: usize = crate::partition::MAX_PARTS;
/// sbatch keeps a job's time limit in minutes as a u32, with its top values meaning INFINITE.
const MAX_TIME_MINUTES: u64 = u32::MAX as u64 - 2;
/// The signal `--stop-before` asks Slurm for; the driver takes it as a
/// graceful stop for the time limit (`progress::signals`).
pub const TIME_LIMIT_SIGNAL: &str = "USR1";
/// `--stop-before`'s default: room for the iteration under way, a checkpoint
/// and the workers' stop (srun allows a worker 10 s) on a large graph. Slurm
/// sends the warning at one of its periodic checks of the time limits (about
/// every 30 s), so it comes early or late by up to that: asked for 45 s ahead
/// of a 60 s limit, the test Slurm's came 33 s ahead.
pub const DEFAULT_STOP_BEFORE: u64 = 120;
/// sbatch keeps `--signal`'s lead time as a 16-bit count of seconds.
const MAX_STOP_BEFORE: u64 = u16::MAX as u64;
const TIME_FORMATS: &str = "minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (as sbatch --time), or UNLIMITED";

/// A value for an `#SBATCH` line. sbatch splits such a line at whitespace, takes
/// quotes and backslashes as quoting and `#` as the start of a comment, and the
/// script's first line that is not `#SBATCH` ends the directives, so a newline
/// would both drop the directives after it and put a command into the script.
/// Such values are refused rather than quoted: a job name or path that needs
/// quoting is far more likely a mistake than intended.
fn directive_value(flag: &'static str, value: &str) -> Result<(), SlurmError> {
    let bad = |why: String| SlurmError::ScriptOption { flag, value: format!("{value:?}"), why };
    if value.is_empty() {
        return Err(bad("give a value: an empty one leaves sbatch's directive without its argument".into()));
    }
    if let Some(c) = value.chars().find(|c| c.is_control() || c.is_whitespace() || "'\"\\#".contains(*c)) {
        let what = if c.is_control() { "a control character" } else { "a character sbatch would split or quote at" };
        return Err(bad(format!(
            "contains {what} ({c:?}); use letters, digits and punctuation other than quotes, backslash and #"
        )));
    }
    Ok(())
}

/// Checks `--time` as sbatch reads it (the value goes into the script as
/// given); its length in seconds, None for no limit.
fn time_limit(value: &str) -> Result<Option<u64>, SlurmError> {
    let bad = |why: &str| SlurmError::ScriptOption {
        flag: "--time",
        value: format!("{value:?}"),
        why: format!("{why}; give {TIME_FORMATS}"),
    };
    if ["UNLIMITED", "INFINITE"].iter().any(|u| value.eq_ignore_ascii_case(u)) {
        return Ok(None);
    }
    let field = |f: &str| -> Result<u64, SlurmError> {
        if f.is_empty() || f.len() > 10 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("not a time limit"));
        }
        f.parse::<u64>().map_err(|_| bad("not a time limit"))
    };
    let (days, rest) = match value.split_once('-') {
        Some((d, rest)) => (Some(field(d)?), rest),
        None => (None, value),
    };
    let parts = rest.split(':').map(field).collect::<Result<Vec<u64>, _>>()?;
    // Without days the fields are minutes[:seconds] or hours:minutes:seconds; with
    // days, hours[:minutes[:seconds]].
    let seconds = match (days, parts.as_slice()) {
        (None, [m]) => Some(m * 60),
        (None, [m, s]) => Some(m * 60 + s),
        (_, [h, m, s]) => Some(h * 3600 + m * 60 + s),
        (Some(_), [h]) => Some(h * 3600),
        (Some(_), [h, m]) => Some(h * 3600 + m * 60),
        _ => None,
    }
    .ok_or_else(|| bad("not a time limit"))?;
    let minutes = days.unwrap_or(0) * 24 * 60 + seconds.div_ceil(60);
    if minutes > MAX_TIME_MINUTES {
        return Err(bad(&format!("{minutes} minutes is more than Slurm can hold ({MAX_TIME_MINUTES})")));
    }
    // sbatch: "a time limit of zero requests that no time limit be imposed".
    let total = days.unwrap_or(0) * 24 * 3600 + seconds;
    Ok((total > 0).then_some(total))
}

impl ScriptOptions {
    /// Refuses what would not make a working script: a value sbatch would
    /// misread, a count of 0 or past what a run can have.
    pub fn check(&self) -> Result<(), SlurmError> {
        let count = |flag: &'static str, n: usize, max: usize| {
            if (1..=max).contains(&n) {
                Ok(())
            } else {
                Err(SlurmError::ScriptOption { flag, value: n.to_string(), why: format!("give 1 to {max}") })
            }
        };
        count("--nodes", self.nodes, MAX_WORKERS)?;
        count("--tasks-per-node", self.tasks_per_node, MAX_WORKERS)?;
        // Slurm's CPU and GPU counts are 16-bit.
        count("--cpus-per-task", self.cpus_per_task, u16::MAX as usize)?;
        if let Some(g) = self.gpus_per_task {
            count("--gpus-per-task", g, u16::MAX as usize)?;
        }
        let workers = self.nodes.saturating_mul(self.tasks_per_node);
        if workers > MAX_WORKERS {
            return Err(SlurmError::ScriptOption {
                flag: "--tasks-per-node",
                value: self.tasks_per_node.to_string(),
                why: format!(
                    "{} nodes x {} tasks is {workers} workers; a run has at most {MAX_WORKERS} (part ids are 16-bit)",
                    self.nodes, self.tasks_per_node
                ),
            });
        }
        directive_value("--job-name", &self.job_name)?;
        directive_value("--output", &self.output)?;
        if let Some(p) = &self.partition {
            directive_value("--partition", p)?;
        }
        let limit = match &self.time {
            Some(t) => {
                directive_value("--time", t)?;
                time_limit(t)?
            }
            None => None,
        };
        // The default shrinks to fit a short limit; a lead the user gave is checked as given.
        let Some(stop_before) = self.stop_before else { return Ok(()) };
        let lead =
            |why: String| SlurmError::ScriptOption { flag: "--stop-before", value: stop_before.to_string(), why };
        if self.command == ScriptCommand::Infer && stop_before > 0 {
            return Err(lead(
                "an infer job has no checkpoint to stop with, so it gets no time-limit warning; omit --stop-before \
                 (or give a --time that fits the inference)"
                    .into(),
            ));
        }
        if stop_before > MAX_STOP_BEFORE {
            return Err(lead(format!(
                "give 0 to {MAX_STOP_BEFORE} seconds (sbatch --signal's range); 0 asks for no warning"
            )));
        }
        if let Some(limit) = limit
            && stop_before > 0
            && stop_before >= limit
        {
            // Slurm would send the warning as soon as the job starts: it would stop at once.
            return Err(lead(format!(
                "the warning would come as the job starts, before any training: --time {} is {limit} s; give \
                 --stop-before below that (a checkpoint and the workers' stop must fit in it), or 0 for no warning",
                self.time.as_deref().unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// The warning's lead in seconds: as given, or by default
    /// `DEFAULT_STOP_BEFORE`, at most half the time limit (a 1-minute test
    /// job is warned 30 s ahead rather than refused).
    fn lead(&self) -> u64 {
        let limit = self.time.as_deref().and_then(|t| time_limit(t).ok().flatten());
        self.stop_before.unwrap_or_else(|| limit.map_or(DEFAULT_STOP_BEFORE, |l| DEFAULT_STOP_BEFORE.min(l / 2)))
    }

    /// The `--signal` directive's value, unless no warning is asked for or
    /// the job has no time limit to warn of.
    fn signal(&self) -> Option<String> {
        if self.command == ScriptCommand::Infer {
            return None;
        }
        let unlimited = self.time.as_deref().is_some_and(|t| time_limit(t).is_ok_and(|l| l.is_none()));
        let lead = self.lead();
        (lead > 0 && !unlimited).then(|| format!("B:{TIME_LIMIT_SIGNAL}@{lead}"))
    }
}

/// A word for a comment line of the script: a newline there would end the
/// comment and run the rest.
fn comment_word(s: &str) -> String {
    if s.chars().any(char::is_control) { format!("{s:?}") } else { shell_word(s) }
}

/// The script's line saying what the job trains on or infers with.
fn target_comment(o: &ScriptOptions, t: &JobTarget) -> String {
    let dataset = comment_word(&t.dataset);
    let mut line = match (o.command, &t.run) {
        (ScriptCommand::Infer, Some(run)) => {
            format!("# Infers with run {}, trained on dataset {dataset}.", comment_word(run))
        }
        (_, Some(run)) => format!("# Resumes run {} on its dataset {dataset}.", comment_word(run)),
        _ if t.default_dataset => {
            format!("# Trains on dataset {dataset}, the built-in default, named below so that the job keeps it.")
        }
        _ => format!("# Trains on dataset {dataset}."),
    };
    if t.generated_in_job {
        line += "\n# It is not in --data-dir yet: the batch step generates it (synthetic).";
    }
    line + "\n"
}

/// An sbatch script that runs `leapgnn train ARGS --cluster slurm` (or `infer
/// RUN ARGS --cluster slurm`) in the batch step: one worker per task, the
/// job's exit code the driver's. `target`: what the job runs on, resolved by
/// the caller (`train::slurm_job`).
pub fn sbatch_script(o: &ScriptOptions, target: &JobTarget) -> Result<ScriptReport, SlurmError> {
    o.check()?;
    let mut s = String::from("#!/bin/bash\n");
    s += "# Generated by `leapgnn slurm-script`; submit with `sbatch FILE`. The driver runs in the\n";
    s += &format!("# batch step and starts one worker per task with srun (`{} --cluster slurm`).\n", o.command.name());
    s += &target_comment(o, target);
    s += &format!("#SBATCH --job-name={}\n", o.job_name);
    s += &format!("#SBATCH --nodes={}\n", o.nodes);
    s += &format!("#SBATCH --ntasks-per-node={}\n", o.tasks_per_node);
    s += &format!("#SBATCH --cpus-per-task={}\n", o.cpus_per_task);
    if let Some(g) = o.gpus_per_task {
        s += &format!("#SBATCH --gpus-per-task={g}\n");
    }
    if let Some(t) = &o.time {
        s += &format!("#SBATCH --time={t}\n");
    }
    if let Some(p) = &o.partition {
        s += &format!("#SBATCH --partition={p}\n");
    }
    s += &format!("#SBATCH --output={}\n", o.output);
    let signal = o.signal();
    if let Some(sig) = &signal {
        s += &format!("#SBATCH --signal={sig}\n");
    }
    s += "set -euo pipefail\n";
    s += "# Each worker's compute threads: the CPUs of its task (srun passes the environment on).\n";
    s += "export RAYON_NUM_THREADS=\"${SLURM_CPUS_PER_TASK:-1}\"\n";
    if signal.is_some() {
        s += &format!(
            "# SIG{TIME_LIMIT_SIGNAL} {} s before the time limit: the driver (exec'd below) checkpoints and stops; \
             `train --resume RUN`\n# goes on. Ignored until the driver takes it: its default action would end the \
             job.\n",
            o.lead()
        );
        s += &format!("trap '' {TIME_LIMIT_SIGNAL}\n");
    }
    let mut cmd = vec![shell_word(&o.binary.display().to_string()), "--data-dir".into()];
    cmd.push(shell_word(&o.data_dir.display().to_string()));
    cmd.push(o.command.name().into());
    if target.default_dataset {
        cmd.push(shell_word(&target.dataset));
    }
    cmd.extend(o.args.iter().map(|a| shell_word(a)));
    // A resumed run keeps its saved cluster (and refuses --cluster).
    let resumes =
        o.command == ScriptCommand::Train && o.args.iter().any(|a| a == "--resume" || a.starts_with("--resume="));
    if !resumes && !o.args.iter().any(|a| a == "--cluster" || a.starts_with("--cluster=")) {
        cmd.extend(["--cluster".into(), "slurm".into()]);
    }
    // infer has no dashboard.
    if o.command == ScriptCommand::Train && !o.args.iter().any(|a| a == "--no-tui") {
        cmd.push("--no-tui".into());
    }
    s += &format!("exec {}\n", cmd.join(" "));
    let limit = o.time.as_deref().and_then(|t| time_limit(t).ok().flatten());
    Ok(ScriptReport {
        script: s,
        command: o.command.name(),
        target: target.clone(),
        job_name: o.job_name.clone(),
        nodes: o.nodes,
        tasks_per_node: o.tasks_per_node,
        workers: o.nodes * o.tasks_per_node,
        cpus_per_task: o.cpus_per_task,
        gpus_per_task: o.gpus_per_task,
        time: o.time.clone(),
        time_limit_seconds: limit,
        stop_before: signal.is_some().then(|| o.lead()),
        partition: o.partition.clone(),
        output: o.output.clone(),
    })
}
