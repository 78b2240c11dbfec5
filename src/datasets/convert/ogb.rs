//! OGB node-property zips (`NAME/raw/edge.csv.gz`, `node-feat.csv.gz`,
//! `node-label.csv.gz`, `num-node-list.csv.gz`, `split/KIND/{train,valid,
//! test}.csv.gz`), as the zip or its extracted directory. The edge and
//! feature files (tens of millions of lines for products) are parsed in
//! parallel per block. The split is the first directory under `split/`
//! (or `split_name`). Stored symmetrised by default, as DGL's `to_bidirected`.
//!
//! The binary layout of ogbn-papers100M (`raw/data.npz`) is recognised and
//! refused: converting it needs about 100 GB of memory.

use super::ConvertOptions;
use super::build::{Dense, Raw};
use super::lines::{Lines, for_each_block, parse_edge, parse_id, read_id_list};
use super::split::SplitRule;
use crate::datasets::DatasetError;
use crate::datasets::source::Source;
use rayon::prelude::*;
use std::path::Path;

pub fn read(path: &Path, opts: &ConvertOptions) -> Result<Raw, DatasetError> {
    let mut src = Source::open(path)?;
    if src.find("raw/data.npz").is_some() {
        return Err(DatasetError::input(format!(
            "{}: the binary OGB layout (raw/data.npz, ogbn-papers100M) is not supported yet: it needs ~100 GB of memory to convert",
            path.display()
        )));
    }
    let edge_name = src.require("raw/edge.csv.gz")?;
    let n = match src.find("raw/num-node-list.csv.gz").map(str::to_owned) {
        Some(name) => read_num_nodes(&mut src, &name)?,
        None => {
            let name = src.require("raw/node-label.csv.gz")?;
            count_lines(&mut src, &name)?
        }
    };
    let edges = read_edges(&mut src, &edge_name, n)?;
    let features = match src.find("raw/node-feat.csv.gz").map(str::to_owned) {
        Some(name) => Some(read_features(&mut src, &name, n)?),
        None => None,
    };
    let labels = match src.find("raw/node-label.csv.gz").map(str::to_owned) {
        Some(name) => Some(read_labels(&mut src, &name, n)?),
        None => None,
    };
    let split = read_split(&mut src, n, opts.split_name.as_deref())?;
    Ok(Raw { num_nodes: n, edges, features, labels, num_classes: 0, split })
}

fn read_num_nodes(src: &mut Source, name: &str) -> Result<usize, DatasetError> {
    let shown = src.display(name);
    let mut lines = Lines::new(shown, src.open_part(name)?);
    let mut total = 0usize;
    while let Some((l, at)) = lines.next_line()? {
        if !l.trim().is_empty() {
            total += parse_id(l.trim(), "node count").map_err(|m| at.err(m))? as usize;
            if total > u32::MAX as usize {
                return Err(at.err(format!("{total} nodes in all: node ids must fit in 32 bits")));
            }
        }
    }
    Ok(total)
}

fn count_lines(src: &mut Source, name: &str) -> Result<usize, DatasetError> {
    let shown = src.display(name);
    let mut n = 0;
    for_each_block(src.open_part(name)?, &shown, |_, lines| {
        n += lines.len();
        Ok(())
    })?;
    Ok(n)
}

fn read_edges(src: &mut Source, name: &str, n: usize) -> Result<Vec<(u32, u32)>, DatasetError> {
    let shown = src.display(name);
    let mut edges = Vec::new();
    for_each_block(src.open_part(name)?, &shown, |first, lines| {
        let parsed: Vec<(u32, u32)> = lines
            .par_iter()
            .enumerate()
            .map(|(i, l)| parse_edge(l, Some(n), false).map_err(|m| DatasetError::parse(&shown, first + i as u64, m)))
            .collect::<Result<_, _>>()?;
        edges.extend_from_slice(&parsed);
        Ok(())
    })?;
    Ok(edges)
}

