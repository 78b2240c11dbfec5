//! The live dashboard (ratatui): a pure rendering of the metrics a run
//! produces. It reads records; it never drives training. The only thing it
//! sends back is the user's request to stop, as a flag the trainer polls.

pub mod app;
pub mod fmt;
mod render;
mod ring;
mod state;
mod view;

pub use app::{Msg, run_terminal};
pub use render::{draw, draw_paged};
pub use ring::Ring;
pub use state::{
    CELL_HISTORY, DashboardState, EPOCH_HISTORY, EVENT_HISTORY, ITERATION_HISTORY, IterPoint, STEP_HISTORY, StepCell,
    StepPoint, WorkerRow,
};
pub use view::{Action, Scroll, Ui, View};
