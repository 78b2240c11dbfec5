//! `leapgnn`: the command-line front end. Each subcommand file parses its
//! arguments and calls one library function; no algorithm lives here.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

mod analyze_locality;
mod bench_report;
mod cluster;
mod download;
mod infer;
mod info;
mod output;
mod partition;
mod shell;
mod slurm_script;
mod train;
mod tune_merge;
mod worker;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`: its place in `mi_option_e` of the
/// mimalloc 3 that libmimalloc-sys 0.1.49 builds (the crate names no constant
/// for it; `purge_delay_is_where_we_set_it` checks the place).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Freed memory stays with the process instead of going back to the OS a
/// second later (mimalloc 3's default). A training step frees and
/// reallocates the same large tensors every iteration, and iterations of
/// full-graph training take longer than that, so each return made the kernel
/// fault and zero those pages again (a fifth of a deepgcn epoch's time); the
/// process's peak is the same either way. `MIMALLOC_PURGE_DELAY` in the
/// environment wins.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set checks the option against _mi_option_last (47
        // here) and takes any value; it only writes two plain fields of
        // mimalloc's static option table. main calls this before the process
        // starts any thread, so nothing reads the table meanwhile.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
    }
}

/// C code's allocations (glibc's malloc: thread-local destructors' records,
/// libssh2, METIS) all go to glibc's main arena. By default glibc gives each
/// new thread its own arena, reserving 64 MiB of address space for it (128
/// MiB while it aligns it). Under an address-space limit (`ulimit -v`) a
/// thread's attempt holds that room for a moment, and whatever the main thread
/// maps meanwhile fails: one `infer` in 60 under a 100 MiB limit failed to map
/// its 4 MB archive that way. Rust's own allocations go to mimalloc, so the
/// one arena sees little contention. `MALLOC_ARENA_MAX` in the environment wins.
fn one_malloc_arena() {
    #[cfg(target_env = "gnu")]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets a field of glibc's malloc parameters (it
        // takes glibc's own lock to do so) and returns 0 on a value it refuses;
        // main calls it before the process starts any thread.
        unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
    }
}

#[derive(Parser)]
#[command(name = "leapgnn", version, about = "Distributed GNN training that brings the model to the features")]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Command,
}

/// Flags every subcommand accepts.
#[derive(clap::Args, Debug, Clone)]
pub struct Global {
    /// Where datasets, partitions and runs live.
    #[arg(long, global = true, env = "LEAPGNN_DATA", default_value = "data")]
    pub data_dir: PathBuf,
    /// Machine output: one JSON object on stdout; human output goes to stderr.
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

impl Global {
    pub fn data(&self) -> leapgnn::DataDir {
        leapgnn::DataDir::new(&self.data_dir)
    }
}

#[derive(Subcommand)]
enum Command {
    /// Fetch a dataset (or import a local copy) and convert it to the on-disk format.
    Download(download::Args),
    /// Print the metadata of a dataset archive and verify it.
    Info(info::Args),
    /// Split a dataset into parts (METIS by default) and write per-part feature files.
    Partition(partition::Args),
    /// Estimate, before training, how local micrographs are and what each strategy would fetch.
    AnalyzeLocality(analyze_locality::Args),
    /// Train a GNN (local worker processes or over SSH).
    // A flag given twice takes the last value: `--config FILE`'s flags go first.
    #[command(args_override_self = true)]
    Train(Box<train::Args>),
    /// Predictions and embeddings of every node of a trained run (layer-wise inference).
    Infer(infer::Args),
    /// Predict iteration time per strategy and number of time steps; pick a merge plan.
    TuneMerge(tune_merge::Args),
    /// Cluster profiles: check every host before training on it; clean what runs left on the hosts.
    Cluster(cluster::Args),
    /// Print an sbatch script that trains on a Slurm allocation (`train --cluster slurm`).
    SlurmScript(slurm_script::Args),
    /// Report of an emulated-cluster run: one table and an SVG plot.
    BenchReport(bench_report::Args),
    /// Print a shell completion script (bash, zsh, fish, ...).
    Completions(shell::CompletionsArgs),
    /// Print the man page, or write one page per command with --dir.
    Man(shell::ManArgs),
    /// Internal: a training worker started by `train`.
    #[command(hide = true)]
    Worker(worker::Args),
    /// Internal: print this binary's build (`leapgnn::BUILD_ID`), which the ssh
    /// launcher compares with the driver's before it starts a worker.
    // Not in `--version`, whose one line scripts read.
    #[command(hide = true)]
    BuildId,
}

fn main() -> ExitCode {
    one_malloc_arena();
    keep_freed_memory();
    let argv: Vec<OsString> = std::env::args_os().collect();
    let cli = match parse(&argv) {
        Ok(c) => c,
        Err(e) => {
            if !e.use_stderr() {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let _ = std::io::Write::write_all(&mut std::io::stderr(), output::clap_error(&e).as_bytes());
            return ExitCode::from(2);
        }
    };
    let cli = match with_config_file(cli, &argv) {
        Ok(c) => c,
        Err(e) => {
            leapgnn::elog!("error: {}", output::one_line(&e));
            return ExitCode::from(leapgnn::error::exit_code(e.chain()));
        }
    };
    init_logging(cli.global.verbose);
    // rustls needs one process-wide crypto provider; ring is the light one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pool = leapgnn::util::threads::start_pool();
    // A worker tells its driver why it cannot work, which then names its host and does not restart it.
    if let Err(e) = &pool
        && !matches!(cli.command, Command::Worker(_))
    {
        leapgnn::elog!("error: {e}");
        return ExitCode::from(1);
    }
    let g = cli.global;
    let uses_data = matches!(
        cli.command,
        Command::Download(_)
            | Command::Info(_)
            | Command::Partition(_)
            | Command::AnalyzeLocality(_)
            | Command::Train(_)
            | Command::Infer(_)
            | Command::TuneMerge(_)
    );
    if uses_data && let Err(e) = g.data().check() {
        leapgnn::elog!("error: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Download(a) => download::run(&g, a),
        Command::Info(a) => info::run(&g, a),
        Command::Partition(a) => partition::run(&g, a),
        Command::AnalyzeLocality(a) => analyze_locality::run(&g, a),
        Command::Train(a) => train::run(&g, *a),
        Command::Infer(a) => infer::run(&g, a),
        Command::TuneMerge(a) => tune_merge::run(&g, a),
        Command::Cluster(a) => cluster::run(&g, a),
        Command::SlurmScript(a) => slurm_script::run(&g, a),
        Command::BenchReport(a) => bench_report::run(&g, a),
        Command::Completions(a) => shell::completions(a),
        Command::Man(a) => shell::man(a),
        Command::Worker(a) => worker::run(&g, a, pool),
        Command::BuildId => {
            leapgnn::outln!("{}", leapgnn::cluster::worker_session::own_build());
            Ok(())
        }
    };
    // A line of human output lost to a failing stdout (a full disk behind `>`) fails the command.
    let result = result.and_then(|()| match leapgnn::util::console::stdout_failure() {
        Some(e) => Err(anyhow::Error::new(e).context("cannot write to stdout")),
        None => Ok(()),
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            leapgnn::elog!("error: {}", output::one_line(&e));
            if leapgnn::progress::signals::forced() {
                return ExitCode::from(leapgnn::progress::signals::FORCED_EXIT);
            }
            // A command that stopped its workers for Ctrl-C or SIGTERM (`tune-merge --calibrate`).
            if let Some(code) = leapgnn::util::interrupt::exit_code() {
                return ExitCode::from(code);
            }
            ExitCode::from(leapgnn::error::exit_code(e.chain()))
        }
    }
}

/// The command line as clap parses it, noting which of train's flags were
/// given (rules such as the strategies' own defaults depend on it).
fn parse(argv: &[OsString]) -> Result<Cli, clap::Error> {
    let m = Cli::command().try_get_matches_from(argv)?;
    let mut cli = Cli::from_arg_matches(&m)?;
    if let (Command::Train(a), Some(sub)) = (&mut cli.command, m.subcommand_matches("train")) {
        a.note_given(sub);
    }
    Ok(cli)
}

fn init_logging(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colour only on a terminal, and never under NO_COLOR (https://no-color.org).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // A log line that cannot be written (stderr's reader has gone) is dropped:
    // reporting that on the same closed stderr would panic.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(leapgnn::progress::LogWriter)
        .log_internal_errors(false)
        .try_init();
}

/// `train --config FILE`: the file's flags go right after `train`, so those of
/// the command line (later) override them, and one parser checks them all.
fn with_config_file(cli: Cli, argv: &[OsString]) -> anyhow::Result<Cli> {
    let Command::Train(a) = &cli.command else { return Ok(cli) };
    let Some(path) = a.config.clone() else { return Ok(cli) };
    let cmd = <train::Args as clap::Args>::augment_args(clap::Command::new("train"));
    let mut flags = leapgnn::train::config_file::flags_from_file(&path, &TrainFlags(cmd))?;
    if a.dataset.is_some() && flags.first().is_some_and(|f| !f.starts_with("--")) {
        flags.remove(0);
    }
    // The subcommand is the first word that is not a global flag or its value.
    let mut at = 1;
    while at < argv.len() && argv[at] != "train" {
        at += if argv[at] == "--data-dir" { 2 } else { 1 };
    }
    let mut out: Vec<OsString> = argv[..=at.min(argv.len() - 1)].to_vec();
    out.extend(flags.into_iter().map(OsString::from));
    let mut rest = argv.iter().skip(at + 1);
    while let Some(x) = rest.next() {
        if x == "--config" {
            rest.next();
        } else if !x.to_string_lossy().starts_with("--config=") {
            out.push(x.clone());
        }
    }
    parse(&out).map_err(|e| {
        let msg = e.to_string();
        let first = msg.lines().next().unwrap_or("").trim_start_matches("error: ").to_string();
        leapgnn::BadInput::new(format!("--config {}: {first}", path.display())).into()
    })
}

/// train's flags as clap has them, for the keys of a `--config` file.
struct TrainFlags(clap::Command);

impl TrainFlags {
    fn arg(&self, name: &str) -> Option<&clap::Arg> {
        self.0.get_arguments().find(|x| x.get_long() == Some(name) && name != "config")
    }
}

impl leapgnn::train::config_file::FlagParser for TrainFlags {
    fn kind(&self, name: &str) -> Option<leapgnn::train::config_file::FlagKind> {
        use leapgnn::train::config_file::FlagKind;
        self.arg(name).map(|x| if x.get_action().takes_values() { FlagKind::Value } else { FlagKind::Switch })
    }

    /// The flag's own parser on the value, the flag alone in its command (what
    /// it requires or conflicts with is for the whole command line to say).
    fn check(&self, name: &str, value: &str) -> Result<(), String> {
        use clap::builder::Resettable;
        let Some(arg) = self.arg(name) else { return Ok(()) };
        let alone = arg.clone().conflicts_with(Resettable::Reset).requires(Resettable::Reset);
        let cmd = clap::Command::new("train").no_binary_name(true).arg(alone);
        match cmd.try_get_matches_from([format!("--{name}={value}")]) {
            Ok(_) => Ok(()),
            Err(e) => Err(expected(arg, &e)),
        }
    }
}

/// What `arg` takes, for a value it refused with `e`: "expected a whole
/// number (as --epochs takes)", or the flag's own parser's reason.
fn expected(arg: &clap::Arg, e: &clap::Error) -> String {
    use std::any::TypeId;
    let parser = arg.get_value_parser().type_id();
    let is = |types: &[TypeId]| types.iter().any(|t| parser == *t);
    let names: Vec<String> =
        arg.get_possible_values().iter().filter(|v| !v.is_hide_set()).map(|v| v.get_name().to_string()).collect();
    let what = if !names.is_empty() {
        format!("one of {}", names.join(", "))
    } else if is(&[TypeId::of::<u64>(), TypeId::of::<u32>(), TypeId::of::<usize>()]) {
        "a whole number, 0 or more".into()
    } else if is(&[TypeId::of::<f64>(), TypeId::of::<f32>()]) {
        "a number".into()
    } else {
        return match std::error::Error::source(e) {
            Some(why) => why.to_string(),
            None => e.to_string().lines().next().unwrap_or("").trim_start_matches("error: ").to_string(),
        };
    };
    format!("expected {what} (as --{} takes)", arg.get_long().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::PURGE_DELAY;

    /// PURGE_DELAY is mimalloc's purge delay: the option there reads its
    /// default of 1000 ms (`options.c`; no other option defaults to 1000), or
    /// what MIMALLOC_PURGE_DELAY says. The test harness never calls main, so
    /// nothing has set it.
    #[test]
    fn purge_delay_is_where_we_set_it() {
        let want = std::env::var("MIMALLOC_PURGE_DELAY").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
        // SAFETY: mi_option_get checks the option's range and only reads the table.
        assert_eq!(unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) }, want);
    }
}
