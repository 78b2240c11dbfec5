//! The sampled mini-batch engine: each iteration trains a global batch of
//! sampled micrographs; its strategies (one file each) decide which worker
//! computes which roots with which feature rows, and how many time steps
//! that takes.

mod auto_steps;
pub(crate) mod leapgnn;
pub(crate) mod micrograph;
mod model_centric;
mod p3;
pub(crate) mod pregather;
mod steps;
mod store;

pub use auto_steps::AutoState;
pub use model_centric::ModelCentric;
pub use p3::P3;
pub use steps::MicroSteps;

use super::strategy::{Iteration, Strategy, StrategyEnv, StrategyKind, step_record};
