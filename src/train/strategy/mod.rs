//! How the workers split an iteration's work: one file per strategy.

mod model_centric;
mod p3;

pub use model_centric::ModelCentric;
pub use p3::P3;

use super::{Collective, TrainError, Worker};
use crate::BadInput;
use crate::metrics::StepRecord;
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StrategyKind {
    /// DGL: worker w trains its own batch b(i, w).
    ModelCentric,
    /// LeapGNN +MG: micrographs routed to the owner of their root.
    Micrograph,
    /// +PG: pre-gather each iteration's remote rows in one request per peer.
    Pregather,
    /// The full system: micrographs, pre-gathering and merged time steps.
    Leapgnn,
    /// P3: features split by column, layer 1 model-parallel.
    P3,
}

impl FromStr for StrategyKind {
    type Err = BadInput;
    fn from_str(s: &str) -> Result<Self, BadInput> {
        match s {
            "model-centric" => Ok(StrategyKind::ModelCentric),
            "micrograph" => Ok(StrategyKind::Micrograph),
            "pregather" => Ok(StrategyKind::Pregather),
            "leapgnn" => Ok(StrategyKind::Leapgnn),
            "p3" => Ok(StrategyKind::P3),
            _ => Err(BadInput::new(format!(
                "unknown --strategy `{s}`: expected model-centric, micrograph, pregather, leapgnn or p3"
            ))),
        }
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StrategyKind::ModelCentric => "model-centric",
            StrategyKind::Micrograph => "micrograph",
            StrategyKind::Pregather => "pregather",
            StrategyKind::Leapgnn => "leapgnn",
            StrategyKind::P3 => "p3",
        })
    }
}

/// One iteration as every worker sees it.
pub struct Iteration<'a> {
    pub epoch: u64,
    /// Index within the epoch.
    pub index: u64,
    /// Iterations completed before this one, over the whole run.
    pub global_index: u64,
    /// b(i, w) for every worker w.
    pub batches: Vec<&'a [u32]>,
    /// Roots over all workers: the loss is their sum divided by this.
    pub global_size: usize,
    /// Seeds this iteration's dropout masks (the same on every worker).
    pub dropout_key: u64,
}

pub trait Strategy {
    fn kind(&self) -> StrategyKind;
    /// Time steps per iteration.
    fn time_steps(&self) -> u32 {
        1
    }
    /// Adds this worker's share of the iteration's gradient into `grad` and
    /// returns its share of the loss; pushes one record per time step (epoch,
    /// iteration, worker and timings filled). `coll` reaches the other workers
    /// (every worker calls the same collectives in the same order); the loop
    /// all-reduces `grad` afterwards and bills traffic a record does not claim
    /// to the last record.
    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut Vec<StepRecord>,
    ) -> Result<f64, TrainError>;
}

/// The strategy `kind`, if this build has it.
pub fn build(kind: StrategyKind) -> Result<Box<dyn Strategy>, TrainError> {
    match kind {
        StrategyKind::ModelCentric => Ok(Box::new(ModelCentric)),
        StrategyKind::P3 => Ok(Box::new(P3::default())),
        other => Err(BadInput::new(format!("--strategy {other} is not implemented yet")).into()),
    }
}
