use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::BadInput;
use leapgnn::train::infer::{InferOptions, infer};
use std::path::PathBuf;

/// Predictions (class and probabilities) and optionally hidden embeddings of every node of a trained run,
/// from layer-wise inference over the whole graph, keyed by node id.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The run (a name under <data-dir>/runs/).
    pub run: String,
    /// Output file [default: runs/<run>/predictions.safetensors, or the directory predictions/ with --format npy].
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// safetensors (`node_id`, `prediction`, `probs`, `embeddings`) or npy (a directory of <field>.npy).
    #[arg(long, default_value = "safetensors")]
    pub format: String,
    /// Also write the output of hidden layer LAYER (0 = the first layer's) as `embeddings`.
    #[arg(long, value_name = "LAYER")]
    pub embeddings: Option<usize>,
    /// Only these node ids (whitespace-separated text), in this order.
    #[arg(long, value_name = "FILE")]
    pub nodes: Option<PathBuf>,
    /// Distributed inference over a cluster profile (not available yet: inference runs in this process).
    #[arg(long, value_name = "PROFILE")]
    pub cluster: Option<PathBuf>,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    if let Some(p) = &a.cluster {
        return Err(BadInput::new(format!(
            "--cluster {}: distributed inference is not available yet; omit --cluster (infer runs in this process, \
             with the run's weights, on this machine's copy of the dataset)",
            p.display()
        ))
        .into());
    }
    let opts = InferOptions { out: a.out, format: a.format.parse()?, embeddings: a.embeddings, nodes: a.nodes };
    let r = infer(&g.data(), &a.run, &opts).with_context(|| format!("inference with run {} failed", a.run))?;
    if g.json {
        return print_json(&r);
    }
    eprintln!("{} nodes: predictions written to {} in {:.2} s", r.nodes, r.out.display(), r.seconds);
    Ok(())
}
