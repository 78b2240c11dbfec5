//! GNNPipe's checkpoints. Each stage alone holds its layers' weights,
//! BatchNorm statistics and optimizer state, and the rows each layer reads
//! from the previous epoch (the history): a checkpoint gathers them at rank
//! 0 (one all-to-all, billed as control and to no step record) and writes
//! the usual weights and optimizer files for the whole model, plus one
//! `history.<layer>` block per hidden layer input (a row per vertex, from
//! the group that computes it). A resumed stage takes its slices back, so
//! the run goes on as it would have; a checkpoint without history (the
//! final one of a run without `--checkpoint-every`) serves `infer` only.

use super::{Stage, flat_ranges, input_width as width, le_bytes, stage_layers, stage_params};
use crate::comm::Category;
use crate::optim::{OptimState, Optimizer};
use crate::train::fullgraph::chunks::VertexRows;
use crate::train::fullgraph::exchange::decode_rows as decode;
use crate::train::trainer::{Attempt, gather_counts, gather_final_counts};
use crate::train::{Collective, Progress, TrainConfig, TrainError, Worker, checkpoint};
use std::path::Path;

/// The vertices whose rows group `g` computes (every vertex with one group).
fn group_vertices(w: &Worker<'_>, stages: usize, groups: usize, g: usize) -> Vec<u32> {
    let n = w.graph.num_nodes() as u32;
    match (&w.owners, groups) {
        (Some(owners), 2..) => (0..n).filter(|&v| owners.as_slice()[v as usize] as usize / stages == g).collect(),
        _ => (0..n).collect(),
    }
}

impl Stage {
    /// The stage's optimizer, from the whole model's (fresh, or restored from a checkpoint).
    pub(super) fn optimizer(
        &self,
        w: &Worker<'_>,
        cfg: &TrainConfig,
        whole: &dyn Optimizer,
    ) -> Result<Box<dyn Optimizer>, TrainError> {
        let mut opt = cfg.optimizer.build(self.own.numel(), cfg.lr, cfg.weight_decay);
        let state = whole.state().slice(&flat_ranges(&w.params, &self.layers));
        opt.load_state(state).map_err(|e| TrainError::Comm(format!("stage {} optimizer state: {e}", self.s).into()))?;
        Ok(opt)
    }

    /// Refills the history of the stage's layers from the checkpoint in `dir`.
    pub(super) fn restore_history(
        &self,
        w: &Worker<'_>,
        dir: &Path,
        bufs: &mut [VertexRows],
    ) -> Result<(), TrainError> {
        let Some(saved) = checkpoint::read_history(dir)? else {
            return Err(crate::BadInput::new(format!(
                "checkpoint {} holds no GNNPipe history (a final checkpoint of a run without --checkpoint-every); \
                 start a new run, with --checkpoint-every N to be able to resume it",
                dir.display()
            ))
            .into());
        };
        let n = w.graph.num_nodes();
        for (l, buf) in self.layers.clone().zip(bufs.iter_mut()).filter(|(l, _)| *l > 0) {
            buf.vals = saved.rows(&format!("history.{l}"), n, width(w, l))?;
        }
        Ok(())
    }

