//! Bytes that crossed a socket, per category and direction. Every frame is
//! counted whole (header + payload), so the figures are what the network
//! carried, not what the model asked for; all but the goodbye a closing mesh
//! sends, which no snapshot of its sender can hold (`mesh::send_loop`), and
//! the messages of an uncounted exchange (`tag::counted`).

use std::sync::atomic::{AtomicU64, Ordering};

/// What a message carries; decides the counter it is billed to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u8)]
pub enum Category {
    Features = 0,
    Gradients = 1,
    Migration = 2,
    Activations = 3,
    Control = 4,
}

impl Category {
    pub const ALL: [Category; 5] =
        [Category::Features, Category::Gradients, Category::Migration, Category::Activations, Category::Control];

    pub fn from_u8(b: u8) -> Option<Category> {
        Category::ALL.get(b as usize).copied()
    }
    pub fn name(self) -> &'static str {
        match self {
            Category::Features => "features",
            Category::Gradients => "gradients",
            Category::Migration => "migration",
            Category::Activations => "activations",
            Category::Control => "control",
        }
    }
}

/// One number per category; serialises as `{"features", "gradients", ...}`
/// (the `bytes` object of `train --json`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PerCategory {
    pub features: u64,
    pub gradients: u64,
    pub migration: u64,
    pub activations: u64,
    pub control: u64,
}

impl PerCategory {
    pub fn get(&self, c: Category) -> u64 {
        self.as_array()[c as usize]
    }
    pub fn total(&self) -> u64 {
        self.as_array().iter().sum()
    }
    fn as_array(&self) -> [u64; 5] {
        [self.features, self.gradients, self.migration, self.activations, self.control]
    }
    fn from_fn(f: impl Fn(Category) -> u64) -> Self {
        PerCategory {
            features: f(Category::Features),
            gradients: f(Category::Gradients),
            migration: f(Category::Migration),
            activations: f(Category::Activations),
            control: f(Category::Control),
        }
    }
}

/// A snapshot of a worker's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ByteCounts {
    pub sent: PerCategory,
    pub received: PerCategory,
}

impl ByteCounts {
    /// What was counted between `earlier` and `self` (per time step, per epoch).
    pub fn since(&self, earlier: &ByteCounts) -> ByteCounts {
        let d = |a: &PerCategory, b: &PerCategory| PerCategory::from_fn(|c| a.get(c).saturating_sub(b.get(c)));
        ByteCounts { sent: d(&self.sent, &earlier.sent), received: d(&self.received, &earlier.received) }
    }
}

/// Live counters, shared by a mesh's sender and receiver threads.
#[derive(Debug, Default)]
pub struct Counters {
    sent: [AtomicU64; 5],
    received: [AtomicU64; 5],
}

impl Counters {
    pub fn add_sent(&self, c: Category, bytes: u64) {
        self.sent[c as usize].fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn add_received(&self, c: Category, bytes: u64) {
        self.received[c as usize].fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> ByteCounts {
        ByteCounts {
            sent: PerCategory::from_fn(|c| self.sent[c as usize].load(Ordering::Relaxed)),
            received: PerCategory::from_fn(|c| self.received[c as usize].load(Ordering::Relaxed)),
        }
    }
}
