//! The engine's public seams, used as a front end or a tier from another crate would use
//! them: a tier of one's own under the disk tier (reads, several write-behind sinks,
//! promotion, preload, a read budget), metadata streams, and cache control.

mod common;

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpucache::control::{self, ControlTarget};
use gpucache::tier::{PreloadSink, Queued, Tier, TierStats, WriteContext, WriteOp};
use gpucache::{
    Bytes, Cache, CacheControl, CacheKinds, Error, Identity, InsertMode, Lookup, MetadataStream,
};

/// A tier that keeps entries in a map; reads can be made slow.
#[derive(Debug, Default)]
struct MapTier {
    map: Mutex<HashMap<Vec<u8>, Bytes>>,
    read_delay: Option<Duration>,
    capacity: Option<usize>,
    batches: AtomicU64,
    durable_batches: AtomicU64,
    hits: AtomicU64,
    /// Held by a test to keep the write-behind thread waiting in `write`.
    write_gate: Mutex<()>,
}

impl MapTier {
    fn holding(entries: &[(&[u8], &[u8])]) -> Self {
        let tier = MapTier::default();
        for (k, v) in entries {
            tier.map
                .lock()
                .unwrap()
                .insert(k.to_vec(), Bytes::copy_from_slice(v));
        }
        tier
    }

    fn get(&self, key: &[u8]) -> Option<Bytes> {
        self.map.lock().unwrap().get(key).cloned()
    }
}

impl Tier for MapTier {
    fn name(&self) -> &str {
        "map"
    }

    fn read(&self, key: &[u8]) -> Lookup {
        if let Some(delay) = self.read_delay {
            std::thread::sleep(delay);
        }
        match self.get(key) {
            Some(v) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Lookup::Hit(v)
            }
            None => Lookup::Miss,
        }
    }

    fn read_budget(&self) -> Option<Duration> {
        self.read_delay.map(|_| Duration::from_millis(20))
    }

    fn write(&self, ops: &[WriteOp<'_>], ctx: &WriteContext<'_>) -> io::Result<()> {
        drop(self.write_gate.lock().unwrap());
        self.batches.fetch_add(1, Ordering::Relaxed);
        if ctx.durable() {
            self.durable_batches.fetch_add(1, Ordering::Relaxed);
        }
        let mut map = self.map.lock().unwrap();
        for op in ops {
            match op {
                WriteOp::Put { key, value } => map.insert(key.to_vec(), Bytes::clone(value)),
                WriteOp::Remove { key } => map.remove(&key[..]),
            };
        }
        Ok(())
    }

    fn clear(&self) -> io::Result<()> {
        self.map.lock().unwrap().clear();
        Ok(())
    }

    fn preload(&self, sink: &mut PreloadSink<'_>) {
        let entries: Vec<(Vec<u8>, Bytes)> = self
            .map
            .lock()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for (k, v) in entries {
            if !sink(&k, &v) {
                return;
            }
        }
    }

    fn would_overflow(&self, _key_len: usize, _value_len: usize, queued: Queued) -> bool {
        self.capacity
            .is_some_and(|cap| self.map.lock().unwrap().len() as u64 + queued.entries >= cap as u64)
    }

    fn stats(&self) -> TierStats {
        let mut s = TierStats::new("map");
        s.entries = self.map.lock().unwrap().len() as u64;
        s.hits = self.hits.load(Ordering::Relaxed);
        s
    }
}

#[test]
fn one_write_behind_feeds_the_disk_and_a_tier_below_it() {
    let dir = tempfile::tempdir().unwrap();
    let map = Arc::new(MapTier::default());
    let cache = Cache::builder()
        .directory(dir.path())
        .tier(map.clone())
        .open()
        .unwrap();
    cache.insert(b"k", b"v".to_vec()).unwrap();
    cache.flush().unwrap();
    assert_eq!(map.get(b"k").as_deref(), Some(&b"v"[..]));
    assert!(
        map.durable_batches.load(Ordering::Relaxed) >= 1,
        "flush reaches every tier"
    );
    let stats = cache.stats();
    assert_eq!(stats.disk.as_ref().unwrap().entries, 1);
    let names: Vec<&str> = stats.tiers.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["disk", "map"]);

    assert!(cache.remove(b"k"));
    cache.flush().unwrap();
    assert_eq!(map.get(b"k"), None, "removals reach every tier");
    cache.insert(b"a", b"1".to_vec()).unwrap();
    cache.clear().unwrap();
    assert_eq!(map.get(b"a"), None, "clear reaches every tier");
}

