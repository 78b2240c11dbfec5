//! Side-by-side comparisons of strategies: the report of an emulated-cluster
//! run (`scripts/emulated-cluster.sh`), built from the `train --json`
//! summaries it saved, as a Markdown table and SVG plots.

mod plot;
mod report;

pub use plot::write_plots;
pub use report::{BenchReport, BenchRow, load_runs, rate_bits};
