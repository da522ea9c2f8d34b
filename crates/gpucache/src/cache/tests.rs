//! The windows between memory and the lower tiers: a value evicted before it is written, a
//! store the queue had no room for, and reads from below racing a removal, a clear or a
//! store (the write-behind thread and the tier reads are held deterministically).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::*;
use crate::tier::{PreloadSink, WriteContext, WriteOp};

/// Stops the first call that passes it until the test releases it.
#[derive(Debug, Default)]
struct Gate {
    armed: AtomicBool,
    entered: (Mutex<bool>, Condvar),
    released: (Mutex<bool>, Condvar),
}

impl Gate {
    fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    fn pass(&self) {
        if !self.armed.swap(false, Ordering::AcqRel) {
            return;
        }
        *self.entered.0.lock() = true;
        self.entered.1.notify_all();
        let mut released = self.released.0.lock();
        while !*released {
            self.released.1.wait(&mut released);
        }
    }

    fn wait_entered(&self) {
        let mut entered = self.entered.0.lock();
        while !*entered {
            self.entered.1.wait(&mut entered);
        }
    }

    fn release(&self) {
        *self.released.0.lock() = true;
        self.released.1.notify_all();
    }
}

/// A map tier whose reads and preload can be held at a gate.
#[derive(Debug, Default)]
struct GateTier {
    map: Mutex<HashMap<Vec<u8>, Bytes>>,
    read_gate: Gate,
    preload_gate: Gate,
    /// Writes fail (a full or read-only disk) while set.
    fail_writes: AtomicBool,
}

impl Tier for GateTier {
    fn name(&self) -> &str {
        "gate"
    }

    fn read(&self, key: &[u8]) -> Lookup {
        let found = self.map.lock().get(key).cloned();
        // The value is read; the caller has not installed it yet.
        self.read_gate.pass();
        found.map_or(Lookup::Miss, Lookup::Hit)
    }

    fn write(&self, ops: &[WriteOp<'_>], _ctx: &WriteContext<'_>) -> io::Result<()> {
        if self.fail_writes.load(Ordering::SeqCst) {
            return Err(io::Error::other("the gate tier fails its writes"));
        }
        let mut map = self.map.lock();
        for op in ops {
            match op {
                WriteOp::Put { key, value } => map.insert(key.to_vec(), Bytes::clone(value)),
                WriteOp::Remove { key } => map.remove(&key[..]),
            };
        }
        Ok(())
    }

    fn clear(&self) -> io::Result<()> {
        self.map.lock().clear();
        Ok(())
    }

    fn preload(&self, sink: &mut PreloadSink<'_>) {
        let entries: Vec<(Vec<u8>, Bytes)> = self
            .map
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.preload_gate.pass();
        for (k, v) in entries {
            if !sink(&k, &v) {
                return;
            }
        }
    }

    fn stats(&self) -> TierStats {
        TierStats::new("gate")
    }
}

fn gate_tier(entries: &[(&[u8], &[u8])]) -> Arc<GateTier> {
    let tier = GateTier::default();
    for (k, v) in entries {
        tier.map
            .lock()
            .insert(k.to_vec(), Bytes::copy_from_slice(v));
    }
    Arc::new(tier)
}

fn disk_cache(dir: &Path) -> CacheBuilder {
    Cache::builder().directory(dir).preload(false)
}

/// Holds the directory lock, as another process's writer would: this cache's write-behind
/// thread waits for it before writing anything.
fn hold_dir_lock(dir: &Path) -> std::fs::File {
    let lock = std::fs::File::open(dir.join("lock")).unwrap();
    lock.lock().unwrap();
    lock
}

#[test]
fn a_value_evicted_before_it_is_written_is_not_served_from_an_older_record() {
    let dir = tempfile::tempdir().unwrap();
    let cache = disk_cache(dir.path()).open().unwrap();
    cache.insert(b"k", b"old".to_vec()).unwrap();
    cache.flush().unwrap();
    let lock = hold_dir_lock(dir.path());
    cache.insert(b"k", b"new".to_vec()).unwrap();
    cache.trim(MemoryPressure::Critical);
    assert!(!cache.memory().contains(b"k"));
    assert_eq!(cache.get(b"k").as_deref(), Some(&b"new"[..]));
    drop(lock);
    cache.flush().unwrap();
    assert_eq!(cache.pending.len(), 0, "written stores are forgotten");
    cache.trim(MemoryPressure::Critical);
    assert_eq!(cache.get(b"k").as_deref(), Some(&b"new"[..]));
}

#[test]
fn a_removal_not_yet_written_hides_the_older_record() {
    let dir = tempfile::tempdir().unwrap();
    let cache = disk_cache(dir.path()).open().unwrap();
    cache.insert(b"k", b"old".to_vec()).unwrap();
    cache.flush().unwrap();
    let lock = hold_dir_lock(dir.path());
    assert!(cache.remove(b"k"));
    assert_eq!(cache.get(b"k"), None);
    drop(lock);
    cache.flush().unwrap();
    assert_eq!(cache.get(b"k"), None);
}

#[test]
fn a_store_the_queue_had_no_room_for_leaves_a_tombstone() {
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        disk_cache(dir.path())
            .write_queue_bytes(4096)
            .open()
            .unwrap()
    };
    let cache = open();
    cache.insert(b"k", b"old".to_vec()).unwrap();
    cache.flush().unwrap();
    let lock = hold_dir_lock(dir.path());
    let mut i = 0u32;
    while cache.stats().write_queue_dropped == 0 {
        cache.insert(&i.to_le_bytes(), vec![1u8; 1000]).unwrap();
        i += 1;
    }
    cache.insert(b"k", vec![2u8; 2000]).unwrap();
    assert_eq!(cache.stats().write_queue_dropped, 2);
    cache.trim(MemoryPressure::Critical);
    assert_eq!(cache.get(b"k"), None, "the older value must not answer");
    drop(lock);
    cache.flush().unwrap();
    assert_eq!(cache.get(b"k"), None);
    drop(cache);
    // The removal queued in the store's place reached the disk.
    assert_eq!(open().get(b"k"), None);
}

