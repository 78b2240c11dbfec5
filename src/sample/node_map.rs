use std::collections::HashMap;

/// Global vertex id -> position in a block while it is being built.
pub trait Interner {
    /// Position of `v`, appending it to `list` when it is new.
    fn intern(&mut self, v: u32, list: &mut Vec<u32>) -> u32;
    /// Forgets the given ids (all ids interned since the last clear).
    fn clear(&mut self, ids: &[u32]);
}

/// Sparse interner for small vertex sets (one micrograph): cheap to create,
/// so every parallel task can own one.
#[derive(Default)]
pub struct SmallMap(HashMap<u32, u32, std::hash::BuildHasherDefault<IdHasher>>);

impl Interner for SmallMap {
    #[inline]
    fn intern(&mut self, v: u32, list: &mut Vec<u32>) -> u32 {
        *self.0.entry(v).or_insert_with(|| {
            list.push(v);
            list.len() as u32 - 1
        })
    }
    fn clear(&mut self, _ids: &[u32]) {
        self.0.clear();
    }
}

/// Multiplicative hash for u32 keys (ids are not attacker-chosen hash-flooding input).
#[derive(Default)]
pub struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

/// Global vertex id -> position in a block, dense over all vertices.
///
/// Kept by the caller and reused across batches: `clear` resets only the ids
/// it is given, so building a block costs O(touched vertices), never O(n).
pub struct NodeMap {
    pos: Vec<u32>,
}

const ABSENT: u32 = u32::MAX;

impl NodeMap {
    pub fn new(num_nodes: usize) -> Self {
        NodeMap { pos: vec![ABSENT; num_nodes] }
    }

    pub fn num_nodes(&self) -> usize {
        self.pos.len()
    }

    #[inline]
    pub fn get(&self, v: u32) -> Option<u32> {
        let p = self.pos[v as usize];
        (p != ABSENT).then_some(p)
    }
}

impl Interner for NodeMap {
    #[inline]
    fn intern(&mut self, v: u32, list: &mut Vec<u32>) -> u32 {
        let slot = &mut self.pos[v as usize];
        if *slot == ABSENT {
            *slot = list.len() as u32;
            list.push(v);
        }
        *slot
    }

    fn clear(&mut self, ids: &[u32]) {
        for &v in ids {
            self.pos[v as usize] = ABSENT;
        }
    }
}
