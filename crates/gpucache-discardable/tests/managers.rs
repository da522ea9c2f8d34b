//! The seed's and Chromium's behaviours of the client and service managers.

use std::sync::{Arc, Mutex};

use gpucache::PolicyKind;
use gpucache_discardable::{
    ClientDiscardableManager, ClientHandle, ContextId, Deleted, Error, MemoryPressure,
    ServiceDiscardableManager, SharedMemory,
};

type Log = Arc<Mutex<Vec<(ContextId, Vec<u32>)>>>;

const K: u64 = 1024;

struct Rig {
    s: ServiceDiscardableManager,
    c: ClientDiscardableManager,
    log: Log,
}

impl Rig {
    fn new(budget: u64, kind: PolicyKind) -> Rig {
        let mut s = ServiceDiscardableManager::new(budget, kind);
        let log: Log = Arc::default();
        let l = log.clone();
        s.set_delete_callback(Box::new(move |ctx, d: &[Deleted]| {
            l.lock()
                .unwrap()
                .push((ctx, d.iter().map(|d| d.resource).collect()));
        }));
        s.add_client(1);
        Rig {
            s,
            c: ClientDiscardableManager::default(),
            log,
        }
    }

    /// Registers new pools through their fds (the path a socket channel takes).
    fn sync(&mut self) {
        for pool in self.c.take_new_pools() {
            let fd = self.c.pool_fd(pool).unwrap().try_clone_to_owned().unwrap();
            self.s.register_pool_fd(1, pool, fd).unwrap();
        }
        for pool in self.c.take_released_pools() {
            self.s.release_pool(1, pool).unwrap();
        }
    }

    fn init(&mut self, ctx: ContextId, res: u32, size: u64) -> ClientHandle {
        let h = self.c.initialize().unwrap();
        self.sync();
        self.s
            .initialize(1, ctx, res, h.pool, h.offset, size)
            .unwrap();
        h
    }

    fn word(&self, h: &ClientHandle) -> u32 {
        self.c.handle(h.id).unwrap().value()
    }

    fn deleted(&self) -> Vec<u32> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .flat_map(|(_, r)| r.clone())
            .collect()
    }
}

#[test]
fn basic_usage() {
    let mut r = Rig::new(2 * K, PolicyKind::Lru);
    let a = r.init(0, 10, K);
    assert_eq!(r.word(&a), 2, "a new handle starts locked");
    assert_eq!(r.s.is_unlocked(1, 10), Some(false));
    r.s.unlock(1, 10).unwrap();
    assert_eq!(r.word(&a), 1);
    assert_eq!(r.s.is_unlocked(1, 10), Some(true));
    assert!(r.c.lock(a.id).unwrap());
    r.s.unlock(1, 10).unwrap();
    r.init(0, 11, K);
    r.init(0, 12, K); // over budget: the unlocked 10 goes
    assert_eq!(r.deleted(), vec![10]);
    assert!(!r.c.lock(a.id).unwrap(), "a deleted handle does not lock");
    assert!(!r.s.contains(1, 10));
    assert_eq!(r.s.stats().total_bytes, 2 * K);
}

#[test]
fn multiple_locks() {
    let mut r = Rig::new(10 * K, PolicyKind::Lru);
    let a = r.init(0, 1, K);
    for _ in 0..3 {
        assert!(r.c.lock(a.id).unwrap());
    }
    assert_eq!(r.word(&a), 5);
    for _ in 0..4 {
        r.s.unlock(1, 1).unwrap();
    }
    assert!(matches!(
        r.s.unlock(1, 1),
        Err(Error::NotLocked { word: 1, .. })
    ));
    // Locked entries are never deleted, even far over budget.
    r.c.lock(a.id).unwrap();
    r.s.set_budget(0);
    assert!(r.s.contains(1, 1));
    r.s.unlock(1, 1).unwrap();
    assert!(!r.s.contains(1, 1));
}

#[test]
fn sub_allocations_and_pools() {
    let mut r = Rig::new(u64::MAX, PolicyKind::Lru);
    let per_pool = (gpucache_discardable::page_size() / 4) as u32;
    let hs: Vec<_> = (0..per_pool + 1).map(|i| r.init(0, i, 1)).collect();
    assert!(hs[..per_pool as usize].iter().all(|h| h.pool == hs[0].pool));
    let mut offs: Vec<_> = hs[..per_pool as usize].iter().map(|h| h.offset).collect();
    offs.dedup();
    assert_eq!(offs.len(), per_pool as usize, "distinct words in one pool");
    assert_ne!(hs[per_pool as usize].pool, hs[0].pool);
    assert_eq!(r.c.pool_count(), 2);
    assert_eq!(r.s.pool_count(1), 2);
}

