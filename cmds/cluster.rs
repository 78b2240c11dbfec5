//! `leapgnn cluster check PROFILE`: preflight every host of a cluster profile.
//! `leapgnn cluster clean PROFILE`: remove what runs left on its hosts.

use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::cluster::Profile;
use leapgnn::cluster::check::{Check, CheckOptions, ClusterReport, check_cluster};
use leapgnn::cluster::clean::{CleanOptions, CleanReport};
use leapgnn::cluster::ship::rank_data_files;
use leapgnn::train::distributed::clean_hosts;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Check every host of a profile: reachable, host key, auth, binary, data, workers start and connect back.
    ///
    /// Ships the leapgnn binary where it is missing or stale (as train would); never sends data.
    /// Exits 1 when any host fails.
    Check(CheckArgs),
    /// Remove the run directories failed, killed or --keep-remote runs left on every host of a profile.
    ///
    /// Looks only in each host's <remote_dir>/<data_dir>/runs/: a run directory goes with everything in
    /// it; an odd name, a symbolic link or a file there is listed and left alone (never followed). A run
    /// training from this --data-dir now is left alone; a host's checkpoint newer than this --data-dir's
    /// copy of the run is copied back first. With --binaries, also the binaries earlier builds shipped to
    /// <remote_dir>/bin/. Exits 1 when a host fails, 2 for bad input.
    Clean(CleanArgs),
}

#[derive(clap::Args, Debug)]
struct CleanArgs {
    /// The cluster profile (TOML), e.g. profiles/lab.toml.
    profile: PathBuf,
    /// Only this run's directory.
    #[arg(long, value_name = "NAME")]
    run: Option<String>,
    /// List what would be removed, per host; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Record host keys not yet in known_hosts (a changed key is still refused).
    #[arg(long)]
    accept_new_host_keys: bool,
    /// Also remove the binaries earlier builds shipped to each host's <remote_dir>/bin/: all but the one
    /// this leapgnn ships (a worker already running keeps its copy open), and the temp files of
    /// uploads that stopped over an hour ago.
    #[arg(long)]
    binaries: bool,
    /// Seconds allowed for each SSH step.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

#[derive(clap::Args, Debug)]
struct CheckArgs {
    /// The cluster profile (TOML), e.g. profiles/lab.toml.
    profile: PathBuf,
    /// Record host keys not yet in known_hosts (a changed key is still refused).
    #[arg(long)]
    accept_new_host_keys: bool,
    /// Also check the files each rank needs for this dataset (with --parts).
    #[arg(long, requires = "parts")]
    dataset: Option<String>,
    /// Number of parts of the partitioning to check (rank r needs part r).
    #[arg(long, requires = "dataset")]
    parts: Option<usize>,
    /// Partitioning method whose parts are checked.
    #[arg(long, default_value = "metis")]
    method: String,
    /// Skip starting the workers (no ping job).
    #[arg(long)]
    no_workers: bool,
    /// Seconds allowed for each SSH step and for the workers to start.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    match a.command {
        Sub::Check(c) => check(g, c),
        Sub::Clean(c) => clean(g, c),
    }
}

fn clean(g: &Global, a: CleanArgs) -> anyhow::Result<()> {
    static INTERRUPTED: AtomicBool = AtomicBool::new(false);
    crate::output::exit_on_interrupt()?;
    // Exiting from the signal's thread cut a host's `rm -rf` or a checkpoint's copy back short and said
    // nothing of what was already removed: the first signal lets the step in progress finish and the
    // report be printed (exit 130 / 143 all the same); a second one exits at once.
    leapgnn::util::interrupt::stop_first(&INTERRUPTED);
    let profile = Profile::load(&a.profile)?;
    let opts = CleanOptions {
        run: a.run,
        dry_run: a.dry_run,
        accept_new_host_keys: a.accept_new_host_keys,
        timeout: Duration::from_secs(a.timeout.max(1)),
        binaries: a.binaries,
        interrupted: &INTERRUPTED,
    };
    let report = clean_hosts(&g.data(), &profile, &opts).context("cluster clean")?;
    if g.json {
        print_json(&report)?;
    } else {
        crate::train::warn_profile(&profile);
        print_clean(&report);
    }
    if report.interrupted {
        anyhow::bail!(
            "cluster clean stopped by a signal: what it removed is listed above; runs and hosts not listed \
             were not looked at: run `leapgnn cluster clean {}` again to clean them",
            a.profile.display()
        );
    }
    if report.ok {
        return Ok(());
    }
    let bad: Vec<String> = report
        .hosts
        .iter()
        .filter(|h| !h.ok)
        .map(|h| h.error.clone().unwrap_or_else(|| format!("host {}@{}:{} failed", h.user, h.address, h.port)))
        .collect();
    anyhow::bail!("cluster clean failed for {} of {} hosts: {}", bad.len(), report.hosts.len(), bad.join("; "))
}

