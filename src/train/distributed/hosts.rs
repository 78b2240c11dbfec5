//! The driver's side of `cluster clean` (`cluster::clean`): a run training
//! from this data directory is left alone (its run lock is held), and a
//! host's checkpoint newer than the driver's copy is copied back before its
//! directory goes, since `--resume` and `infer` read only the driver's copy.

use crate::DataDir;
use crate::cluster::Profile;
use crate::cluster::clean::{CleanOptions, CleanReport, LocalRuns, clean_cluster};
use crate::cluster::launcher::RemoteDir;
use crate::train::{RunLock, TrainError, checkpoint};

/// Lists (with `dry_run`) or removes what runs left on `profile`'s hosts.
pub fn clean_hosts(data: &DataDir, profile: &Profile, opts: &CleanOptions<'_>) -> anyhow::Result<CleanReport> {
    clean_cluster(profile, opts, &Driver { data })
}

struct Driver<'a> {
    data: &'a DataDir,
}

impl LocalRuns for Driver<'_> {
    fn hold(&self, run: &str) -> Result<Option<Box<dyn std::any::Any>>, String> {
        let dir = self.data.run_dir(run);
        if !dir.is_dir() {
            return Ok(None);
        }
        match RunLock::acquire(&dir, run) {
            Ok(lock) => Ok(Some(Box::new(lock))),
            Err(TrainError::RunInUse { holder, .. }) => Err(format!(
                "in progress here ({}, {}): left alone",
                holder.map_or_else(|| "its driver".to_string(), |p| format!("driver pid {p}")),
                dir.display()
            )),
            Err(e) => Err(format!("cannot tell whether it is in progress here: {e}")),
        }
    }

    fn secure(
        &self,
        run: &str,
        state: &[u8],
        remote: &mut dyn RemoteDir,
        dry_run: bool,
    ) -> Result<Option<String>, String> {
        let there = checkpoint::state_iteration(state).map_err(|why| {
            format!(
                "its checkpoint/state.json {why}: left alone; remove it with the leapgnn that wrote it, or by hand \
                 if you do not need it"
            )
        })?;
        let dir = self.data.run_dir(run);
        if !dir.is_dir() {
            // Not a run of this data directory: nothing here to keep it for.
            return Ok(None);
        }
        let ck = checkpoint::dir(&dir);
        let here = checkpoint::load_config(&ck).ok().map(|(_, p)| p.global_iteration);
        if here.is_some_and(|h| h >= there) {
            return Ok(None);
        }
        if dry_run {
            return Ok(Some(format!(
                "its checkpoint (after iteration {there}) is newer than the driver's: it would be copied into {} first",
                ck.display()
            )));
        }
        checkpoint::copy_into(&ck, &mut |name| remote.read(name)).map_err(|e| {
            format!(
                "its checkpoint (after iteration {there}) is newer than the driver's, and copying it back failed: {e:#}"
            )
        })?;
        Ok(Some(format!(
            "its checkpoint (after iteration {there}), newer than the driver's, was copied into {} first",
            ck.display()
        )))
    }
}