#[test]
fn reuse_only_after_deletion_and_merging() {
    let mut r = Rig::new(u64::MAX, PolicyKind::Lru);
    let hs: Vec<_> = (0..5).map(|i| r.init(0, i, 1)).collect();
    // The client frees slot 1 before the service deleted it: not reused yet.
    r.c.free(hs[1].id).unwrap();
    assert_eq!(r.c.pending_count(), 1);
    let h5 = r.init(0, 5, 1);
    assert_eq!(h5.offset, 20);
    assert!(h5.id > hs[4].id, "ids only grow");
    r.s.delete(1, 1).unwrap();
    r.c.reclaim();
    assert_eq!(r.c.pending_count(), 0);
    let h6 = r.init(0, 6, 1);
    assert_eq!(h6.offset, hs[1].offset, "a deleted slot is reused");
    assert!(h6.id > h5.id);
    // Free 2 and 3, then 1 and 5 and 4: the ranges merge.
    for (h, res) in [(&hs[2], 2), (&hs[3], 3), (&h6, 6), (&h5, 5), (&hs[4], 4)] {
        r.s.delete(1, res).unwrap();
        r.c.free(h.id).unwrap();
    }
    let words = (gpucache_discardable::page_size() / 4) as u32;
    assert_eq!(r.c.free_ranges(hs[0].pool), vec![(1, words - 1)]);
    assert_eq!(r.c.handle(hs[1].id).map(|_| ()), None);
    assert!(matches!(r.c.lock(hs[1].id), Err(Error::UnknownHandle(_))));
    // The last one freed: the pool is released on both sides.
    r.s.delete(1, 0).unwrap();
    r.c.free(hs[0].id).unwrap();
    assert_eq!(r.c.pool_count(), 0);
    r.sync();
    assert_eq!(r.s.pool_count(1), 0);
}

#[test]
fn limits_in_lru_order() {
    let mut r = Rig::new(3 * K, PolicyKind::Lru);
    let hs: Vec<_> = (0..3).map(|i| r.init(0, i, K)).collect();
    for i in 0..3 {
        r.s.unlock(1, i).unwrap();
    }
    // Use 0 again: 1 is now the least recently used.
    assert!(r.c.lock(hs[0].id).unwrap());
    r.s.unlock(1, 0).unwrap();
    r.init(0, 3, K);
    assert_eq!(r.deleted(), vec![1]);
    r.init(0, 4, K);
    assert_eq!(r.deleted(), vec![1, 2]);
    assert_eq!(r.word(&hs[1]), 0);
    assert_eq!(r.s.stats().evictions, 2);
}

#[test]
fn size_change() {
    let mut r = Rig::new(4 * K, PolicyKind::Lru);
    r.init(0, 0, K);
    r.s.unlock(1, 0).unwrap();
    r.init(0, 1, K);
    r.s.resize(1, 1, 2 * K).unwrap(); // levels added while locked
    assert_eq!(r.s.stats().total_bytes, 3 * K);
    assert!(r.deleted().is_empty());
    r.s.resize(1, 1, 4 * K).unwrap();
    assert_eq!(r.deleted(), vec![0]);
    assert_eq!(r.s.size_of(1, 1), Some(4 * K));
    assert_eq!(r.s.stats().locked_bytes, 4 * K);
    r.s.unlock(1, 1).unwrap();
    r.s.resize(1, 1, 5 * K).unwrap(); // unlocked and over budget: it goes
    assert_eq!(r.deleted(), vec![0, 1]);
    assert_eq!(r.s.stats().total_bytes, 0);
}

