use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::BadInput;
use leapgnn::DataDir;
use leapgnn::cluster::check::ssh_job_launcher;
use leapgnn::cluster::driver::DriverError;
use leapgnn::cluster::ship::{chunk_files, rank_data_files};
use leapgnn::cluster::{Allocation, Launcher, LauncherKind, LocalLauncher, LogSink, Profile, SlurmLauncher};
use leapgnn::format::write_atomic;
use leapgnn::metrics::{EpochRecord, RestartRecord, RunInfo, RunSummary, StepRecord};
use leapgnn::progress::{self, ProgressSink, signals};
use leapgnn::train::distributed::{DistOptions, GradDump, resume_distributed, train_distributed};
use leapgnn::train::flags::{Action, TrainFlags};
use leapgnn::train::tensorboard::TensorBoard;
use leapgnn::train::{self, Observer, ResumeOverrides, RunOptions, TrainConfig, TrainError};
use std::time::Duration;

/// `train`'s flags and their rules live in the library (`train::flags`), with the defaults.
pub type Args = TrainFlags;

/// Hands the run's progress to the chosen display.
struct Watch(Box<dyn ProgressSink>);

impl Observer for Watch {
    fn start(&mut self, info: &RunInfo) {
        self.0.start(info);
    }
    fn hosts(&mut self, hosts: &[String]) {
        self.0.hosts(hosts);
    }
    fn step(&mut self, r: &StepRecord) -> Result<(), TrainError> {
        self.0.record(r);
        Ok(())
    }
    fn epoch(&mut self, e: &EpochRecord, _epochs: u64) {
        self.0.epoch(e);
    }
    fn event(&mut self, msg: &str) {
        self.0.event(msg);
    }
    fn restart(&mut self, r: &RestartRecord) {
        self.0.restart(r);
    }
    /// `q` in the dashboard, a closed `--json-stream` reader, Ctrl-C or SIGTERM.
    fn stop_requested(&self) -> bool {
        self.0.stop_requested() || signals::stop_requested()
    }
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    // Bad flags are reported before the dashboard takes the terminal. A
    // single worker never waits on another, but refuses a bad timeout as
    // several would.
    comm_timeout(a.comm_timeout)?;
    let mut action = a.action()?;
    // Slurm requeued this job (its node failed): the script's `--run NAME` goes on with the run it started.
    if matches!(action, Action::Train(_))
        && let Some(r) = train::slurm_job::requeued_run(&g.data(), a.run.as_deref())?
    {
        leapgnn::elog!("{}", r.describe());
        action = Action::Resume { run: r.run, overrides: ResumeOverrides::default() };
    }
    let (cfg, profile, resume) = match action {
        Action::Naive(cfg) => return naive(g, &cfg),
        Action::Neutronstar(cfg) => return neutronstar(g, &a, *cfg),
        Action::Resume { run, overrides } => {
            // On the workers it resumes on (`--workers`): a Slurm allocation must hold that many tasks.
            let cfg = match (multi_worker_config(&g.data(), &run), overrides.workers) {
                (Some(c), Some(w)) => Some(c.on_workers(w)?),
                (c, _) => c,
            };
            let profile = match &cfg {
                Some(c) => train::placement::resume_profile(c, a.workers)?,
                None => None,
            };
            (cfg, profile, Some((run, overrides)))
        }
        Action::Train(cfg) => {
            let (cfg, profile) = train::placement::place(*cfg, a.workers, a.parts)?;
            cfg.check()?;
            (Some(cfg), profile, None)
        }
    };
    // Once, before a dashboard can take the terminal.
    if let Some(p) = &profile {
        warn_profile(p);
    }
    let data = g.data();
    let opts = RunOptions {
        run: a.run.clone(),
        stop_after: a.stop_after,
        stop_in_evaluation: a.stop_in_evaluation,
        memory_limit: a.memory_limit_mb.map(|m| m.saturating_mul(1 << 20)),
    };
    let tty = progress::interactive();
    let dashboard = progress::uses_dashboard(tty, a.no_tui, g.json, a.json_stream);
    // One worker runs in this process: a second Ctrl-C can only exit. The driver of
    // several stops them first (its `interrupted` flag), then exits 130.
    let several = cfg.as_ref().is_some_and(|c| c.workers > 1) || profile.is_some();
    let on_force = if several { signals::OnForce::Flag } else { signals::OnForce::Exit };
    signals::install(on_force, dashboard).context("cannot install the Ctrl-C / SIGTERM handler")?;
    let mut watch = Watch(progress::choose(tty, a.no_tui, g.json, a.json_stream));
    let mut dump = GradDump { path: a.dump_grad.clone(), inner: &mut watch };
    let mut tb = TensorBoard::new(a.tensorboard.clone(), &mut dump)?;
    let obs: &mut dyn Observer = &mut tb;
    let result = match (cfg, &resume) {
        (Some(cfg), Some(resume)) => distributed(g, cfg, profile, &a, &opts, dashboard, obs, Some(resume)),
        (Some(cfg), None) if cfg.workers > 1 || profile.is_some() => {
            distributed(g, cfg, profile, &a, &opts, dashboard, obs, None)
        }
        (Some(cfg), _) => {
            let name = cfg.dataset.clone();
            train::train(&data, cfg, &opts, obs).with_context(|| format!("training on {name} failed"))
        }
        (None, Some((run, over))) => {
            train::resume(&data, run, over, &opts, obs).with_context(|| format!("cannot resume run {run}"))
        }
        (None, None) => unreachable!("a config is built unless resuming"),
    };
    tb.finish();
    // The terminal is back before anything else is printed.
    watch.0.finish();
    // `--json-stream > /dev/full`: the records are lost. The run stopped with its
    // checkpoint, as for a reader that has gone, but it fails (exit 1) naming why.
    let lost = watch.0.output_failure();
    let summary = result?;
    let ck = train::checkpoint::dir(&data.run_dir(&summary.run));
    // A stop asked for after the last iteration (while the final checkpoint was written) stopped nothing.
    let stopped = watch.stop_requested() && (lost.is_some() || train::checkpoint::finished(&ck).is_none());
    if watch.stop_requested() && !stopped {
        leapgnn::elog!(
            "the stop request came after the last epoch: run {} had finished (nothing is left to resume)",
            summary.run
        );
    }
    if stopped {
        if let Some(e) = &lost {
            leapgnn::elog!(
                "stopped after iteration {} as the --json-stream records could not be written to stdout ({e}), \
                 checkpoint written to {}; continue with `leapgnn train --resume {}` once stdout can take them",
                summary.iterations,
                ck.display(),
                summary.run
            );
        } else if signals::time_limit() {
            leapgnn::elog!(
                "stopped for the job's time limit (SIGUSR1 from `slurm-script --stop-before`) after iteration {}, \
                 checkpoint written to {}; continue in a new job: `leapgnn slurm-script [OPTIONS] train --resume \
                 {}` prints its script",
                summary.iterations,
                ck.display(),
                summary.run
            );
        } else if summary.workers > 1 {
            leapgnn::elog!(
                "stopped on request after iteration {}, checkpoint written to {}",
                summary.iterations,
                ck.display()
            );
        } else {
            leapgnn::elog!(
                "stopped on request after iteration {}, checkpoint written; continue with `leapgnn train --resume \
                 {}`",
                summary.iterations,
                summary.run
            );
        }
    }
    if g.json {
        print_json(&summary)?;
    } else {
        report(&summary, &data.run_dir(&summary.run));
    }
    match lost {
        Some(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
        None => Ok(()),
    }
}

/// W > 1: the driver starts the workers, as local processes (in their own
/// process group, so Ctrl-C reaches only the driver, which then stops them)
/// or over ssh (`profile`). While the dashboard owns the terminal, what the
/// workers print goes to its event log.
#[allow(clippy::too_many_arguments)]
fn distributed(
    g: &Global,
    cfg: TrainConfig,
    profile: Option<Profile>,
    a: &Args,
    opts: &RunOptions,
    dashboard: bool,
    obs: &mut dyn Observer,
    resume: Option<&(String, ResumeOverrides)>,
) -> anyhow::Result<RunSummary> {
    let comm_timeout = comm_timeout(a.comm_timeout)?;
    let data = g.data();
    // A second Ctrl-C: stop the workers at once.
    let interrupted = signals::forced_flag();
    let (queued, rx) = progress::worker_lines();
    let log: LogSink = if dashboard { queued } else { leapgnn::cluster::launcher::stderr_log() };
    let (mut ssh, mut slurm) = (None, None);
    // A local profile (`--cluster profiles/local.toml`) is not kept past `placement::place`: read its
    // `encrypt` and `binary`.
    let local_profile = match &profile {
        Some(_) => None,
        None => cfg.cluster.as_deref().and_then(|p| Profile::load_or_builtin(p).ok()),
    };
    // A run started with --encrypt keeps it when resumed: the driver adds its saved config's.
    let encrypt = a.encrypt || profile.as_ref().or(local_profile.as_ref()).is_some_and(|p| p.encrypt);
    match profile {
        Some(p) if p.launcher == LauncherKind::Slurm => {
            let alloc = Allocation::from_env(Some(cfg.workers))?;
            let binary = match &p.binary {
                Some(b) => b.clone(),
                None => std::env::current_exe().context("cannot find the leapgnn executable to start workers")?,
            };
            let mut l = SlurmLauncher::new(alloc, binary, worker_args(g, &data)?).with_log(log.clone());
            if p.sbcast {
                let job = (cfg.parts, cfg.workers);
                let files = |rank| rank_data_files(&data, &cfg.dataset, cfg.partition_method(), job, rank);
                let chunks = chunk_files(&data, &cfg.dataset, cfg.gnnpipe.as_ref().map(|g| g.chunks));
                let items = (0..cfg.workers).flat_map(files).chain(chunks).collect::<std::collections::BTreeSet<_>>();
                l = l.with_sbcast(std::path::Path::new(&p.remote_dir), items.into_iter().collect());
            }
            slurm = Some(l);
        }
        Some(p) => {
            let job = (cfg.parts, cfg.workers);
            let chunks = cfg.gnnpipe.as_ref().map(|g| g.chunks);
            let l =
                ssh_job_launcher(p, a.accept_new_host_keys, &data, &cfg.dataset, cfg.partition_method(), job, chunks)?;
            ssh = Some(l.with_log(log.clone()));
        }
        None => {}
    }
    let local;
    let launcher: &dyn Launcher = match (&ssh, &slurm) {
        (Some(l), _) => l,
        (_, Some(l)) => l,
        _ => {
            local = local_launcher(g, &data, log, local_profile.as_ref())?;
            &local
        }
    };
    let dist = DistOptions {
        launcher,
        interrupted,
        comm_timeout,
        check_replicas: a.check_replicas,
        dump_grad: a.dump_grad.clone(),
        worker_lines: dashboard.then_some(&rx),
        driver_bind: match (&ssh, &slurm) {
            (Some(l), _) => l.profile().driver_bind(),
            (_, Some(_)) => Profile::slurm().driver_bind(),
            _ => Profile::local().driver_bind(),
        },
        auto_planner: Some(&leapgnn::cost::auto_plans),
        restarts: a.restarts,
        encrypt,
        keep_remote: a.keep_remote,
    };
    let name = cfg.dataset.clone();
    let result = match resume {
        Some((run, over)) => {
            resume_distributed(&data, run, over, opts, &dist, obs).with_context(|| format!("cannot resume run {run}"))
        }
        None => train_distributed(&data, cfg, opts, &dist, obs),
    };
    let Some(ssh) = &ssh else {
        // A resume's error already says so, and the dataset is not what it is about.
        return if resume.is_some() { result } else { result.with_context(|| format!("training on {name} failed")) };
    };
    let summary = result
        .map_err(|e| name_host(ssh.profile(), e))
        .with_context(|| format!("training on {name} over ssh failed"))?;
    let shipped = ssh.shipped();
    let path = data.run_dir(&summary.run).join("shipped.json");
    write_atomic(&path, &serde_json::to_vec_pretty(&shipped).expect("shipped serialises"))?;
    let sent: Vec<_> = shipped.iter().filter(|s| s.sent).collect();
    if !g.json {
        leapgnn::elog!(
            "ssh: sent {} files ({:.1} MB), {} were already current on the hosts (see {})",
            sent.len(),
            sent.iter().map(|s| s.bytes).sum::<u64>() as f64 / 1e6,
            shipped.len() - sent.len(),
            path.display()
        );
    }
    Ok(summary)
}

/// The profile's warnings (`Profile::warnings`), one line each.
pub(crate) fn warn_profile(p: &Profile) {
    for w in &p.warnings {
        leapgnn::elog!("warning: {}: {w}", p.name());
    }
}

/// `--comm-timeout` seconds, checked.
pub(crate) fn comm_timeout(secs: f64) -> anyhow::Result<Duration> {
    if !(secs.is_finite() && secs > 0.0 && secs <= 86_400.0) {
        return Err(BadInput::new(format!("--comm-timeout {secs}: expected seconds in (0, 86400]")).into());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Workers as local processes of `profile`'s `binary` (a local profile's,
/// when it names one) or else this binary, with its `env`, on this data directory; they
/// log at the driver's verbosity (-v, -vv), relayed as `[worker r]` lines.
pub(crate) fn local_launcher(
    g: &Global,
    data: &DataDir,
    log: LogSink,
    profile: Option<&Profile>,
) -> anyhow::Result<LocalLauncher> {
    let args = worker_args(g, data)?;
    let launcher = match profile.and_then(|p| p.binary.as_ref()) {
        Some(binary) => LocalLauncher::new(binary, args),
        None => LocalLauncher::current(args)?,
    };
    Ok(launcher.with_log(log).with_env(profile.map(|p| p.env.clone()).unwrap_or_default()))
}

/// Every worker's flags before `worker`: the data directory (absolute: a Slurm step may start
/// elsewhere), and the driver's verbosity (-v, -vv), relayed as `[worker r]` lines.
pub(crate) fn worker_args(g: &Global, data: &DataDir) -> anyhow::Result<Vec<String>> {
    let mut args = vec!["--data-dir".into(), std::path::absolute(&data.root)?.display().to_string()];
    args.extend((0..g.verbose).map(|_| "-v".to_string()));
    Ok(args)
}

/// Adds "rank R on user@host:port" to a failure that one worker caused.
pub(crate) fn name_host(profile: &Profile, e: anyhow::Error) -> anyhow::Error {
    match e.chain().find_map(|c| c.downcast_ref::<DriverError>()).and_then(DriverError::rank) {
        Some(rank) => e.context(profile.describe_rank(rank)),
        None => e,
    }
}

/// `--strategy naive --dry-run`: the bytes naive migration would move, per epoch.
fn naive(g: &Global, cfg: &TrainConfig) -> anyhow::Result<()> {
    let name = cfg.dataset.clone();
    let r = train::naive_dry_run(&g.data(), cfg).with_context(|| format!("cannot cost naive migration on {name}"))?;
    if g.json {
        return print_json(&r);
    }
    let mb = |b: f64| b / 1e6;
    leapgnn::outln!(
        "naive per-layer model migration: {} on {} workers ({}), batch {} per worker, fanout {}, {} params",
        r.dataset,
        r.workers,
        r.partition,
        r.batch_size,
        r.fanouts,
        r.params
    );
    leapgnn::outln!("epoch  iters      hops   MB total  MB params  MB partial  MB interm.  MB model-centric features");
    for e in &r.epochs {
        leapgnn::outln!(
            "{:>5}  {:>5}  {:>8}  {:>9.2}  {:>9.2}  {:>10.2}  {:>10.2}  {:>26.2}",
            e.epoch + 1,
            e.iterations,
            e.hops,
            mb(e.bytes as f64),
            mb(e.bytes_params as f64),
            mb(e.bytes_partial as f64),
            mb(e.bytes_intermediate as f64),
            mb(e.bytes_features_model_centric as f64)
        );
    }
    leapgnn::outln!(
        "per epoch: naive {:.2} MB vs model-centric remote features {:.2} MB (not trained: a dry run)",
        mb(r.bytes_per_epoch),
        mb(r.bytes_features_model_centric_per_epoch)
    );
    Ok(())
}

fn report(s: &RunSummary, dir: &std::path::Path) {
    let (Some(test), Some(val), Some(loss)) = (s.test_accuracy, s.best_val_accuracy, s.final_loss) else {
        leapgnn::elog!(
            "run {}: stopped before its first evaluation, so there is no accuracy to report; {}",
            s.run,
            dir.display()
        );
        return;
    };
    leapgnn::elog!(
        "run {}: test accuracy {:.4} at best validation {:.4} (epoch {}), final loss {}; {}",
        s.run,
        test,
        val,
        s.best_epoch + 1,
        leapgnn::tui::fmt::loss(loss),
        dir.display()
    );
    if s.rows.is_none() || s.bytes.is_none() {
        leapgnn::elog!(
            "run {}: rows and bytes unknown (null in summary.json): its final checkpoint holds no count of them",
            s.run
        );
    }
    if let Some(n) = s.replica_checks {
        leapgnn::elog!(
            "--check-replicas: the {} replicas' weights were compared {n} times, identical every time",
            s.workers
        );
    }
}

/// The saved config of run `run` when it used several workers (resumed by the
/// distributed driver); `None` otherwise, or when unreadable (`train::resume`
/// then says why).
fn multi_worker_config(data: &leapgnn::DataDir, run: &str) -> Option<TrainConfig> {
    let ck = train::checkpoint::dir(&data.run_dir(run));
    train::checkpoint::load_config(&ck).ok().map(|(cfg, _)| cfg).filter(|cfg| cfg.workers > 1)
}

/// `--strategy neutronstar --dry-run`: trains model-centric with the same
/// flags, then reports the paper's NeutronStar estimate from that run.
fn neutronstar(g: &Global, a: &Args, cfg: TrainConfig) -> anyhow::Result<()> {
    let name = cfg.dataset.clone();
    let data = g.data();
    let opts = RunOptions { run: a.run.clone(), ..Default::default() };
    let mut quiet = train::Quiet;
    let r = if cfg.workers > 1 {
        let mut args = vec!["--data-dir".into(), data.root.display().to_string()];
        args.extend((0..g.verbose).map(|_| "-v".to_string()));
        let launcher = LocalLauncher::current(args)?.with_log(leapgnn::cluster::launcher::stderr_log());
        let dist = DistOptions {
            launcher: &launcher,
            interrupted: signals::forced_flag(),
            comm_timeout: comm_timeout(a.comm_timeout)?,
            check_replicas: 0,
            dump_grad: None,
            worker_lines: None,
            driver_bind: Profile::local().driver_bind(),
            auto_planner: None,
            restarts: 0,
            // The driver takes --encrypt from the run's config.
            encrypt: false,
            keep_remote: false,
        };
        train::neutronstar::estimate(&data, cfg, |d, c| train_distributed(d, c, &opts, &dist, &mut quiet))
    } else {
        train::neutronstar::estimate(&data, cfg, |d, c| Ok(train::train(d, c, &opts, &mut quiet)?))
    }
    .with_context(|| format!("cannot estimate NeutronStar on {name}"))?;
    if g.json {
        return print_json(&r);
    }
    leapgnn::outln!(
        "NeutronStar estimate (not a run) from model-centric run {}: {} on {} workers ({}), {} epochs",
        r.run,
        r.dataset,
        r.workers,
        r.partition,
        r.epochs
    );
    leapgnn::outln!(
        "computation graph: n {} -> n' {}, e {} -> e' {}; c_fetch {:.3e} s per remote row",
        r.n,
        r.n_prime,
        r.e,
        r.e_prime,
        r.c_fetch
    );
    leapgnn::outln!(
        "per epoch: model-centric {:.3} s (compute {:.3} s) -> NeutronStar estimate {:.3} s ({:.2}x)",
        r.t_total_per_epoch,
        r.t_comp_per_epoch,
        r.estimate_per_epoch,
        r.t_total_per_epoch / r.estimate_per_epoch.max(f64::MIN_POSITIVE)
    );
    Ok(())
}
