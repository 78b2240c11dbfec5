//! `leapgnn completions` and `leapgnn man`: each shell's script is produced
//! and names the subcommands and flags; bash accepts its script (`bash -n`);
//! the man pages render, one per command with `--dir`; a closed stdout
//! (`| head -1`) ends them quietly.

mod dist_support;

use dist_support::RUN_LIMIT;
use dist_support::bounded::{Bounded, QUICK_LIMIT};
use std::process::Command;

/// `leapgnn ARGS`, its output captured, within `RUN_LIMIT`.
fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_leapgnn")).args(args).output_in(RUN_LIMIT, &format!("leapgnn {args:?}"))
}

fn leapgnn(args: &[&str]) -> String {
    let out = run(args);
    assert!(out.status.success(), "leapgnn {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_shell_gets_a_script_that_knows_the_subcommands_and_flags() {
    for shell in ["bash", "zsh", "fish"] {
        let script = leapgnn(&["completions", shell]);
        for word in ["leapgnn", "train", "tune-merge", "analyze-locality", "--strategy", "--workers"] {
            assert!(script.contains(word), "{shell} script lacks `{word}`");
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("leapgnn.bash");
    std::fs::write(&path, leapgnn(&["completions", "bash"])).unwrap();
    match Command::new("bash").arg("-n").arg(&path).try_output_in(QUICK_LIMIT, "bash -n") {
        Ok(out) => {
            assert!(out.status.success(), "bash -n rejects the script: {}", String::from_utf8_lossy(&out.stderr))
        }
        Err(e) => eprintln!("skipping `bash -n`: cannot run bash ({e})"),
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is bad input");
}

/// What `--help` hides, the completion scripts offered: TAB after
/// `leapgnn ` listed the driver's own `worker` and `build-id` subcommands,
/// and after `leapgnn train --` the test flags (`--dump-grad`). Every shell's
/// script now leaves them out and still offers the commands a user runs; the
/// hidden subcommands still work for the driver.
#[test]
fn no_shell_is_offered_a_hidden_subcommand_or_flag() {
    // How each shell's script names a subcommand it offers (the worker's).
    let worker = [
        ("bash", "leapgnn__subcmd__worker"),
        ("zsh", "(worker)"),
        ("fish", "-a \"worker\""),
        ("elvish", "'leapgnn;worker'"),
        ("powershell", "'leapgnn;worker'"),
    ];
    for (shell, offered) in worker {
        let script = leapgnn(&["completions", shell]);
        for word in ["train", "partition", "analyze-locality", "strategy", "data-dir"] {
            assert!(script.contains(word), "{shell} script lacks `{word}`");
        }
        for hidden in [offered, "build-id", "Internal:", "dump-grad", "stop-after", "stop-in-evaluation"] {
            assert!(!script.contains(hidden), "{shell} script offers hidden `{hidden}`");
        }
    }
    assert!(leapgnn(&["build-id"]).trim().starts_with(env!("CARGO_PKG_VERSION")));
    assert!(leapgnn(&["worker", "--help"]).contains("--rank"));
}

#[test]
fn man_pages_render_for_the_tool_and_each_command() {
    let page = leapgnn(&["man"]);
    assert!(page.starts_with(".ie") || page.contains(".TH leapgnn"), "{}", &page[..page.len().min(200)]);
    assert!(page.contains("train"));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("man1");
    leapgnn(&["man", "--dir", dir.to_str().unwrap()]);
    let train = std::fs::read_to_string(dir.join("leapgnn-train.1")).unwrap();
    assert!(train.contains(".TH leapgnn-train") && train.contains("strategy"), "{}", &train[..train.len().min(300)]);
    assert!(dir.join("leapgnn.1").is_file());
    // A file where the pages' directory should be is a wrong --dir (exit 2), not a failed write.
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "kept").unwrap();
    let out = run(&["man", "--dir", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.starts_with("error: --dir") && err.contains("is a file"), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "kept");
}

/// `leapgnn man | head -1` and the like: stdout is a pipe whose reader is
/// already closed (so every write fails with EPIPE). Each command still
/// exits 0 without a word on stderr, as a Unix filter does.
#[test]
fn a_closed_stdout_ends_the_output_quietly() {
    // slurm-script checks that the job's dataset is there.
    let cora = dist_support::cora();
    let d = cora.path().to_str().unwrap();
    let script = ["--data-dir", d, "slurm-script", "--", "cora", "--epochs", "1"];
    let cases: [&[&str]; 4] = [&["man"], &["completions", "zsh"], &["completions", "bash"], &script];
    for args in cases {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = Command::new(env!("CARGO_BIN_EXE_leapgnn"))
            .args(args)
            .stdout(std::process::Stdio::from(writer))
            .stderr(std::process::Stdio::piped())
            .output_as_set_in(RUN_LIMIT, &format!("leapgnn {args:?} > a closed pipe"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "leapgnn {args:?}: {err}");
        assert!(err.is_empty(), "leapgnn {args:?}: {err}");
    }
}

/// `leapgnn slurm-script [OPTIONS] train ARGS` (CLI.md's form) and
/// `leapgnn slurm-script [OPTIONS] -- ARGS` print the same script, which runs
/// `train ARGS`; train arguments that `train` would refuse exit 2 naming them.
#[test]
fn slurm_script_takes_the_train_arguments_with_or_without_the_word_train() {
    let tmp = dist_support::cora();
    let d = tmp.path().to_str().unwrap();
    let named = leapgnn(&["--data-dir", d, "slurm-script", "--nodes", "2", "train", "cora", "--epochs", "3"]);
    let dashed = leapgnn(&["--data-dir", d, "slurm-script", "--nodes", "2", "--", "cora", "--epochs", "3"]);
    assert_eq!(named, dashed);
    assert!(named.contains("#SBATCH --nodes=2") && named.contains(" train cora --epochs 3 --cluster slurm"), "{named}");
    let out = run(&["--data-dir", d, "slurm-script", "train", "cora", "--epochz", "3"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--epochz"));
    // A flag given twice takes the last value in train (so --config's flags can be overridden): accepted here too.
    let twice = leapgnn(&["--data-dir", d, "slurm-script", "train", "cora", "--epochs", "1", "--epochs", "3"]);
    assert!(twice.contains(" train cora --epochs 1 --epochs 3 --cluster slurm"), "{twice}");
}

/// `leapgnn build-id`, which the ssh launcher asks a remote binary, prints
/// this build alone; it is hidden from `--help` (clap_complete lists hidden
/// commands, `worker` too), and `--version` keeps the one line scripts read.
#[test]
fn build_id_is_hidden_and_leaves_version_alone() {
    assert_eq!(leapgnn(&["build-id"]), format!("{}\n", leapgnn::BUILD_ID));
    assert_eq!(leapgnn(&["--version"]), format!("leapgnn {}\n", env!("CARGO_PKG_VERSION")));
    assert!(!leapgnn(&["--help"]).contains("build-id"));
}
