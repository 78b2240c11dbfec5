//! The `partition` job: open the dataset, reuse a matching partition or cut a
//! new one, write it, report cut / balance / time / memory.

use super::quality::Quality;
use super::writer::{Grouping, TargetLock, write_dir};
use super::{PartitionError, PartitionOptions, Problem, assign, train_flags};
use crate::format::{DatasetFile, FormatError, ManifestFile, PartFile, PartManifest};
use crate::{BadInput, DataDir};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What `partition --json` prints (CLI.md), plus a few extras after `peak_rss_bytes`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PartitionReport {
    pub name: String,
    pub parts: usize,
    pub method: String,
    pub path: String,
    pub edge_cut: u64,
    pub edge_cut_fraction: f64,
    pub balance: BalanceFigures,
    pub seconds: f64,
    pub peak_rss_bytes: Option<u64>,
    pub seed: u64,
    pub constraints: String,
    /// Stored CSR entries (the denominator of `edge_cut_fraction`).
    pub edges: u64,
    pub part_nodes: Vec<u64>,
    pub part_train: Vec<u64>,
    /// True when a matching partition already existed and was kept.
    pub reused: bool,
}

/// max/avg per constraint (1.0 = perfect).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BalanceFigures {
    pub nodes: f64,
    pub train: f64,
}

/// Partitions dataset `name` under `data` as `opts` says, or keeps an existing
/// partition made with the same method, K, seed, constraints and dataset
/// (unless `opts.force`).
pub fn partition_dataset(
    data: &DataDir,
    name: &str,
    opts: &PartitionOptions,
) -> Result<PartitionReport, PartitionError> {
    let started = Instant::now();
    let job = Job::open(data, name, opts)?;
    // Checked before the lock too, so a matching partition in a read-only place is used as it is.
    // `partition` says "kept" only of files it has checked whole (a run's
    // on-demand reuse below does not re-hash them: its workers verify what they read).
    let reuse = |job: &Job<'_>| if opts.force { Ok(None) } else { job.existing(started, true) };
    if let Some(r) = reuse(&job)? {
        return Ok(r);
    }
    let _lock = TargetLock::acquire(&job.dir)?;
    // Another process may have written it while this one waited.
    if let Some(r) = reuse(&job)? {
        return Ok(r);
    }
    job.run(started)
}

/// The directory of the `method`-`parts` partition of `name` (default
/// constraints), created first when missing or stale; says so on stderr.
pub fn ensure_partition(data: &DataDir, name: &str, method: &str, parts: usize, seed: u64) -> anyhow::Result<PathBuf> {
    ensure_partition_checked(data, name, method, parts, seed, &mut |_| Ok(()))
}

/// `ensure_partition`, with `check` given the partitioning's node -> part
/// map first: the manifest's of one on disk, or, for a new one, the map
/// just cut, before anything is written. So a run that `check` refuses (its
/// workers' shares do not fit) leaves no partition behind; its error is
/// returned as it is.
pub fn ensure_partition_checked(
    data: &DataDir,
    name: &str,
    method: &str,
    parts: usize,
    seed: u64,
    check: &mut dyn FnMut(&[u16]) -> anyhow::Result<()>,
) -> anyhow::Result<PathBuf> {
    let started = Instant::now();
    let opts = PartitionOptions { seed, ..PartitionOptions::new(method.parse()?, parts) };
    let context = || format!("cannot partition {name}");
    let job = Job::open(data, name, &opts).with_context(context)?;
    let kept = |job: &Job<'_>, check: &mut dyn FnMut(&[u16]) -> anyhow::Result<()>| -> anyhow::Result<bool> {
        if job.existing(started, false).with_context(context)?.is_none() {
            return Ok(false);
        }
        check(ManifestFile::open(&job.dir)?.node_part())?;
        Ok(true)
    };
    if kept(&job, check)? {
        return Ok(job.dir);
    }
    let _lock = TargetLock::acquire(&job.dir).with_context(context)?;
    if kept(&job, check)? {
        return Ok(job.dir);
    }
    let cut = job.cut().with_context(context)?;
    check(&cut.node_part)?;
    // Said once the cut is accepted: a refused run's error is its only line.
    crate::elog!("no up-to-date {method}-{parts} partition of {name}: creating {}", job.dir.display());
    let r = job.write(cut, started).with_context(context)?;
    crate::elog!(
        "partitioned {name} into {parts} parts with {method}: edge cut {:.1}%, balance nodes {:.3} train {:.3}, {:.1} s; \
         wrote {:.1} MB to {}",
        100.0 * r.edge_cut_fraction,
        r.balance.nodes,
        r.balance.train,
        r.seconds,
        dir_bytes(Path::new(&r.path)) as f64 / 1e6,
        r.path
    );
    Ok(PathBuf::from(r.path))
}

/// Bytes of the files directly in `dir` (a partition: manifest and parts).
fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().filter_map(|e| e.metadata().ok()).filter(|m| m.is_file()).map(|m| m.len()).sum())
        .unwrap_or(0)
}

/// A partitioning cut and not yet written.
struct Cut {
    node_part: Vec<u16>,
    q: Quality,
}

struct Job<'a> {
    name: &'a str,
    opts: &'a PartitionOptions,
    dir: PathBuf,
    ds: DatasetFile,
}

