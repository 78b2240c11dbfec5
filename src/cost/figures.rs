//! The cost model's figures: what one unit of each kind of work costs on a
//! cluster. They live in the `[cost]` table of a cluster profile; `tune-merge
//! --calibrate` measures them and writes the table back. Without a
//! calibration the defaults below apply: ROUGH guesses for a 10 Gb/s network
//! and one modern CPU core per worker, good for the shape of a prediction
//! (which T wins), not for its seconds.

use crate::BadInput;
use crate::cluster::Profile;
use crate::format::{FormatError, write_atomic};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Compute rate of one model kind. Units are per layer l of a block:
/// `edge` = sampled edges x input width, `row` = destination rows x input
/// width x output width (the dense transform), `input` = input rows x
/// feature dim (building the input matrix), plus a fixed cost per block.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ComputeRate {
    pub edge_seconds: f64,
    pub row_seconds: f64,
    pub input_seconds: f64,
    pub block_seconds: f64,
}

impl Default for ComputeRate {
    fn default() -> Self {
        // Forward + backward of GraphSAGE on 2 CPU threads (~5 GFLOP/s effective).
        ComputeRate { edge_seconds: 1.0e-9, row_seconds: 0.4e-9, input_seconds: 0.5e-9, block_seconds: 2.0e-4 }
    }
}

/// A measured link between two workers (the probe's figures).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Link {
    pub from: usize,
    pub to: usize,
    /// Bytes per second.
    pub bandwidth: f64,
    /// One-way latency, seconds.
    pub latency: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Figures {
    /// `default (rough, uncalibrated)` or what the calibration measured on.
    pub source: String,
    /// The dataset the calibration ran on (empty: uncalibrated, or calibrated
    /// before this was recorded). Compute and gather rates depend on it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub dataset: String,
    /// Any link without its own entry: bytes per second, one-way latency (s).
    pub bandwidth: f64,
    pub latency: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    /// Fixed cost of one feature request beyond the link latency (framing, dispatch).
    pub request_seconds: f64,
    /// Per remote row: the owner's lookup and copy, the requester's unpacking.
    pub remote_row_seconds: f64,
    /// Per byte of a local or cached row copied into the input matrix.
    pub local_byte_seconds: f64,
    /// Per request to an owner, the part of the fetch on the worker's own
    /// thread (building and sending it): a prefetch cannot hide it.
    pub issue_request_seconds: f64,
    /// Per byte of remote rows taken in from the replies on the worker's own
    /// thread: a prefetch cannot hide it either.
    pub reply_byte_seconds: f64,
    /// Sampling: per sampled edge and per block.
    pub sample_edge_seconds: f64,
    pub sample_block_seconds: f64,
    /// Compute rate per model (`sage`, `gcn`, ...); `default` for the others.
    pub compute: BTreeMap<String, ComputeRate>,
    /// Gradient all-reduce and optimizer step: fixed + per parameter.
    pub sync_seconds: f64,
    pub sync_param_seconds: f64,
    /// Cost of ending a time step (the workers meet before the next one).
    pub step_seconds: f64,
    /// Workers' times fluctuate, and a step waits for the slowest: the
    /// expected maximum exceeds the maximum of the expectations. A step lasts
    /// its slowest worker's predicted work x (1 + jitter).
    pub jitter: f64,
    /// Every worker pre-gathers at the same moment, so each host's link
    /// carries all its peers' flows at once (an incast at every host):
    /// that burst's transfer takes (1 + contention) x what the probed
    /// pairwise bandwidth gives. Per-step fetches spread out over the
    /// iteration and pay none of it.
    pub contention: f64,
    /// Memory a worker may use for one time step's blocks and rows (bytes; 0 = unbounded).
    pub memory_bytes: u64,
}

pub const DEFAULT_SOURCE: &str = "default (rough, uncalibrated)";

