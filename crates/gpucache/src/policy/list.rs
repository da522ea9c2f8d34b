//! Intrusive doubly-linked queues over dense entry ids.
//!
//! Several queues may share one [`Links`] table as long as each id is on at most one queue
//! at a time; that is how S3-FIFO keeps its small and main queues without allocating.

use super::EntryId;

pub(crate) const NIL: EntryId = EntryId::MAX;

#[derive(Clone, Copy, Debug)]
struct Node {
    prev: EntryId,
    next: EntryId,
}

/// The per-id link table shared by queues.
#[derive(Debug, Default)]
pub(crate) struct Links {
    nodes: Vec<Node>,
}

impl Links {
    /// Room for ids below `ids` without growing again ([`EvictionPolicy::reserve_ids`]).
    ///
    /// [`EvictionPolicy::reserve_ids`]: super::EvictionPolicy::reserve_ids
    pub(crate) fn reserve_ids(&mut self, ids: usize) {
        super::reserve_exact_ids(&mut self.nodes, ids);
    }

    /// Makes room for `id`. Inline, with the growth out of line: every push asks, and
    /// nearly every one finds room (a push was a call of about 34 instructions, a third of
    /// W-TinyLFU's move of an entry between queues).
    #[inline]
    pub(crate) fn ensure(&mut self, id: EntryId) {
        if self.nodes.len() <= id as usize {
            self.grow_to(id);
        }
    }

    #[cold]
    #[inline(never)]
    fn grow_to(&mut self, id: EntryId) {
        self.nodes.resize(
            id as usize + 1,
            Node {
                prev: NIL,
                next: NIL,
            },
        );
    }

    pub(crate) fn clear(&mut self) {
        self.nodes.clear();
    }

    /// How many ids the table has room for without growing (tests).
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.nodes.capacity()
    }

    /// Heap bytes of the table (memory accounting).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Node>()
    }
}

/// One FIFO queue: ids are pushed at the back and popped at the front.
#[derive(Debug)]
pub(crate) struct Queue {
    head: EntryId,
    tail: EntryId,
    len: usize,
}

