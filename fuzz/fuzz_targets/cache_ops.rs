//! Random operation sequences on a `Cache` over a real directory: inserts (replacing and
//! new-only), gets, removes, flushes, clears, compactions, reopens, and a second cache on
//! the same directory writing from another thread at the same time. After every operation
//! the memory tier's shards, its policy queues and the disk index pass `validate()`, and
//! every value read is checked against a reference model:
//!
//! - a value read is always one that was written for that key (never wrong bytes);
//! - a value read is always the key's latest, evictions, dropped stores and reopens
//!   notwithstanding: a value evicted from memory before the writer wrote it is served from
//!   the pending writes, never from an older record, and a removed or cleared key never
//!   reads back (what is lost may read as absent, never as older);
//! - while nothing can have been evicted or dropped (checked in the stats), a key that was
//!   stored reads back as exactly its latest value, after a reopen too.
#![no_main]

use std::collections::{HashMap, HashSet};
use std::path::Path;

use gpucache::{Cache, CacheBuilder, Error, InsertMode};
use libfuzzer_sys::fuzz_target;

/// The input, one byte per operation after a byte of settings, so that short inputs are
/// long sequences: the operation is the high nibble, a length class the next two bits and
/// the key the low two (few keys, so that sequences of operations on one key are common).
#[derive(Debug)]
struct Input {
    small_memory: bool,
    small_disk: bool,
    /// Settings bit 2: LRU (as in the seeds before W-TinyLFU), else bit 3: W-TinyLFU, else
    /// S3-FIFO.
    policy: gpucache::PolicyKind,
    ops: Vec<Op>,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Insert { key: u8, len: u16 },
    InsertNew { key: u8, len: u16 },
    Get { key: u8 },
    Remove { key: u8 },
    Flush,
    Clear,
    Compact,
    Reopen { preload: bool },
    /// A second cache on the same directory writes `count` keys from another thread while
    /// this one reads and writes.
    Concurrent { count: u8 },
}

impl Input {
    fn parse(data: &[u8]) -> Option<Input> {
        let (&settings, ops) = data.split_first()?;
        let ops = ops
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let key = b & 0x03;
                // Tiny, small, 1 KiB-ish and 4 KiB-ish values, varied by position.
                let jitter = (i as u16).wrapping_mul(131) % 64;
                let len = [jitter, 100 + jitter, 1000 + jitter, 4000 + jitter][usize::from(b >> 2 & 3)];
                match b >> 4 {
                    0..=4 => Op::Insert { key, len },
                    5 | 6 => Op::InsertNew { key, len },
                    7..=10 => Op::Get { key },
                    11 => Op::Remove { key },
                    12 => Op::Flush,
                    13 => Op::Reopen { preload: b & 4 != 0 },
                    14 if b & 8 == 0 => Op::Clear,
                    14 => Op::Compact,
                    _ => Op::Concurrent { count: (b & 0x0F) * 2 },
                }
            })
            .collect();
        Some(Input {
            small_memory: settings & 1 != 0,
            small_disk: settings & 2 != 0,
            policy: match (settings & 4 != 0, settings & 8 != 0) {
                (true, _) => gpucache::PolicyKind::Lru,
                (false, true) => gpucache::PolicyKind::TinyLfu,
                (false, false) => gpucache::PolicyKind::S3Fifo,
            },
            ops,
        })
    }
}

/// Keys of the main cache; the second cache writes keys from `SECOND` on.
const KEYS: u8 = 4;
const SECOND: u8 = 128;

fn value(key: u8, version: u32, len: u16) -> Vec<u8> {
    let mut v = vec![key];
    v.extend_from_slice(&version.to_le_bytes());
    let fill = key ^ version as u8;
    v.resize(5 + usize::from(len % 4096), fill);
    v
}

/// The version a value was written with, if it is a well-formed value of `key`.
fn version_of(key: u8, v: &[u8]) -> u32 {
    assert!(v.len() >= 5, "value of key {key} too short: {}", v.len());
    assert_eq!(v[0], key, "value of another key");
    let version = u32::from_le_bytes(v[1..5].try_into().unwrap());
    let fill = key ^ version as u8;
    assert!(v[5..].iter().all(|&b| b == fill), "value bytes damaged");
    version
}

fn builder(dir: &Path, input: &Input, preload: bool) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(b"fuzz".to_vec())
        .max_memory_bytes(if input.small_memory { 16 << 10 } else { 64 << 20 })
        .max_disk_bytes(if input.small_disk { 48 << 10 } else { 64 << 20 })
        .max_segment_bytes(8 << 10)
        .open_table_min_entries(0)
        .policy(input.policy)
        .shards(1)
        .preload(preload)
}

