//! Least-recently-used order.

use super::list::{Links, Queue};
use super::{EntryId, EvictionPolicy};

/// Evicts the entry whose last insert or hit is oldest.
#[derive(Debug, Default)]
pub struct Lru {
    links: Links,
    queue: Queue,
}

impl Lru {
    /// Checks the queue and that it holds only ids `tracked` accepts (tests and fuzzing).
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(&self, tracked: &dyn Fn(EntryId) -> bool) {
        let ids = self.queue.validate(&self.links, &mut Default::default());
        assert!(ids.into_iter().all(tracked), "LRU tracks a free id");
    }
}

impl EvictionPolicy for Lru {
    fn insert(&mut self, id: EntryId, _key_hash: u64, _weight: u64) {
        self.queue.push_back(&mut self.links, id);
    }

    fn touch(&mut self, id: EntryId) {
        self.queue.move_to_back(&mut self.links, id);
    }

    fn update(&mut self, id: EntryId, _weight: u64) {
        self.touch(id);
    }

    fn remove(&mut self, id: EntryId) {
        self.queue.unlink(&mut self.links, id);
    }

    fn evict(&mut self) -> Option<EntryId> {
        self.queue.pop_front(&mut self.links)
    }

    fn reserve_ids(&mut self, ids: usize) {
        self.links.reserve_ids(ids);
    }

    fn len(&self) -> usize {
        self.queue.len()
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.links.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_first() {
        let mut lru = Lru::default();
        for id in 0..4 {
            lru.insert(id, 0, 1);
        }
        lru.touch(0);
        lru.touch(2);
        let order: Vec<_> = std::iter::from_fn(|| lru.evict()).collect();
        assert_eq!(order, vec![1, 3, 0, 2]);
    }
}
