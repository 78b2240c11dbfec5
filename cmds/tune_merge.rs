//! `leapgnn tune-merge`: predicted iteration time per strategy and number of
//! time steps, the chosen merge plan (written for `train --merge-plan`), the
//! calibration of the cost figures and the check of a prediction against a
//! measured run.

use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use leapgnn::BadInput;
use leapgnn::cluster::check::ssh_job_launcher;
use leapgnn::cluster::{Launcher, LauncherKind, LocalLauncher, Profile};
use leapgnn::cost::calibrate::{CalibrateOptions, Calibration, calibrate};
use leapgnn::cost::probe::ProbeTask;
use leapgnn::cost::{Candidate, Figures, Tuning, Validation, plan_for, validate_run};
use leapgnn::model::ModelKind;
use leapgnn::sample::Fanouts;
use leapgnn::train::flags::defaults;
use leapgnn::train::{Prefetch, TrainConfig};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Predict iteration time per strategy and T = 1..W from exact counts of
/// sampled iterations and the cluster's cost figures; choose and write the
/// leapgnn merge plan.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dataset name (registry or --data-dir), dataset directory or archive path.
    pub dataset: String,
    /// Workers (one partition each), as `train --parts`.
    #[arg(long, allow_negative_numbers = true)]
    pub parts: usize,
    /// Cluster profile whose [cost] table holds the figures
    /// [default: <data-dir>/profiles/local.toml when present, else rough built-in figures].
    #[arg(long)]
    pub cluster: Option<PathBuf>,
    /// With an ssh profile and --calibrate: record host keys not yet in known_hosts (a changed key is still refused).
    #[arg(long)]
    pub accept_new_host_keys: bool,
    /// Measure the figures on the cluster first (probe + a few real iterations of each strategy) and write them into the profile.
    #[arg(long)]
    pub calibrate: bool,
    /// Iterations of each calibration run (the first is warm-up).
    #[arg(long, default_value_t = 30, allow_negative_numbers = true)]
    pub calibrate_iterations: u64,
    /// Where to write the merge plan [default: <data-dir>/<dataset>/plans/leapgnn-<K>.toml].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Compare the prediction with run RUN (under <data-dir>/runs/): error per component.
    #[arg(long, value_name = "RUN")]
    pub validate: Option<String>,
    /// The GNN, as `train --model`.
    #[arg(long, value_enum, default_value_t = defaults::MODEL)]
    pub model: ModelKind,
    /// Neighbours per layer, input layer first.
    #[arg(long, default_value_t = defaults::fanouts(), allow_hyphen_values = true)]
    pub fanout: Fanouts,
    /// Roots per worker per iteration.
    #[arg(long, default_value_t = defaults::BATCH_SIZE, allow_negative_numbers = true)]
    pub batch_size: usize,
    /// Hidden size.
    #[arg(long, default_value_t = defaults::HIDDEN, allow_negative_numbers = true)]
    pub hidden: usize,
    /// Feature cache per worker in MiB (filled by degree).
    #[arg(long, default_value_t = defaults::CACHE_MB, allow_negative_numbers = true)]
    pub cache_mb: u64,
    /// Seed of the shuffles and the sampler.
    #[arg(long, default_value_t = defaults::SEED, allow_negative_numbers = true)]
    pub seed: u64,
    /// Sampled iterations the prediction averages over.
    #[arg(long, default_value_t = 8, allow_negative_numbers = true)]
    pub iterations: usize,
    /// pregather / leapgnn with prefetch (`on`), without (`off`), or both, the plan taking the faster (`auto`).
    #[arg(long, value_enum, value_name = "WHEN", num_args = 0..=1, default_missing_value = "on", default_value_t = defaults::PREFETCH)]
    pub prefetch: Prefetch,
    /// Memory bound per worker in MB for one time step (overrides cost.memory_bytes; 0 = none).
    #[arg(long, allow_negative_numbers = true)]
    pub memory_mb: Option<u64>,
    /// Use figures calibrated on dataset NAME for this one (refused otherwise: they predict badly).
    #[arg(long, value_name = "NAME")]
    pub figures_from: Option<String>,
    /// Seconds any worker waits for another during calibration.
    #[arg(long, default_value_t = 30.0, allow_negative_numbers = true)]
    pub comm_timeout: f64,
}