#[derive(Default)]
struct Model {
    /// Every version ever written per key.
    history: HashMap<u8, HashSet<u32>>,
    /// The latest version per key; `None` once removed (or cleared).
    latest: HashMap<u8, Option<u32>>,
    next_version: u32,
}

impl Model {
    fn write(&mut self, key: u8) -> u32 {
        self.next_version += 1;
        let v = self.next_version;
        self.history.entry(key).or_default().insert(v);
        self.latest.insert(key, Some(v));
        v
    }

    /// `strict`: nothing can have been lost, so a stored key must be found.
    fn check(&self, key: u8, got: Option<&[u8]>, strict: bool) {
        let latest = self.latest.get(&key).copied().flatten();
        match got {
            Some(v) => {
                let version = version_of(key, v);
                let known = self.history.get(&key).is_some_and(|h| h.contains(&version));
                assert!(known, "key {key}: version {version} was never written");
                match latest {
                    Some(latest) => assert_eq!(version, latest, "key {key}: an older value"),
                    None => panic!("key {key}: removed or cleared, yet read back"),
                }
            }
            None => {
                if strict && latest.is_some() {
                    panic!("key {key}: version {latest:?} was stored and nothing was lost");
                }
            }
        }
    }
}

/// Whether the stats show that nothing can have been evicted or dropped.
fn nothing_lost(cache: &Cache) -> bool {
    let s = cache.stats();
    let disk = s.disk.unwrap_or_default();
    s.memory.evictions == 0
        && s.write_queue_dropped == 0
        && disk.evicted_segments == 0
        && disk.write_errors == 0
        && disk.too_large_skipped == 0
        && s.disk_error.is_none()
}

fuzz_target!(|data: &[u8]| {
    let Some(input) = Input::parse(data) else {
        return;
    };
    // On tmpfs where there is one: fsyncs cost nothing there, so the fuzzer runs many times
    // more sequences; the files and their semantics are the same.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm)
    } else {
        tempfile::tempdir()
    }
    .expect("temporary directory");
    let dir = tmp.path().join("cache");
    let mut cache = builder(&dir, &input, true).open().expect("open");
    let mut model = Model::default();
    // Evictions counted by caches that were closed still happened.
    let mut lost_before = false;
    for &op in input.ops.iter().take(400) {
        match op {
            Op::Insert { key, len } => {
                let key = key % KEYS;
                let v = model.write(key);
                cache.insert(&[key], value(key, v, len)).expect("insert");
            }
            Op::InsertNew { key, len } => {
                let key = key % KEYS;
                let present = cache.memory().contains(&[key]);
                model.next_version += 1;
                let v = model.next_version;
                match cache.insert_with(&[key], value(key, v, len), InsertMode::NEW_ONLY) {
                    Ok(()) => {
                        assert!(!present, "key {key}: new-only insert over a held key");
                        model.history.entry(key).or_default().insert(v);
                        model.latest.insert(key, Some(v));
                    }
                    Err(Error::AlreadyExists(_)) | Err(Error::CacheFull { .. }) => {}
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            Op::Get { key } => {
                let key = key % KEYS;
                let got = cache.get(&[key]);
                let strict = !lost_before && nothing_lost(&cache);
                model.check(key, got.as_deref(), strict);
            }
            Op::Remove { key } => {
                let key = key % KEYS;
                cache.remove(&[key]);
                if model.latest.contains_key(&key) {
                    model.latest.insert(key, None);
                }
            }
            Op::Flush => cache.flush().expect("flush"),
            Op::Clear => {
                cache.clear().expect("clear");
                for latest in model.latest.values_mut() {
                    *latest = None;
                }
            }
            Op::Compact => cache.compact().expect("compact"),
            Op::Reopen { preload } => {
                lost_before |= !nothing_lost(&cache);
                drop(cache);
                cache = builder(&dir, &input, preload).open().expect("reopen");
            }
            Op::Concurrent { count } => {
                let second = builder(&dir, &input, false).open().expect("second cache");
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        for i in 0..count % 32 {
                            let key = SECOND + i;
                            second
                                .insert(&[key], value(key, 1, u16::from(i) * 37))
                                .expect("second insert");
                        }
                        second.flush().expect("second flush");
                    });
                    for key in 0..KEYS.min(8) {
                        let got = cache.get(&[key]);
                        model.check(key, got.as_deref(), false);
                    }
                });
                second.validate();
                lost_before |= !nothing_lost(&second);
                drop(second);
                // What the other cache wrote reads back right, whenever it is found.
                for i in 0..count % 32 {
                    let key = SECOND + i;
                    if let Some(v) = cache.get(&[key]) {
                        assert_eq!(version_of(key, &v), 1);
                    }
                }
            }
        }
        cache.validate();
    }
});