/// Bounds of the figures `check` accepts. Each is far beyond any real
/// cluster, and within them every prediction stays finite: a `[cost]` table
/// with `latency = 1e308` or `bandwidth = 1e-300` (a hand edit, a unit
/// slip) otherwise predicted `inf` or `NaN` ms per iteration, chose a plan
/// from those, and wrote it with exit 0. Per unit of work, seconds (an hour
/// per row or edge) and factors (jitter, contention) alike.
const MAX_FIGURE: f64 = 3600.0;
/// Bytes per second: one byte per second to an exabyte per second. The
/// probe itself reports up to 4 MiB per nanosecond (4.2e15) where a
/// loopback transfer is lost in the round trip's noise, and a calibrated
/// profile must load.
const MIN_BANDWIDTH: f64 = 1.0;
const MAX_BANDWIDTH: f64 = 1e18;
const SECONDS_RANGE: &str = "must be between 0 and 3600 (seconds per unit of work, or a factor)";
const BANDWIDTH_RANGE: &str = "must be between 1 and 1e18 bytes per second";

impl Default for Figures {
    fn default() -> Self {
        Figures {
            source: DEFAULT_SOURCE.into(),
            dataset: String::new(),
            bandwidth: 1.25e9,
            latency: 50e-6,
            links: Vec::new(),
            request_seconds: 30e-6,
            remote_row_seconds: 0.3e-6,
            local_byte_seconds: 0.2e-9,
            issue_request_seconds: 10e-6,
            reply_byte_seconds: 0.2e-9,
            sample_edge_seconds: 30e-9,
            sample_block_seconds: 50e-6,
            compute: BTreeMap::from([("default".to_string(), ComputeRate::default())]),
            sync_seconds: 0.5e-3,
            sync_param_seconds: 5e-9,
            step_seconds: 100e-6,
            jitter: 0.1,
            contention: 0.5,
            memory_bytes: 0,
        }
    }
}

impl Figures {
    pub fn is_calibrated(&self) -> bool {
        self.source != DEFAULT_SOURCE
    }

    /// Figures calibrated on another dataset predict badly (their compute and
    /// gather rates are that dataset's): refused unless `accepted` names it.
    /// `accepted` must name the dataset the figures came from: a name they do
    /// not hold (or built-in figures, calibrated on none) is refused too.
    pub fn check_dataset(&self, dataset: &str, accepted: Option<&str>, origin: &str) -> Result<(), BadInput> {
        if let Some(a) = accepted
            && a != self.dataset
        {
            let held = if self.dataset.is_empty() {
                "are not calibrated on any dataset (built-in rough figures)".to_string()
            } else {
                format!("were calibrated on {}", self.dataset)
            };
            return Err(BadInput::new(format!(
                "--figures-from {a}: the figures in {origin} {held}; omit --figures-from, or calibrate with --calibrate"
            )));
        }
        if self.dataset.is_empty() || self.dataset == dataset || accepted == Some(self.dataset.as_str()) {
            return Ok(());
        }
        Err(BadInput::new(format!(
            "the figures in {origin} were calibrated on {}, not {dataset}: calibrate on {dataset} (--calibrate), or \
             use them anyway with --figures-from {}",
            self.dataset, self.dataset
        )))
    }

    /// (bytes per second, latency) of the link `from -> to`.
    pub fn link(&self, from: usize, to: usize) -> (f64, f64) {
        self.links
            .iter()
            .find(|l| l.from == from && l.to == to)
            .map_or((self.bandwidth, self.latency), |l| (l.bandwidth, l.latency))
    }

    /// The compute rate of `model` (its own entry, else `default`, else the built-in one).
    pub fn compute_of(&self, model: &str) -> ComputeRate {
        self.compute.get(model).or_else(|| self.compute.get("default")).cloned().unwrap_or_default()
    }