/// W-TinyLFU refuses one-off newcomers to a full memory tier at the door, but not a value
/// that no other tier holds: with the write queue full, memory keeps the newcomer, through
/// either insert mode.
#[test]
fn a_store_the_queue_had_no_room_for_is_kept_in_memory_whatever_its_admission() {
    let dir = tempfile::tempdir().unwrap();
    let cache = disk_cache(dir.path())
        .max_memory_bytes(16 * (1000 + crate::ENTRY_OVERHEAD + 8))
        .write_queue_bytes(4096)
        .open()
        .unwrap();
    cache.insert(b"first", vec![0u8; 10]).unwrap();
    cache.flush().unwrap();
    let lock = hold_dir_lock(dir.path());
    // Popular residents fill memory.
    for i in 0..64u32 {
        cache.insert(&i.to_le_bytes(), vec![1u8; 1000]).unwrap();
        for _ in 0..4 {
            cache.get(&i.to_le_bytes());
        }
    }
    assert!(cache.stats().write_queue_dropped > 0);
    cache.insert(b"newcomer", vec![2u8; 1000]).unwrap();
    assert_eq!(cache.get(b"newcomer").as_deref(), Some(&[2u8; 1000][..]));
    cache
        .insert_with(b"new-only", vec![3u8; 1000], InsertMode::NEW_ONLY)
        .unwrap();
    assert_eq!(cache.get(b"new-only").as_deref(), Some(&[3u8; 1000][..]));
    drop(lock);
    cache.flush().unwrap();
}