impl Default for Queue {
    fn default() -> Self {
        Self {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

impl Queue {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The oldest id, left in place.
    pub(crate) fn front(&self) -> Option<EntryId> {
        (self.head != NIL).then_some(self.head)
    }

    /// The id after `id` (towards the back), which must be on this queue.
    pub(crate) fn next(&self, links: &Links, id: EntryId) -> Option<EntryId> {
        let next = links.nodes[id as usize].next;
        (next != NIL).then_some(next)
    }

    /// Calls `f` on every id, front to back.
    pub(crate) fn for_each(&self, links: &Links, mut f: impl FnMut(EntryId)) {
        let mut at = self.head;
        while at != NIL {
            f(at);
            at = links.nodes[at as usize].next;
        }
    }

    /// Appends `id`, which must not be on any queue sharing `links`.
    #[inline]
    pub(crate) fn push_back(&mut self, links: &mut Links, id: EntryId) {
        links.ensure(id);
        links.nodes[id as usize] = Node {
            prev: self.tail,
            next: NIL,
        };
        if self.tail == NIL {
            self.head = id;
        } else {
            links.nodes[self.tail as usize].next = id;
        }
        self.tail = id;
        self.len += 1;
    }

    /// Prepends `id` (it becomes the oldest), which must not be on any queue sharing `links`.
    #[inline]
    pub(crate) fn push_front(&mut self, links: &mut Links, id: EntryId) {
        links.ensure(id);
        links.nodes[id as usize] = Node {
            prev: NIL,
            next: self.head,
        };
        if self.head == NIL {
            self.tail = id;
        } else {
            links.nodes[self.head as usize].prev = id;
        }
        self.head = id;
        self.len += 1;
    }

    /// Removes and returns the oldest id.
    pub(crate) fn pop_front(&mut self, links: &mut Links) -> Option<EntryId> {
        if self.head == NIL {
            return None;
        }
        let id = self.head;
        self.unlink(links, id);
        Some(id)
    }

    /// Removes `id`, which must be on this queue.
    #[inline]
    pub(crate) fn unlink(&mut self, links: &mut Links, id: EntryId) {
        let Node { prev, next } = links.nodes[id as usize];
        if prev == NIL {
            self.head = next;
        } else {
            links.nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            links.nodes[next as usize].prev = prev;
        }
        self.len -= 1;
    }

    /// Moves the `count` ids from the front up to and including `last` (which must be on
    /// this queue, `count` places from its front) to the back of `to`, in order: one splice
    /// however many ids it carries.
    pub(crate) fn move_front_run(
        &mut self,
        links: &mut Links,
        to: &mut Queue,
        last: EntryId,
        count: usize,
    ) {
        debug_assert!(count > 0 && count <= self.len && self.head != NIL);
        let first = self.head;
        let rest = links.nodes[last as usize].next;
        self.head = rest;
        if rest == NIL {
            self.tail = NIL;
        } else {
            links.nodes[rest as usize].prev = NIL;
        }
        self.len -= count;
        links.nodes[last as usize].next = NIL;
        links.nodes[first as usize].prev = to.tail;
        if to.tail == NIL {
            to.head = first;
        } else {
            links.nodes[to.tail as usize].next = first;
        }
        to.tail = last;
        to.len += count;
    }

    /// Moves `id`, which must be on this queue, to the back.
    pub(crate) fn move_to_back(&mut self, links: &mut Links, id: EntryId) {
        if self.tail != id {
            self.unlink(links, id);
            self.push_back(links, id);
        }
    }

    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// Checks the queue: its links agree in both directions, its length is its count of
    /// ids, and no id is on it twice or on another queue of `seen` (the ids of queues
    /// already checked); adds its ids to `seen` and returns them front to back.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn validate(
        &self,
        links: &Links,
        seen: &mut std::collections::HashSet<EntryId>,
    ) -> Vec<EntryId> {
        let mut ids = Vec::new();
        let (mut prev, mut at) = (NIL, self.head);
        while at != NIL {
            assert!(
                ids.len() < self.len,
                "queue longer than its length {}",
                self.len
            );
            let node = links.nodes[at as usize];
            assert_eq!(node.prev, prev, "id {at}: back link broken");
            assert!(seen.insert(at), "id {at} queued twice");
            ids.push(at);
            (prev, at) = (at, node.next);
        }
        assert_eq!(self.tail, prev, "tail is not the last id");
        assert_eq!(ids.len(), self.len, "length disagrees with the links");
        ids
    }

    /// The ids from front to back (tests only).
    #[cfg(test)]
    pub(crate) fn to_vec(&self, links: &Links) -> Vec<EntryId> {
        let mut out = Vec::new();
        let mut at = self.head;
        while at != NIL {
            out.push(at);
            at = links.nodes[at as usize].next;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_share_links() {
        let mut links = Links::default();
        let (mut a, mut b) = (Queue::default(), Queue::default());
        for id in [3, 1, 4] {
            a.push_back(&mut links, id);
        }
        b.push_back(&mut links, 0);
        b.push_back(&mut links, 9);
        a.move_to_back(&mut links, 3);
        assert_eq!(a.to_vec(&links), vec![1, 4, 3]);
        a.unlink(&mut links, 4);
        assert_eq!(a.to_vec(&links), vec![1, 3]);
        assert_eq!(b.pop_front(&mut links), Some(0));
        b.push_back(&mut links, 4);
        assert_eq!(b.to_vec(&links), vec![9, 4]);
        assert_eq!((a.len(), b.len()), (2, 2));
        assert_eq!(a.pop_front(&mut links), Some(1));
        assert_eq!(a.pop_front(&mut links), Some(3));
        assert_eq!(a.pop_front(&mut links), None);
    }

    #[test]
    fn a_front_run_moves_in_one_splice() {
        let mut links = Links::default();
        let (mut a, mut b) = (Queue::default(), Queue::default());
        for id in [3, 1, 4, 5] {
            a.push_back(&mut links, id);
        }
        b.push_back(&mut links, 9);
        a.move_front_run(&mut links, &mut b, 1, 2);
        assert_eq!(a.to_vec(&links), vec![4, 5]);
        assert_eq!(b.to_vec(&links), vec![9, 3, 1]);
        // The whole queue, into an empty one.
        let mut c = Queue::default();
        a.move_front_run(&mut links, &mut c, 5, 2);
        assert_eq!((a.len(), a.front()), (0, None));
        assert_eq!(c.to_vec(&links), vec![4, 5]);
        let mut seen = std::collections::HashSet::new();
        for q in [&a, &b, &c] {
            q.validate(&links, &mut seen);
        }
        a.push_back(&mut links, 8);
        assert_eq!(a.to_vec(&links), vec![8]);
        a.validate(&links, &mut seen);
    }

    #[test]
    fn push_front_prepends() {
        let mut links = Links::default();
        let mut a = Queue::default();
        a.push_front(&mut links, 5);
        a.push_back(&mut links, 6);
        a.push_front(&mut links, 7);
        assert_eq!(a.to_vec(&links), vec![7, 5, 6]);
        a.validate(&links, &mut std::collections::HashSet::new());
        a.unlink(&mut links, 6);
        assert_eq!(a.pop_front(&mut links), Some(7));
        assert_eq!(a.to_vec(&links), vec![5]);
        a.validate(&links, &mut std::collections::HashSet::new());
    }
}
