//! `cluster clean`: what failed, killed or `--keep-remote` runs left in the
//! run area (`<data_dir>/runs/`) of every host of a profile, listed and
//! removed (`remote_dir` does the looking and the removing, refusing odd
//! names and links). What the driver's side knows of a run (whether it is
//! training now, whether its checkpoint is older than a host's) comes from
//! the caller (`LocalRuns`): the cluster layer knows no checkpoints.

use super::launcher::RemoteDir;
use super::profile::{HostSpec, LauncherKind, Profile};
use super::remote_dir::{Found, HostSftp, LeftAlone, RemoteRun, StaleFile};
use super::ssh_session::SessionOptions;
use crate::BadInput;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub struct CleanOptions<'a> {
    /// Only this run (a plain run name).
    pub run: Option<String>,
    /// List what would be removed; remove nothing.
    pub dry_run: bool,
    pub accept_new_host_keys: bool,
    /// Bound on each SSH step.
    pub timeout: Duration,
    /// Also remove what earlier builds shipped to `<remote_dir>/bin/`: every
    /// binary but the one this leapgnn ships (`ssh::binary_to_ship`).
    pub binaries: bool,
    /// Set by Ctrl-C or SIGTERM: the removal in progress finishes, nothing
    /// further starts (no next run, no next host), and the report says so.
    pub interrupted: &'a AtomicBool,
}

/// The driver's side of each run found on a host.
pub trait LocalRuns {
    /// Held while run `run`'s directory is removed (so that no `--resume`
    /// starts meanwhile); `Err(why)` when the run is in progress here.
    fn hold(&self, run: &str) -> Result<Option<Box<dyn std::any::Any>>, String>;
    /// Makes sure nothing is lost with the host's copy, whose checkpoint
    /// state is `state`, read from `checkpoint`: `Ok(Some(note))` when it did
    /// something first (or would, with `dry_run`), `Err(why)` to keep it.
    fn secure(
        &self,
        run: &str,
        state: &[u8],
        checkpoint: &mut dyn RemoteDir,
        dry_run: bool,
    ) -> Result<Option<String>, String>;
}

