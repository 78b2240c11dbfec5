//! What the training loop needs from the other workers. The distributed
//! runtime implements it over TCP; `Solo` is the single worker (W = 1).

use crate::comm::ByteCounts;

pub type CommError = Box<dyn std::error::Error + Send + Sync>;

pub trait Collective {
    fn rank(&self) -> usize;
    fn world(&self) -> usize;
    /// Element-wise sum over all workers, in place; every worker ends with the same values.
    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError>;
    fn barrier(&mut self) -> Result<(), CommError>;
    /// Replaces `buf` on every worker with `root`'s.
    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError>;
    /// `out[p]` goes to worker `p`; returns what each worker sent this one
    /// (entry `rank` is `out[rank]`). Billed to `category`.
    fn all_to_all(&mut self, out: Vec<Vec<u8>>, category: crate::comm::Category) -> Result<Vec<Vec<u8>>, CommError>;
    /// `all_to_all` that `bytes` never holds, on any worker.
    fn all_to_all_uncounted(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, CommError>;
    /// Bytes this worker has sent and received so far, by category (cumulative).
    fn bytes(&self) -> ByteCounts;
}

/// A u64 travels in an f32 all-reduce as four 16-bit pieces: exact in f32.
const PIECES: usize = 4;

/// An all-reduce buffer that gathers one u64 per worker: `v` in worker
/// `rank`'s slots, zeros elsewhere (each worker writes only its own, so the
/// sum is a gather). Read it back with `read_u64_slots`.
pub fn u64_slots(v: u64, rank: usize, world: usize) -> Vec<f32> {
    let mut all = vec![0f32; world * PIECES];
    for (k, slot) in all[rank * PIECES..(rank + 1) * PIECES].iter_mut().enumerate() {
        *slot = ((v >> (16 * k)) & 0xffff) as f32;
    }
    all
}

/// Every worker's u64 from a summed `u64_slots` buffer, by rank.
pub fn read_u64_slots(all: &[f32]) -> Vec<u64> {
    all.chunks_exact(PIECES)
        .map(|p| p.iter().enumerate().fold(0u64, |v, (k, x)| v | ((*x as u64) << (16 * k))))
        .collect()
}

/// The only worker: every collective is the identity and nothing crosses a socket.
#[derive(Debug, Default)]
pub struct Solo;

impl Collective for Solo {
    fn rank(&self) -> usize {
        0
    }
    fn world(&self) -> usize {
        1
    }
    fn all_reduce_sum(&mut self, _buf: &mut [f32]) -> Result<(), CommError> {
        Ok(())
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        Ok(())
    }
    fn broadcast(&mut self, _buf: &mut Vec<u8>, _root: usize) -> Result<(), CommError> {
        Ok(())
    }
    fn all_to_all(&mut self, out: Vec<Vec<u8>>, _category: crate::comm::Category) -> Result<Vec<Vec<u8>>, CommError> {
        if out.len() != 1 {
            return Err(format!("all-to-all with {} messages, but there is one worker", out.len()).into());
        }
        Ok(out)
    }
    fn all_to_all_uncounted(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, CommError> {
        self.all_to_all(out, crate::comm::Category::Control)
    }
    fn bytes(&self) -> ByteCounts {
        ByteCounts::default()
    }
}

/// The workers of a distributed job, over their TCP mesh. Every wait is
/// bounded by `timeout`; gradients are billed as such, the rest as control.
pub struct MeshCollective<'m> {
    pub mesh: &'m crate::comm::Mesh,
    pub timeout: std::time::Duration,
}

impl Collective for MeshCollective<'_> {
    fn rank(&self) -> usize {
        self.mesh.rank()
    }
    fn world(&self) -> usize {
        self.mesh.world()
    }
    fn all_reduce_sum(&mut self, buf: &mut [f32]) -> Result<(), CommError> {
        Ok(self.mesh.all_reduce_sum(buf, crate::comm::Category::Gradients, self.timeout)?)
    }
    fn barrier(&mut self) -> Result<(), CommError> {
        Ok(self.mesh.barrier(self.timeout)?)
    }
    fn broadcast(&mut self, buf: &mut Vec<u8>, root: usize) -> Result<(), CommError> {
        Ok(self.mesh.broadcast(root, buf, crate::comm::Category::Control, self.timeout)?)
    }
    fn all_to_all(&mut self, out: Vec<Vec<u8>>, category: crate::comm::Category) -> Result<Vec<Vec<u8>>, CommError> {
        Ok(self.mesh.all_to_all(out, category, self.timeout)?)
    }
    fn all_to_all_uncounted(&mut self, out: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, CommError> {
        Ok(self.mesh.all_to_all_uncounted(out, self.timeout)?)
    }
    fn bytes(&self) -> ByteCounts {
        self.mesh.bytes()
    }
}
