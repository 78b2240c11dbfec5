//! The time steps shared by `micrograph`, `pregather` and `leapgnn`: route
//! the roots of every worker batch to their owner, then at time step t worker
//! r trains the micrographs of model m = (r + t) mod W that it owns, as one
//! block. Gradients accumulate over the steps; the loop all-reduces once.
//!
//! Migration: the models move on after every step. With `fused` (default)
//! each worker keeps one accumulator for whichever model visits, which sums
//! to the same gradient with nothing moved and no per-step synchronisation.
//! With `ring` the accumulator literally follows its model: after step t
//! worker r sends it to r - 1 and takes model (r + t + 1)'s from r + 1
//! (counted as `migration` bytes); that exchange is also the step's barrier.

use super::auto_steps::AutoSteps;
use super::store::{Locality, Pregathered, Scratch};
use super::{Iteration, Strategy, StrategyEnv, StrategyKind, step_record};
use crate::comm::{ByteCounts, Category, Owners};
use crate::schedule::MergePlan;
use crate::schedule::routing::{merge, route};
use crate::train::strategy::StepSink;
use crate::train::{Collective, Migration, StepStats, TrainError, Worker};
use std::collections::VecDeque;
use std::time::Instant;

/// How many time steps an iteration takes.
pub(super) enum StepCount {
    /// One per worker (micrograph, pregather).
    World,
    /// leapgnn with a fixed T, spread by the plan's shares.
    Plan(MergePlan),
    /// leapgnn tuning T while it trains.
    Auto(AutoSteps),
}

pub struct MicroSteps {
    kind: StrategyKind,
    world: usize,
    owners: Option<Owners>,
    migration: Migration,
    pregather: bool,
    prefetch: bool,
    count: StepCount,
    /// Reused per-step root lists.
    roots: Vec<Vec<u32>>,
    /// Maps for building stores (None until the first store, or while lent out).
    spare: Vec<Scratch>,
    /// The next iterations' stores, sampled and asked for during this one
    /// (--prefetch; at most `it.ahead.len()`).
    ahead: VecDeque<Pregathered>,
}

impl MicroSteps {
    pub(super) fn new(kind: StrategyKind, env: &StrategyEnv, pregather: bool, count: StepCount) -> Self {
        MicroSteps {
            kind,
            world: env.world,
            owners: env.owners.clone(),
            migration: env.migration,
            pregather,
            prefetch: pregather && env.prefetch,
            count,
            roots: Vec::new(),
            spare: Vec::new(),
            ahead: VecDeque::new(),
        }
    }

    /// Step root lists of `batches` for worker `rank` with `t` time steps.
    fn routed(&self, batches: &[&[u32]], rank: usize, t: u32, out: &mut Vec<Vec<u32>>) {
        route(batches, self.owners.as_ref().map(Owners::as_slice), rank, out);
        if (t as usize) < batches.len() {
            let shares = match &self.count {
                StepCount::Plan(p) => p.shares(rank),
                StepCount::Auto(a) => match a.plan(t) {
                    Some(p) => p.shares(rank),
                    None => MergePlan::even(batches.len(), t).shares(rank),
                },
                StepCount::World => MergePlan::even(batches.len(), t).shares(rank),
            };
            merge(out, &shares);
        }
    }

    fn scratch(&mut self, num_nodes: usize) -> Scratch {
        self.spare.pop().unwrap_or_else(|| Scratch::new(num_nodes))
    }

    #[allow(clippy::too_many_arguments)]
    fn run_steps(
        &self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        (roots, mut b0): (&[Vec<u32>], ByteCounts),
        mut store: Option<&mut Pregathered>,
        loc: Locality<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError> {
        let (rank, world) = (w.rank, it.batches.len());
        let mut loss = 0.0;
        for (t, step_roots) in roots.iter().enumerate() {
            let mut s = match store.as_deref_mut() {
                None => w.compute(step_roots, it.epoch, it.dropout_key, it.global_size, grad)?,
                Some(store) => {
                    let mut s = StepStats { roots: step_roots.len() as u64, ..Default::default() };
                    if t == 0 {
                        // The whole iteration's remote fetch happened before this step.
                        s.rows = store.fetched;
                        s.gather_seconds = store.fetch_seconds;
                    }
                    if let Some(input) = store.take_step(t, w.features, loc, w.norm)? {
                        s.rows += input.local;
                        s.sample_seconds = input.sample_seconds;
                        s.gather_seconds += input.gather_seconds;
                        w.learn(input.blocks, input.rows, it.dropout_key, it.global_size, grad, &mut s)?;
                    }
                    s
                }
            };
            loss += s.loss;
            let mut sync = 0.0;
            if self.migration == Migration::Ring && t + 1 < roots.len() {
                let ts = Instant::now();
                pass_to_previous(coll, rank, world, grad)?;
                sync = ts.elapsed().as_secs_f64();
            }
            s.roots = step_roots.len() as u64;
            let b1 = coll.bytes();
            let mut r = step_record(it, (t as u32, rank, (rank + t) % world), &s, &b1.since(&b0));
            b0 = b1;
            r.sync_seconds = sync;
            if t + 1 < roots.len() {
                records.push_final(r)?;
            } else {
                records.push(r)?;
            }
        }
        Ok(loss)
    }
}

impl Strategy for MicroSteps {
    fn kind(&self) -> StrategyKind {
        self.kind
    }

