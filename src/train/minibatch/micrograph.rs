//! LeapGNN +MG: the roots of every worker batch are trained by the worker that
//! owns them, W time steps per iteration; each step's block reads its rows as
//! it goes (mostly from the worker's own part).

use super::steps::{MicroSteps, StepCount};
use super::{StrategyEnv, StrategyKind};

pub fn build(env: &StrategyEnv) -> MicroSteps {
    MicroSteps::new(StrategyKind::Micrograph, env, false, StepCount::World)
}
