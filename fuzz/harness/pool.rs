//! A bounded pool of inputs a run grows (the seeds stay at its front); shared by every
//! generator, a leaf so that users without the program corpus include it alone.

use super::rng::Rng;

/// A bounded pool of inputs that grows as a run finds new behaviour; a full pool replaces a
/// random entry (the seeds, at the front, stay).
pub struct Pool<T> {
    pub items: Vec<T>,
    fixed: usize,
    cap: usize,
}

impl<T: Clone> Pool<T> {
    pub fn new(seeds: Vec<T>, cap: usize) -> Self {
        let fixed = seeds.len();
        Pool {
            items: seeds,
            fixed,
            cap: cap.max(fixed + 1),
        }
    }

    pub fn add(&mut self, rng: &mut Rng, item: T) {
        if self.items.len() < self.cap {
            self.items.push(item);
        } else {
            let i = self.fixed + rng.below(self.items.len() - self.fixed);
            self.items[i] = item;
        }
    }

    pub fn pick(&self, rng: &mut Rng) -> Option<&T> {
        rng.pick(&self.items)
    }

    /// One of the seeds the pool started with.
    pub fn pick_seed(&self, rng: &mut Rng) -> Option<&T> {
        rng.pick(&self.items[..self.fixed])
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }
}