/// A store memory refused at the door whose write then fails is nowhere else: memory takes
/// it back, whatever its policy says.
#[test]
fn a_store_whose_write_failed_is_kept_in_memory_whatever_its_admission() {
    let tier = gate_tier(&[]);
    let cache = Cache::builder()
        .tier(tier.clone())
        .preload(false)
        .max_memory_bytes(16 * (1000 + crate::ENTRY_OVERHEAD + 8))
        .open()
        .unwrap();
    for i in 0..64u32 {
        cache.insert(&i.to_le_bytes(), vec![1u8; 1000]).unwrap();
        for _ in 0..4 {
            cache.get(&i.to_le_bytes());
        }
    }
    cache.flush().unwrap();
    tier.fail_writes.store(true, Ordering::SeqCst);
    cache.insert(b"newcomer", vec![2u8; 1000]).unwrap();
    assert!(cache.flush().is_err(), "the write failed");
    assert_eq!(cache.get(b"newcomer").as_deref(), Some(&[2u8; 1000][..]));
    assert!(cache.in_memory(b"newcomer"));
}

/// A cache over a gate tier holding `k` = `old`, with a lookup of `k` held inside the tier's
/// read while `during` runs; returns the cache once the lookup has finished.
fn with_a_lookup_held_in_its_read(during: impl FnOnce(&Cache)) -> Cache {
    let tier = gate_tier(&[(b"k", b"old")]);
    let cache = Cache::builder()
        .tier(tier.clone())
        .preload(false)
        .open()
        .unwrap();
    tier.read_gate.arm();
    std::thread::scope(|scope| {
        let reader = scope.spawn(|| cache.get(b"k"));
        tier.read_gate.wait_entered();
        during(&cache);
        tier.read_gate.release();
        // The racing lookup may answer with the value it read: it began before `during`.
        let _ = reader.join().unwrap();
    });
    cache
}

#[test]
fn a_lookup_racing_a_removal_does_not_bring_the_value_back() {
    let cache = with_a_lookup_held_in_its_read(|cache| {
        assert!(!cache.remove(b"k"));
        cache.flush().unwrap();
    });
    assert_eq!(cache.get(b"k"), None, "removed, yet back in memory");
}

#[test]
fn a_lookup_racing_a_clear_does_not_bring_the_value_back() {
    let cache = with_a_lookup_held_in_its_read(|cache| cache.clear().unwrap());
    assert_eq!(cache.get(b"k"), None, "cleared, yet back in memory");
}

#[test]
fn a_lookup_racing_a_store_keeps_the_newer_value() {
    let cache = with_a_lookup_held_in_its_read(|cache| {
        cache.insert(b"k", b"new".to_vec()).unwrap();
        cache.flush().unwrap();
        cache.trim(MemoryPressure::Critical);
    });
    assert_eq!(cache.get(b"k").as_deref(), Some(&b"new"[..]));
}

#[test]
fn the_preload_does_not_install_keys_written_since_it_began() {
    let tier = gate_tier(&[(b"removed", b"old"), (b"stored", b"old"), (b"kept", b"v")]);
    tier.preload_gate.arm();
    let cache = Cache::builder().tier(tier.clone()).open().unwrap();
    tier.preload_gate.wait_entered();
    cache.remove(b"removed");
    cache.insert(b"stored", b"new".to_vec()).unwrap();
    cache.flush().unwrap();
    cache.trim(MemoryPressure::Critical);
    tier.preload_gate.release();
    cache.wait_for_preload();
    assert!(cache.memory().contains(b"kept"), "other keys are preloaded");
    assert_eq!(cache.get(b"removed"), None);
    assert_eq!(cache.get(b"stored").as_deref(), Some(&b"new"[..]));
    assert_eq!(cache.stats().preloaded, 1);
}

#[test]
fn new_only_sees_a_store_not_yet_written() {
    let dir = tempfile::tempdir().unwrap();
    let cache = disk_cache(dir.path()).open().unwrap();
    let lock = hold_dir_lock(dir.path());
    cache
        .insert_with(b"k", b"v".to_vec(), InsertMode::NEW_ONLY)
        .unwrap();
    cache.trim(MemoryPressure::Critical);
    assert!(matches!(
        cache.insert_with(b"k", b"w".to_vec(), InsertMode::NEW_ONLY),
        Err(Error::AlreadyExists(_))
    ));
    drop(lock);
    cache.flush().unwrap();
    assert_eq!(cache.get(b"k").as_deref(), Some(&b"v"[..]));
}

