//! How an epoch's work is laid out, shared by training (`train`), the cost
//! model (`cost`) and the locality analysis (`locality`), below all three:
//! the epoch's batches (`batches`), which worker trains which roots at each
//! time step (`routing`), the merge plan (`plan`) and the choice of time steps
//! for `--time-steps auto` (`auto`).

mod auto;
pub mod batches;
pub mod plan;
pub mod routing;

pub use auto::next_time_steps;
pub use batches::{Schedule, epoch_order};
pub use plan::MergePlan;
