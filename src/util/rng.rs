//! Seeded randomness. Every random choice in leapgnn derives from the user's
//! `--seed` through `stream`, so the same seed gives the same run on any
//! number of workers.

use rand::SeedableRng;
pub use rand_xoshiro::Xoshiro256PlusPlus as Rng;

/// SplitMix64 finaliser: a strong 64-bit mix, used to derive independent streams.
#[inline]
pub fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A hash of a seed and a tuple of coordinates (e.g. epoch, layer, vertex):
/// a pure function of its inputs.
#[inline]
pub fn hash_of(seed: u64, parts: &[u64]) -> u64 {
    let mut h = mix64(seed);
    for &p in parts {
        h = mix64(h ^ p);
    }
    h
}

/// An RNG for one named purpose (`what`) under `seed`; different purposes are independent.
pub fn stream(seed: u64, what: &str) -> Rng {
    let tag = what.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3));
    Rng::seed_from_u64(hash_of(seed, &[tag]))
}

/// A SplitMix64 stream: a single u64 of state, for hot loops that seed one
/// tiny generator per vertex or per row from `hash_of`.
#[derive(Clone, Copy, Debug)]
pub struct SplitMix(pub u64);

impl SplitMix {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }
    /// Jumps over the next `n` values in O(1): the state advances by a constant per draw.
    #[inline]
    pub fn skip(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15u64.wrapping_mul(n));
    }
    /// Uniform in `0..n` (Lemire's multiply-shift; bias below n / 2^64).
    #[inline]
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng as _;

    #[test]
    fn streams_are_reproducible_and_independent() {
        let a: Vec<u32> = (0..4).map(|_| 0).scan(stream(7, "split"), |r, _: u32| Some(r.random())).collect();
        let b: Vec<u32> = (0..4).map(|_| 0).scan(stream(7, "split"), |r, _: u32| Some(r.random())).collect();
        let c: Vec<u32> = (0..4).map(|_| 0).scan(stream(7, "features"), |r, _: u32| Some(r.random())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(hash_of(1, &[2, 3]), hash_of(1, &[3, 2]));
    }
}