fn print_clean(r: &CleanReport) {
    let verb = if r.dry_run { "would remove" } else { "removed" };
    for h in &r.hosts {
        let name = format!("{}@{}:{}{}", h.user, h.address, h.port, if h.spare { " (spare)" } else { "" });
        let area = h.runs_dir.as_ref().map(|d| format!(" {}", d.display())).unwrap_or_default();
        leapgnn::outln!("{name}{area}: {}", if h.ok { "ok" } else { "FAIL" });
        if let Some(e) = &h.error {
            leapgnn::outln!("    error: {e}");
        }
        for run in &h.removed {
            leapgnn::outln!(
                "    {verb} {} ({} files, {:.1} MB){}",
                run.run,
                run.files,
                run.bytes as f64 / 1e6,
                run.note.as_ref().map(|n| format!(": {n}")).unwrap_or_default()
            );
        }
        for k in &h.kept {
            leapgnn::outln!("    left {}: {}", k.name, k.why);
        }
        for b in &h.binaries {
            leapgnn::outln!("    {verb} {} ({:.1} MB)", b.path.display(), b.bytes as f64 / 1e6);
        }
        if h.ok && h.removed.is_empty() && h.kept.is_empty() && h.binaries.is_empty() {
            leapgnn::outln!("    nothing to remove");
        }
    }
    let (runs, bytes) = r.hosts.iter().flat_map(|h| &h.removed).fold((0, 0), |(n, b), x| (n + 1, b + x.bytes));
    let binaries: Vec<_> = r.hosts.iter().flat_map(|h| &h.binaries).collect();
    let also = match binaries.len() {
        0 => String::new(),
        n => format!(" and {n} binary files ({:.1} MB)", binaries.iter().map(|b| b.bytes).sum::<u64>() as f64 / 1e6),
    };
    leapgnn::outln!(
        "{}: {verb} {runs} run directories ({:.1} MB){also}{}{}",
        r.profile,
        bytes as f64 / 1e6,
        if r.dry_run { " (dry run: nothing was removed)" } else { "" },
        if r.interrupted { " (interrupted: runs and hosts not listed were not looked at)" } else { "" }
    );
}

fn check(g: &Global, a: CheckArgs) -> anyhow::Result<()> {
    let profile = Profile::load(&a.profile)?;
    let data = match (a.dataset, a.parts) {
        (Some(name), Some(parts)) => {
            let workers = profile.world();
            if parts < workers && workers > 0 {
                return Err(leapgnn::BadInput::new(format!(
                    "--parts {parts} must be at least the {workers} worker slots of the profile {} \
                     (each rank owns a contiguous range of the parts)",
                    profile.name()
                ))
                .into());
            }
            let data = g.data();
            let method = a.method;
            let wk = (parts, workers.max(1));
            Some(Arc::new(move |rank| rank_data_files(&data, &name, &method, wk, rank)) as _)
        }
        _ => None,
    };
    let opts = CheckOptions {
        accept_new_host_keys: a.accept_new_host_keys,
        data,
        start_workers: !a.no_workers,
        timeout: Duration::from_secs(a.timeout.max(1)),
    };
    let report = check_cluster(&profile, &opts).context("cluster check")?;
    if g.json {
        print_json(&report)?;
    } else {
        crate::train::warn_profile(&profile);
        print_table(&report);
    }
    if report.ok {
        Ok(())
    } else {
        let bad: Vec<String> = report
            .hosts
            .iter()
            .filter(|h| !h.ok)
            .map(|h| format!("{}:{}{}", h.address, h.port, spare_mark(h)))
            .collect();
        anyhow::bail!("cluster check failed for {} of {} hosts: {}", bad.len(), report.hosts.len(), bad.join(", "))
    }
}

/// " (spare)" after a spare host's name.
fn spare_mark(h: &leapgnn::cluster::check::HostReport) -> &'static str {
    if h.spare { " (spare)" } else { "" }
}

fn print_table(r: &ClusterReport) {
    let mark = |c: &Check| match c.ok {
        Some(true) => "ok",
        Some(false) => "FAIL",
        None => "-",
    };
    leapgnn::outln!(
        "{:<28} {:<9} {:<8} {:<5} {:<6} {:<5} {:<5} result",
        "host",
        "reachable",
        "host_key",
        "auth",
        "binary",
        "data",
        "ports"
    );
    for h in &r.hosts {
        let name = format!("{}@{}:{}{}", h.user, h.address, h.port, spare_mark(h));
        leapgnn::outln!(
            "{:<28} {:<9} {:<8} {:<5} {:<6} {:<5} {:<5} {}",
            name,
            mark(&h.reachable),
            mark(&h.host_key),
            mark(&h.auth),
            mark(&h.binary),
            mark(&h.data),
            mark(&h.ports),
            if h.ok { "ok" } else { "FAIL" }
        );
        for (what, c) in h.checks() {
            if c.ok == Some(false) || (c.ok == Some(true) && matches!(what, "binary" | "data" | "ports")) {
                leapgnn::outln!("    {what}: {}", c.detail);
            }
        }
    }
    leapgnn::outln!("{}: {}", r.profile, if r.ok { "all hosts ok" } else { "some hosts FAILED" });
}
