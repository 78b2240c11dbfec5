//! Collectives over the mesh: ring all-reduce (reduce-scatter then
//! all-gather), barrier, broadcast. Every worker must call the same
//! collectives in the same order; each call has one deadline for all of its
//! messages.

use super::counters::Category;
use super::deadline::Deadline;
use super::error::CommError;
use super::mesh::Mesh;
use super::tag;
use std::ops::Range;
use std::time::Duration;

/// Tag of step `step` of the collective numbered `seq`.
fn step_tag(space: u8, seq: u64, step: usize) -> u64 {
    tag::make(space, (seq << 16) | step as u64)
}

/// Chunk `i` of `n` items split into `w` near-equal chunks (the first `n % w` get one more).
pub fn chunk(n: usize, w: usize, i: usize) -> Range<usize> {
    let (base, extra) = (n / w, n % w);
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

/// `xs` as little-endian bytes (the wire form of every f32 buffer).
pub fn le_bytes(xs: &[f32]) -> Vec<u8> {
    bytemuck::cast_slice::<f32, u8>(xs).to_vec()
}

/// `dst += src`, where `src` holds little-endian f32s (the byte order of every
/// host leapgnn builds for).
pub fn add_from_le(dst: &mut [f32], src: &[u8]) {
    match bytemuck::try_cast_slice::<u8, f32>(src) {
        Ok(xs) => dst.iter_mut().zip(xs).for_each(|(d, s)| *d += s),
        // Heap buffers are aligned in practice; this is the portable fallback.
        Err(_) => dst
            .iter_mut()
            .zip(src.chunks_exact(4))
            .for_each(|(d, s)| *d += f32::from_le_bytes([s[0], s[1], s[2], s[3]])),
    }
}

impl Mesh {
    /// Checks that a received f32 block has the expected length.
    fn expect_len(&self, peer: usize, got: &[u8], floats: usize, what: &str) -> Result<(), CommError> {
        if got.len() == floats * 4 {
            return Ok(());
        }
        Err(CommError::Protocol {
            peer: self.peer(peer),
            what: what.to_string(),
            detail: format!(
                "it sent {} bytes where {} f32s ({} bytes) were due: the workers passed buffers of different lengths",
                got.len(),
                floats,
                floats * 4
            ),
        })
    }

    /// Sums `buf` element-wise over all workers, in place, with a ring:
    /// reduce-scatter then all-gather, each worker sending 2(W-1)/W of the
    /// buffer. Handles any length, including 0 and lengths not divisible by W.
    pub fn all_reduce_sum(&self, buf: &mut [f32], category: Category, timeout: Duration) -> Result<(), CommError> {
        let w = self.world();
        if w == 1 {
            return Ok(());
        }
        let seq = self.next_collective();
        let dl = Deadline::after(timeout);
        let (r, n) = (self.rank(), buf.len());
        let (next, prev) = ((r + 1) % w, (r + w - 1) % w);
        let steps = w - 1;
        for s in 0..steps {
            let (send_c, recv_c) = ((r + w - s) % w, (r + 2 * w - s - 1) % w);
            self.send(next, step_tag(tag::ALL_REDUCE, seq, s), category, le_bytes(&buf[chunk(n, w, send_c)]))?;
            let what = || format!("all-reduce chunk {recv_c} (reduce-scatter step {} of {steps})", s + 1);
            let got = self.recv_within(prev, step_tag(tag::ALL_REDUCE, seq, s), &dl, what)?;
            let dst = &mut buf[chunk(n, w, recv_c)];
            self.expect_len(prev, &got, dst.len(), &what())?;
            add_from_le(dst, &got);
        }
        for s in 0..steps {
            let (send_c, recv_c) = ((r + 1 + w - s) % w, (r + w - s) % w);
            let t = step_tag(tag::ALL_REDUCE, seq, steps + s);
            self.send(next, t, category, le_bytes(&buf[chunk(n, w, send_c)]))?;
            let what = || format!("all-reduce chunk {recv_c} (all-gather step {} of {steps})", s + 1);
            let got = self.recv_within(prev, t, &dl, what)?;
            let dst = &mut buf[chunk(n, w, recv_c)];
            self.expect_len(prev, &got, dst.len(), &what())?;
            bytemuck::cast_slice_mut::<f32, u8>(dst).copy_from_slice(&got);
        }
        Ok(())
    }

    /// Returns when every worker has entered the barrier.
    pub fn barrier(&self, timeout: Duration) -> Result<(), CommError> {
        let w = self.world();
        if w == 1 {
            return Ok(());
        }
        let t = step_tag(tag::BARRIER, self.next_collective(), 0);
        let dl = Deadline::after(timeout);
        let others = || (0..w).filter(|&p| p != self.rank());
        for p in others() {
            self.send(p, t, Category::Control, Vec::new())?;
        }
        for p in others() {
            self.recv_within(p, t, &dl, || "its arrival at the barrier".to_string())?;
        }
        Ok(())
    }

    /// Makes `data` on every worker equal to `data` on `root`.
    pub fn broadcast(
        &self,
        root: usize,
        data: &mut Vec<u8>,
        category: Category,
        timeout: Duration,
    ) -> Result<(), CommError> {
        let w = self.world();
        if root >= w {
            return Err(CommError::Usage(format!("broadcast from worker {root}, but the job has {w} workers")));
        }
        if w == 1 {
            return Ok(());
        }
        let t = step_tag(tag::BROADCAST, self.next_collective(), 0);
        if self.rank() == root {
            for p in (0..w).filter(|&p| p != root) {
                self.send(p, t, category, data.clone())?;
            }
        } else {
            *data = self.recv_within(root, t, &Deadline::after(timeout), || "its broadcast".to_string())?;
        }
        Ok(())
    }

    /// Personalised exchange: `out[p]` goes to worker `p` (`out[rank]` stays
    /// here) and the result's entry `p` is what worker `p` sent this one. Empty
    /// messages are sent too, so every worker knows when the exchange is over.
    pub fn all_to_all(
        &self,
        out: Vec<Vec<u8>>,
        category: Category,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, CommError> {
        self.exchange(out, tag::ALL_TO_ALL, category, timeout)
    }

    /// `all_to_all` that no counter holds, sent or received: for an exchange
    /// that is no part of the bytes a run reports. Left out by its tag, not
    /// by snapshots around it, as a faster peer's message may arrive before
    /// this worker's exchange begins.
    pub fn all_to_all_uncounted(&self, out: Vec<Vec<u8>>, timeout: Duration) -> Result<Vec<Vec<u8>>, CommError> {
        self.exchange(out, tag::ALL_TO_ALL_UNCOUNTED, Category::Control, timeout)
    }

    fn exchange(
        &self,
        mut out: Vec<Vec<u8>>,
        space: u8,
        category: Category,
        timeout: Duration,
    ) -> Result<Vec<Vec<u8>>, CommError> {
        let w = self.world();
        if out.len() != w {
            return Err(CommError::Usage(format!(
                "all-to-all with {} messages, but the job has {w} workers",
                out.len()
            )));
        }
        let r = self.rank();
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); w];
        got[r] = std::mem::take(&mut out[r]);
        if w == 1 {
            return Ok(got);
        }
        let t = step_tag(space, self.next_collective(), 0);
        for (p, m) in out.into_iter().enumerate().filter(|&(p, _)| p != r) {
            self.send(p, t, category, m)?;
        }
        let dl = Deadline::after(timeout);
        for (p, slot) in got.iter_mut().enumerate().filter(|&(p, _)| p != r) {
            *slot = self.recv_within(p, t, &dl, || "its part of an all-to-all exchange".to_string())?;
        }
        Ok(got)
    }

    /// `broadcast` of an f32 buffer whose length every worker already knows
    /// (e.g. the initial model weights from rank 0).
    pub fn broadcast_f32(
        &self,
        root: usize,
        buf: &mut [f32],
        category: Category,
        timeout: Duration,
    ) -> Result<(), CommError> {
        let mut bytes = if self.rank() == root { le_bytes(buf) } else { Vec::new() };
        self.broadcast(root, &mut bytes, category, timeout)?;
        if self.rank() != root {
            self.expect_len(root, &bytes, buf.len(), &format!("the broadcast from worker {root}"))?;
            bytemuck::cast_slice_mut::<f32, u8>(buf).copy_from_slice(&bytes);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_cover_the_buffer_exactly() {
        for n in [0, 1, 2, 3, 7, 45_000, 45_001] {
            for w in 1..=5 {
                let mut next = 0;
                for i in 0..w {
                    let c = chunk(n, w, i);
                    assert_eq!(c.start, next, "n {n} w {w} i {i}");
                    assert!(c.len() == n / w || c.len() == n / w + 1);
                    next = c.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn unaligned_sources_add_the_same() {
        let xs = [1.5f32, -2.0, 3.25];
        let mut bytes = vec![0u8];
        bytes.extend_from_slice(bytemuck::cast_slice(&xs));
        let (mut a, mut b) = ([1.0f32; 3], [1.0f32; 3]);
        add_from_le(&mut a, &bytes[1..]);
        add_from_le(&mut b, &le_bytes(&xs));
        assert_eq!(a, [2.5, -1.0, 4.25]);
        assert_eq!(a, b);
    }
}