    /// Rejects figures that would make a prediction meaningless, naming the key.
    pub fn check(&self, origin: &str) -> Result<(), BadInput> {
        let bad = |k: &str, v: f64, what: &str| {
            Err(BadInput::new(format!(
                "{origin}: cost.{k} = {v}: {what}; fix it or run `leapgnn tune-merge ... --calibrate`"
            )))
        };
        for (k, v) in [("bandwidth", self.bandwidth)] {
            if !(MIN_BANDWIDTH..=MAX_BANDWIDTH).contains(&v) {
                return bad(k, v, BANDWIDTH_RANGE);
            }
        }
        let times = [
            ("latency", self.latency),
            ("request_seconds", self.request_seconds),
            ("remote_row_seconds", self.remote_row_seconds),
            ("local_byte_seconds", self.local_byte_seconds),
            ("issue_request_seconds", self.issue_request_seconds),
            ("reply_byte_seconds", self.reply_byte_seconds),
            ("sample_edge_seconds", self.sample_edge_seconds),
            ("sample_block_seconds", self.sample_block_seconds),
            ("sync_seconds", self.sync_seconds),
            ("sync_param_seconds", self.sync_param_seconds),
            ("step_seconds", self.step_seconds),
            ("jitter", self.jitter),
            ("contention", self.contention),
        ];
        for (k, v) in times {
            if !(0.0..=MAX_FIGURE).contains(&v) {
                return bad(k, v, SECONDS_RANGE);
            }
        }
        for (i, l) in self.links.iter().enumerate() {
            let key = format!("links[{} -> {}]", l.from, l.to);
            if !(MIN_BANDWIDTH..=MAX_BANDWIDTH).contains(&l.bandwidth) {
                return bad(&format!("{key}.bandwidth"), l.bandwidth, BANDWIDTH_RANGE);
            }
            if !(0.0..=MAX_FIGURE).contains(&l.latency) {
                return bad(&format!("{key}.latency"), l.latency, SECONDS_RANGE);
            }
            // `link` takes the first entry: a second one for the pair would be ignored without a word.
            if self.links[..i].iter().any(|o| (o.from, o.to) == (l.from, l.to)) {
                return bad(&key, l.bandwidth, "a second entry for the same pair of workers; keep one");
            }
        }
        for (m, c) in &self.compute {
            for (k, v) in [
                ("edge_seconds", c.edge_seconds),
                ("row_seconds", c.row_seconds),
                ("input_seconds", c.input_seconds),
                ("block_seconds", c.block_seconds),
            ] {
                if !(0.0..=MAX_FIGURE).contains(&v) {
                    return bad(&format!("compute.{m}.{k}"), v, SECONDS_RANGE);
                }
            }
        }
        Ok(())
    }

    /// The figures of `profile` (its `[cost]` table over the defaults).
    pub fn of_profile(profile: &Profile) -> Result<Self, BadInput> {
        let origin =
            profile.path.as_ref().map_or("the built-in local profile".to_string(), |p| p.display().to_string());
        let f = match &profile.cost {
            None => Figures::default(),
            Some(t) => t
                .clone()
                .try_into::<Figures>()
                .map_err(|e| BadInput::new(format!("{origin}: the [cost] table is malformed: {e}")))?,
        };
        f.check(&origin)?;
        f.check_link_ranks(profile, &origin)?;
        Ok(f)
    }

    /// A link naming a worker the profile's hosts do not have (a typo, or a
    /// host removed since the calibration) would never be looked up: the
    /// model would price every transfer at the default link without a word.
    /// Only a profile with `[[host]]`s fixes its worker count; a local or
    /// Slurm one takes it from `--workers` and may use fewer than it measured.
    fn check_link_ranks(&self, profile: &Profile, origin: &str) -> Result<(), BadInput> {
        let world = profile.world();
        if world == 0 {
            return Ok(());
        }
        let Some((l, missing)) =
            self.links.iter().find_map(|l| [l.from, l.to].into_iter().find(|&r| r >= world).map(|r| (l, r)))
        else {
            return Ok(());
        };
        let mut first = 0;
        let hosts: Vec<String> = profile
            .hosts
            .iter()
            .map(|h| {
                let ranks = match h.workers {
                    1 => format!("rank {first}"),
                    n => format!("ranks {first}..={}", first + n - 1),
                };
                first += h.workers;
                format!("{} ({ranks})", h.label())
            })
            .collect();
        Err(BadInput::new(format!(
            "{origin}: cost.links[{} -> {}]: there is no worker {missing}: the profile's hosts are {}; correct the \
             entry's from/to, or remove it (or recalibrate with `leapgnn tune-merge ... --calibrate`)",
            l.from,
            l.to,
            hosts.join(", ")
        )))
    }