#[derive(serde::Serialize)]
struct Output<'a> {
    dataset: &'a str,
    workers: usize,
    figures: &'a str,
    predictions: &'a [Candidate],
    chosen: &'a Candidate,
    plan: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    calibration: Option<&'a Calibration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    validation: Option<&'a Validation>,
    #[serde(skip_serializing_if = "Option::is_none")]
    measured_iteration_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a leapgnn::cost::Errors>,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    crate::output::exit_on_interrupt()?;
    let data = g.data();
    let cfg = config(&a)?;
    if a.iterations == 0 {
        return Err(BadInput::new("--iterations must be at least 1").into());
    }
    if a.calibrate && a.calibrate_iterations < 2 {
        return Err(BadInput::new("--calibrate-iterations must be at least 2 (the first is warm-up)").into());
    }
    if let (true, Some(f)) = (a.calibrate, &a.figures_from) {
        return Err(BadInput::new(format!(
            "--figures-from {f} with --calibrate: calibration measures this dataset's own figures; omit one of them"
        ))
        .into());
    }
    let out = match &a.out {
        Some(p) => p.clone(),
        None if leapgnn::paths::is_plain_name(&a.dataset) => {
            data.dataset_dir(&a.dataset).join("plans").join(format!("leapgnn-{}.toml", a.parts))
        }
        None => {
            return Err(BadInput::new(format!(
                "{} is a path, not a dataset name: give --out PLAN.toml for the merge plan",
                a.dataset
            ))
            .into());
        }
    };
    if out.is_dir() {
        return Err(BadInput::new(format!(
            "--out {} is a directory; give the merge plan's file path (e.g. {})",
            out.display(),
            out.join(format!("leapgnn-{}.toml", a.parts)).display()
        ))
        .into());
    }
    // Written last, after the prediction (and any calibration) ran.
    leapgnn::format::check_target(&out)?;
    let mut validated = None;
    if let Some(run) = &a.validate {
        let dir = data.run_dir(run);
        if !leapgnn::paths::is_plain_name(run) || !dir.join("config.json").is_file() {
            return Err(BadInput::new(format!(
                "--validate {run}: no run of that name in {} (give the name of a finished `leapgnn train` run)",
                data.runs_dir().display()
            ))
            .into());
        }
        let run_cfg = leapgnn::cost::validatable_run(&data, run)?;
        leapgnn::cost::check_calibrated_for(run, &run_cfg, &cfg.dataset, a.calibrate)?;
        validated = Some((run, run_cfg.dataset));
    }
    let (profile_path, profile) = profile(&data, a.cluster.as_deref(), a.calibrate)?;
    if a.calibrate {
        // Written only after the calibration's minutes of work.
        leapgnn::format::check_target(&profile_path)?;
    }
    let mut figures = Figures::of_profile(&profile)?;
    if let Some(mb) = a.memory_mb {
        figures.memory_bytes = mb << 20;
    }
    if !a.calibrate {
        let origin = profile_path.display().to_string();
        figures.check_dataset(&cfg.dataset, a.figures_from.as_deref(), &origin)?;
        // The run is predicted with these figures too: they must be its dataset's as well.
        if let Some((run, dataset)) = &validated {
            figures
                .check_dataset(dataset, a.figures_from.as_deref(), &origin)
                .map_err(|e| BadInput::new(format!("--validate {run}: run `{run}` trained on {dataset}, and {e}")))?;
        }
    }

    let mut calibration = None;
    if a.calibrate {
        let bar = stage_bar(std::io::stderr().is_terminal() && !g.json);
        let c = run_calibration(&data, &cfg, &figures, &profile, &a, &bar);
        bar.finish_and_clear();
        let c = c?;
        c.figures
            .write_into_profile(&profile_path)
            .with_context(|| format!("cannot write the calibrated figures into {}", profile_path.display()))?;
        if !g.json {
            leapgnn::elog!("calibrated figures written into {}", profile_path.display());
            for s in &c.skipped {
                leapgnn::elog!("calibration skipped {s}");
            }
        }
        figures = c.figures.clone();
        calibration = Some(c);
    }

    let tuning = plan_for(&data, &cfg, &figures, a.iterations, a.prefetch.search())?;
    tuning.plan.save(&out).with_context(|| format!("cannot write the merge plan {}", out.display()))?;
    let validation = match &a.validate {
        Some(run) => {
            Some(validate_run(&data, run, &figures).with_context(|| format!("cannot validate against run {run}"))?)
        }
        None => None,
    };
    if g.json {
        return print_json(&Output {
            dataset: &cfg.dataset,
            workers: cfg.workers,
            figures: &figures.source,
            predictions: &tuning.candidates,
            chosen: tuning.chosen(),
            plan: out.display().to_string(),
            calibration: calibration.as_ref(),
            validation: validation.as_ref(),
            measured_iteration_seconds: validation.as_ref().map(|v| v.measured_iteration_seconds),
            error: validation.as_ref().map(|v| &v.error),
        });
    }
    print_table(&cfg, &figures, &tuning, &out);
    if let Some(v) = &validation {
        print_validation(v);
    }
    Ok(())
}

