//! SNAP/LAW text edge lists: `from to [anything]` per line (tabs, spaces or
//! commas), optionally gzip-compressed, `#` and `%` comment lines skipped.
//! Direction is kept unless `symmetrize`. Without a node count, nodes are
//! 0..=largest id. There are no features (generated ones are used) and no
//! labels (unless `generated_classes`).

use super::ConvertOptions;
use super::build::Raw;
use super::lines::{Lines, parse_edge};
use crate::datasets::DatasetError;
use crate::datasets::source::Source;
use std::path::Path;

const EXTENSIONS: [&str; 8] = [".txt", ".txt.gz", ".tsv", ".tsv.gz", ".csv", ".csv.gz", ".edges", ".edges.gz"];

pub fn read(path: &Path, opts: &ConvertOptions) -> Result<Raw, DatasetError> {
    let mut src = Source::open(path)?;
    let name = pick_file(&src)?;
    let shown = src.display(&name);
    let limit = opts.num_nodes.map(|n| n as usize);
    let mut lines = Lines::new(shown, src.open_part(&name)?);
    let mut edges = Vec::new();
    let mut max_id = None::<u32>;
    while let Some((l, at)) = lines.next_line()? {
        let t = l.trim_start();
        if t.is_empty() || t.starts_with('#') || t.starts_with('%') {
            continue;
        }
        let (u, v) = parse_edge(t, limit, true).map_err(|m| at.err(m))?;
        max_id = max_id.max(Some(u.max(v)));
        edges.push((u, v));
    }
    let num_nodes = limit.unwrap_or(max_id.map_or(0, |m| m as usize + 1));
    if limit.is_none() {
        let fix = "or set num_nodes in its datasets.toml entry";
        super::lines::check_implied_nodes(num_nodes, edges.len(), &lines.loc().file, fix)?;
    }
    Ok(Raw { num_nodes, edges, ..Default::default() })
}

/// A plain file is the edge list; in a zip or directory, the only edge-list-like file.
fn pick_file(src: &Source) -> Result<String, DatasetError> {
    if let [only] = src.names() {
        return Ok(only.clone());
    }
    let found: Vec<&String> = src.names().iter().filter(|n| EXTENSIONS.iter().any(|e| n.ends_with(e))).collect();
    match found.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(DatasetError::invalid(src.path().display().to_string(), "no edge list (.txt, .tsv, .csv) in it")),
        many => Err(DatasetError::invalid(
            src.path().display().to_string(),
            format!(
                "holds several files that could be the edge list: {}",
                many.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}
