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
    let mut cmd = crate::Cli::command();
    // Into memory first: the generators panic on a failed write.
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "leapgnn", &mut script);
    crate::output::write_stdout(&script)
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
