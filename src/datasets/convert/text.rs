//! The plain-text Planetoid layout: `PREFIX.edges.txt` (`u v` per line),
//! `PREFIX.labels.txt` (one label per node, -1 = none), `PREFIX.features.txt`
//! (a `#` header with `dim=D`, then per node the columns that are 1; an empty
//! line = no features), `PREFIX.{train,val,test}.txt` (node ids). Only the
//! edges file is required. The graph is undirected.

use super::ConvertOptions;
use super::build::{Raw, SparseRows};
use super::lines::{Lines, fields, parse_edge, parse_id, parse_label, read_id_list};
use super::split::{PLANETOID, SplitRule};
use crate::datasets::DatasetError;
use std::fs::File;
use std::path::{Path, PathBuf};

/// `PATH` is `DIR/PREFIX`, `DIR/PREFIX.edges.txt`, or a directory (with
/// `prefix` from the options, or its only `*.edges.txt`).
pub fn read(path: &Path, opts: &ConvertOptions) -> Result<Raw, DatasetError> {
    let base = resolve_prefix(path, opts.prefix.as_deref())?;
    let part = |ext: &str| PathBuf::from(format!("{}.{ext}", base.display()));

    let labels = match open_if_present(&part("labels.txt"))? {
        Some(mut l) => Some(read_labels(&mut l)?),
        None => None,
    };
    let features = match open_if_present(&part("features.txt"))? {
        Some(mut l) => Some(read_features(&mut l)?),
        None => None,
    };
    let known_n = match (&labels, &features) {
        (Some(l), Some((rows, _))) if l.len() != rows.num_rows() => {
            return Err(DatasetError::invalid(
                part("features.txt").display().to_string(),
                format!("{} feature rows but {} has {} labels", rows.num_rows(), part("labels.txt").display(), l.len()),
            ));
        }
        (Some(l), _) => Some(l.len()),
        (None, Some((rows, _))) => Some(rows.num_rows()),
        (None, None) => None,
    };

    let edges_path = part("edges.txt");
    if !edges_path.is_file() {
        return Err(DatasetError::input(format!(
            "--from {}: no {} (a text dataset is PREFIX.edges.txt, with PREFIX.labels.txt, .features.txt and \
             .train/.val/.test.txt beside it when it has them)",
            path.display(),
            edges_path.display()
        )));
    }
    let mut lines = open(&edges_path)?;
    let mut edges = Vec::new();
    while let Some((l, at)) = lines.next_line()? {
        if l.trim().is_empty() || l.starts_with('#') {
            continue;
        }
        edges.push(parse_edge(l, known_n, false).map_err(|m| at.err(m))?);
    }
    let n = known_n.unwrap_or_else(|| edges.iter().map(|&(u, v)| u.max(v) as usize + 1).max().unwrap_or(0));
    if known_n.is_none() {
        let fix = format!("or give {} to fix the node count", part("labels.txt").display());
        super::lines::check_implied_nodes(n, edges.len(), &edges_path.display().to_string(), &fix)?;
    }

    let mut splits: [Option<Vec<u32>>; 3] = Default::default();
    for (slot, ext) in splits.iter_mut().zip(["train.txt", "val.txt", "test.txt"]) {
        if let Some(mut l) = open_if_present(&part(ext))? {
            *slot = Some(read_id_list(&mut l, n)?);
        }
    }
    let split = if splits.iter().any(Option::is_some) {
        SplitRule::Given(splits.map(Option::unwrap_or_default))
    } else {
        PLANETOID
    };

    let features = match features {
        Some((rows, dim)) => Some(
            rows.to_dense(n, dim).map_err(|m| DatasetError::invalid(part("features.txt").display().to_string(), m))?,
        ),
        None => None,
    };
    Ok(Raw { num_nodes: n, edges, features, labels, num_classes: 0, split })
}

fn resolve_prefix(path: &Path, prefix: Option<&str>) -> Result<PathBuf, DatasetError> {
    let shown = path.display().to_string();
    if path.is_dir() {
        if let Some(p) = prefix {
            return Ok(path.join(p));
        }
        let mut found: Vec<String> = std::fs::read_dir(path)
            .map_err(|e| DatasetError::io(path, e))?
            .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".edges.txt").map(str::to_owned))
            .collect();
        found.sort();
        return match found.as_slice() {
            [one] => Ok(path.join(one)),
            [] => Err(DatasetError::invalid(shown, "no PREFIX.edges.txt in this directory")),
            many => Err(DatasetError::invalid(
                shown,
                format!("holds several graphs ({}); pass --from DIR/PREFIX", many.join(", ")),
            )),
        };
    }
    if let Some(stripped) = shown.strip_suffix(".edges.txt") {
        return Ok(PathBuf::from(stripped));
    }
    if Path::new(&format!("{shown}.edges.txt")).is_file() {
        return Ok(path.to_path_buf());
    }
    Err(DatasetError::invalid(shown.clone(), format!("neither a directory nor a prefix of {shown}.edges.txt")))
}

fn open(p: &Path) -> Result<Lines<File>, DatasetError> {
    let f = File::open(p).map_err(|e| DatasetError::io(p, e))?;
    Ok(Lines::new(p.display().to_string(), f))
}

fn open_if_present(p: &Path) -> Result<Option<Lines<File>>, DatasetError> {
    if p.is_file() { open(p).map(Some) } else { Ok(None) }
}

fn read_labels(lines: &mut Lines<File>) -> Result<Vec<i32>, DatasetError> {
    let mut labels = Vec::new();
    while let Some((l, at)) = lines.next_line()? {
        let l = l.trim();
        if l.starts_with('#') {
            continue;
        }
        labels.push(parse_label(l).map_err(|m| at.err(m))?);
    }
    Ok(labels)
}

/// Rows of column indices and the dimension (`dim=` in the header, else the largest column + 1).
fn read_features(lines: &mut Lines<File>) -> Result<(SparseRows, u32), DatasetError> {
    let mut rows = SparseRows::new();
    let mut dim: Option<u32> = None;
    let mut cols = Vec::new();
    while let Some((l, at)) = lines.next_line()? {
        if let Some(header) = l.strip_prefix('#') {
            if rows.num_rows() == 0 && dim.is_none() {
                dim = header_dim(header).map_err(|m| at.err(m))?;
            }
            continue;
        }
        cols.clear();
        for tok in fields(l) {
            let c = parse_id(tok, "feature column").map_err(|m| at.err(m))?;
            if let Some(d) = dim
                && c >= d
            {
                return Err(at.err(format!("feature column {c} is beyond the header's dim={d}")));
            }
            cols.push(c);
        }
        rows.push_row(cols.iter().copied());
    }
    let dim = dim.unwrap_or_else(|| rows.min_dim());
    Ok((rows, dim))
}

fn header_dim(header: &str) -> Result<Option<u32>, String> {
    for tok in header.split(|c: char| c.is_ascii_whitespace() || c == ';' || c == ',') {
        if let Some(v) = tok.strip_prefix("dim=") {
            return v.parse().map(Some).map_err(|_| format!("header `dim={v}` is not a number"));
        }
    }
    Ok(None)
}
