use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::bench::{load_runs, write_plots};
use leapgnn::format::write_atomic;
use std::path::PathBuf;

/// Turn the `run-<rate>-<strategy>.json` summaries in DIR (written by
/// scripts/emulated-cluster.sh) into report.md (one table) and bench.svg.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The bench directory (runs/bench-<date>/).
    pub dir: PathBuf,
    /// A line added under the table (e.g. how the links were shaped).
    #[arg(long)]
    pub note: Option<String>,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    let report = load_runs(&a.dir)?;
    let svg = write_plots(&report, &a.dir)?;
    let command = std::fs::read_to_string(a.dir.join("command.txt")).unwrap_or_default();
    let mut md = format!("# {} on {} emulated hosts\n\n", report.dataset, report.workers);
    if !command.trim().is_empty() {
        md.push_str(&format!("```\n{}\n```\n\n", command.trim()));
    }
    md.push_str(&report.markdown());
    md.push_str("\nBytes are per epoch, summed over workers (training features: the training steps' own fetches, from metrics.jsonl; all features adds evaluation, which every strategy runs model-centric); epoch seconds exclude evaluation; speed-up is model-centric's epoch seconds / the strategy's at the same link rate.\n");
    if let Some(n) = &a.note {
        md.push_str(&format!("{n}\n"));
    }
    md.push_str("\n![speed-up and epoch seconds](bench.svg)\n");
    let path = a.dir.join("report.md");
    write_atomic(&path, md.as_bytes()).with_context(|| format!("cannot write {}", path.display()))?;
    if g.json {
        print_json(&serde_json::json!({ "rows": report.rows, "report": path, "plot": svg }))
    } else {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), report.markdown().as_bytes());
        leapgnn::elog!("wrote {} and {}", path.display(), svg.display());
        Ok(())
    }
}
