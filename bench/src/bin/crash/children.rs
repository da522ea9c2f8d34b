//! The Rust children: the `Cache` writer, the session writer and the compactor. Each prints
//! `READY` once open, `F <seq>` after each flush that succeeded (everything before operation
//! `seq` is durable), and exits 3 if a read returns a wrong value, 5 if a store was dropped
//! (the checker could not tell a drop from a loss).

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpucache::session::{CacheMode, SessionDesc, SessionRegistry};
use gpucache::{Cache, CacheBuilder, Error};

use crate::model::{self, key, op, session_id, value_for, verify, Kind, Op, MAX_SEQ};

/// The builder every process opens a `cache` or `egl` directory with (the EGL front end
/// opens it with the same identity, so the compactor and the readers share it).
pub fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(model::IDENTITY)
        .max_segment_bytes(64 << 10)
        // The persisted hash table at any size, so that kills land in its writes too.
        .open_table_min_entries(0)
        .max_disk_bytes(1 << 30)
        .max_memory_bytes(256 << 10)
}

/// The session description of the harness: a disk cache that never fills.
pub fn session_desc() -> SessionDesc {
    SessionDesc::new(model::SESSION_ID)
        .mode(CacheMode::Disk)
        .version(model::SESSION_VERSION)
        .max_in_memory_bytes(256 << 10)
        .max_in_memory_entries(1000)
        .max_value_file_bytes(u32::MAX)
}

/// The directory the sessions of `root` live in, opened as a plain cache by the compactor
/// and the concurrent reader (same identity: no identity bytes, the session version).
pub fn session_dir(root: &Path) -> PathBuf {
    let hex: String = model::SESSION_ID
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    root.join("d3d12").join(hex)
}

/// A plain cache on the directory of `kind` under `dir` (for sessions, `dir` is the root).
pub fn plain_cache(kind: Kind, dir: &Path) -> gpucache::Result<Cache> {
    match kind {
        Kind::Session => Cache::builder()
            .directory(session_dir(dir))
            .version(model::SESSION_VERSION)
            .max_memory_bytes(256 << 10)
            .preload(false)
            .open(),
        _ => builder(dir).preload(false).open(),
    }
}

fn ack(seq: u64) {
    println!("F {seq}");
}

fn corrupt(e: String) -> ! {
    println!("CORRUPT {e}");
    std::process::exit(3);
}

pub fn run(args: &[String]) {
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let dir = PathBuf::from(arg(1));
    let epoch: u64 = arg(2).parse().unwrap_or(0);
    let seed: u64 = arg(3).parse().unwrap_or(0);
    match arg(0).as_str() {
        "cache" => cache_child(&dir, epoch, seed),
        "session" => session_child(&dir, epoch, seed),
        "compactor" => compactor(Kind::parse(&arg(2)).expect("kind"), &dir),
        other => {
            eprintln!("unknown child {other}");
            std::process::exit(2);
        }
    }
}

fn cache_child(dir: &Path, epoch: u64, seed: u64) {
    let cache = builder(dir)
        .preload(seed.is_multiple_of(2))
        .open()
        .expect("open");
    if let Some(e) = cache.disk_error() {
        println!("DISKERROR {e}");
        std::process::exit(4);
    }
    println!("READY");
    for seq in 0..MAX_SEQ {
        match op(Kind::Cache, seed, seq) {
            Op::Put { id, len } => {
                let _ = cache.insert(&key(id), value_for(id, model::version(epoch, seq), len));
            }
            Op::Remove { id } => {
                cache.remove(&key(id));
            }
            Op::Get { id } => {
                if let Some(v) = cache.get(&key(id)) {
                    verify(id, &v).unwrap_or_else(|e| corrupt(e));
                }
            }
            Op::Flush => {
                if cache.flush().is_ok() {
                    let dropped = cache.stats().write_queue_dropped;
                    if dropped > 0 {
                        println!("DROPPED {dropped}");
                        std::process::exit(5);
                    }
                    ack(seq);
                }
            }
            Op::Compact => {
                let _ = cache.compact();
            }
        }
    }
    println!("DONE");
}

fn session_child(root: &Path, epoch: u64, seed: u64) {
    let registry = SessionRegistry::with_root(root);
    let session = registry.open(session_desc()).expect("open session");
    println!("READY");
    for seq in 0..MAX_SEQ {
        match op(Kind::Session, seed, seq) {
            Op::Put { len, .. } => {
                let id = session_id(epoch, seq);
                let value = value_for(id, model::version(epoch, seq), len);
                if let Err(e) = session.store(&key(id), value) {
                    // Every key is new and the file never fills: any refusal is a bug.
                    println!("REFUSED {seq}: {e}");
                    std::process::exit(5);
                }
            }
            Op::Get { id } => {
                let id = session_id(epoch, u64::from(id) % (seq + 1));
                match session.find(&key(id)) {
                    Ok(v) => {
                        verify(id, &v).unwrap_or_else(|e| corrupt(e));
                    }
                    Err(Error::NotFound) => {}
                    Err(e) => corrupt(format!("find: {e}")),
                }
            }
            Op::Flush => {
                if session.flush().is_ok() {
                    ack(seq);
                }
            }
            Op::Remove { .. } | Op::Compact => {}
        }
    }
    println!("DONE");
}

/// Compacts the directory of `kind` over and over while a writer uses it.
fn compactor(kind: Kind, dir: &Path) {
    let cache = plain_cache(kind, dir).expect("open");
    println!("READY");
    loop {
        let _ = cache.compact();
        std::thread::sleep(Duration::from_millis(1));
    }
}
