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
    /// Bytes this worker has sent and received so far, by category (cumulative).
    fn bytes(&self) -> ByteCounts;
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
    fn bytes(&self) -> ByteCounts {
        ByteCounts::default()
    }
}
