//! Per-time-step records, the `metrics.jsonl` sink and the run summary.

mod record;
mod run_info;
mod sink;
mod summary;
mod tensorboard;

pub use record::{ByteCounts, RestartRecord, RowCounts, StepRecord, add_bytes, sub_bytes};
pub use run_info::RunInfo;
pub use sink::JsonlSink;
pub use summary::{Counted, EpochRecord, RunBytes, RunSummary};
pub use tensorboard::{EventWriter, TensorBoardLog};
