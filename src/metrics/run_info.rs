/// What a run is, told to progress displays before its first record.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunInfo {
    pub run: String,
    pub dataset: String,
    pub strategy: String,
    /// `full-graph` for the full-graph engine, absent (None) for mini-batch
    /// runs, as in the run summary: model-centric names a strategy of both
    /// engines, so the strategy alone does not say which one trains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    pub model: String,
    pub workers: u32,
    /// Time steps per iteration (1 for model-centric).
    pub time_steps: u32,
    pub epochs: u64,
    pub iterations_per_epoch: u64,
    /// Where this session starts: past 0 when a run is resumed.
    pub start_epoch: u64,
    pub start_iteration: u64,
    /// RETEXO: the stages (one per layer) its `epochs` rounds divide into,
    /// evenly; absent for every other strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stages: Option<u32>,
    /// Where each worker runs, by rank: the SSH profile's host entry
    /// (`address:port`: two entries on one address differ), the Slurm
    /// node, `local` for a process on this machine. Empty when not known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<String>,
}

impl RunInfo {
    /// Iterations of the whole run.
    pub fn total_iterations(&self) -> u64 {
        self.epochs * self.iterations_per_epoch
    }

    /// RETEXO: the stage (1-based) that 1-based `epoch` trains, and how many
    /// stages there are.
    pub fn stage_of(&self, epoch: u64) -> Option<(u64, u64)> {
        let stages = u64::from(self.stages.filter(|&s| s > 0)?);
        let rounds = (self.epochs / stages).max(1);
        Some(((epoch.max(1) - 1) / rounds + 1).min(stages)).map(|s| (s, stages))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_info_written_before_the_mode_field_still_reads() {
        let old = r#"{"run":"r","dataset":"cora","strategy":"model-centric","model":"sage","workers":2,
            "time_steps":1,"epochs":3,"iterations_per_epoch":5,"start_epoch":0,"start_iteration":0}"#;
        let info: RunInfo = serde_json::from_str(old).unwrap();
        assert_eq!((info.mode, info.workers), (None, 2));
        let fg = RunInfo { mode: Some("full-graph".into()), ..info };
        let json = serde_json::to_value(&fg).unwrap();
        assert_eq!(json["mode"], "full-graph");
        assert_eq!(serde_json::from_value::<RunInfo>(json).unwrap(), fg);
    }
}