    /// Replaces the `[cost]` table of the profile file at `path` (every other
    /// line, comments included, stays as written); creates the file when it
    /// does not exist. Written atomically.
    pub fn write_into_profile(&self, path: &Path) -> Result<(), FormatError> {
        let old = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                "# Workers as local processes on this machine.\n[cluster]\nlauncher = \"local\"\n".to_string()
            }
            Err(e) => return Err(FormatError::Io { path: path.to_path_buf(), source: e }),
        };
        let mut text = without_cost_tables(&old);
        if !text.is_empty() && !text.ends_with("\n\n") {
            text.push('\n');
        }
        #[derive(Serialize)]
        struct Wrapper<'a> {
            cost: &'a Figures,
        }
        text.push_str(
            "# Cost-model figures, written by `leapgnn tune-merge --calibrate` (see README, \"Tuning the merge\").\n",
        );
        text.push_str(&toml::to_string(&Wrapper { cost: self }).expect("figures serialise"));
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| FormatError::Io { path: dir.to_path_buf(), source: e })?;
        }
        write_atomic(path, text.as_bytes())
    }
}

/// `text` without its `[cost]`, `[cost.*]` and `[[cost.*]]` tables (and the
/// comment line this module writes above them).
fn without_cost_tables(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut skipping = false;
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let name = t.trim_start_matches('[').split(']').next().unwrap_or("").trim();
            skipping = name == "cost" || name.starts_with("cost.");
        }
        if t.starts_with("# Cost-model figures, written by") {
            continue;
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_figures_replace_the_old_table_and_keep_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("lab.toml");
        std::fs::write(&p, "# my lab\n[cluster]\nlauncher = \"local\"\n\n[cost]\nbandwidth = 1.0\n[cost.compute.sage]\nedge_seconds = 1.0\n").unwrap();
        let mut f = Figures { source: "test".into(), ..Figures::default() };
        f.links.push(Link { from: 0, to: 1, bandwidth: 2e9, latency: 1e-5 });
        f.write_into_profile(&p).unwrap();
        f.bandwidth = 3e9;
        f.write_into_profile(&p).unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("# my lab\n[cluster]\n"), "{text}");
        assert_eq!(text.matches("[cost]").count(), 1, "{text}");
        let prof = Profile::load(&p).unwrap();
        let back = Figures::of_profile(&prof).unwrap();
        assert_eq!(back, f);
        assert_eq!(back.link(0, 1), (2e9, 1e-5));
        assert_eq!(back.link(1, 0), (3e9, f.latency));
    }

    #[test]
    fn figures_from_must_name_the_figures_dataset() {
        let built_in = Figures::default();
        assert!(built_in.check_dataset("cora", None, "p.toml").is_ok());
        let e = built_in.check_dataset("cora", Some("arxiv"), "p.toml").unwrap_err().to_string();
        assert!(e.starts_with("--figures-from arxiv: the figures in p.toml are not calibrated"), "{e}");
        let fb = Figures { dataset: "facebook".into(), ..Figures::default() };
        assert!(fb.check_dataset("facebook", None, "p.toml").is_ok());
        assert!(fb.check_dataset("cora", Some("facebook"), "p.toml").is_ok());
        assert!(fb.check_dataset("cora", None, "p.toml").unwrap_err().to_string().contains("--figures-from facebook"));
        let e = fb.check_dataset("facebook", Some("cora"), "p.toml").unwrap_err().to_string();
        assert!(e.contains("were calibrated on facebook"), "{e}");
    }

    #[test]
    fn bad_figures_name_the_key() {
        let f = Figures { bandwidth: 0.0, ..Figures::default() };
        assert!(f.check("p.toml").unwrap_err().to_string().contains("cost.bandwidth"));
        let mut f = Figures::default();
        f.compute.insert("gat".into(), ComputeRate { row_seconds: -1.0, ..ComputeRate::default() });
        assert!(f.check("p.toml").unwrap_err().to_string().contains("compute.gat.row_seconds"));
    }
}