#[test]
fn ownership_on_unlock_and_scribbling() {
    let mut r = Rig::new(2 * K, PolicyKind::Lru);
    let a = r.init(0, 0, K);
    r.s.unlock(1, 0).unwrap();
    // Unlocked, so the service owns it; the client locks again through shared memory only.
    assert!(r.c.lock(a.id).unwrap());
    r.init(0, 1, K);
    r.init(0, 2, K); // over budget; 0's delete loses to the client's lock
    assert!(r.s.contains(1, 0));
    assert_eq!(r.s.stats().lock_races, 1);
    assert_eq!(r.s.is_unlocked(1, 0), Some(false));
    r.s.unlock(1, 0).unwrap(); // now it goes
    assert_eq!(r.deleted(), vec![0]);
    // A client that scribbles over its own words: 1 on a locked handle, then 0.
    let b = r.init(0, 3, K);
    let bh = r.c.handle(b.id).unwrap();
    bh.memory()
        .word(bh.offset())
        .unwrap()
        .store(1, std::sync::atomic::Ordering::Relaxed);
    assert!(matches!(
        r.s.unlock(1, 3),
        Err(Error::NotLocked { word: 1, .. })
    ));
    bh.force_delete();
    assert!(matches!(
        r.s.unlock(1, 3),
        Err(Error::NotLocked { word: 0, .. })
    ));
    assert_eq!(r.s.stats().total_bytes, 3 * K, "locked: kept over budget");
    // Another client's resources are untouched by any of it.
    r.s.add_client(2);
    let mem = Arc::new(SharedMemory::create(1, false).unwrap());
    mem.word(0)
        .unwrap()
        .store(2, std::sync::atomic::Ordering::Relaxed);
    r.s.register_pool(2, 7, mem).unwrap();
    r.s.initialize(2, 0, 0, 7, 0, 0).unwrap();
    r.s.set_budget(0);
    assert!(r.s.contains(2, 0));
}

#[test]
fn memory_pressure() {
    let mut r = Rig::new(8 * K, PolicyKind::TinyLfu);
    for i in 0..8 {
        r.init(0, i, K);
        if i != 7 {
            r.s.unlock(1, i).unwrap();
        }
    }
    r.s.memory_pressure(MemoryPressure::Moderate);
    assert_eq!(r.s.stats().total_bytes, 2 * K);
    r.s.memory_pressure(MemoryPressure::Critical);
    assert_eq!(r.s.stats().total_bytes, K, "only the locked one stays");
    assert!(r.s.contains(1, 7));
    assert_eq!(r.s.stats().budget, 8 * K);
}

#[test]
fn deletes_batched_per_context_and_shutdown() {
    let mut r = Rig::new(100 * K, PolicyKind::Lru);
    let hs: Vec<_> = (0..9).map(|i| r.init(i % 3, i, K)).collect();
    for i in 0..6 {
        r.s.unlock(1, i).unwrap();
    }
    r.s.memory_pressure(MemoryPressure::Critical);
    let log = r.log.lock().unwrap().clone();
    assert_eq!(log.len(), 3, "one call per context: {log:?}");
    assert!(log
        .iter()
        .all(|(ctx, res)| res.len() == 2 && res.iter().all(|r| r % 3 == *ctx)));
    r.s.shutdown();
    assert_eq!(r.log.lock().unwrap().len(), 6);
    assert!(
        hs.iter().all(|h| r.word(h) == 0),
        "shutdown force-deletes locked handles"
    );
    assert_eq!(r.s.stats().total_bytes, 0);
}

#[test]
fn context_loss() {
    let mut r = Rig::new(100 * K, PolicyKind::Lru);
    let hs: Vec<_> = (0..4).map(|i| r.init(i % 2, i, K)).collect();
    r.s.unlock(1, 0).unwrap();
    assert_eq!(r.s.context_lost(0), 2);
    assert!(
        r.deleted().is_empty(),
        "a lost context's resources are gone already"
    );
    assert_eq!((r.word(&hs[0]), r.word(&hs[2])), (0, 0));
    assert_eq!((r.word(&hs[1]), r.word(&hs[3])), (2, 2));
    assert_eq!(r.s.stats().total_bytes, 2 * K);
    assert!(!r.c.lock(hs[0].id).unwrap());
}

#[test]
fn client_death() {
    let mut r = Rig::new(100 * K, PolicyKind::Lru);
    r.init(0, 0, K);
    r.init(1, 1, K);
    r.s.add_client(2);
    let mem = Arc::new(SharedMemory::create(1, false).unwrap());
    mem.word(0)
        .unwrap()
        .store(2, std::sync::atomic::Ordering::Relaxed);
    r.s.register_pool(2, 1, mem).unwrap();
    r.s.initialize(2, 0, 0, 1, 0, K).unwrap();
    assert_eq!(r.s.remove_client(1).unwrap(), 2);
    assert_eq!(r.log.lock().unwrap().len(), 2);
    assert_eq!(r.s.pool_count(1), 0);
    assert!(r.s.contains(2, 0));
    assert_eq!(r.s.stats().total_bytes, K);
    assert!(matches!(r.s.unlock(1, 0), Err(Error::UnknownClient(1))));
}

