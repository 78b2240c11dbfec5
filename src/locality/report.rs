//! The result: one row per (method, S, sampling, depth), printed as the
//! paper's table, as JSON (`--json`) or as CSV (`--csv`).

use super::Sampling;
use crate::format::{FormatError, write_atomic};
use std::fmt::Write as _;
use std::path::Path;

/// One configuration. Rows and bytes are per iteration and worker (averages
/// over the analysed worker batches); miss rates are remote / requested rows.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    pub method: String,
    pub parts: usize,
    pub sampling: Sampling,
    pub layers: usize,
    pub fanout: u32,
    /// Iterations analysed (each of `parts` worker batches).
    pub iterations: usize,
    /// Roots in those iterations.
    pub roots: usize,
    /// Micrographs behind `locality_pct`.
    pub micrographs: u64,
    pub locality_pct: f64,
    /// 100 / S: the locality a random placement gives.
    pub r_sub_pct: f64,
    pub miss_model_centric: f64,
    pub miss_micrograph: f64,
    pub miss_pregather: f64,
    pub rows_model_centric: f64,
    pub rows_micrograph: f64,
    pub rows_pregather: f64,
    pub remote_rows_model_centric: f64,
    pub remote_rows_micrograph: f64,
    pub remote_rows_pregather: f64,
    /// The rows' bytes as the feature service sends them: rows x feature dim
    /// x 4 for dense features; a count plus a column and a value per non-zero
    /// for features stored sparse (`RowRef::wire_bytes`).
    pub bytes_model_centric: f64,
    pub bytes_micrograph: f64,
    pub bytes_pregather: f64,
    pub remote_bytes_model_centric: f64,
    pub remote_bytes_micrograph: f64,
    pub remote_bytes_pregather: f64,
    /// Naive per-layer model migration (see `naive`): total and its parts.
    pub bytes_naive_migration: f64,
    pub naive_hops: f64,
    pub naive_bytes_params: f64,
    pub naive_bytes_partial: f64,
    pub naive_bytes_intermediate: f64,
    pub partition_seed: u64,
    /// Time spent on this row (work shared by the rows of one sampling and
    /// depth is split evenly among them).
    pub seconds: f64,
}

/// What `analyze-locality --json` prints.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    pub dataset: String,
    pub nodes: usize,
    pub edges: usize,
    pub feature_dim: usize,
    pub classes: usize,
    pub train: usize,
    pub batch_size: usize,
    pub batches: usize,
    pub micrographs: usize,
    pub hidden: usize,
    pub seed: u64,
    pub rows: Vec<Row>,
    pub seconds: f64,
}

/// A column-aligned text table: first column left-aligned, the rest right-aligned.
struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    fn new(header: &[&str]) -> Self {
        Table { rows: vec![header.iter().map(|s| s.to_string()).collect()] }
    }
    fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }
    fn render(&self, out: &mut String) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width: Vec<usize> =
            (0..cols).map(|c| self.rows.iter().filter_map(|r| r.get(c)).map(|s| s.len()).max().unwrap_or(0)).collect();
        for r in &self.rows {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                let w = width[c];
                let _ = if c == 0 { write!(line, "{cell:<w$}") } else { write!(line, "  {cell:>w$}") };
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
}

fn mb(bytes: f64) -> String {
    format!("{:.2}", bytes / 1e6)
}

fn pct(rate: f64) -> String {
    format!("{:.1}", 100.0 * rate)
}

impl Report {
    /// The paper's table (locality per sampling and S, one column per method
    /// and depth, R_sub last) followed by every figure per row.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Data locality in micrographs (%): {} ({} nodes), {} roots per worker batch, seed {}",
            self.dataset, self.nodes, self.batch_size, self.seed
        );
        let mut cols: Vec<(String, usize)> = Vec::new();
        let mut keys: Vec<(Sampling, usize)> = Vec::new();
        for r in &self.rows {
            if !cols.contains(&(r.method.clone(), r.layers)) {
                cols.push((r.method.clone(), r.layers));
            }
            if !keys.contains(&(r.sampling, r.parts)) {
                keys.push((r.sampling, r.parts));
            }
        }
        keys.sort_by_key(|&(s, p)| (s != Sampling::Node, p));
        let mut header = vec!["sampling".to_string(), "S".to_string()];
        header.extend(cols.iter().map(|(m, l)| format!("{m} {l}L")));
        header.push("R_sub".into());
        let mut t = Table::new(&header.iter().map(String::as_str).collect::<Vec<_>>());
        let mut last = None;
        for &(sampling, parts) in &keys {
            let mut line =
                vec![if last == Some(sampling) { String::new() } else { sampling.to_string() }, parts.to_string()];
            last = Some(sampling);
            for (m, l) in &cols {
                let cell = self
                    .rows
                    .iter()
                    .find(|r| r.sampling == sampling && r.parts == parts && &r.method == m && r.layers == *l);
                line.push(cell.map_or("-".into(), |r| format!("{:.1}", r.locality_pct)));
            }
            line.push(format!("{:.1}", 100.0 / parts as f64));
            t.push(line);
        }
        t.render(&mut out);
        out.push('\n');
        let _ = writeln!(
            out,
            "Per iteration and worker (MC = model-centric, MG = micrograph, PG = pregather; MB = 10^6 bytes):"
        );
        let mut t = Table::new(&[
            "method", "S", "sampling", "layers", "fanout", "iters", "local%", "Rsub%", "missMC%", "missMG%", "missPG%",
            "rowsMC", "rowsMG", "rowsPG", "MB MC", "MB MG", "MB PG", "naive MB", "seconds",
        ]);
        for r in &self.rows {
            t.push(vec![
                r.method.clone(),
                r.parts.to_string(),
                r.sampling.to_string(),
                r.layers.to_string(),
                r.fanout.to_string(),
                r.iterations.to_string(),
                format!("{:.1}", r.locality_pct),
                format!("{:.1}", r.r_sub_pct),
                pct(r.miss_model_centric),
                pct(r.miss_micrograph),
                pct(r.miss_pregather),
                format!("{:.0}", r.rows_model_centric),
                format!("{:.0}", r.rows_micrograph),
                format!("{:.0}", r.rows_pregather),
                mb(r.bytes_model_centric),
                mb(r.bytes_micrograph),
                mb(r.bytes_pregather),
                mb(r.bytes_naive_migration),
                format!("{:.2}", r.seconds),
            ]);
        }
        t.render(&mut out);
        out
    }

    /// The rows as CSV (header = the JSON field names), written atomically.
    pub fn write_csv(&self, path: &Path) -> Result<(), FormatError> {
        let mut w = csv::Writer::from_writer(Vec::new());
        for r in &self.rows {
            w.serialize(r).map_err(|e| FormatError::io(path, std::io::Error::other(e)))?;
        }
        let bytes = w.into_inner().map_err(|e| FormatError::io(path, std::io::Error::other(e.to_string())))?;
        write_atomic(path, &bytes)
    }
}