fn read_features(src: &mut Source, name: &str, n: usize) -> Result<Dense, DatasetError> {
    let shown = src.display(name);
    let mut values: Vec<f32> = Vec::new();
    let mut dim = 0usize;
    let mut rows = 0usize;
    for_each_block(src.open_part(name)?, &shown, |first, lines| {
        if dim == 0 {
            dim = lines.first().map_or(0, |l| l.split(',').count());
        }
        if rows + lines.len() > n {
            return Err(DatasetError::parse(&shown, (n + 1) as u64, format!("more feature rows than the {n} nodes")));
        }
        // Grown with the rows read, never sized from the node count (a header's claim).
        values.resize((rows + lines.len()) * dim, 0.0);
        let out = &mut values[rows * dim..(rows + lines.len()) * dim];
        out.par_chunks_mut(dim).zip(lines.par_iter()).enumerate().try_for_each(|(i, (row, l))| {
            let err = |m: String| DatasetError::parse(&shown, first + i as u64, m);
            let mut k = 0;
            for tok in l.split(',') {
                if k == dim {
                    return Err(err(format!("more than {dim} values (the first row has {dim})")));
                }
                let x = tok.trim().parse::<f32>().map_err(|_| err(format!("`{tok}` is not a number")))?;
                if !x.is_finite() {
                    return Err(err(format!("`{tok}` is not a finite number (features must be)")));
                }
                row[k] = x;
                k += 1;
            }
            if k != dim {
                return Err(err(format!("{k} values, the first row has {dim}")));
            }
            Ok(())
        })?;
        rows += lines.len();
        Ok(())
    })?;
    if rows != n {
        return Err(DatasetError::invalid(shown, format!("{rows} feature rows for {n} nodes")));
    }
    Ok(Dense { dim: dim as u32, values })
}

/// One label per line; `nan` or empty (unlabelled nodes) becomes -1.
fn read_labels(src: &mut Source, name: &str, n: usize) -> Result<Vec<i32>, DatasetError> {
    let shown = src.display(name);
    let mut lines = Lines::new(shown, src.open_part(name)?);
    let mut labels = Vec::new();
    while let Some((l, at)) = lines.next_line()? {
        let t = l.trim();
        let v = if t.is_empty() || t.eq_ignore_ascii_case("nan") {
            -1
        } else {
            // Some OGB files write labels as floats (`3.0`).
            let x: f64 = t.parse().map_err(|_| at.err(format!("label `{t}` is not a number")))?;
            if x.fract() != 0.0 || !(0.0..i32::MAX as f64).contains(&x) {
                return Err(at.err(format!("label `{t}` is not a class id")));
            }
            x as i32
        };
        labels.push(v);
    }
    if labels.len() != n {
        return Err(lines.loc().invalid(format!("{} labels for {n} nodes", labels.len())));
    }
    Ok(labels)
}

fn read_split(src: &mut Source, n: usize, want: Option<&str>) -> Result<SplitRule, DatasetError> {
    let mut kinds: Vec<String> = src
        .names()
        .iter()
        .filter_map(|p| p.strip_suffix("/train.csv.gz"))
        .filter_map(|d| d.rsplit_once("split/").map(|(_, k)| k.to_owned()))
        .filter(|k| !k.contains('/'))
        .collect();
    kinds.sort();
    kinds.dedup();
    let kind = match want {
        Some(w) if kinds.iter().any(|k| k == w) => w.to_owned(),
        Some(w) => {
            return Err(DatasetError::input(format!(
                "{}: no split `{w}` (has: {})",
                src.path().display(),
                kinds.join(", ")
            )));
        }
        None => match kinds.first() {
            Some(k) => k.clone(),
            None => return Ok(SplitRule::None),
        },
    };
    let mut ids: [Vec<u32>; 3] = Default::default();
    for (slot, part) in ids.iter_mut().zip(["train", "valid", "test"]) {
        let name = src.require(&format!("split/{kind}/{part}.csv.gz"))?;
        let shown = src.display(&name);
        *slot = read_id_list(&mut Lines::new(shown, src.open_part(&name)?), n)?;
    }
    Ok(SplitRule::Given(ids))
}