#[derive(Debug, Clone, Serialize)]
pub struct CleanReport {
    pub profile: String,
    pub dry_run: bool,
    /// Every host answered and every removal it was asked for succeeded
    /// (never when `interrupted`).
    pub ok: bool,
    /// Stopped by a signal: `hosts` holds what was done up to then; runs and
    /// hosts not listed there were not looked at.
    pub interrupted: bool,
    pub hosts: Vec<HostClean>,
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct HostClean {
    pub address: String,
    pub port: u16,
    pub user: String,
    pub spare: bool,
    pub ok: bool,
    /// Why the host failed (cannot connect, a run area that is a link, a removal that failed).
    pub error: Option<String>,
    /// `<data_dir>/runs` there, once connected.
    pub runs_dir: Option<PathBuf>,
    /// The run directories removed (with `dry_run`: that would be removed).
    pub removed: Vec<CleanedRun>,
    /// What was left alone, and why.
    pub kept: Vec<LeftAlone>,
    /// The binaries (and upload temp files) removed from `bin/`, with
    /// `--binaries` (with `dry_run`: that would be removed).
    pub binaries: Vec<StaleFile>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CleanedRun {
    pub run: String,
    pub path: PathBuf,
    pub files: u64,
    pub bytes: u64,
    /// What was done first (a newer checkpoint copied back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Cleans every host of `profile` (spares too; an entry for a machine seen
/// already is skipped), one host after another.
pub fn clean_cluster(profile: &Profile, opts: &CleanOptions<'_>, local: &dyn LocalRuns) -> anyhow::Result<CleanReport> {
    if profile.launcher != LauncherKind::Ssh {
        return Err(BadInput::new(format!(
            "{}: cluster clean works on ssh profiles (launcher = \"ssh\"); the runs of local workers are in \
             --data-dir, and a Slurm job's sbcast copies are removed when it ends",
            profile.name()
        ))
        .into());
    }
    if let Some(run) = &opts.run
        && !crate::paths::is_plain_name(run)
    {
        return Err(BadInput::new(format!(
            "--run {run:?}: a run name is letters, digits, `-`, `_` or `.` (one directory under runs/, never a path)"
        ))
        .into());
    }
    let session = SessionOptions {
        known_hosts: profile.known_hosts.clone(),
        accept_new_host_keys: profile.accept_new_host_keys || opts.accept_new_host_keys,
        connect_timeout: profile.connect_timeout,
        io_timeout: opts.timeout,
    };
    // The name the binary this leapgnn ships has on a host: that one stays.
    let keep = match opts.binaries {
        true => {
            let item = super::ship::binary_item(&super::ssh::binary_to_ship(profile)?)?;
            Some(item.remote.file_name().unwrap_or_default().to_string_lossy().into_owned())
        }
        false => None,
    };
    let mut seen: Vec<String> = Vec::new();
    let mut hosts = Vec::new();
    let entries = profile.hosts.iter().map(|h| (h, false)).chain(profile.spares.iter().map(|h| (h, true)));
    for (h, spare) in entries {
        if opts.interrupted.load(Ordering::SeqCst) {
            break;
        }
        if seen.contains(&h.label()) {
            continue;
        }
        seen.push(h.label());
        hosts.push(clean_host(h, spare, profile, &session, opts, keep.as_deref(), local));
    }
    let interrupted = opts.interrupted.load(Ordering::SeqCst);
    let ok = !interrupted && hosts.iter().all(|h| h.ok);
    let warnings = profile.warnings.clone();
    Ok(CleanReport { profile: profile.name(), dry_run: opts.dry_run, ok, interrupted, hosts, warnings })
}

fn clean_host(
    h: &HostSpec,
    spare: bool,
    profile: &Profile,
    session: &SessionOptions,
    opts: &CleanOptions<'_>,
    keep: Option<&str>,
    local: &dyn LocalRuns,
) -> HostClean {
    let mut r = HostClean {
        address: h.address.clone(),
        port: h.port,
        user: h.user.clone(),
        spare,
        ok: true,
        error: None,
        runs_dir: None,
        removed: vec![],
        kept: vec![],
        binaries: vec![],
    };
    let conn = match HostSftp::connect(h, session, profile) {
        Ok(c) => c,
        Err(e) => return r.failed(e.to_string()),
    };
    r.runs_dir = Some(conn.runs_dir());
    let found = match &opts.run {
        Some(run) => conn.run(run).map(|f| match f {
            Found::Run(run) => (vec![run], vec![]),
            Found::Odd(o) => (vec![], vec![o]),
            Found::Absent => (vec![], vec![]),
        }),
        None => conn.list_runs(),
    };
    let (runs, odd) = match found {
        Ok(f) => f,
        Err(e) => return r.failed(e.to_string()),
    };
    r.kept = odd;
    for run in runs {
        if opts.interrupted.load(Ordering::SeqCst) {
            return r;
        }
        match clean_run(&conn, &run, opts.dry_run, local) {
            Ok(note) => {
                r.removed.push(CleanedRun {
                    run: run.run.clone(),
                    path: run.path.clone(),
                    files: run.files,
                    bytes: run.bytes,
                    note,
                });
                crate::util::interrupt::test_pause("clean-between-runs");
            }
            Err((why, failed)) => {
                r.ok &= !failed;
                if failed && r.error.is_none() {
                    r.error = Some(format!("{}: {why}", run.run));
                }
                r.kept.push(LeftAlone { name: run.run.clone(), why });
            }
        }
    }
    if let Some(keep) = keep.filter(|_| !opts.interrupted.load(Ordering::SeqCst)) {
        let stale = conn.stale_binaries(keep).and_then(|stale| {
            if !opts.dry_run {
                conn.remove_binaries(&stale)?;
            }
            Ok(stale)
        });
        match stale {
            Ok(stale) => r.binaries = stale,
            Err(e) => {
                r.ok = false;
                r.error.get_or_insert(e.to_string());
            }
        }
    }
    r
}

/// Removes one run directory; `Err((why, failed))` when it stays (`failed`:
/// because something went wrong, rather than by choice).
fn clean_run(
    conn: &HostSftp,
    run: &RemoteRun,
    dry_run: bool,
    local: &dyn LocalRuns,
) -> Result<Option<String>, (String, bool)> {
    let _held = local.hold(&run.run).map_err(|why| (why, false))?;
    // Held by this data directory or not, a run whose workers run on the host is in progress.
    match conn.running_ranks(run) {
        Ok(ranks) if ranks.is_empty() => {}
        Ok(ranks) => {
            let ranks: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
            return Err((
                format!(
                    "in progress: its workers run on this host (rank {}), for a driver on another machine or \
                     another --data-dir: left alone",
                    ranks.join(", ")
                ),
                false,
            ));
        }
        Err(e) => return Err((format!("cannot tell whether its workers run there, so it stays: {e}"), true)),
    }
    let note = match &run.checkpoint {
        Some(state) => {
            let mut ck = conn.dir(run.path.join("checkpoint"));
            local.secure(&run.run, state, &mut ck, dry_run).map_err(|why| (why, true))?
        }
        None => None,
    };
    if !dry_run {
        conn.remove_run(run).map_err(|e| (e.to_string(), true))?;
    }
    Ok(note)
}

impl HostClean {
    fn failed(mut self, error: String) -> Self {
        self.ok = false;
        self.error = Some(error);
        self
    }
}