#[test]
fn a_value_found_below_the_disk_is_kept_in_memory_and_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let map = Arc::new(MapTier::holding(&[(b"remote", b"value")]));
    {
        let cache = Cache::builder()
            .directory(dir.path())
            .tier(map.clone())
            .preload(false)
            .open()
            .unwrap();
        assert_eq!(cache.get(b"remote").as_deref(), Some(&b"value"[..]));
        assert!(cache.memory().contains(b"remote"), "promoted into memory");
        assert_eq!(cache.stats().tiers[1].hits, 1);
    } // Closing writes the promotion to the disk.
    let disk_only = Cache::builder()
        .directory(dir.path())
        .preload(false)
        .open()
        .unwrap();
    assert_eq!(disk_only.get(b"remote").as_deref(), Some(&b"value"[..]));
}

#[test]
fn preload_fills_memory_from_every_tier_and_warms_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..100u32)
        .map(|i| (i.to_le_bytes().to_vec(), vec![i as u8; 100]))
        .collect();
    let pairs: Vec<(&[u8], &[u8])> = entries.iter().map(|(k, v)| (&k[..], &v[..])).collect();
    let map = Arc::new(MapTier::holding(&pairs));
    {
        let cache = Cache::builder()
            .directory(dir.path())
            .tier(map)
            .open()
            .unwrap();
        cache.wait_for_preload();
        assert_eq!(cache.stats().preloaded, 100);
        assert_eq!(cache.memory().len(), 100);
    }
    let disk_only = Cache::builder().directory(dir.path()).open().unwrap();
    assert_eq!(disk_only.stats().disk.unwrap().entries, 100);
    for (k, v) in &entries {
        assert_eq!(disk_only.get(k).as_deref(), Some(&v[..]));
    }
}

#[test]
fn a_slow_tier_never_holds_a_lookup_past_its_budget() {
    let map = Arc::new(MapTier {
        read_delay: Some(Duration::from_millis(400)),
        ..MapTier::holding(&[(b"slow", b"value")])
    });
    let cache = Cache::builder().tier(map).preload(false).open().unwrap();
    let start = Instant::now();
    assert_eq!(cache.lookup(b"slow"), Lookup::Miss);
    let waited = start.elapsed();
    // The budget is 20 ms; the tier takes 400. The margin is for a loaded machine.
    assert!(waited < Duration::from_millis(300), "waited {waited:?}");
    assert_eq!(cache.stats().tiers[0].reads_timed_out, 1);
    // The read goes on, and its value is kept for the next lookup.
    let deadline = Instant::now() + Duration::from_secs(10);
    while cache.stats().tiers[0].late_hits == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(cache.get(b"slow").as_deref(), Some(&b"value"[..]));
    assert_eq!(cache.stats().tiers[0].late_hits, 1);
}

#[test]
fn new_only_inserts_are_refused_when_a_lower_tier_is_full() {
    let map = Arc::new(MapTier {
        capacity: Some(1),
        ..MapTier::default()
    });
    let cache = Cache::builder().tier(map).open().unwrap();
    cache
        .insert_with(b"a", b"1".to_vec(), InsertMode::NEW_ONLY)
        .unwrap();
    assert!(matches!(
        cache.insert_with(b"a", b"2".to_vec(), InsertMode::NEW_ONLY),
        Err(Error::AlreadyExists(_))
    ));
    cache.flush().unwrap();
    assert!(matches!(
        cache.insert_with(b"b", b"2".to_vec(), InsertMode::NEW_ONLY),
        Err(Error::CacheFull { .. })
    ));
    // Replacing inserts leave capacity to the tier.
    cache.insert(b"b", b"2".to_vec()).unwrap();
}

