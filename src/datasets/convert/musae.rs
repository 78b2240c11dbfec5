//! MUSAE social graphs (SNAP facebook-large, twitch, ...): `STEM_edges.csv`
//! (header, then `a,b`), `STEM_features.json` (node id -> active feature
//! columns) and `STEM_target.csv` (a node id column and a label column), in a
//! directory or a zip. Undirected; split seeded 60/20/20.
//!
//! Labels are the label column's distinct values in sorted order (numeric
//! order when all are integers), so facebook's page_type gives company=0,
//! government=1, politician=2, tvshow=3.

use super::ConvertOptions;
use super::build::{Raw, SparseRows};
use super::lines::{Lines, parse_edge, parse_id};
use super::split::SplitRule;
use crate::datasets::DatasetError;
use crate::datasets::source::Source;
use std::collections::HashMap;
use std::path::Path;

pub const DEFAULT_SPLIT: [f64; 3] = [0.6, 0.2, 0.2];

pub fn read(path: &Path, opts: &ConvertOptions) -> Result<Raw, DatasetError> {
    let mut src = Source::open(path)?;
    let stem = find_stem(&src, opts.prefix.as_deref())?;
    let edges_name = src.require(&format!("{stem}_edges.csv"))?;
    let features_name = src.require(&format!("{stem}_features.json"))?;
    let target_name = src.require(&format!("{stem}_target.csv"))?;

    let (labels, num_classes) = read_target(&mut src, &target_name, opts)?;
    let n = labels.len();
    let edges = read_edges(&mut src, &edges_name, n)?;
    let features = read_features(&mut src, &features_name, n)?;
    Ok(Raw {
        num_nodes: n,
        edges,
        features: Some(features),
        labels: Some(labels),
        num_classes,
        split: SplitRule::Fractions(DEFAULT_SPLIT),
    })
}

/// The `STEM` of the only `STEM_edges.csv` (or the one matching `prefix`).
fn find_stem(src: &Source, prefix: Option<&str>) -> Result<String, DatasetError> {
    let stems: Vec<&str> = src
        .names()
        .iter()
        .filter_map(|n| n.strip_suffix("_edges.csv"))
        .filter(|stem| match prefix {
            Some(p) => {
                let file = stem.rsplit('/').next().unwrap_or(stem);
                file == p || file.ends_with(&format!("_{p}"))
            }
            None => true,
        })
        .collect();
    match stems.as_slice() {
        [one] => Ok(one.rsplit('/').next().unwrap_or(one).to_owned()),
        [] => Err(DatasetError::invalid(
            src.path().display().to_string(),
            format!("no {}_edges.csv in it; is this a MUSAE dataset?", prefix.unwrap_or("*")),
        )),
        many => Err(DatasetError::invalid(
            src.path().display().to_string(),
            format!("holds several MUSAE graphs ({}); choose one with prefix = \"...\"", many.join(", ")),
        )),
    }
}

/// Splits one CSV record, honouring double quotes (`"a, b"`, `""` = `"`).
pub fn split_csv(line: &str, out: &mut Vec<String>) {
    out.clear();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
}

