//! The full LeapGNN: pregathered micrograph steps, merged into T <= W time
//! steps per iteration. The micrographs of models that no longer visit this
//! worker (steps t >= T) join the visiting steps 0..T-1, balanced by the merge
//! plan's shares (equal by default). T comes from the plan (`--merge-plan`),
//! `--time-steps N`, or is tuned while training (`--time-steps auto`).

use super::auto_steps::AutoSteps;
use super::steps::{MicroSteps, StepCount};
use super::{StrategyEnv, StrategyKind};
use crate::schedule::MergePlan;

pub fn build(env: &StrategyEnv) -> MicroSteps {
    let count = match (&env.plan, env.time_steps) {
        (Some(plan), _) => StepCount::Plan(plan.clone()),
        (None, Some(t)) => StepCount::Plan(MergePlan::even(env.world, t)),
        (None, None) => StepCount::Auto(AutoSteps::new(env.world, env.auto_plans.clone())),
    };
    MicroSteps::new(StrategyKind::Leapgnn, env, true, count)
}
