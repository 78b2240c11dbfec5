//! `leapgnn completions SHELL` and `leapgnn man`: shell completions and man
//! pages generated from the same clap definitions as `--help`, so they never
//! drift from the flags.

use anyhow::Context;
use clap::CommandFactory;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Write one page per command (leapgnn.1, leapgnn-train.1, ...) into this
    /// directory instead of printing leapgnn(1) to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// Prints the completion script for `a.shell` to stdout.
pub fn completions(a: CompletionsArgs) -> anyhow::Result<()> {
    let mut cmd = visible(&crate::Cli::command());
    // Into memory first: the generators panic on a failed write.
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "leapgnn", &mut script);
    crate::output::write_stdout(&script)
}

/// `cmd` without what `hide` keeps out of `--help`. clap_complete's
/// generators list hidden subcommands and flags, so TAB offered the driver's
/// `worker` and `build-id` and the test flags (`--dump-grad`); clap_mangen
/// leaves them out already. clap cannot remove a subcommand or an argument,
/// so the command is rebuilt from its visible parts. The derive's argument
/// groups are left out: they name the hidden flags too, and completion does
/// not use them.
fn visible(cmd: &clap::Command) -> clap::Command {
    let mut out = clap::Command::new(cmd.get_name().to_string())
        .visible_aliases(cmd.get_visible_aliases().map(str::to_string).collect::<Vec<_>>())
        .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
        .subcommands(cmd.get_subcommands().filter(|s| !s.is_hide_set()).map(visible));
    if let Some(about) = cmd.get_about() {
        out = out.about(about.clone());
    }
    if let Some(v) = cmd.get_version() {
        out = out.version(v.to_string());
    }
    out
}

/// Prints leapgnn(1), or writes every command's page into `--dir`.
pub fn man(a: ManArgs) -> anyhow::Result<()> {
    let cmd = crate::Cli::command();
    match a.dir {
        None => {
            let mut page = Vec::new();
            clap_mangen::Man::new(cmd).render(&mut page).context("cannot render the man page")?;
            crate::output::write_stdout(&page)
        }
        Some(dir) => {
            if dir.exists() && !dir.is_dir() {
                return Err(leapgnn::BadInput::new(format!(
                    "--dir {} is a file; give a directory for the man pages (created if missing)",
                    dir.display()
                ))
                .into());
            }
            std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
            clap_mangen::generate_to(cmd, &dir)
                .with_context(|| format!("cannot write man pages into {}", dir.display()))
        }
    }
}