impl<'a> Job<'a> {
    /// Checks the options and opens the dataset (structure only: cheap).
    fn open(data: &DataDir, name: &'a str, opts: &'a PartitionOptions) -> Result<Job<'a>, PartitionError> {
        let k = opts.parts;
        // The count alone, before the archive is looked for; against its nodes below.
        super::check_parts(k, usize::MAX, name)?;
        // The archive `train` would use: a name under --data-dir, or a path (partitioned beside it).
        let path = crate::paths::resolve_archive(data, name);
        if !path.is_file() {
            let msg = if crate::paths::is_plain_name(name) {
                format!(
                    "no dataset `{name}` at {} (run `leapgnn download {name}` first, or check --data-dir)",
                    path.display()
                )
            } else {
                format!(
                    "no dataset archive at `{name}`: give a dataset directory (holding dataset.lgnn), an archive, or a name under --data-dir"
                )
            };
            return Err(BadInput::new(msg).into());
        }
        let dir = crate::paths::partition_dir(data, name, opts.method.name(), k);
        let ds = DatasetFile::open(&path)?;
        super::check_parts(k, ds.num_nodes(), name)?;
        Ok(Job { name, opts, dir, ds })
    }

    /// The report of a partition already on disk that matches this job, if any
    /// (a missing, corrupt or partial one does not match and is rewritten).
    /// `verify`: the dataset, the manifest and every part are hashed and
    /// checked too. A file that cannot be read for another reason (memory,
    /// descriptors, permissions) is an error: a rewrite would not cure it, and
    /// would replace a partition that may be sound.
    fn existing(&self, started: Instant, verify: bool) -> Result<Option<PartitionReport>, PartitionError> {
        let Some(m) = self.readable(ManifestFile::open(&self.dir))? else { return Ok(None) };
        let settings = (self.opts.method.name(), self.opts.parts, self.opts.seed);
        if !super::cut_alike(&m, &self.ds, settings, self.opts.balance) {
            return Ok(None);
        }
        for i in 0..self.opts.parts as u32 {
            match self.readable(PartFile::open(&self.dir, i))? {
                Some(p) if !verify || p.verify().is_ok() => {}
                _ => return Ok(None),
            }
        }
        // A damaged dataset fails in `run`, with its own error, rather than being reported as kept.
        if verify && (self.ds.verify().is_err() || m.verify().is_err()) {
            return Ok(None);
        }
        let q = Quality {
            edge_cut: m.edge_cut(),
            edges: m.edges(),
            part_nodes: m.part_nodes().to_vec(),
            part_train: m.part_train().to_vec(),
        };
        Ok(Some(self.report(&q, true, started)))
    }

    /// A file of the existing partition, or None when it is missing or
    /// damaged (the partition is cut again).
    fn readable<F>(&self, opened: Result<F, FormatError>) -> Result<Option<F>, PartitionError> {
        match opened {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.is_missing_or_damaged() => Ok(None),
            Err(source) => Err(PartitionError::Existing { dir: self.dir.clone(), source }),
        }
    }

    fn run(self, started: Instant) -> Result<PartitionReport, PartitionError> {
        let cut = self.cut()?;
        self.write(cut, started)
    }

    /// The node -> part map and its quality, in memory.
    fn cut(&self) -> Result<Cut, PartitionError> {
        let (k, n) = (self.opts.parts, self.ds.num_nodes());
        // Cutting a large graph takes minutes with nothing else on the screen.
        let _spinner = crate::progress::Spinner::stderr(format!(
            "{}-{k} cut of {} ({n} nodes, {} edges)",
            self.opts.method.name(),
            self.name,
            self.ds.graph().num_edges()
        ));
        self.ds.verify()?;
        let is_train = train_flags(n, self.ds.train());
        let problem = Problem {
            graph: self.ds.graph(),
            is_train: &is_train,
            parts: k,
            balance: self.opts.balance,
            seed: self.opts.seed,
        };
        let node_part = assign(self.opts.method, &problem)?;
        let q = Quality::measure(self.ds.graph(), &node_part, &is_train, k);
        Ok(Cut { node_part, q })
    }

    fn write(self, Cut { node_part, q }: Cut, started: Instant) -> Result<PartitionReport, PartitionError> {
        let k = self.opts.parts;
        // Seconds more on a large graph: every feature row is copied into its part.
        let _spinner = crate::progress::Spinner::stderr(format!(
            "writing {}-{k} of {} ({k} part files)",
            self.opts.method.name(),
            self.name
        ));
        let mut groups = Grouping::new(&node_part, k);
        let manifest = PartManifest {
            dataset: self.name.to_string(),
            dataset_checksum: self.ds.checksum(),
            method: self.opts.method.name().to_string(),
            parts: k as u32,
            seed: self.opts.seed,
            constraints: self.opts.balance.name().to_string(),
            node_part,
            local_index: std::mem::take(&mut groups.local_index),
            part_nodes: q.part_nodes.clone(),
            part_train: q.part_train.clone(),
            edge_cut: q.edge_cut,
            edges: q.edges,
        };
        write_dir(&self.dir, &self.ds, &groups, &manifest)?;
        Ok(self.report(&q, false, started))
    }

    fn report(&self, q: &Quality, reused: bool, started: Instant) -> PartitionReport {
        PartitionReport {
            name: self.name.to_string(),
            parts: self.opts.parts,
            method: self.opts.method.name().to_string(),
            path: self.dir.display().to_string(),
            edge_cut: q.edge_cut,
            edge_cut_fraction: q.edge_cut_fraction(),
            balance: BalanceFigures {
                nodes: PartManifest::balance(&q.part_nodes),
                train: PartManifest::balance(&q.part_train),
            },
            seconds: started.elapsed().as_secs_f64(),
            peak_rss_bytes: crate::util::peak_rss_bytes(),
            seed: self.opts.seed,
            constraints: self.opts.balance.name().to_string(),
            edges: q.edges,
            part_nodes: q.part_nodes.clone(),
            part_train: q.part_train.clone(),
            reused,
        }
    }
}