    /// The T in use (auto: the latest decision).
    fn time_steps(&self) -> u32 {
        match &self.count {
            StepCount::World => self.world as u32,
            StepCount::Plan(p) => p.time_steps,
            StepCount::Auto(a) => a.current(),
        }
    }

    fn auto_state(&self) -> Option<super::AutoState> {
        match &self.count {
            StepCount::Auto(a) => Some(a.state()),
            _ => None,
        }
    }

    /// Also drops stores asked for ahead that turn out stale: their answers are
    /// taken, so none is left behind in the mailbox.
    fn settle(&mut self, w: &mut Worker<'_>) -> Result<(), TrainError> {
        while let Some(mut s) = self.ahead.pop_front() {
            s.complete(w.features)?;
            self.spare.push(s.recycle());
        }
        Ok(())
    }

    fn restore_auto(&mut self, s: &super::AutoState) -> Result<(), TrainError> {
        match &mut self.count {
            StepCount::Auto(a) => a.restore(s),
            _ => Ok(()),
        }
    }

    fn iteration(
        &mut self,
        w: &mut Worker<'_>,
        coll: &mut dyn Collective,
        it: &Iteration<'_>,
        grad: &mut [f32],
        records: &mut StepSink<'_>,
    ) -> Result<f64, TrainError> {
        let rank = w.rank;
        // Step 0's record also carries what the iteration moved before it (the pre-gather fetch).
        let bytes0 = coll.bytes();
        let t_count = match &mut self.count {
            StepCount::Auto(a) => {
                let t = a.begin(coll, it.epoch)?;
                if let Some(why) = a.take_decision() {
                    records.event(&why);
                }
                t
            }
            _ => self.time_steps(),
        };
        let mut roots = std::mem::take(&mut self.roots);
        self.routed(&it.batches, rank, t_count, &mut roots);
        let owners = self.owners.clone();
        let loc = Locality { owners: owners.as_ref().map(Owners::as_slice), rank };
        let num_nodes = w.graph.num_nodes();

        let mut store = None;
        if self.pregather {
            store = match self.ahead.pop_front() {
                Some(s) if s.epoch == it.epoch && s.roots == roots => Some(s),
                stale => {
                    self.ahead.extend(stale);
                    self.settle(w)?;
                    let scratch = self.scratch(num_nodes);
                    Some(Pregathered::build(&w.sampler, w.features, loc, roots.clone(), it.epoch, scratch)?)
                }
            };
        }
        // --prefetch: the next iterations are sampled and their rows asked for
        // now, once this one's have arrived, so that the owners' answers travel
        // while this iteration computes and sums its gradient (no thread: on a
        // worker with one core a second one competes with the compute).
        if let Some(s) = store.as_mut() {
            s.complete(w.features)?;
        }
        if self.prefetch {
            let t_next = match &self.count {
                StepCount::Auto(a) => a.next(),
                _ => Some(t_count),
            };
            while let (Some(t), Some(batches)) = (t_next, it.ahead.get(self.ahead.len())) {
                let mut next = Vec::new();
                self.routed(batches, rank, t, &mut next);
                let scratch = self.scratch(num_nodes);
                self.ahead.push_back(Pregathered::request(&w.sampler, w.features, loc, next, it.epoch, scratch)?);
            }
        }
        let result = self.run_steps(w, coll, it, (&roots, bytes0), store.as_mut(), loc, grad, records);
        if let Some(s) = store {
            self.spare.push(s.recycle());
        }
        self.roots = roots;
        result
    }
}

/// Ring migration: sends the accumulator in `grad` to worker rank - 1 and
/// replaces it with the one worker rank + 1 sends.
fn pass_to_previous(coll: &mut dyn Collective, rank: usize, world: usize, grad: &mut [f32]) -> Result<(), TrainError> {
    if world == 1 {
        return Ok(());
    }
    let (prev, next) = ((rank + world - 1) % world, (rank + 1) % world);
    let mut out = vec![Vec::new(); world];
    out[prev] = bytemuck::cast_slice::<f32, u8>(grad).to_vec();
    let got = coll.all_to_all(out, Category::Migration).map_err(TrainError::Comm)?;
    let theirs = &got[next];
    if theirs.len() != grad.len() * 4 {
        return Err(TrainError::Comm(
            format!(
                "--migration ring: worker {next} passed {} bytes of gradient accumulator, expected {}",
                theirs.len(),
                grad.len() * 4
            )
            .into(),
        ));
    }
    for (g, b) in grad.iter_mut().zip(theirs.chunks_exact(4)) {
        *g = f32::from_le_bytes(b.try_into().expect("4 bytes"));
    }
    Ok(())
}