fn read_target(src: &mut Source, name: &str, opts: &ConvertOptions) -> Result<(Vec<i32>, u32), DatasetError> {
    let shown = src.display(name);
    let mut lines = Lines::new(shown, src.open_part(name)?);
    let mut rec = Vec::new();
    let Some((header, at)) = lines.next_line()? else {
        return Err(lines.loc().invalid("empty file; expected a header line"));
    };
    split_csv(header, &mut rec);
    let col = |want: &str| rec.iter().position(|h| h.trim() == want);
    // Twitch's target keeps the crawl id in `id` and the graph's id in `new_id`.
    let id_col = match &opts.id_column {
        Some(c) => col(c).ok_or_else(|| at.err(format!("no column `{c}` in the header")))?,
        None => col("new_id").or_else(|| col("id")).ok_or_else(|| at.err("no `id` column; set id_column"))?,
    };
    let label_col = match &opts.label_column {
        Some(c) => col(c).ok_or_else(|| at.err(format!("no column `{c}` in the header")))?,
        None => ["page_type", "target", "mature", "label"]
            .iter()
            .find_map(|c| col(c))
            .ok_or_else(|| at.err("no label column (page_type, target, mature, label); set label_column"))?,
    };
    let width = rec.len();
    let mut rows: Vec<(u32, String, u64)> = Vec::new();
    while let Some((l, at)) = lines.next_line()? {
        if l.trim().is_empty() {
            continue;
        }
        split_csv(l, &mut rec);
        if rec.len() != width {
            return Err(at.err(format!("{} fields, the header has {width}", rec.len())));
        }
        let id = parse_id(rec[id_col].trim(), "node id").map_err(|m| at.err(m))?;
        rows.push((id, rec[label_col].trim().to_owned(), at.line));
    }
    let n = rows.len();
    let mut classes: Vec<&str> = rows.iter().map(|(_, c, _)| c.as_str()).collect();
    classes.sort_unstable();
    classes.dedup();
    if classes.iter().all(|c| c.parse::<i64>().is_ok()) {
        classes.sort_by_key(|c| c.parse::<i64>().unwrap_or_default());
    }
    let class_of: HashMap<&str, i32> = classes.iter().enumerate().map(|(i, c)| (*c, i as i32)).collect();
    let mut labels = vec![-2i32; n];
    let file = &lines.loc().file;
    for (id, c, line) in &rows {
        let v = *id as usize;
        if v >= n {
            return Err(DatasetError::parse(file, *line, format!("node id {v} is beyond the node count {n}")));
        }
        if labels[v] != -2 {
            return Err(DatasetError::parse(file, *line, format!("node id {v} appears twice")));
        }
        labels[v] = class_of[c.as_str()];
    }
    Ok((labels, classes.len() as u32))
}

fn read_edges(src: &mut Source, name: &str, n: usize) -> Result<Vec<(u32, u32)>, DatasetError> {
    let shown = src.display(name);
    let mut lines = Lines::new(shown, src.open_part(name)?);
    let mut edges = Vec::new();
    while let Some((l, at)) = lines.next_line()? {
        if l.trim().is_empty() || (at.line == 1 && !l.starts_with(|c: char| c.is_ascii_digit())) {
            continue; // the header
        }
        edges.push(parse_edge(l, Some(n), false).map_err(|m| at.err(m))?);
    }
    Ok(edges)
}

fn read_features(src: &mut Source, name: &str, n: usize) -> Result<super::build::Dense, DatasetError> {
    let shown = src.display(name);
    let bytes = src.read_part(name)?;
    let map: HashMap<String, Vec<u32>> =
        serde_json::from_slice(super::lines::strip_bom_bytes(&bytes)).map_err(|e| {
            DatasetError::parse(&shown, e.line() as u64, format!("not a JSON object of id -> [columns]: {e}"))
        })?;
    let mut by_node: Vec<Option<&Vec<u32>>> = vec![None; n];
    for (k, cols) in &map {
        let v = parse_id(k, "node id").map_err(|m| DatasetError::invalid(&shown, m))? as usize;
        if v >= n {
            return Err(DatasetError::invalid(&shown, format!("node id {v} is beyond the node count {n}")));
        }
        by_node[v] = Some(cols);
    }
    let mut rows = SparseRows::new();
    for cols in by_node {
        rows.push_row(cols.into_iter().flatten().copied());
    }
    rows.to_dense(n, rows.min_dim()).map_err(|m| DatasetError::invalid(&shown, m))
}

#[cfg(test)]
mod tests {
    use super::split_csv;

    #[test]
    fn csv_quotes_are_honoured() {
        let mut out = Vec::new();
        split_csv(r#"56,378,"Division, Illinois ""DNR""",government"#, &mut out);
        assert_eq!(out, ["56", "378", r#"Division, Illinois "DNR""#, "government"]);
        split_csv("a,,b", &mut out);
        assert_eq!(out, ["a", "", "b"]);
    }
}
