//! One deadline per operation: a collective or a fetch that waits on several
//! messages must finish within its timeout as a whole, and its error reports
//! the timeout the caller chose, not whatever was left of it.

use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    timeout: Duration,
}

impl Deadline {
    pub fn after(timeout: Duration) -> Self {
        let now = Instant::now();
        // A timeout too large to represent means "practically never".
        let at = now.checked_add(timeout).unwrap_or(now + Duration::from_secs(86_400 * 365));
        Deadline { at, timeout }
    }
    pub fn at(&self) -> Instant {
        self.at
    }
    /// The timeout this deadline was made from (what errors report).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }
    pub fn remaining(&self) -> Duration {
        self.at.saturating_duration_since(Instant::now())
    }
    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }
}