#[test]
fn new_only_counts_stores_the_writer_has_not_written_yet() {
    let map = Arc::new(MapTier {
        capacity: Some(2),
        ..MapTier::default()
    });
    let cache = Cache::builder().tier(map.clone()).open().unwrap();
    {
        // The writer waits in `write`: nothing accepted has reached the tier.
        let _gate = map.write_gate.lock().unwrap();
        for key in [&b"a"[..], b"b"] {
            cache
                .insert_with(key, b"v".to_vec(), InsertMode::NEW_ONLY)
                .unwrap();
        }
        assert!(matches!(
            cache.insert_with(b"c", b"v".to_vec(), InsertMode::NEW_ONLY),
            Err(Error::CacheFull { .. })
        ));
    }
    cache.flush().unwrap();
    assert_eq!(map.stats().entries, 2, "everything accepted was written");
}

const STREAM: MetadataStream = MetadataStream::new("front-end-state", *b"TEST", 1);

#[test]
fn a_metadata_stream_follows_its_cache_identity() {
    let dir = tempfile::tempdir().unwrap();
    let open = |id: &[u8]| {
        Cache::builder()
            .directory(dir.path())
            .identity(id.to_vec())
            .open()
            .unwrap()
    };
    let cache = open(b"driver A");
    let cache_dir = cache.directory().unwrap().to_path_buf();
    let wait = Duration::from_secs(1);
    STREAM
        .update(&cache_dir, cache.identity(), wait, |_| b"state".to_vec())
        .unwrap();
    assert_eq!(STREAM.read(&cache_dir).unwrap().unwrap(), b"state");
    cache.clear().unwrap();
    assert_eq!(STREAM.read(&cache_dir).unwrap(), None, "a clear removes it");
    STREAM
        .update(&cache_dir, cache.identity(), wait, |_| b"again".to_vec())
        .unwrap();
    drop(cache);
    let other = open(b"driver B");
    assert_eq!(
        STREAM.read(&cache_dir).unwrap(),
        None,
        "another identity wiped it"
    );
    let stale = Identity::new(b"driver A".to_vec());
    assert!(
        STREAM
            .update(&cache_dir, &stale, wait, |_| Vec::new())
            .is_err(),
        "a process of the old identity cannot write into the new one's directory"
    );
    drop(other);
}

struct CountingTarget(AtomicU64);

impl ControlTarget for CountingTarget {
    fn clear(&self) -> gpucache::Result<()> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

#[test]
fn a_front_end_registers_for_cache_control() {
    if !common::in_developer_mode("a_front_end_registers_for_cache_control") {
        return;
    }
    let counting = Arc::new(CountingTarget(AtomicU64::new(0)));
    let target: Arc<dyn ControlTarget> = counting.clone();
    control::register(CacheKinds::APPLICATION_MANAGED, &target);
    gpucache::cache_control(CacheKinds::IMPLICIT_DRIVER_MANAGED, CacheControl::CLEAR).unwrap();
    assert_eq!(counting.0.load(Ordering::Relaxed), 0, "another kind");
    gpucache::cache_control(CacheKinds::APPLICATION_MANAGED, CacheControl::CLEAR).unwrap();
    assert_eq!(counting.0.load(Ordering::Relaxed), 1);
    gpucache::cache_control(CacheKinds::APPLICATION_MANAGED, CacheControl::DISABLE).unwrap();
    assert!(control::is_disabled(CacheKinds::APPLICATION_MANAGED));
    assert!(!control::is_disabled(CacheKinds::IMPLICIT_DRIVER_MANAGED));
    gpucache::cache_control(CacheKinds::APPLICATION_MANAGED, CacheControl::ENABLE).unwrap();
    assert!(!control::is_disabled(CacheKinds::APPLICATION_MANAGED));
    drop(target);
    drop(counting);
    gpucache::cache_control(CacheKinds::APPLICATION_MANAGED, CacheControl::CLEAR).unwrap();
}
