//! LeapGNN +PG: micrograph's W time steps, with the iteration's remote rows
//! fetched once before the first step (one request per owner); `--prefetch`
//! fetches the next iteration's rows while this one computes.

use super::steps::{MicroSteps, StepCount};
use super::{StrategyEnv, StrategyKind};

pub fn build(env: &StrategyEnv) -> MicroSteps {
    MicroSteps::new(StrategyKind::Pregather, env, true, StepCount::World)
}
