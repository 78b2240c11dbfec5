/// What a run is, told to progress displays before its first record.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunInfo {
    pub run: String,
    pub dataset: String,
    pub strategy: String,
    pub model: String,
    pub workers: u32,
    /// Time steps per iteration (1 for model-centric).
    pub time_steps: u32,
    pub epochs: u64,
    pub iterations_per_epoch: u64,
    /// Where this session starts: past 0 when a run is resumed.
    pub start_epoch: u64,
    pub start_iteration: u64,
}

impl RunInfo {
    /// Iterations of the whole run.
    pub fn total_iterations(&self) -> u64 {
        self.epochs * self.iterations_per_epoch
    }
}
