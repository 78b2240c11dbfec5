use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::BadInput;
use leapgnn::format::AtomicFile;
use leapgnn::locality::{Options, Sampling, analyze, parse_list, write_plot};
use leapgnn::partition::Method;
use std::path::{Path, PathBuf};

/// Estimate, before training, how local micrographs are and how many feature
/// rows model-centric, micrograph and pregather training would fetch, per
/// partition method, number of servers S, sampling and depth. A model has one
/// layer per sampled hop (the LeapGNN artifact uses one more; we do not).
/// Missing partitions are created and kept.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dataset name under --data-dir (see `leapgnn download`).
    pub dataset: String,
    /// Numbers of servers S (= workers = partitions), comma-separated.
    #[arg(long, default_value = "2,4,8,16", allow_hyphen_values = true)]
    pub parts: String,
    /// Partition methods: metis, random, hash, ldg (comma-separated).
    #[arg(long, default_value = "metis,random")]
    pub method: String,
    /// node (GraphSAGE fanout) and/or layer (FastGCN/LADIES budget), comma-separated.
    #[arg(long, default_value = "node,layer")]
    pub sampling: String,
    /// GNN depths (sampled layers), comma-separated [default: 2,10; with a --fanout
    /// of several entries, their number].
    #[arg(long, allow_hyphen_values = true)]
    pub layers: Option<String>,
    /// Neighbours per vertex and layer (node-wise), or new vertices per root and
    /// layer (layer-wise), as `train --fanout` takes it: `10`, or one equal entry
    /// per layer (`10,10`) [default: 10 for up to 3 layers, 2 for deeper models].
    #[arg(long, allow_hyphen_values = true)]
    pub fanout: Option<String>,
    /// Roots per worker mini-batch (B; the global batch is S x B).
    #[arg(long, default_value_t = 1024, allow_negative_numbers = true)]
    pub batch_size: i64,
    /// Worker mini-batches analysed per row, rounded up to whole iterations of S batches.
    #[arg(long, default_value_t = 20, allow_negative_numbers = true)]
    pub batches: i64,
    /// Micrographs sampled for the locality figure (the first roots of the batches).
    #[arg(long, default_value_t = 4096, allow_negative_numbers = true)]
    pub micrographs: i64,
    /// Hidden size of the GraphSAGE model whose naive migration is costed.
    #[arg(long, default_value_t = 128, allow_negative_numbers = true)]
    pub hidden: i64,
    /// Seed of the epoch shuffle and of sampling (as `train --seed`); also of new partitions.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub seed: u64,
    /// Write an SVG figure: locality per S with R_sub, and miss rates per strategy.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Remove the partitions this analysis had to create when it ends (by default they are kept for `train`).
    #[arg(long)]
    pub no_keep: bool,
    /// Write the rows as CSV (the JSON field names as header).
    #[arg(long)]
    pub csv: Option<PathBuf>,
}

/// A count flag as usize; zero and negative values are left for `Options::check` / rejected here.
fn count(flag: &str, v: i64) -> Result<usize, BadInput> {
    usize::try_from(v).map_err(|_| BadInput::new(format!("{flag} {v}: must be a positive number")))
}

/// `--fanout` in `train`'s syntax: one number for every layer, or one entry
/// per layer (then also the depth), which must all be equal here.
fn fanout_arg(s: &str) -> Result<(Option<u32>, Option<usize>), BadInput> {
    use leapgnn::sample::{Fanout, Fanouts};
    let f: Fanouts = s.parse().map_err(|e| BadInput::new(format!("--fanout {s}: {e}")))?;
    let ks: Vec<u32> =
        f.0.iter()
            .map(|k| match k {
                Fanout::Upto(k) => Ok(*k),
                Fanout::All => Err(BadInput::new(format!(
                    "--fanout {s}: `all` has no sampled neighbourhood to analyse; give a number per layer"
                ))),
            })
            .collect::<Result<_, _>>()?;
    if ks.windows(2).any(|w| w[0] != w[1]) {
        return Err(BadInput::new(format!(
            "--fanout {s}: analyze-locality samples every layer alike; give one fanout (e.g. {}) or equal entries",
            ks[0]
        )));
    }
    let depth = (ks.len() > 1).then_some(ks.len());
    Ok((ks.first().copied(), depth))
}

/// Fails now, not after the analysis, when `path` cannot be written.
fn check_writable(flag: &str, path: &Path) -> anyhow::Result<()> {
    if path.is_dir() {
        return Err(BadInput::new(format!("{flag} {}: a directory; name a file", path.display())).into());
    }
    AtomicFile::create(path).map(drop).map_err(|e| {
        BadInput::new(format!("{flag} {}: cannot write there ({e}); choose a writable path", path.display())).into()
    })
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    crate::output::exit_on_interrupt()?;
    let (fanout, depth) = match a.fanout.as_deref() {
        Some(f) => fanout_arg(f)?,
        None => (None, None),
    };
    let layers = match (a.layers.as_deref(), depth) {
        (Some(l), _) => parse_list::<usize>("--layers", l)?,
        (None, Some(d)) => vec![d],
        (None, None) => vec![2, 10],
    };
    if let (Some(d), true) = (depth, layers.iter().any(|&l| Some(l) != depth)) {
        return Err(BadInput::new(format!(
            "--fanout {} has {d} entries (one per layer) but --layers asks for {layers:?}; give one of them, or a single fanout",
            a.fanout.as_deref().unwrap_or_default()
        ))
        .into());
    }
    let opts = Options {
        methods: parse_list::<Method>("--method", &a.method)?,
        parts: parse_list::<usize>("--parts", &a.parts)?,
        samplings: parse_list::<Sampling>("--sampling", &a.sampling)?,
        layers,
        fanout,
        batch_size: count("--batch-size", a.batch_size)?,
        batches: count("--batches", a.batches)?,
        micrographs: count("--micrographs", a.micrographs)?,
        hidden: count("--hidden", a.hidden)?,
        seed: a.seed,
        keep: !a.no_keep,
    };
    if let Some(p) = &a.plot {
        if p.extension().and_then(|e| e.to_str()) != Some("svg") {
            return Err(BadInput::new(format!("--plot {}: the figure is SVG; name the file *.svg", p.display())).into());
        }
        check_writable("--plot", p)?;
    }
    if let Some(p) = &a.csv {
        check_writable("--csv", p)?;
    }
    let report = analyze(&g.data(), &a.dataset, &opts, !g.json)
        .with_context(|| format!("cannot analyse the locality of {}", a.dataset))?;
    if let Some(p) = &a.csv {
        report.write_csv(p).with_context(|| format!("cannot write --csv {}", p.display()))?;
    }
    if let Some(p) = &a.plot {
        write_plot(&report, p).with_context(|| format!("cannot write --plot {}", p.display()))?;
    }
    if g.json {
        return print_json(&report);
    }
    crate::output::write_stdout(report.render().as_bytes())?;
    leapgnn::outln!("total {:.2} s", report.seconds);
    Ok(())
}
