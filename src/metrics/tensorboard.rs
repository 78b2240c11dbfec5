//! `train --tensorboard DIR`: the run's curves as TensorBoard event files.
//!
//! An event file is a TFRecord stream of `Event` protocol buffers. We write
//! the few fields scalars need by hand (wall time, step, file version, and a
//! summary of `(tag, simple_value)` pairs) rather than pull in a protobuf
//! toolchain for four messages.

use super::{ByteCounts, EpochRecord, RowCounts, RunInfo, StepRecord, add_bytes};
use crate::format::FormatError;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Appends events to one `events.out.tfevents.*` file in a directory.
pub struct EventWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl EventWriter {
    /// Creates `dir` and a new event file in it. A resumed run gets a file of
    /// its own: TensorBoard reads every event file of a directory as one run.
    pub fn create(dir: &Path) -> Result<Self, FormatError> {
        std::fs::create_dir_all(dir).map_err(|e| FormatError::io(dir, e))?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let host = host.trim();
        let name = format!(
            "events.out.tfevents.{}.{}.{}.{}.leapgnn",
            now.as_secs(),
            if host.is_empty() { "localhost" } else { host },
            std::process::id(),
            now.subsec_nanos()
        );
        let path = dir.join(name);
        let f = File::create_new(&path).map_err(|e| FormatError::io(&path, e))?;
        let mut w = EventWriter { path, out: BufWriter::new(f) };
        w.record(&event(wall_time(), 0, Payload::Version("brain.Event:2")))?;
        w.flush()?;
        Ok(w)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// One event at `step` holding every `(tag, value)` scalar.
    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> Result<(), FormatError> {
        if values.is_empty() {
            return Ok(());
        }
        self.record(&event(wall_time(), step, Payload::Scalars(values)))
    }

    /// Makes what was written visible to a TensorBoard that is reading the file.
    pub fn flush(&mut self) -> Result<(), FormatError> {
        self.out.flush().map_err(|e| FormatError::io(&self.path, e))
    }

    /// TFRecord framing: length, its masked CRC-32C, the data, its masked CRC-32C.
    fn record(&mut self, data: &[u8]) -> Result<(), FormatError> {
        let len = (data.len() as u64).to_le_bytes();
        let mut frame = Vec::with_capacity(data.len() + 16);
        frame.extend_from_slice(&len);
        frame.extend_from_slice(&masked_crc(&len).to_le_bytes());
        frame.extend_from_slice(data);
        frame.extend_from_slice(&masked_crc(data).to_le_bytes());
        self.out.write_all(&frame).map_err(|e| FormatError::io(&self.path, e))
    }
}

fn wall_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

/// TFRecord's checksum: CRC-32C rotated and offset, so that a CRC of data
/// that itself holds CRCs is not trivially zero.
fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

enum Payload<'a> {
    Version(&'a str),
    Scalars(&'a [(String, f64)]),
}

/// `tensorflow.Event`: wall_time = 1 (double), step = 2 (int64),
/// file_version = 3 (string), summary = 5 (`Summary`).
fn event(wall_time: f64, step: u64, payload: Payload<'_>) -> Vec<u8> {
    let mut e = Vec::with_capacity(64);
    e.push(1 << 3 | 1);
    e.extend_from_slice(&wall_time.to_le_bytes());
    e.push(2 << 3);
    varint(&mut e, step);
    match payload {
        Payload::Version(v) => bytes_field(&mut e, 3, v.as_bytes()),
        Payload::Scalars(values) => {
            // `Summary`: repeated value = 1; `Summary.Value`: tag = 1, simple_value = 2 (float).
            let mut summary = Vec::with_capacity(values.len() * 32);
            let mut value = Vec::with_capacity(64);
            for (tag, v) in values {
                value.clear();
                bytes_field(&mut value, 1, tag.as_bytes());
                value.push(2 << 3 | 5);
                value.extend_from_slice(&(*v as f32).to_le_bytes());
                bytes_field(&mut summary, 1, &value);
            }
            bytes_field(&mut e, 5, &summary);
        }
    }
    e
}

fn bytes_field(out: &mut Vec<u8>, field: u8, data: &[u8]) {
    out.push(field << 3 | 2);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// What one iteration's step records add up to.
#[derive(Default)]
struct IterationSums {
    loss: f64,
    /// Per worker: its working seconds in each time step.
    step_seconds: BTreeMap<u32, Vec<f64>>,
}

/// Turns the run's records into TensorBoard scalars:
/// - per epoch (step = epoch number): `epoch/loss`, `epoch/val_accuracy`,
///   `epoch/test_accuracy`, `epoch/seconds`, `epoch/eval_seconds`,
///   `epoch/miss_rate` (not for an epoch that requested no rows: full-graph),
///   `epoch/bytes/<category>` and `epoch/bytes/total`
///   (bytes sent during the epoch's training steps, all workers);
/// - per iteration (step = iteration number over the whole run):
///   `iteration/loss`, `iteration/seconds` (the slowest worker's working time)
///   and `iteration/step<t>_seconds` (the slowest worker in time step t).
pub struct TensorBoardLog {
    writer: EventWriter,
    iterations_per_epoch: u64,
    pending: BTreeMap<(u64, u64), IterationSums>,
    /// Per epoch, by the records' own epoch: the driver merges the workers'
    /// streams, so a worker's first record of epoch e+1 can come before rank
    /// 0's record of epoch e, and counted by arrival it was billed to e.
    epoch_sums: BTreeMap<u64, (ByteCounts, RowCounts)>,
}

impl TensorBoardLog {
    pub fn create(dir: &Path) -> Result<Self, FormatError> {
        Ok(TensorBoardLog {
            writer: EventWriter::create(dir)?,
            iterations_per_epoch: 1,
            pending: BTreeMap::new(),
            epoch_sums: BTreeMap::new(),
        })
    }

    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    pub fn start(&mut self, info: &RunInfo) {
        self.iterations_per_epoch = info.iterations_per_epoch.max(1);
    }

    pub fn step(&mut self, r: &StepRecord) {
        let it = self.pending.entry((r.epoch, r.iteration)).or_default();
        it.loss += r.loss;
        let steps = it.step_seconds.entry(r.worker).or_default();
        let t = r.time_step as usize;
        if steps.len() <= t {
            steps.resize(t + 1, 0.0);
        }
        steps[t] += r.sample_seconds + r.gather_seconds + r.compute_seconds + r.sync_seconds;
        let (bytes, rows) = self.epoch_sums.entry(r.epoch).or_default();
        add_bytes(bytes, &r.bytes_out);
        *rows += r.rows;
    }

    /// Writes the epoch's scalars and those of its iterations, then flushes.
    pub fn epoch(&mut self, e: &EpochRecord) -> Result<(), FormatError> {
        self.write_iterations(|(epoch, _)| epoch <= e.epoch)?;
        let (b, rows) = self.take_epoch_sums(e.epoch);
        let miss = rows.miss_rate();
        let mut v: Vec<(String, f64)> = vec![
            ("epoch/loss".into(), e.loss),
            ("epoch/val_accuracy".into(), e.val_accuracy),
            ("epoch/test_accuracy".into(), e.test_accuracy),
            ("epoch/seconds".into(), e.seconds),
            ("epoch/eval_seconds".into(), e.eval_seconds),
        ];
        // An epoch that requested no rows has no miss rate: no point, rather than a 0 that reads as perfect.
        v.extend(miss.map(|m| ("epoch/miss_rate".to_string(), m)));
        for (name, n) in [
            ("features", b.features),
            ("gradients", b.gradients),
            ("migration", b.migration),
            ("activations", b.activations),
            ("control", b.control),
            ("total", b.total()),
        ] {
            v.push((format!("epoch/bytes/{name}"), n as f64));
        }
        self.writer.scalars(e.epoch, &v)?;
        self.writer.flush()
    }

    /// The bytes and rows of the records of `epoch` (and of any earlier one
    /// come late), leaving those of later epochs.
    fn take_epoch_sums(&mut self, epoch: u64) -> (ByteCounts, RowCounts) {
        let later = self.epoch_sums.split_off(&(epoch + 1));
        let (mut b, mut rows) = (ByteCounts::default(), RowCounts::default());
        for (bytes, r) in std::mem::replace(&mut self.epoch_sums, later).into_values() {
            add_bytes(&mut b, &bytes);
            rows += r;
        }
        (b, rows)
    }

    /// The iterations of a run stopped in mid-epoch.
    pub fn finish(&mut self) -> Result<(), FormatError> {
        self.write_iterations(|_| true)?;
        self.writer.flush()
    }

    fn write_iterations(&mut self, done: impl Fn((u64, u64)) -> bool) -> Result<(), FormatError> {
        let keys: Vec<_> = self.pending.keys().copied().take_while(|k| done(*k)).collect();
        for key in keys {
            let it = self.pending.remove(&key).unwrap_or_default();
            let steps = it.step_seconds.values().map(Vec::len).max().unwrap_or(0);
            let mut slowest = vec![0.0f64; steps];
            let mut busiest = 0.0f64;
            for per_step in it.step_seconds.values() {
                for (s, &sec) in slowest.iter_mut().zip(per_step) {
                    *s = s.max(sec);
                }
                busiest = busiest.max(per_step.iter().sum());
            }
            let mut v = vec![("iteration/loss".to_string(), it.loss), ("iteration/seconds".to_string(), busiest)];
            v.extend(slowest.iter().enumerate().map(|(t, &s)| (format!("iteration/step{t}_seconds"), s)));
            self.writer.scalars(key.0 * self.iterations_per_epoch + key.1, &v)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_epochs_bytes_are_its_records_whatever_order_they_come_in() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = TensorBoardLog::create(dir.path()).unwrap();
        let rec = |epoch, worker, features| {
            let mut r = StepRecord { epoch, worker, ..StepRecord::default() };
            r.bytes_out.features = features;
            r.rows.requested = features;
            r
        };
        log.step(&rec(0, 0, 100));
        // Worker 1's first record of epoch 1, read before rank 0's record of epoch 0.
        log.step(&rec(1, 1, 7));
        log.step(&rec(0, 1, 20));
        let (b, rows) = log.take_epoch_sums(0);
        assert_eq!((b.features, rows.requested), (120, 120));
        log.step(&rec(1, 0, 3));
        let (b, rows) = log.take_epoch_sums(1);
        assert_eq!((b.features, rows.requested), (10, 10));
    }

    #[test]
    fn varint_matches_protobuf() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        out.clear();
        varint(&mut out, 1);
        assert_eq!(out, [1]);
    }

    /// The CRC of TFRecord's documented example (`crc32c("123456789")`).
    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }
}
