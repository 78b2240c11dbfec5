//! Preflight checks of a cluster profile, host by host (in parallel):
//! reachable, host key, key auth, the binary runs there and is the driver's
//! own build, the data a rank needs is present or shippable, and (optionally)
//! every worker starts, connects back to the driver and answers a ping.
//! `train` runs the same checks first and stops at the first bad host.

use super::driver::{DriverError, DriverOptions, run_job};
use super::known_hosts::HostKeyStatus;
use super::launcher::{Launcher, describe_threads};
use super::local::LocalLauncher;
use super::profile::{HostSpec, LauncherKind, Profile};
use super::ship::{self, RemoteState, ShipItem};
use super::ssh::{RankFiles, SshLauncher};
use super::ssh_session::Stage;
use crate::DataDir;
use crate::util::threads::spawn_scoped;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// One check's outcome: `ok` is `None` when it was not run (not asked for,
/// or an earlier check on the host failed).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Check {
    pub ok: Option<bool>,
    pub detail: String,
}

impl Check {
    fn pass(d: impl Into<String>) -> Self {
        Check { ok: Some(true), detail: d.into() }
    }
    fn fail(d: impl Into<String>) -> Self {
        Check { ok: Some(false), detail: d.into() }
    }
    fn skip(d: impl Into<String>) -> Self {
        Check { ok: None, detail: d.into() }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct HostReport {
    pub address: String,
    pub port: u16,
    pub user: String,
    pub ranks: Vec<usize>,
    /// A `spare = true` entry: checked like the others (it must work the day
    /// it takes a lost host's ranks), but no worker is started there.
    pub spare: bool,
    pub reachable: Check,
    pub host_key: Check,
    pub auth: Check,
    pub binary: Check,
    pub data: Check,
    /// Workers started there connected back to the driver (control port reachable).
    pub ports: Check,
    pub ok: bool,
}

impl HostReport {
    /// The checks in column order, with their JSON names.
    pub fn checks(&self) -> [(&'static str, &Check); 6] {
        [
            ("reachable", &self.reachable),
            ("host_key", &self.host_key),
            ("auth", &self.auth),
            ("binary", &self.binary),
            ("data", &self.data),
            ("ports", &self.ports),
        ]
    }

    /// The first failed check as "name: detail".
    pub fn first_failure(&self) -> Option<String> {
        self.checks().iter().find(|(_, c)| c.ok == Some(false)).map(|(n, c)| format!("{n}: {}", c.detail))
    }

    fn settle(&mut self) {
        self.ok = self.first_failure().is_none();
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterReport {
    pub profile: String,
    pub launcher: LauncherKind,
    pub hosts: Vec<HostReport>,
    pub ok: bool,
    /// The profile's warnings (`Profile::warnings`), e.g. two entries for one machine.
    pub warnings: Vec<String>,
}

pub struct CheckOptions {
    pub accept_new_host_keys: bool,
    /// Files each rank needs (see `ship::rank_data_files`); `None`: data not checked.
    pub data: Option<RankFiles>,
    /// Start every worker with the ping job (proves start-up and the control port).
    pub start_workers: bool,
    /// Bound on each SSH step and on the workers' start-up.
    pub timeout: Duration,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions { accept_new_host_keys: false, data: None, start_workers: true, timeout: Duration::from_secs(30) }
    }
}

/// Runs every check of `profile`. Host failures are in the report; `Err` only
/// when the checks themselves cannot run (e.g. this executable is not found).
pub fn check_cluster(profile: &Profile, opts: &CheckOptions) -> anyhow::Result<ClusterReport> {
    let mut hosts = match profile.launcher {
        LauncherKind::Local | LauncherKind::Slurm => vec![local_row(opts)],
        LauncherKind::Ssh => check_hosts(&ssh_launcher(profile, opts)?, opts.data.as_ref()),
    };
    if opts.start_workers {
        if hosts.iter().all(|h| h.first_failure().is_none()) {
            start_workers(profile, opts, &mut hosts)?;
        } else {
            for h in &mut hosts {
                h.ports = Check::skip("not run: the workers start only when every host passes");
            }
        }
    }
    for h in &mut hosts {
        h.settle();
    }
    let ok = hosts.iter().all(|h| h.ok);
    Ok(ClusterReport {
        profile: profile.name(),
        launcher: profile.launcher,
        hosts,
        ok,
        warnings: profile.warnings.clone(),
    })
}

/// Every host of the launcher's profile, spares last, in parallel (no worker started).
fn check_hosts(launcher: &SshLauncher, data: Option<&RankFiles>) -> Vec<HostReport> {
    let profile = launcher.profile();
    let assignment = profile.assignment();
    std::thread::scope(|s| {
        let regular = profile.hosts.iter().enumerate().map(|(i, h)| {
            let ranks: Vec<usize> = (0..assignment.len()).filter(|&r| assignment[r] == i).collect();
            (h, Some(ranks))
        });
        let handles: Vec<_> = regular
            .chain(profile.spares.iter().map(|h| (h, None)))
            .map(|(h, ranks)| {
                let (r, d) = (ranks.clone(), data.cloned());
                (h, ranks, spawn_scoped(s, "leapgnn-check", move || check_host(launcher, h, r, d)))
            })
            .collect();
        // A host whose thread could not start is checked here, after the others: slower, never skipped.
        handles
            .into_iter()
            .map(|(h, ranks, t)| match t {
                Ok(t) => t.join().expect("host check panicked"),
                Err(_) => check_host(launcher, h, ranks, data.cloned()),
            })
            .collect::<Vec<_>>()
    })
}

/// The checks `train` runs before starting workers: an error naming the first bad host.
pub fn preflight(profile: &Profile, opts: &CheckOptions) -> anyhow::Result<ClusterReport> {
    let report = check_cluster(profile, &CheckOptions { start_workers: false, data: opts.data.clone(), ..*opts })?;
    first_bad_host(report)
}

/// The launcher of a job over ssh on dataset `name` (its `method` partition
/// in `parts` parts, for `workers` ranks): every host checked first
/// (`preflight_with`), then, as each rank starts, the dataset archive, the
/// partition manifest and the parts that rank owns shipped to it (one
/// worker: the archive alone; `ship::rank_data_files`). Nothing is partitioned here: the driver cuts
/// a missing partition after its own checks and before any rank starts, so
/// a run that they refuse leaves none behind.
pub fn ssh_job_launcher(
    profile: Profile,
    accept_new_host_keys: bool,
    data: &DataDir,
    name: &str,
    method: &str,
    (parts, workers): (usize, usize),
    chunks: Option<usize>,
) -> anyhow::Result<SshLauncher> {
    let launcher = SshLauncher::new(profile)?.accept_new_host_keys(accept_new_host_keys);
    preflight_with(&launcher)?;
    let (data, name, method) = (data.clone(), name.to_string(), method.to_string());
    let files = move |rank| {
        let mut f = ship::rank_data_files(&data, &name, &method, (parts, workers), rank);
        f.extend(ship::chunk_files(&data, &name, chunks));
        f
    };
    Ok(launcher.with_rank_files(std::sync::Arc::new(files)))
}

/// `preflight` with the launcher that will start the workers: what the checks
/// ship (the binary) shows in its `shipped()` report.
pub fn preflight_with(launcher: &SshLauncher) -> anyhow::Result<ClusterReport> {
    let mut hosts = check_hosts(launcher, None);
    for h in &mut hosts {
        h.settle();
    }
    let profile = launcher.profile();
    first_bad_host(ClusterReport {
        profile: profile.name(),
        launcher: profile.launcher,
        ok: false,
        hosts,
        warnings: profile.warnings.clone(),
    })
}

fn first_bad_host(mut report: ClusterReport) -> anyhow::Result<ClusterReport> {
    report.ok = report.hosts.iter().all(|h| h.ok);
    if let Some(h) = report.hosts.iter().find(|h| !h.ok) {
        let role = if h.spare { "spare host".to_string() } else { format!("host ranks {:?} on", h.ranks) };
        anyhow::bail!(
            "{role} {}@{}:{} failed the cluster check: {} (run `leapgnn cluster check {}` for every host{})",
            h.user,
            h.address,
            h.port,
            h.first_failure().unwrap_or_default(),
            report.profile,
            if h.spare { "; a spare must work before it is needed: fix it or remove it from the profile" } else { "" }
        );
    }
    Ok(report)
}

/// Wraps a driver error with the host of the rank at fault, e.g.
/// "rank 1 on gnn@10.0.0.2:22: worker 1 was killed by SIGKILL before finishing".
pub fn name_host(profile: &Profile, e: DriverError) -> anyhow::Error {
    match e.rank() {
        Some(r) => anyhow::Error::new(e).context(profile.describe_rank(r)),
        None => anyhow::Error::new(e),
    }
}

/// Ships the binary only: data is reported by the check, never sent.
fn ssh_launcher(profile: &Profile, opts: &CheckOptions) -> anyhow::Result<SshLauncher> {
    Ok(SshLauncher::new(profile.clone())?.accept_new_host_keys(opts.accept_new_host_keys).with_io_timeout(opts.timeout))
}

fn blank(address: &str, port: u16, user: &str, ranks: Option<Vec<usize>>) -> HostReport {
    let not_run = || Check::skip("not run");
    HostReport {
        address: address.into(),
        port,
        user: user.into(),
        spare: ranks.is_none(),
        ranks: ranks.unwrap_or_default(),
        reachable: not_run(),
        host_key: not_run(),
        auth: not_run(),
        binary: not_run(),
        data: Check::skip("not requested"),
        ports: Check::skip("not requested"),
        ok: false,
    }
}

/// `ranks`: the host's ranks, `None` for a spare.
fn check_host(launcher: &SshLauncher, h: &HostSpec, ranks: Option<Vec<usize>>, data: Option<RankFiles>) -> HostReport {
    let mut r = blank(&h.address, h.port, &h.user, ranks.clone());
    let p = match launcher.prepare(h, &[]) {
        Ok(p) => p,
        Err(e) => {
            let msg = e.to_string();
            let stage = e.stage();
            r.reachable = if stage == Stage::Connect { Check::fail(&msg) } else { Check::pass("connected") };
            if stage != Stage::Connect {
                r.host_key = if stage == Stage::HostKey { Check::fail(&msg) } else { Check::pass("known") };
            }
            if matches!(stage, Stage::Auth | Stage::Remote) {
                r.auth = if stage == Stage::Auth { Check::fail(&msg) } else { Check::pass(auth_method(h)) };
            }
            if stage == Stage::Remote {
                r.binary = Check::fail(&msg);
            }
            return r;
        }
    };
    r.reachable = Check::pass(format!("connected to {}", p.peer));
    let kh = launcher.session_options().known_hosts;
    r.host_key = Check::pass(match p.host_key {
        HostKeyStatus::Known => format!("matches {}", kh.display()),
        HostKeyStatus::Recorded => format!("new key recorded in {}", kh.display()),
    });
    r.auth = Check::pass(auth_method(h));
    let bin = p.shipped.first();
    r.binary = Check::pass(format!(
        "leapgnn {} at {}{}",
        p.build,
        p.binary.display(),
        if bin.is_some_and(|b| b.sent) { " (just shipped)" } else { "" }
    ));
    // Ranks write their run directory under data_dir (a spare's too, once it takes over).
    r.data = match (writable(&p, &h.label()), data, ranks) {
        (Err(c), ..) => c,
        (Ok(()), Some(files), Some(ranks)) => data_check(&p, &ranks, &files, &h.label()),
        (Ok(()), Some(_), None) => Check::pass(format!(
            "{} writable; a spare is sent its ranks' data when it takes them",
            p.layout.data.display()
        )),
        (Ok(()), None, _) => Check::pass(format!("{} writable (files not checked)", p.layout.data.display())),
    };
    r
}

/// data_dir exists or can be made, and can be written (a read-only file
/// system, another user's directory): what `train` would otherwise find
/// only when it ships the data or a worker writes its run directory.
fn writable(p: &super::ssh::Prepared, label: &str) -> Result<(), Check> {
    let dir = super::ssh_session::quote(&p.layout.data.to_string_lossy());
    let cmd = format!("mkdir -p -- {dir} && test -w {dir} || {{ echo 'not writable'; exit 1; }}");
    super::ssh_session::run_ok(&p.session, label, &cmd).map(drop).map_err(|e| {
        Check::fail(format!(
            "data_dir {}: {e} (set data_dir in the profile to a directory this user can write)",
            p.layout.data.display()
        ))
    })
}

fn auth_method(h: &HostSpec) -> String {
    match &h.identity {
        Some(k) => format!("key {}", k.display()),
        None => "ssh agent".into(),
    }
}

/// Present and matching, or shippable from here; never sends anything.
fn data_check(p: &super::ssh::Prepared, ranks: &[usize], files: &RankFiles, label: &str) -> Check {
    let sftp = match super::ssh_session::sftp(&p.session, label) {
        Ok(s) => s,
        Err(e) => return Check::fail(e.to_string()),
    };
    // Ranks on one host share the topology and manifest: count each remote file once.
    let mut needed = std::collections::BTreeMap::new();
    for &rank in ranks {
        for item in files(rank) {
            if item.remote.is_absolute() {
                return Check::fail(format!(
                    "rank {rank} needs {}, outside the data directory: train ships files from the data directory \
                     only; import the dataset there first (`leapgnn download NAME --from ...`)",
                    item.local.display()
                ));
            }
            let remote = p.layout.data.join(&item.remote);
            needed.entry(remote.clone()).or_insert((rank, ShipItem { remote, ..item }));
        }
    }
    let (mut current, mut to_ship, mut bytes) = (0usize, Vec::new(), 0u64);
    for (rank, item) in needed.into_values() {
        if !item.local.is_file() {
            return Check::fail(format!("rank {rank} needs {}, which does not exist here", item.local.display()));
        }
        match ship::remote_state((&p.session, &sftp), label, &p.layout.root, &item) {
            Ok(RemoteState::Current) => current += 1,
            Ok(_) => {
                bytes += std::fs::metadata(&item.local).map(|m| m.len()).unwrap_or(0);
                to_ship.push(item.remote);
            }
            Err(e) => return Check::fail(e.to_string()),
        }
    }
    if to_ship.is_empty() {
        return Check::pass(format!("{current} files present and matching in {}", p.layout.data.display()));
    }
    let names: Vec<String> = to_ship.iter().take(3).map(|p| p.display().to_string()).collect();
    Check::pass(format!(
        "{current} present and matching, {} missing or stale ({:.1} MB, shipped by train): {}{}",
        to_ship.len(),
        bytes as f64 / 1e6,
        names.join(", "),
        if to_ship.len() > 3 { ", ..." } else { "" }
    ))
}

/// The local profile: one row for this machine.
fn local_row(opts: &CheckOptions) -> HostReport {
    let mut r = blank("localhost", 0, &std::env::var("USER").unwrap_or_default(), Some(vec![]));
    r.reachable = Check::pass("local processes");
    r.host_key = Check::skip("not used by the local launcher");
    r.auth = Check::skip("not used by the local launcher");
    r.binary = match std::env::current_exe() {
        Ok(p) => Check::pass(format!("leapgnn {} at {}", env!("CARGO_PKG_VERSION"), p.display())),
        Err(e) => Check::fail(format!("cannot find this executable: {e}")),
    };
    if let Some(files) = &opts.data {
        let missing: Vec<PathBuf> = files(0).into_iter().map(|i| i.local).filter(|p| !p.is_file()).collect();
        r.data = match missing.first() {
            None => Check::pass("present"),
            Some(m) => Check::fail(format!("{} does not exist", m.display())),
        };
    }
    r
}

/// Starts every worker with the ping job and records, per host, whether its
/// workers connected back and answered.
fn start_workers(profile: &Profile, opts: &CheckOptions, hosts: &mut [HostReport]) -> anyhow::Result<()> {
    let (launcher, world): (Box<dyn Launcher>, usize) = match profile.launcher {
        LauncherKind::Local => (Box::new(LocalLauncher::current(vec![])?), 1),
        LauncherKind::Ssh => (Box::new(ssh_launcher(profile, opts)?), profile.world()),
        LauncherKind::Slurm => {
            let alloc = super::slurm::Allocation::from_env(None)?;
            let world = alloc.world();
            let exe = std::env::current_exe()?;
            (Box::new(super::slurm::SlurmLauncher::new(alloc, exe, vec![])), world)
        }
    };
    let driver = DriverOptions {
        start_timeout: opts.timeout,
        silence_timeout: opts.timeout,
        bind: profile.driver_bind(),
        encrypt: profile.encrypt,
        ..DriverOptions::default()
    };
    let never = AtomicBool::new(false);
    let ping = serde_json::json!({"task": "ping"});
    let host_index =
        |rank: usize| if profile.hosts.is_empty() { Some(0) } else { profile.assignment().get(rank).copied() };
    match run_job(launcher.as_ref(), world, &ping, &driver, &never, |_| {}) {
        Ok(done) => {
            for (rank, d) in done.iter().enumerate() {
                if let Some(i) = host_index(rank) {
                    let pid = d["pid"].as_u64().unwrap_or(0);
                    let threads =
                        d["threads"].as_u64().map_or(String::new(), |t| format!(", {}", describe_threads(t as usize)));
                    let prev = if hosts[i].ports.ok == Some(true) {
                        format!("{}, ", hosts[i].ports.detail)
                    } else {
                        String::new()
                    };
                    hosts[i].ports =
                        Check::pass(format!("{prev}rank {rank} started (pid {pid}{threads}) and answered"));
                }
            }
        }
        Err(e) => {
            let msg = name_host(profile, e);
            let failed = msg.downcast_ref::<DriverError>().and_then(DriverError::rank).and_then(host_index);
            for (i, h) in hosts.iter_mut().enumerate() {
                h.ports = if Some(i) == failed || failed.is_none() {
                    Check::fail(format!("{msg:#}"))
                } else {
                    Check::skip(format!("not verified: the ping job failed elsewhere ({msg:#})"))
                };
            }
        }
    }
    Ok(())
}
