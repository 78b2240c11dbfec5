use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::datasets::convert::split::{parse_fractions, parse_per_class};
use leapgnn::datasets::{self, ConvertOptions, DownloadRequest, Format, Registry};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A datasets.toml name, or a new name to import with --from and --format.
    #[arg(required_unless_present = "list")]
    pub name: Option<String>,
    /// Show the registry: names, formats, sizes and which are present.
    #[arg(long, conflicts_with = "name")]
    pub list: bool,
    /// Convert this local file, zip or directory instead of downloading (text: DIR/PREFIX).
    #[arg(long)]
    pub from: Option<PathBuf>,
    /// Source layout: ogb, npz, edgelist, musae or text (default: the registry's).
    #[arg(long)]
    pub format: Option<Format>,
    /// Convert again even if a valid archive exists; the kept download is reused only
    /// when it matches the registry's sha256, otherwise it is fetched again.
    #[arg(long)]
    pub force: bool,
    /// Store every edge in both directions.
    #[arg(long)]
    pub symmetrize: bool,
    /// Keep self loops (dropped by default).
    #[arg(long)]
    pub self_loops: bool,
    /// Dimension of the seeded uniform features generated for graphs without features.
    #[arg(long, allow_negative_numbers = true)]
    pub feature_dim: Option<u32>,
    /// Generate seeded labels with this many classes for graphs without labels.
    #[arg(long, allow_negative_numbers = true)]
    pub generated_classes: Option<u32>,
    /// Random split of the labelled nodes, train,val,test in percent (or fractions).
    #[arg(long, value_parser = parse_fractions)]
    pub split: Option<[f64; 3]>,
    /// Planetoid-style random split of the labelled nodes (PyG's split="random"):
    /// TRAIN nodes of each class, then VAL and TEST nodes from the rest, e.g. 20,500,1000.
    #[arg(long, value_parser = parse_per_class, conflicts_with = "split", value_name = "TRAIN,VAL,TEST")]
    pub split_per_class: Option<[u64; 3]>,
    /// text: file prefix inside a --from directory; musae: which graph of several.
    #[arg(long)]
    pub prefix: Option<String>,
    /// Feature storage: auto (CSR below 10 % non-zero values), dense or sparse.
    #[arg(long, default_value = "auto")]
    pub features: leapgnn::format::FeatureStorage,
    /// Seed of generated features, labels and splits.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub seed: u64,
    /// Another registry file instead of the built-in datasets.toml.
    #[arg(long, env = "LEAPGNN_REGISTRY")]
    pub registry: Option<PathBuf>,
    /// Extra rounds over the mirrors after a network failure (with backoff).
    #[arg(long, default_value_t = 4, allow_negative_numbers = true)]
    pub retries: u32,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    let reg = Registry::resolve(a.registry.as_deref())?;
    if a.list {
        return list(g, &reg);
    }
    let name = a.name.clone().unwrap_or_default();
    let req = DownloadRequest {
        name: name.clone(),
        from: a.from,
        format: a.format,
        force: a.force,
        seed: a.seed,
        options: ConvertOptions {
            symmetrize: a.symmetrize.then_some(true),
            self_loops: a.self_loops,
            feature_dim: a.feature_dim,
            generated_classes: a.generated_classes,
            split: a.split.map(|s| s.to_vec()),
            split_per_class: a.split_per_class.map(|s| s.to_vec()),
            prefix: a.prefix,
            features: a.features,
            ..Default::default()
        },
        retries: a.retries,
        progress: !g.json && std::io::stderr().is_terminal(),
    };
    let mut r = datasets::download(&g.data(), &reg, &req).with_context(|| format!("cannot get dataset {name}"))?;
    if r.action != "present" {
        r.notes.extend(leapgnn::train::training_on(&g.data(), &name).iter().map(|t| replaced_under(&name, t)));
    }
    for n in &r.notes {
        leapgnn::elog!("warning: {n}");
    }
    if g.json {
        return print_json(&r);
    }
    if r.action == "present" {
        leapgnn::elog!("{name}: already present (use --force to rebuild)");
    }
    crate::info::print_summary(&r.summary);
    leapgnn::outln!("seconds       {:.2} ({})", r.seconds, r.action);
    Ok(())
}

/// A run's workers keep the files they opened, so the run itself goes on;
/// what breaks is its continuation, which checks the data it trained on.
fn replaced_under(name: &str, t: &leapgnn::train::TrainingRun) -> String {
    let run = &t.run;
    let pid = t.holder.map(|p| format!(" (pid {p})")).unwrap_or_default();
    format!(
        "dataset `{name}` was replaced while run `{run}`{pid} trains on it: the run goes on with the data it \
         opened, but a restart of it (--restarts), `train --resume {run}` and `infer {run}` will refuse the new \
         data; to continue it later, put back the data it started on, or train a new run"
    )
}

#[derive(serde::Serialize)]
struct Listed<'a> {
    name: &'a str,
    format: Format,
    description: &'a str,
    /// As every other output shows them: secrets replaced by `***`.
    urls: Vec<String>,
    sha256: Option<&'a str>,
    size: Option<u64>,
    download_size: Option<&'a str>,
    present: bool,
    path: String,
}

fn list(g: &Global, reg: &Registry) -> anyhow::Result<()> {
    let data = g.data();
    let rows: Vec<Listed> = reg
        .entries()
        .map(|e| {
            let path = data.dataset_path(&e.name);
            Listed {
                name: &e.name,
                format: e.format,
                description: &e.description,
                urls: e.urls.iter().map(|u| datasets::fetch::shown_url(u)).collect(),
                sha256: e.sha256.as_deref(),
                size: e.size,
                download_size: e.download_size.as_deref(),
                present: path.is_file(),
                path: path.display().to_string(),
            }
        })
        .collect();
    if g.json {
        return print_json(&serde_json::json!({ "datasets": rows }));
    }
    leapgnn::outln!("{:<20} {:<10} {:>10}  {:<7}  description", "name", "format", "download", "present");
    for r in &rows {
        let size = match (r.size, r.download_size) {
            (Some(b), _) => format!("{:.1} MB", b as f64 / 1e6),
            (None, Some(s)) => s.to_owned(),
            (None, None) if r.format == Format::Synthetic => "generated".to_owned(),
            _ => "-".to_owned(),
        };
        leapgnn::outln!(
            "{:<20} {:<10} {:>10}  {:<7}  {}",
            r.name,
            r.format,
            size,
            if r.present { "yes" } else { "no" },
            r.description
        );
    }
    Ok(())
}