/// The profile named by --cluster, else `<data-dir>/profiles/local.toml`
/// (where an uncalibrated local setup's figures go), else the built-in one.
/// `--calibrate` may name a profile file that does not exist yet: it is
/// created as a local profile holding the figures.
fn profile(data: &leapgnn::DataDir, given: Option<&Path>, calibrate: bool) -> anyhow::Result<(PathBuf, Profile)> {
    if let Some(p) = given {
        if calibrate && !p.exists() {
            return Ok((p.to_path_buf(), Profile::local()));
        }
        return Ok((p.to_path_buf(), Profile::load(p)?));
    }
    let p = data.root.join("profiles").join("local.toml");
    if p.is_file() {
        return Ok((p.clone(), Profile::load(&p)?));
    }
    Ok((p, Profile::local()))
}

fn run_calibration(
    data: &leapgnn::DataDir,
    cfg: &TrainConfig,
    figures: &Figures,
    profile: &Profile,
    a: &Args,
    bar: &ProgressBar,
) -> anyhow::Result<Calibration> {
    let comm_timeout = crate::train::comm_timeout(a.comm_timeout)?;
    let interrupted: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
    // The first signal stops the workers (the run fails as interrupted, exit 130 / 143); a second exits at once.
    leapgnn::util::interrupt::stop_first(interrupted);
    // Calibrated where it will train: local processes, or the profile's ssh hosts.
    // What the workers print (pids, mesh addresses) is shown with -v only.
    let chatter: leapgnn::cluster::LogSink = std::sync::Arc::new(|l| tracing::info!("{l}"));
    let local;
    let ssh;
    let slurm;
    let launcher: &dyn Launcher = match profile.launcher {
        LauncherKind::Slurm => {
            let alloc = leapgnn::cluster::Allocation::from_env(Some(cfg.workers))?;
            let binary = std::env::current_exe().context("cannot find the leapgnn executable to start workers")?;
            let args = vec!["--data-dir".into(), std::path::absolute(&data.root)?.display().to_string()];
            slurm = leapgnn::cluster::SlurmLauncher::new(alloc, binary, args).with_log(chatter);
            &slurm
        }
        LauncherKind::Ssh => {
            let (name, method) = (&cfg.dataset, cfg.partition_method());
            let job = (cfg.parts, cfg.workers);
            ssh = ssh_job_launcher(profile.clone(), a.accept_new_host_keys, data, name, method, job, None)?
                .with_log(chatter);
            // Cut once the hosts pass: the link probes start the ranks, and each is shipped its parts as it starts.
            leapgnn::partition::ensure_partition(data, name, method, cfg.parts, cfg.seed)?;
            &ssh
        }
        _ => {
            local =
                LocalLauncher::current(vec!["--data-dir".into(), data.root.display().to_string()])?.with_log(chatter);
            &local
        }
    };
    let opts = CalibrateOptions {
        launcher,
        driver_bind: profile.driver_bind(),
        encrypt: profile.encrypt,
        interrupted,
        iterations: a.calibrate_iterations,
        probe: ProbeTask::default(),
        comm_timeout,
        stage: &|s| {
            bar.set_length(s.total as u64);
            bar.set_position(s.index as u64);
            bar.set_message(s.what.to_string());
            tracing::info!("calibration stage {}/{}: {}", s.index + 1, s.total, s.what);
        },
    };
    calibrate(data, cfg, figures, &opts).context("calibration failed")
}