#[test]
fn a_value_too_large_for_a_disk_segment_is_refused_and_the_old_one_kept() {
    let dir = tempfile::tempdir().unwrap();
    let cache = disk_cache(dir.path())
        .max_disk_bytes(64 << 10)
        .open()
        .unwrap();
    let limit = cache.max_value_size();
    assert!(limit < 8 << 10, "{limit}");
    cache.insert(b"k", b"old".to_vec()).unwrap();
    let over = usize::try_from(limit).unwrap() + 1;
    assert!(matches!(
        cache.insert(b"k", vec![0u8; over]),
        Err(Error::ValueTooLarge { .. })
    ));
    cache.flush().unwrap();
    cache.trim(MemoryPressure::Critical);
    assert_eq!(cache.get(b"k").as_deref(), Some(&b"old"[..]));
}

/// A directory of `n` entries that closes with a persisted table.
fn with_table(n: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let cache = disk_cache(dir.path())
        .open_table_min_entries(0)
        .open()
        .unwrap();
    for i in 0..n {
        cache.insert(&i.to_le_bytes(), vec![i as u8; 100]).unwrap();
    }
    drop(cache);
    assert!(dir.path().join("seg-table.hix").exists());
    dir
}

/// A builder that opens `dir` through its persisted table, whatever its size.
fn through_table(dir: &Path) -> CacheBuilder {
    Cache::builder().directory(dir).open_table_min_entries(0)
}

fn writer_started(cache: &Cache) -> bool {
    cache.built_writer().is_some_and(WriteBehind::is_started)
}

#[test]
fn an_open_through_the_table_builds_no_writer_before_the_second_lookup() {
    let dir = with_table(50);
    let cache = through_table(dir.path()).open().unwrap();
    assert!(!writer_started(&cache));
    assert_eq!(
        cache.get(&7u32.to_le_bytes()).as_deref(),
        Some(&[7u8; 100][..])
    );
    assert!(
        cache.background.get().is_none(),
        "the first lookup built the writer or the preload"
    );
    assert_eq!(
        cache.get(&8u32.to_le_bytes()).as_deref(),
        Some(&[8u8; 100][..])
    );
    assert!(writer_started(&cache));
    // The preload, spawned by the writer, runs and ends.
    cache.wait_for_preload();
    assert!(cache.stats().preloaded > 0);
}

#[test]
fn a_store_or_a_clear_starts_an_idle_writer() {
    let dir = with_table(50);
    let open = || through_table(dir.path()).open().unwrap();
    let cache = open();
    cache.insert(b"new", b"value".to_vec()).unwrap();
    assert!(writer_started(&cache));
    cache.flush().unwrap();
    drop(cache);
    let cache = open();
    assert_eq!(cache.get(b"new").as_deref(), Some(&b"value"[..]));
    cache.clear().unwrap();
    assert!(writer_started(&cache));
    cache.wait_for_preload();
    drop(cache);
    let cache = open();
    assert_eq!(cache.get(b"new"), None);
    assert_eq!(cache.get(&7u32.to_le_bytes()), None);
}

#[test]
fn an_idle_writer_is_dropped_without_writing() {
    let dir = with_table(50);
    let table = std::fs::metadata(dir.path().join("seg-table.hix")).unwrap();
    let cache = through_table(dir.path()).open().unwrap();
    assert!(cache.get(&3u32.to_le_bytes()).is_some());
    drop(cache);
    let after = std::fs::metadata(dir.path().join("seg-table.hix")).unwrap();
    assert_eq!(table.modified().unwrap(), after.modified().unwrap());
}

#[test]
fn a_store_before_the_first_lookup_is_not_undone_by_the_preload() {
    let dir = with_table(50);
    let cache = through_table(dir.path()).open().unwrap();
    assert!(cache.background.get().is_none());
    // The store builds the preload, which must count it as written since it began.
    let key = 7u32.to_le_bytes();
    cache.insert(&key, vec![0xAA; 10]).unwrap();
    // Out of memory before the preload (its thread takes tens of µs to spawn) gets there.
    cache.memory().remove(&key);
    cache.wait_for_preload();
    assert!(cache.stats().preloaded > 0);
    assert!(
        !cache.memory().contains(&key),
        "the preload put back the old value"
    );
    assert_eq!(cache.get(&key).as_deref(), Some(&[0xAA; 10][..]));
}

