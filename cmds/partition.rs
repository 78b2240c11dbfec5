use crate::Global;
use crate::output::print_json;
use anyhow::Context;
use leapgnn::partition::{PartitionOptions, partition_dataset};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Dataset name under --data-dir (see `leapgnn download`).
    pub dataset: String,
    /// Number of parts K: 2..=65535 and at most the number of nodes.
    #[arg(long, short = 'k', allow_negative_numbers = true)]
    pub parts: i64,
    /// metis, random, hash, or ldg (streaming: for graphs too large for METIS' memory).
    #[arg(long, default_value = "metis")]
    pub method: String,
    /// What every part should hold evenly: nodes, train (vertices), or both.
    #[arg(long, default_value = "nodes,train")]
    pub balance: String,
    /// Seed of the method's randomness (METIS' seed, shuffles); hash ignores it.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub seed: u64,
    /// Recompute even when a partition with the same settings exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(g: &Global, a: Args) -> anyhow::Result<()> {
    crate::output::exit_on_interrupt()?;
    let Ok(parts) = usize::try_from(a.parts) else {
        return Err(leapgnn::BadInput::new(format!("--parts {}: need at least 2 parts", a.parts)).into());
    };
    let opts = PartitionOptions {
        parts,
        method: a.method.parse()?,
        balance: a.balance.parse()?,
        seed: a.seed,
        force: a.force,
    };
    let r =
        partition_dataset(&g.data(), &a.dataset, &opts).with_context(|| format!("cannot partition {}", a.dataset))?;
    if r.reused {
        leapgnn::elog!("kept the existing partition in {} (same settings and dataset; --force recomputes it)", r.path);
    }
    if g.json {
        return print_json(&r);
    }
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    leapgnn::outln!("dataset       {}", r.name);
    leapgnn::outln!("partition     {} parts, {} (balance {}, seed {})", r.parts, r.method, r.constraints, r.seed);
    leapgnn::outln!("path          {}", r.path);
    leapgnn::outln!("edge cut      {} of {} entries ({:.2}%)", r.edge_cut, r.edges, 100.0 * r.edge_cut_fraction);
    leapgnn::outln!("balance       nodes {:.3}, train {:.3} (max/avg)", r.balance.nodes, r.balance.train);
    leapgnn::outln!("part nodes    {:?}", r.part_nodes);
    leapgnn::outln!("part train    {:?}", r.part_train);
    let rss = r.peak_rss_bytes.map(|b| format!(", peak RSS {:.0} MB", mb(b))).unwrap_or_default();
    leapgnn::outln!("time          {:.2} s{rss}", r.seconds);
    Ok(())
}
