use crate::Global;
use anyhow::Context;
use leapgnn::BadInput;
use leapgnn::cluster::slurm::{ScriptCommand, ScriptOptions, sbatch_script};
use leapgnn::train::slurm_job::{infer_target, train_target};
use std::ffi::{OsStr, OsString};

/// Print an sbatch script that runs `leapgnn train ARGS` (or `leapgnn infer RUN ARGS`) on a Slurm allocation,
/// one worker per task: `leapgnn slurm-script [OPTIONS] train ARGS` or `... infer RUN ARGS`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Nodes to allocate.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub nodes: usize,
    /// Workers (tasks) per node; the run has nodes x tasks-per-node workers.
    #[arg(long, default_value_t = 2, allow_negative_numbers = true)]
    pub tasks_per_node: usize,
    /// CPUs per worker (its RAYON_NUM_THREADS).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub cpus_per_task: usize,
    /// GPUs per worker (with a `--features cuda` build and `--device cuda` in the train arguments).
    #[arg(long, allow_negative_numbers = true)]
    pub gpus_per_task: Option<usize>,
    /// Wall-clock limit (sbatch --time, e.g. 02:00:00).
    #[arg(long)]
    pub time: Option<String>,
    /// Slurm partition (sbatch --partition).
    #[arg(long)]
    pub partition: Option<String>,
    #[arg(long, default_value = "leapgnn")]
    pub job_name: String,
    /// Where the job's output goes (%j: the job id).
    #[arg(long, default_value = "leapgnn-%j.out")]
    pub output: String,
    /// Seconds before the time limit at which Slurm warns the driver (SIGUSR1), which then
    /// checkpoints and stops so that `train --resume RUN` continues; 0: no warning (an infer job gets none).
    /// [default: 120, at most half the --time limit]
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub stop_before: Option<u64>,
    /// The job, after this command's own options: `train cora --strategy leapgnn --epochs 10`
    /// (or, as before, `-- cora --strategy leapgnn --epochs 10`), or `infer RUN [--out FILE ...]`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true, value_name = "TRAIN_ARGS")]
    pub train: Vec<String>,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    // `slurm-script [opts] train ARGS` names the subcommand it wraps; `-- ARGS` does not (train).
    let mut args = a.train;
    let command = match args.first().map(String::as_str) {
        Some("infer") => ScriptCommand::Infer,
        _ => ScriptCommand::Train,
    };
    if args.first().is_some_and(|t| t == command.name()) {
        args.remove(0);
    }
    let binary = std::env::current_exe().context("cannot find the leapgnn executable")?;
    let data_dir = std::path::absolute(&g.data_dir).context("cannot make --data-dir absolute")?;
    // The command line the batch step runs (less what the script adds), parsed as `leapgnn` parses it,
    // so a typo fails here and not in the queue.
    let argv: Vec<OsString> = [binary.as_os_str(), OsStr::new("--data-dir"), data_dir.as_os_str()]
        .into_iter()
        .map(OsString::from)
        .chain(std::iter::once(command.name().into()))
        .chain(args.iter().map(OsString::from))
        .collect();
    let cli = crate::parse(&argv).map_err(|e| {
        // clap's message up to its usage, on one line (a missing argument is named on the next).
        let msg = e.to_string();
        let what: Vec<&str> = msg.lines().map(str::trim).take_while(|l| !l.is_empty()).collect();
        let what = what.join(" ");
        let what = what.trim_start_matches("error: ");
        BadInput::new(format!("the {} arguments are not valid: {what}", command.name()))
    })?;
    let o = ScriptOptions {
        job_name: a.job_name,
        nodes: a.nodes,
        tasks_per_node: a.tasks_per_node,
        cpus_per_task: a.cpus_per_task,
        gpus_per_task: a.gpus_per_task,
        time: a.time,
        partition: a.partition,
        output: a.output,
        stop_before: a.stop_before,
        binary,
        data_dir,
        command,
        args,
    };
    // The script's own options first: their refusals do not depend on the data directory.
    o.check()?;
    let cli = crate::with_config_file(cli, &argv)?;
    let target = match &cli.command {
        crate::Command::Train(t) => train_target(&cli.global.data(), t)?,
        crate::Command::Infer(i) => infer_target(&cli.global.data(), &i.run)?,
        _ => unreachable!("argv names train or infer"),
    };
    if target.default_dataset {
        leapgnn::elog!(
            "the job trains {}, the built-in default (no dataset was named); the script names it",
            target.dataset
        );
    }
    if target.generated_in_job {
        leapgnn::elog!(
            "{} is not in {} yet: the job's batch step generates it (synthetic) before training",
            target.dataset,
            o.data_dir.display()
        );
    }
    let report = sbatch_script(&o, &target)?;
    if g.json {
        return crate::output::print_json(&report);
    }
    crate::output::write_stdout(report.script.as_bytes())
}