#[test]
fn through_the_table_records_are_read_in_the_directory_the_table_describes() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    std::fs::rename(with_table(50).keep(), &dir).unwrap();
    let cache = through_table(&dir).open().unwrap();
    // Moved away after the open, an empty directory in its place: the table's directory
    // still holds the record (a read by path would find nothing).
    std::fs::rename(&dir, parent.path().join("moved")).unwrap();
    std::fs::create_dir(&dir).unwrap();
    assert_eq!(
        cache.get(&7u32.to_le_bytes()).as_deref(),
        Some(&[7u8; 100][..])
    );
}

#[test]
fn after_the_full_index_records_are_read_in_a_recreated_directory() {
    let dir = with_table(50);
    let cache = through_table(dir.path()).preload(false).open().unwrap();
    assert!(cache.get(&7u32.to_le_bytes()).is_some());
    // A store builds the full index first; then the directory is removed and recreated.
    cache.insert(b"before", b"1".to_vec()).unwrap();
    cache.flush().unwrap();
    std::fs::remove_dir_all(dir.path()).unwrap();
    cache.insert(b"after", b"2".to_vec()).unwrap();
    cache.flush().unwrap();
    assert_eq!(cache.stats().disk.unwrap().recreated, 1);
    // From the disk, not memory: its data file is found by path.
    cache.memory().remove(b"after");
    assert_eq!(cache.get(b"after").as_deref(), Some(&b"2"[..]));
}

#[test]
fn threads_racing_to_build_the_writer_lose_no_store() {
    let dir = with_table(50);
    let open = || through_table(dir.path()).open().unwrap();
    let key = |t: u32, i: u32| (1000 + t * 100 + i).to_le_bytes();
    let cache = open();
    let stats = cache.stats();
    assert_eq!((stats.write_queue_bytes, stats.write_queue_dropped), (0, 0));
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let cache = &cache;
            s.spawn(move || {
                for i in 0..25u32 {
                    cache.insert(&key(t, i), vec![t as u8; 10]).unwrap();
                    assert!(cache.get(&(i % 50).to_le_bytes()).is_some());
                }
            });
        }
    });
    cache.flush().unwrap();
    drop(cache);
    let cache = open();
    for t in 0..4u32 {
        for i in 0..25u32 {
            assert_eq!(
                cache.get(&key(t, i)).as_deref(),
                Some(&[t as u8; 10][..]),
                "thread {t} store {i}"
            );
        }
    }
}

#[test]
fn a_data_file_kept_from_the_table_s_directory_is_not_read_for_the_full_index() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("cache");
    std::fs::rename(with_table(50).keep(), &dir).unwrap();
    let cache = through_table(&dir).preload(false).open().unwrap();
    // Another process replaces the directory: the same layout, other values.
    std::fs::rename(&dir, parent.path().join("moved")).unwrap();
    {
        let other = disk_cache(&dir).open_table_min_entries(0).open().unwrap();
        for i in 0..50u32 {
            other
                .insert(&i.to_le_bytes(), vec![i as u8 + 1; 100])
                .unwrap();
        }
    }
    // The first hit: through the table, in the table's (moved) directory, whose data file
    // is kept open.
    let key = |i: u32| i.to_le_bytes();
    assert_eq!(cache.get(&key(7)).as_deref(), Some(&[7u8; 100][..]));
    // The second lookup starts the writer, which builds the full index by path first.
    assert!(cache.get(&key(7)).is_some());
    cache.flush().unwrap();
    assert!(cache.disk.as_ref().unwrap().index_is_full());
    // Its locations are read in the directory at the path, not in the kept file.
    assert_eq!(cache.get(&key(9)).as_deref(), Some(&[10u8; 100][..]));
}

