use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::format::{DatasetFile, DatasetSummary};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A dataset name under --data-dir, a dataset directory, or a path to an archive.
    pub dataset: String,
    /// Skip the checksum and O(n+m) checks (structure is always validated).
    #[arg(long)]
    pub no_verify: bool,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    let path = leapgnn::paths::resolve_archive(&g.data(), &a.dataset);
    if !path.exists() {
        return Err(leapgnn::BadInput::new(format!(
            "no dataset archive at {} (run `leapgnn download {}` first)",
            path.display(),
            a.dataset
        ))
        .into());
    }
    let t0 = std::time::Instant::now();
    let f = if a.no_verify { DatasetFile::open(&path) } else { DatasetFile::open_verified(&path) }
        .with_context(|| format!("cannot read dataset {}", a.dataset))?;
    let s = f.summary();
    if g.json {
        // `seconds`: open + verify, so the fields match `download --json`.
        return print_json(&Timed { summary: &s, seconds: t0.elapsed().as_secs_f64() });
    }
    print_summary(&s);
    Ok(())
}

#[derive(serde::Serialize)]
struct Timed<'a> {
    #[serde(flatten)]
    summary: &'a DatasetSummary,
    seconds: f64,
}

/// The human view of a dataset archive (also printed by `download`).
pub fn print_summary(s: &DatasetSummary) {
    leapgnn::outln!("name          {}", s.name);
    leapgnn::outln!("path          {}", s.path);
    leapgnn::outln!("source        {}", s.source);
    leapgnn::outln!("nodes         {}", s.nodes);
    leapgnn::outln!(
        "edges         {} (directed CSR entries{})",
        s.edges,
        if s.directed { "" } else { ", both directions" }
    );
    leapgnn::outln!("feature_dim   {}{}", s.feature_dim, if s.generated_features { " (generated)" } else { "" });
    leapgnn::outln!("features      {} ({} values stored)", s.feature_storage, s.feature_values);
    leapgnn::outln!("classes       {}", s.classes);
    leapgnn::outln!("split         train {} / val {} / test {}", s.train, s.val, s.test);
    leapgnn::outln!("size          {} bytes", s.bytes);
    leapgnn::outln!("sha256        {}", s.sha256);
}