    /// Writes a checkpoint of `p` at rank 0 (every rank takes part): every
    /// stage's layers and optimizer state and, with `history`, every hidden
    /// layer's input rows. `p.run_counts` is gathered first (counted from
    /// `attempt`), after the state's exchange, so that the count holds it:
    /// a run whose driver dies at this checkpoint sent it, and an
    /// uninterrupted run's socket totals count it. Not at the run's end
    /// (`last`): a longer run sends no state there, and the resumed attempt's
    /// final checkpoint sends its own (`gather_final_counts`).
    pub(super) fn save(
        &self,
        w: &Worker<'_>,
        coll: &mut dyn Collective,
        (cfg, dir): (&TrainConfig, Option<&Path>),
        (p, attempt, last): (&mut Progress, &Attempt, bool),
        opt: &dyn Optimizer,
        (bufs, history): (&[VertexRows], bool),
    ) -> Result<(), TrainError> {
        let (stages, num_layers) = (self.stages, w.model.num_layers());
        let groups = self.world / stages;
        let slots = cfg.optimizer.slots();
        // The matching stages of every group hold the same layers: group 0's are sent.
        let mut mine = Vec::new();
        if self.rank < stages {
            mine.extend(self.own.flat_values()?);
            mine.extend(self.own.flat_buffers()?);
            let state = opt.state();
            for slot in slots {
                let (_, v) = state.slots.iter().find(|(n, _)| n == slot).ok_or_else(|| {
                    TrainError::Comm(format!("stage {}: the optimizer has no `{slot}` state", self.s).into())
                })?;
                mine.extend_from_slice(v);
            }
        }
        if history {
            let ids = group_vertices(w, stages, groups, self.rank / stages);
            for (_, buf) in self.layers.clone().zip(bufs).filter(|(l, _)| *l > 0) {
                mine.extend(buf.of(&ids));
            }
        }
        let mut out = vec![Vec::new(); self.world];
        out[0] = le_bytes(&mine);
        let before = coll.bytes();
        let got = coll.all_to_all(out, Category::Control).map_err(TrainError::Comm)?;
        if last {
            let state = coll.bytes().since(&before).sent;
            gather_final_counts(coll, p, attempt, &state, w)?;
        } else {
            p.run_counts = gather_counts(coll, p, attempt)?;
        }
        let (Some(dir), 0) = (dir, self.rank) else { return Ok(()) };

        let n = w.graph.num_nodes();
        let mut whole = OptimState {
            step: opt.state().step,
            slots: slots.iter().map(|s| (s.to_string(), vec![0f32; w.params.numel()])).collect(),
        };
        // Hidden layer l's input rows are rows[l - 1].
        let hidden = if history { 1..num_layers } else { 1..1 };
        let mut rows: Vec<VertexRows> = hidden.clone().map(|l| VertexRows::zeros(n, width(w, l))).collect();
        for (q, msg) in got.iter().enumerate() {
            let (s, g) = (q % stages, q / stages);
            let layers = stage_layers(s, stages, num_layers);
            let theirs = stage_params(&w.params, &layers);
            let (nw, nb) = (theirs.numel(), theirs.buffers_numel());
            let ids = if history { group_vertices(w, stages, groups, g) } else { Vec::new() };
            let hist: usize = layers.clone().filter(|&l| l > 0).map(|l| ids.len() * width(w, l)).sum();
            let model = if g == 0 { nw + nb + slots.len() * nw } else { 0 };
            let vals = decode(msg, 1, model + hist, q, "checkpoint state")?;
            let (model_vals, mut hist_vals) = vals.split_at(model);
            if g == 0 {
                theirs.set_flat(&model_vals[..nw])?;
                theirs.set_flat_buffers(&model_vals[nw..nw + nb])?;
                let ranges = flat_ranges(&w.params, &layers);
                for (k, (_, slot)) in whole.slots.iter_mut().enumerate() {
                    let mut at = nw + nb + k * nw;
                    for r in &ranges {
                        slot[r.clone()].copy_from_slice(&model_vals[at..at + r.len()]);
                        at += r.len();
                    }
                }
            }
            for l in layers.filter(|&l| l > 0 && history) {
                let (these, rest) = hist_vals.split_at(ids.len() * rows[l - 1].d);
                rows[l - 1].write(&ids, these);
                hist_vals = rest;
            }
        }
        let mut full = cfg.optimizer.build(w.params.numel(), cfg.lr, cfg.weight_decay);
        full.load_state(whole).map_err(|e| TrainError::Comm(format!("checkpoint optimizer state: {e}").into()))?;
        let blocks: Vec<(String, usize, &[f32])> =
            hidden.zip(&rows).map(|(l, r)| (format!("history.{l}"), r.d, r.vals.as_slice())).collect();
        checkpoint::save_with_history(dir, cfg, p, &w.params, full.as_ref(), history.then_some(blocks.as_slice()))
    }
}
