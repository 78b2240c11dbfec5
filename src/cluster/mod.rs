//! Starting and talking to workers: cluster profiles, launchers (local
//! processes, SSH) and the driver <-> worker control protocol.

pub mod check;
pub mod clean;
pub mod control;
pub mod driver;
pub mod job_key;
pub mod known_hosts;
pub mod launcher;
pub mod local;
pub mod profile;
pub mod remote_dir;
pub mod run_busy;
pub mod ship;
pub mod slurm;
pub mod ssh;
pub mod ssh_session;
pub mod worker_session;

pub use control::{ControlConn, ControlError, Hello, ThreadRefused, ToDriver, ToWorker};
pub use launcher::{Launcher, LogSink, RemoteDir, WorkerProcess, WorkerSpec};
pub use local::LocalLauncher;
pub use profile::{HostSpec, LauncherKind, Profile, ProfileError};
pub use slurm::{Allocation, SlurmLauncher};
pub use ssh::SshLauncher;
