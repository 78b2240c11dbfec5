use std::collections::VecDeque;

/// A bounded history: pushing past the capacity drops the oldest entry, so a
/// long run's dashboard keeps a flat memory footprint.
#[derive(Clone, Debug)]
pub struct Ring<T> {
    items: VecDeque<T>,
    cap: usize,
}

impl<T> Ring<T> {
    pub fn new(cap: usize) -> Self {
        let cap = cap.max(1);
        Ring { items: VecDeque::with_capacity(cap), cap }
    }

    pub fn push(&mut self, v: T) {
        if self.items.len() == self.cap {
            self.items.pop_front();
        }
        self.items.push_back(v);
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }

    pub fn last(&self) -> Option<&T> {
        self.items.back()
    }

    /// Oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.items.iter()
    }

    /// The newest entry `want` accepts among the last `depth` ones.
    pub fn recent_mut(&mut self, depth: usize, want: impl Fn(&T) -> bool) -> Option<&mut T> {
        self.items.iter_mut().rev().take(depth).find(|v| want(v))
    }

    /// Keeps the entries `keep` accepts, in order.
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.items.retain(keep);
    }

    /// The newest `n` entries, oldest first.
    pub fn tail(&self, n: usize) -> impl Iterator<Item = &T> {
        self.items.iter().skip(self.items.len().saturating_sub(n))
    }
}
