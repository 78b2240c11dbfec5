//! Starting and talking to workers: launchers (local processes now, SSH
//! later) and the driver <-> worker control protocol.

pub mod control;
pub mod driver;
pub mod launcher;
pub mod local;
pub mod worker_session;

pub use control::{ControlConn, ControlError, Hello, ToDriver, ToWorker};
pub use launcher::{Launcher, WorkerProcess, WorkerSpec};
pub use local::LocalLauncher;
