//! `--time-steps auto`: leapgnn measures each candidate T (W down to 1) on
//! real iterations, then rank 0 picks the T whose slowest worker was fastest
//! and broadcasts it, so every worker adopts the same T at the same iteration.
//! (The artifact let each rank decide from its own clock and could deadlock.)
//!
//! The schedule depends only on the sequence of iterations, which every worker
//! shares, so all workers enter the deciding collectives together.

use crate::comm::Category;
use crate::train::{Collective, TrainError};
use std::time::Instant;

/// Iterations run before measuring (first-touch page faults, allocator growth).
const WARMUP: u64 = 1;

pub(super) struct AutoSteps {
    world: usize,
    /// Candidate T values, most steps first.
    candidates: Vec<u32>,
    /// Candidate indices still to be measured, in order.
    todo: Vec<usize>,
    /// Measured seconds per candidate on this worker.
    seconds: Vec<f64>,
    /// The candidate the running iteration measures, and when it began.
    running: Option<(usize, Instant, u64)>,
    begun: u64,
    chosen: Option<u32>,
}

impl AutoSteps {
    pub fn new(world: usize) -> Self {
        let candidates: Vec<u32> = (1..=world as u32).rev().collect();
        AutoSteps {
            world,
            todo: (0..candidates.len()).collect(),
            seconds: vec![0.0; candidates.len()],
            candidates,
            running: None,
            begun: 0,
            chosen: (world == 1).then_some(1),
        }
    }

    pub fn chosen(&self) -> Option<u32> {
        self.chosen
    }

    /// T for the iteration about to start (of `epoch`); closes the previous
    /// iteration's measurement and, once every candidate has one, decides.
    pub fn begin(&mut self, coll: &mut dyn Collective, epoch: u64) -> Result<u32, TrainError> {
        let now = Instant::now();
        if let Some((c, start, e)) = self.running.take() {
            // An iteration that ended an epoch also paid for its evaluation: measure that candidate again.
            if e == epoch {
                self.seconds[c] = now.duration_since(start).as_secs_f64();
                self.todo.retain(|&x| x != c);
            }
        }
        let k = self.begun;
        self.begun += 1;
        if let Some(t) = self.chosen {
            return Ok(t);
        }
        if k < WARMUP {
            return Ok(self.world as u32);
        }
        match self.todo.first() {
            Some(&c) => {
                self.running = Some((c, now, epoch));
                Ok(self.candidates[c])
            }
            None => {
                let t = self.decide(coll)?;
                self.chosen = Some(t);
                Ok(t)
            }
        }
    }

    /// T of the next iteration if it is known now (for prefetching).
    pub fn next(&self) -> Option<u32> {
        if let Some(t) = self.chosen {
            return Some(t);
        }
        if self.begun < WARMUP {
            return Some(self.world as u32);
        }
        // Assumes the running measurement completes (prefetching stays within an epoch).
        let skip = usize::from(self.running.is_some());
        self.todo.get(skip).map(|&c| self.candidates[c])
    }

    /// Rank 0 collects every worker's seconds per candidate, takes the
    /// slowest worker's as the iteration time, picks the fastest candidate
    /// and broadcasts it.
    fn decide(&mut self, coll: &mut dyn Collective) -> Result<u32, TrainError> {
        let mine: Vec<u8> = self.seconds.iter().flat_map(|s| s.to_le_bytes()).collect();
        let mut out = vec![Vec::new(); self.world];
        out[0] = mine;
        let got = coll.all_to_all(out, Category::Control).map_err(TrainError::Comm)?;
        let mut decision = Vec::new();
        if coll.rank() == 0 {
            let n = self.candidates.len();
            let mut slowest = vec![0f64; n];
            for (r, bytes) in got.iter().enumerate() {
                if bytes.len() != n * 8 {
                    return Err(TrainError::Comm(
                        format!(
                            "--time-steps auto: worker {r} sent {} bytes of timings, expected {}",
                            bytes.len(),
                            n * 8
                        )
                        .into(),
                    ));
                }
                for (c, b) in bytes.chunks_exact(8).enumerate() {
                    let s = f64::from_le_bytes(b.try_into().expect("8 bytes"));
                    slowest[c] = slowest[c].max(s);
                }
            }
            let best = (0..n).min_by(|&a, &b| slowest[a].total_cmp(&slowest[b])).unwrap_or(0);
            tracing::info!(
                "--time-steps auto: iteration seconds by T {:?}; chose T = {}",
                self.candidates.iter().zip(&slowest).collect::<Vec<_>>(),
                self.candidates[best]
            );
            decision = self.candidates[best].to_le_bytes().to_vec();
        }
        coll.broadcast(&mut decision, 0).map_err(TrainError::Comm)?;
        let t = decision
            .get(..4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .filter(|&t| t >= 1 && t as usize <= self.world)
            .ok_or_else(|| TrainError::Comm("--time-steps auto: worker 0 broadcast a malformed decision".into()))?;
        Ok(t)
    }
}