#[test]
fn hostile_inputs_are_typed_errors() {
    let mut r = Rig::new(100 * K, PolicyKind::Lru);
    let h = r.init(0, 0, K);
    let s = &mut r.s;
    assert!(matches!(
        s.initialize(9, 0, 0, 1, 0, 1),
        Err(Error::UnknownClient(9))
    ));
    assert!(matches!(
        s.initialize(1, 0, 5, 99, 0, 1),
        Err(Error::UnknownPool { pool: 99, .. })
    ));
    assert!(matches!(
        s.initialize(1, 0, 5, h.pool, 2, 1),
        Err(Error::BadOffset { offset: 2, .. })
    ));
    assert!(matches!(
        s.initialize(1, 0, 5, h.pool, 1 << 20, 1),
        Err(Error::BadOffset { .. })
    ));
    assert!(matches!(
        s.initialize(1, 0, 5, h.pool, u32::MAX - 3, 1),
        Err(Error::BadOffset { .. })
    ));
    assert!(matches!(
        s.initialize(1, 0, 0, h.pool, 4, 1),
        Err(Error::AlreadyInitialized { .. })
    ));
    assert!(matches!(
        s.initialize(1, 0, 5, h.pool, h.offset, 1),
        Err(Error::HandleInUse { .. })
    ));
    assert!(matches!(
        s.initialize(1, 0, 5, h.pool, 8, 1),
        Err(Error::NotLockedAtInit(0))
    ));
    assert!(matches!(
        s.unlock(1, 42),
        Err(Error::UnknownResource { resource: 42, .. })
    ));
    s.unlock(1, 0).unwrap();
    assert!(matches!(
        s.unlock(1, 0),
        Err(Error::NotLocked { word: 1, .. })
    ));
    assert!(matches!(
        s.resize(1, 42, 1),
        Err(Error::UnknownResource { .. })
    ));
    assert!(matches!(
        s.delete(1, 42),
        Err(Error::UnknownResource { .. })
    ));
    assert!(matches!(
        s.release_pool(1, h.pool),
        Err(Error::PoolInUse { .. })
    ));
    assert!(matches!(
        s.release_pool(1, 99),
        Err(Error::UnknownPool { .. })
    ));
    assert!(matches!(s.remove_client(9), Err(Error::UnknownClient(9))));
    let fd = r.c.pool_fd(h.pool).unwrap().try_clone_to_owned().unwrap();
    assert!(matches!(
        r.s.register_pool_fd(1, h.pool, fd),
        Err(Error::PoolExists { .. })
    ));
    // An empty memfd, and one not a whole number of words.
    for len in [0u64, 6] {
        let flags = rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING;
        let fd = rustix::fs::memfd_create("t", flags).unwrap();
        rustix::fs::ftruncate(&fd, len).unwrap();
        assert!(matches!(r.s.register_pool_fd(1, 50, fd), Err(Error::PoolSize(l)) if l == len));
    }
    // A pipe, and a memfd that could shrink under the service (no sealing): refused.
    let (rd, _wr) = rustix::pipe::pipe().unwrap();
    assert!(matches!(
        r.s.register_pool_fd(1, 51, rd),
        Err(Error::NotSealed)
    ));
    let fd = rustix::fs::memfd_create("t", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, 4096).unwrap();
    assert!(matches!(
        r.s.register_pool_fd(1, 52, fd),
        Err(Error::NotSealed)
    ));
    // A client's pool cannot be shrunk once made.
    let pfd = r.c.pool_fd(h.pool).unwrap();
    assert!(rustix::fs::ftruncate(pfd, 0).is_err());
    assert_eq!(r.s.stats().resources, 1);
    // Sizes that would overflow the total.
    let h2 = r.c.initialize().unwrap();
    assert!(matches!(
        r.s.initialize(1, 0, 7, h2.pool, h2.offset, u64::MAX),
        Err(Error::SizeTooLarge(_))
    ));
    r.s.initialize(1, 0, 7, h2.pool, h2.offset, K).unwrap();
    assert!(matches!(
        r.s.resize(1, 7, u64::MAX),
        Err(Error::SizeTooLarge(_))
    ));
    assert_eq!(r.s.size_of(1, 7), Some(K));
    assert_eq!(r.s.stats().total_bytes, 2 * K);
}

#[test]
fn thrash_resistant_default_beats_lru_on_the_frame_loop() {
    use gpucache_discardable::frame_loop::run;
    let lru = run(PolicyKind::Lru, 105, 10, 20, 4096).unwrap();
    let best = run(PolicyKind::default(), 105, 10, 20, 4096).unwrap();
    assert!(lru.recreations_per_frame >= 100.0, "{lru:?}");
    assert!(
        best.recreations_per_frame * 5.0 <= lru.recreations_per_frame,
        "{best:?} vs {lru:?}"
    );
    assert!(best.peak_over_budget <= 1.0);
}
