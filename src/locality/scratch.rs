//! Per-thread scratch for rayon loops: buffers sized by the graph (stamps,
//! dense maps) are made once per worker thread's share of a loop and reused,
//! never per micrograph.

use std::ops::{Deref, DerefMut};
use std::sync::Mutex;

/// A stack of reusable values; `get` lends one (making it if none is free)
/// and takes it back when the guard drops, so at most one value exists per
/// concurrently running task.
pub struct Pool<T> {
    free: Mutex<Vec<T>>,
    make: Box<dyn Fn() -> T + Send + Sync>,
}

impl<T> Pool<T> {
    pub fn new(make: impl Fn() -> T + Send + Sync + 'static) -> Self {
        Pool { free: Mutex::new(Vec::new()), make: Box::new(make) }
    }

    pub fn get(&self) -> Pooled<'_, T> {
        let item = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_else(|| (self.make)());
        Pooled { pool: self, item: Some(item) }
    }
}

pub struct Pooled<'a, T> {
    pool: &'a Pool<T>,
    item: Option<T>,
}

impl<T> Deref for Pooled<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.item.as_ref().expect("present until drop")
    }
}

impl<T> DerefMut for Pooled<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.item.as_mut().expect("present until drop")
    }
}

impl<T> Drop for Pooled<'_, T> {
    fn drop(&mut self) {
        if let Some(item) = self.item.take() {
            self.pool.free.lock().unwrap_or_else(|e| e.into_inner()).push(item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn values_are_reused_after_the_guard_drops() {
        let made = Arc::new(AtomicUsize::new(0));
        let m = made.clone();
        let pool = Pool::new(move || {
            m.fetch_add(1, Ordering::Relaxed);
            Vec::<u32>::with_capacity(8)
        });
        {
            let mut a = pool.get();
            a.push(1);
            let _b = pool.get();
        }
        let a = pool.get();
        assert_eq!(made.load(Ordering::Relaxed), 2);
        assert!(a.capacity() >= 8);
    }
}
