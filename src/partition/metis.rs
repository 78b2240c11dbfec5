//! METIS k-way (the vendored `metis` crate) on the symmetrised graph without
//! self loops. Multi-constraint by default: one weight for the node and one for
//! being a train vertex, so every part gets its share of both (ncon = 2);
//! `--balance nodes` gives the classic single constraint.

use super::{IMBALANCE, PartitionError, Problem};
use crate::BadInput;
use crate::util::rng::mix64;
use metis::Idx;
use std::sync::Mutex;

/// METIS (GKlib) keeps its random generator in process globals: two calls at
/// once would interleave their draws, and the same seed would stop giving the
/// same partition. One METIS call at a time per process.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

pub fn assign(p: &Problem<'_>) -> Result<Vec<u16>, PartitionError> {
    let n = p.graph.num_nodes();
    let too_big = |entries: usize| {
        BadInput::new(format!(
            "--method metis: the graph has {n} nodes and {entries} symmetric adjacency entries, more than METIS' \
             32-bit indices hold ({}); use --method ldg",
            Idx::MAX
        ))
    };
    // The symmetric graph has at least as many entries as there are distinct
    // non-loop stored ones: past twice the limit it cannot fit, so refuse
    // before spending memory on symmetrising.
    if n >= Idx::MAX as usize || p.graph.num_edges() / 2 > Idx::MAX as usize {
        return Err(too_big(p.graph.num_edges()).into());
    }
    let sym = p.graph.to_undirected();
    let entries = sym.indices.len();
    if entries > Idx::MAX as usize {
        return Err(too_big(entries).into());
    }
    let xadj: Vec<Idx> = sym.indptr.iter().map(|&x| x as Idx).collect();
    let adjncy: Vec<Idx> = sym.indices.into_iter().map(|u| u as Idx).collect();

    // A train constraint over zero train vertices would divide by zero inside METIS.
    let train = p.balance.train && p.num_train() > 0;
    let nodes = p.balance.nodes || !train;
    let ncon = nodes as usize + train as usize;
    let mut vwgt: Vec<Idx> = Vec::with_capacity(n * ncon);
    for &t in p.is_train {
        if nodes {
            vwgt.push(1);
        }
        if train {
            vwgt.push(t as Idx);
        }
    }
    let ubvec = vec![IMBALANCE as metis::Real; ncon];
    let seed = (mix64(p.seed) & 0x3fff_ffff) as Idx;

    let failed = |detail: String| PartitionError::Metis { nodes: n, entries, detail };
    let mut part: Vec<Idx> = vec![0; n];
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let call = || {
        metis::Graph::new(ncon as Idx, p.parts as Idx, &xadj, &adjncy)
            .map_err(|e| Err(format!("{e:?}")))?
            .set_vwgt(&vwgt)
            .set_ubvec(&ubvec)
            .set_option(metis::option::Seed(seed))
            .part_kway(&mut part)
            .map_err(Ok)
    };
    // METIS prints its complaints on stdout, where `--json` output goes.
    // Signals from outside reach this process's own handlers meanwhile (`gk_signals`).
    let (done, said) =
        crate::util::c_stdout::capture(call).map_err(|e| failed(format!("cannot set its output aside: {e}")))?;
    let done = done.map_err(|e| e.map_or_else(|setup| setup, |m| m.to_string()));
    let said = first_lines(&said);
    done.map_err(|e| failed(if said.is_empty() { e } else { format!("{e}: {said}") }))?;
    let part: Vec<u16> = part.into_iter().map(|q| q as u16).collect();
    if !said.is_empty() {
        tracing::debug!("METIS said: {said}");
    }
    Ok(part)
}

/// METIS' distinct complaints, on one line.
fn first_lines(text: &str) -> String {
    let mut lines: Vec<&str> = Vec::new();
    for l in text.lines().map(|l| l.trim().trim_start_matches('*')).filter(|l| !l.is_empty()) {
        if !lines.contains(&l) && lines.len() < 3 {
            lines.push(l);
        }
    }
    lines.join("; ")
}