/// The calibration's stages as a bar on stderr; hidden where stderr is not a
/// terminal or with --json (-v logs each stage instead, with the workers' lines).
fn stage_bar(visible: bool) -> ProgressBar {
    let target = if visible { ProgressDrawTarget::stderr() } else { ProgressDrawTarget::hidden() };
    let style = ProgressStyle::with_template("calibrating [{bar:30.cyan/blue}] {pos}/{len} {elapsed} {msg}")
        .expect("the template is valid")
        .progress_chars("=> ");
    let bar = ProgressBar::with_draw_target(None, target).with_style(style);
    bar.enable_steady_tick(Duration::from_millis(200));
    bar
}

fn config(a: &Args) -> Result<TrainConfig, BadInput> {
    let d = TrainConfig::default();
    if a.parts == 0 {
        return Err(BadInput::new("--parts must be at least 1"));
    }
    let cfg = TrainConfig {
        dataset: a.dataset.clone(),
        workers: a.parts,
        parts: a.parts,
        model: a.model,
        eval_fanouts: a.fanout.clone(),
        fanouts: a.fanout.clone(),
        batch_size: a.batch_size,
        hidden: a.hidden,
        seed: a.seed,
        cache_mb: a.cache_mb,
        ..d
    };
    if cfg.batch_size == 0 {
        return Err(BadInput::new("--batch-size must be at least 1"));
    }
    if cfg.fanouts.layers() == 0 {
        return Err(BadInput::new("--fanout needs one entry per layer, e.g. 10,10"));
    }
    Ok(cfg)
}

fn ms(s: f64) -> String {
    format!("{:.2}", s * 1e3)
}

fn print_table(cfg: &TrainConfig, f: &Figures, t: &Tuning, out: &Path) {
    leapgnn::outln!(
        "Predicted iteration time (ms): {}, {} workers, {}, batch {} per worker, fanout {}, hidden {}",
        cfg.dataset,
        cfg.workers,
        cfg.model,
        cfg.batch_size,
        cfg.fanouts,
        cfg.hidden
    );
    leapgnn::outln!("figures: {}", f.source);
    leapgnn::outln!(
        "{:<14} {:>2} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10}",
        "strategy",
        "T",
        "prefetch",
        "iteration",
        "sample",
        "gather",
        "compute",
        "sync",
        "memory MB"
    );
    for (i, c) in t.candidates.iter().enumerate() {
        let mark = if i == t.chosen {
            "  <- chosen"
        } else if c.fits_memory {
            ""
        } else {
            "  (over the memory bound)"
        };
        leapgnn::outln!(
            "{:<14} {:>2} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10.1}{mark}",
            c.strategy.to_string(),
            c.time_steps,
            if c.prefetch { "on" } else { "-" },
            ms(c.iteration_seconds),
            ms(c.components.sample),
            ms(c.components.gather),
            ms(c.components.compute),
            ms(c.components.sync),
            c.peak_memory_bytes as f64 / (1 << 20) as f64,
        );
    }
    let c = t.chosen();
    let shares = if c.balance.is_empty() { "even shares" } else { "balanced shares" };
    let prefetch = if c.prefetch { ", prefetch" } else { "" };
    leapgnn::outln!(
        "chosen: leapgnn with {} time steps ({shares}{prefetch}), {} ms per iteration; plan written to {}",
        c.time_steps,
        ms(c.iteration_seconds),
        out.display()
    );
}

fn print_validation(v: &Validation) {
    leapgnn::outln!(
        "\nrun {} ({}, {} workers, T = {}, {} iterations): predicted vs measured (ms, mean over workers)",
        v.run,
        v.strategy,
        v.workers,
        v.time_steps,
        v.iterations
    );
    leapgnn::outln!("{:<10} {:>10} {:>10} {:>8}", "component", "predicted", "measured", "error");
    let p = &v.predicted.components;
    let m = &v.measured;
    let e = &v.error;
    for (name, pv, mv, ev) in [
        ("sample", p.sample, m.sample, e.sample),
        ("gather", p.gather, m.gather, e.gather),
        ("compute", p.compute, m.compute, e.compute),
        ("sync", p.sync, m.sync, e.sync),
        ("iteration", v.predicted.iteration_seconds, v.measured_iteration_seconds, e.iteration),
    ] {
        leapgnn::outln!("{name:<10} {:>10} {:>10} {:>+7.1}%", ms(pv), ms(mv), ev * 100.0);
    }
    if v.slow_iterations > 0 {
        leapgnn::outln!(
            "{} slow iteration(s) left out (held up, e.g. by a preempted worker); the mean of all is {} ms",
            v.slow_iterations,
            ms(v.all_iteration_seconds)
        );
    }
}