#[test]
fn a_cache_left_to_exit_persists_everything_and_keeps_its_values_allocated() {
    let key = |i: u32| i.to_le_bytes();
    for leave in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let cache = disk_cache(dir.path()).open().unwrap();
        for i in 0..20u32 {
            cache.insert(&key(i), vec![i as u8; 1000]).unwrap();
        }
        let memory = Arc::downgrade(&cache.memory);
        if leave {
            cache.leave_memory_to_exit();
        }
        // No flush: the drop writes what is queued either way, and a second call changes
        // nothing.
        if leave {
            cache.leave_memory_to_exit();
        }
        drop(cache);
        assert_eq!(memory.upgrade().is_some(), leave);
        if let Some(store) = memory.upgrade() {
            // The caller above and the one holder it was left to.
            assert_eq!(Arc::strong_count(&store), 2);
        }
        let reopened = disk_cache(dir.path()).open().unwrap();
        for i in 0..20u32 {
            assert_eq!(reopened.get(&key(i)).as_deref(), Some(&[i as u8; 1000][..]));
        }
    }
}

/// A builder that opens `dir` with the preload at first use, without the persisted table.
fn at_first_use(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .open_table_min_entries(u64::MAX)
        .preload_at_first_use(true)
}

/// A directory holding `n` entries and no persisted table.
fn without_table(n: u32) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let cache = at_first_use(dir.path()).open().unwrap();
    for i in 0..n {
        cache.insert(&i.to_le_bytes(), vec![i as u8; 100]).unwrap();
    }
    drop(cache);
    assert!(!dir.path().join("seg-table.hix").exists());
    dir
}

#[test]
fn a_preload_at_first_use_starts_at_the_first_lookup() {
    let dir = without_table(50);
    let cache = at_first_use(dir.path()).open().unwrap();
    // Time enough for a preload started at the open to spawn and read 5 KB.
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(cache.background.get().is_none(), "the open built them");
    assert_eq!(cache.stats().preloaded, 0);
    // The first lookup (unlike one through the table) starts them.
    assert_eq!(
        cache.get(&7u32.to_le_bytes()).as_deref(),
        Some(&[7u8; 100][..])
    );
    assert!(writer_started(&cache));
    cache.wait_for_preload();
    // All but the key looked up, unless the preload got to it first (it starts before the
    // lookup reads memory).
    assert!(
        (49..=50).contains(&cache.stats().preloaded),
        "{}",
        cache.stats().preloaded
    );
    assert!(cache.memory().contains(&49u32.to_le_bytes()));
}

#[test]
fn a_preload_at_first_use_starts_when_asked_or_at_a_store() {
    let dir = without_table(50);
    let cache = at_first_use(dir.path()).open().unwrap();
    cache.start_preload();
    assert!(writer_started(&cache));
    cache.wait_for_preload();
    assert_eq!(cache.stats().preloaded, 50);
    // Asked again: nothing more happens.
    cache.start_preload();
    assert_eq!(cache.stats().preloaded, 50);
    drop(cache);

    let cache = at_first_use(dir.path()).open().unwrap();
    let key = 7u32.to_le_bytes();
    cache.insert(&key, vec![0xAA; 10]).unwrap();
    assert!(writer_started(&cache));
    // Out of memory before the preload gets there: the store must win all the same.
    cache.memory().remove(&key);
    cache.wait_for_preload();
    // The preload starts before the store is recorded, and may have read the key first.
    assert!((49..=50).contains(&cache.stats().preloaded));
    assert!(
        !cache.memory().contains(&key),
        "the preload put back the old value"
    );
    assert_eq!(cache.get(&key).as_deref(), Some(&[0xAA; 10][..]));
}

#[test]
fn a_preload_at_first_use_never_used_writes_nothing() {
    let dir = without_table(50);
    let listing = |d: &Path| {
        let mut v: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name(), e.metadata().unwrap().len())
            })
            .collect();
        v.sort();
        v
    };
    let before = listing(dir.path());
    let cache = at_first_use(dir.path()).open().unwrap();
    cache.flush().unwrap();
    drop(cache);
    assert_eq!(listing(dir.path()), before);
    // And the entries are all there for the next process.
    let cache = at_first_use(dir.path()).open().unwrap();
    cache.wait_for_preload();
    assert_eq!(cache.stats().preloaded, 50);
}
