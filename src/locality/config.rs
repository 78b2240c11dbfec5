//! What to analyse: the grid of (partition method, #servers, sampling, depth)
//! and the batch settings, with the paper's defaults.

use crate::BadInput;
use crate::partition::{MAX_PARTS, Method};
use std::fmt;
use std::str::FromStr;

/// How a sample grows from its roots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sampling {
    /// GraphSAGE style: up to `fanout` in-neighbours per vertex and layer.
    Node,
    /// FastGCN/LADIES style: a budget of `fanout` vertices per root and layer,
    /// drawn from the union neighbourhood with degree-based importance.
    Layer,
}

impl Sampling {
    pub fn name(self) -> &'static str {
        match self {
            Sampling::Node => "node",
            Sampling::Layer => "layer",
        }
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Sampling {
    type Err = BadInput;
    fn from_str(s: &str) -> Result<Self, BadInput> {
        match s {
            "node" | "node-wise" => Ok(Sampling::Node),
            "layer" | "layer-wise" => Ok(Sampling::Layer),
            _ => Err(BadInput::new(format!("--sampling {s}: unknown sampling; use node or layer"))),
        }
    }
}

/// The paper's fanouts: 10 for shallow models (2L), 2 for deep ones (10L),
/// so that a deep micrograph stays a few thousand vertices.
pub fn default_fanout(layers: usize) -> u32 {
    if layers <= 3 { 10 } else { 2 }
}

/// One row of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setting {
    pub method: Method,
    pub parts: usize,
    pub sampling: Sampling,
    pub layers: usize,
    pub fanout: u32,
}

/// Everything `analyze-locality` is asked.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    pub methods: Vec<Method>,
    /// Numbers of servers S (= workers W = partitions).
    pub parts: Vec<usize>,
    pub samplings: Vec<Sampling>,
    /// GNN depths (number of sampled layers).
    pub layers: Vec<usize>,
    /// Fanout (node-wise) or per-root layer budget (layer-wise); None = `default_fanout`.
    pub fanout: Option<u32>,
    /// Roots per worker mini-batch (B).
    pub batch_size: usize,
    /// Worker mini-batches analysed per row, rounded up to whole iterations of S batches.
    pub batches: usize,
    /// Micrographs whose locality is measured (the first roots of the analysed batches).
    pub micrographs: usize,
    /// Hidden size of the model whose naive migration is costed.
    pub hidden: usize,
    /// Seeds the epoch's shuffle and the sampler, as `train --seed` does.
    pub seed: u64,
    /// Keep the partitions the analysis had to create (`--no-keep` drops them).
    pub keep: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            methods: vec![Method::Metis, Method::Random],
            parts: vec![2, 4, 8, 16],
            samplings: vec![Sampling::Node, Sampling::Layer],
            layers: vec![2, 10],
            fanout: None,
            batch_size: 1024,
            batches: 20,
            micrographs: 4096,
            hidden: 128,
            seed: 0,
            keep: true,
        }
    }
}

impl Options {
    /// Rejects values that cannot work on any graph, naming the flag.
    pub fn check(&self) -> Result<(), BadInput> {
        let bad = |m: String| Err(BadInput::new(m));
        for (flag, empty) in [
            ("--method", self.methods.is_empty()),
            ("--parts", self.parts.is_empty()),
            ("--sampling", self.samplings.is_empty()),
            ("--layers", self.layers.is_empty()),
        ] {
            if empty {
                return bad(format!("{flag} needs at least one value"));
            }
        }
        for &s in &self.parts {
            if s < 2 {
                return bad(format!("--parts {s}: need at least 2 servers"));
            }
            if s > MAX_PARTS {
                return bad(format!("--parts {s}: at most {MAX_PARTS} servers (part ids are 16-bit)"));
            }
        }
        if let Some(&l) = self.layers.iter().find(|&&l| l == 0 || l > 64) {
            return bad(format!("--layers {l}: a model has 1 to 64 layers"));
        }
        if self.fanout == Some(0) {
            return bad("--fanout 0: every layer must keep at least one neighbour".into());
        }
        for (flag, v) in
            [("--batch-size", self.batch_size), ("--batches", self.batches), ("--micrographs", self.micrographs)]
        {
            if v == 0 {
                return bad(format!("{flag} must be at least 1"));
            }
        }
        if self.hidden == 0 {
            return bad("--hidden must be at least 1".into());
        }
        Ok(())
    }

    /// Rejects more servers than the graph has vertices.
    pub fn check_graph(&self, num_nodes: usize) -> Result<(), BadInput> {
        match self.parts.iter().find(|&&s| s > num_nodes) {
            Some(s) => Err(BadInput::new(format!("--parts {s}: more servers than the {num_nodes} nodes of the graph"))),
            None => Ok(()),
        }
    }

    /// Every row, in output order: method, then S, then sampling, then depth.
    pub fn grid(&self) -> Vec<Setting> {
        let mut out = Vec::new();
        for &method in &self.methods {
            for &parts in &self.parts {
                for &sampling in &self.samplings {
                    for &layers in &self.layers {
                        let fanout = self.fanout.unwrap_or_else(|| default_fanout(layers));
                        out.push(Setting { method, parts, sampling, layers, fanout });
                    }
                }
            }
        }
        out
    }
}

/// Parses a comma-separated list for `flag` (duplicates dropped, order kept).
pub fn parse_list<T: FromStr + PartialEq>(flag: &str, s: &str) -> Result<Vec<T>, BadInput>
where
    T::Err: fmt::Display,
{
    let mut out: Vec<T> = Vec::new();
    for part in s.split(',').map(str::trim) {
        let v = part.parse::<T>().map_err(|e| {
            let why = e.to_string();
            // The item's own error usually names the flag already.
            if why.starts_with("--") {
                BadInput::new(why)
            } else {
                BadInput::new(format!("{flag} {s}: `{part}`: {why}"))
            }
        })?;
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_paper() {
        let o = Options::default();
        let g = o.grid();
        assert_eq!(g.len(), 2 * 4 * 2 * 2);
        assert_eq!(g[0], Setting { method: Method::Metis, parts: 2, sampling: Sampling::Node, layers: 2, fanout: 10 });
        assert_eq!(g[1].fanout, 2);
        assert!(o.check().is_ok() && o.check_graph(100).is_ok());
        assert!(o.check_graph(10).unwrap_err().0.contains("--parts 16"));
    }

    #[test]
    fn lists_parse_and_reject_junk() {
        assert_eq!(parse_list::<usize>("--parts", "2, 4,2").unwrap(), vec![2, 4]);
        assert!(parse_list::<usize>("--parts", "2,x").unwrap_err().0.contains("--parts 2,x"));
        assert_eq!(parse_list::<Sampling>("--sampling", "layer").unwrap(), vec![Sampling::Layer]);
        assert!(parse_list::<Method>("--method", "magic").unwrap_err().0.starts_with("--method magic"));
        let zero = Options { fanout: Some(0), ..Options::default() };
        assert!(zero.check().unwrap_err().0.contains("--fanout 0"));
    }
}
