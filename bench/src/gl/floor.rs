//! The floor of the warm-start benchmark: blob-cache callbacks backed by a plain in-process
//! hash map, filled from one file before the context is created and written back whole at
//! exit. No disk cache can answer faster than this.
//!
//! File: repeated `[key len u32 LE][value len u32 LE][key][value]`; no checksum (a
//! benchmark's private file, rewritten by each populating run).

use std::collections::HashMap;
use std::ffi::c_void;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use anyhow::{bail, Context as _, Result};
use parking_lot::RwLock;

static MAP: RwLock<Option<HashMap<Vec<u8>, Vec<u8>>>> = RwLock::new(None);
static CHANGED: AtomicBool = AtomicBool::new(false);
static GETS: AtomicU64 = AtomicU64::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static SETS: AtomicU64 = AtomicU64::new(0);

/// Counters of the floor callbacks.
#[derive(Clone, Copy, Debug, Default)]
pub struct FloorStats {
    /// `get` calls.
    pub gets: u64,
    /// `get` calls answered with a value.
    pub hits: u64,
    /// `set` calls.
    pub sets: u64,
}

/// Fills the map from `path` (a missing file is an empty map).
pub fn load(path: &Path) -> Result<()> {
    let map = match std::fs::read(path) {
        Ok(bytes) => read_pairs(&bytes)
            .with_context(|| path.display().to_string())?
            .into_iter()
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => HashMap::new(),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    *MAP.write() = Some(map);
    Ok(())
}

/// The `(key, value)` pairs of a file in the format above.
pub fn read_pairs(bytes: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut pairs = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        if rest.len() < 8 {
            bail!("truncated");
        }
        let k = u32::from_le_bytes(rest[0..4].try_into().unwrap()) as usize;
        let v = u32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
        rest = &rest[8..];
        if rest.len() < k + v {
            bail!("truncated");
        }
        pairs.push((rest[..k].to_vec(), rest[k..k + v].to_vec()));
        rest = &rest[k + v..];
    }
    Ok(pairs)
}

/// A file in the format above, pairs sorted by key.
pub fn write_pairs(pairs: impl IntoIterator<Item = (Vec<u8>, Vec<u8>)>) -> Vec<u8> {
    let mut pairs: Vec<_> = pairs.into_iter().collect();
    pairs.sort();
    let mut out = Vec::new();
    for (key, value) in pairs {
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(&key);
        out.extend_from_slice(&value);
    }
    out
}

/// Writes the map to `path` if a `set` changed it; returns the values' total bytes.
pub fn save(path: &Path) -> Result<u64> {
    let guard = MAP.read();
    let Some(map) = guard.as_ref() else {
        return Ok(0);
    };
    let values: u64 = map.values().map(|v| v.len() as u64).sum();
    if CHANGED.load(Ordering::Acquire) {
        let out = write_pairs(map.iter().map(|(k, v)| (k.clone(), v.clone())));
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, &out).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path)?;
    }
    Ok(values)
}

/// The counters so far.
pub fn stats() -> FloorStats {
    FloorStats {
        gets: GETS.load(Ordering::Relaxed),
        hits: HITS.load(Ordering::Relaxed),
        sets: SETS.load(Ordering::Relaxed),
    }
}

/// `EGLSetBlobFuncANDROID` over the map.
///
/// # Safety
/// `key` and `value` point to `key_size` and `value_size` readable bytes (or are null).
pub unsafe extern "C" fn set(
    key: *const c_void,
    key_size: isize,
    value: *const c_void,
    value_size: isize,
) {
    if key.is_null() || value.is_null() || key_size <= 0 || value_size <= 0 {
        return;
    }
    SETS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: non-null with positive sizes; the caller guarantees the lengths.
    let (key, value) = unsafe {
        (
            std::slice::from_raw_parts(key.cast::<u8>(), key_size as usize),
            std::slice::from_raw_parts(value.cast::<u8>(), value_size as usize),
        )
    };
    if let Some(map) = MAP.write().as_mut() {
        map.insert(key.to_vec(), value.to_vec());
        CHANGED.store(true, Ordering::Release);
    }
}

/// `EGLGetBlobFuncANDROID` over the map; a value larger than the buffer is a miss (Mesa
/// reads its buffer whenever the answer is non-zero).
///
/// # Safety
/// `key` points to `key_size` readable bytes and `value` to `value_size` writable bytes (or
/// they are null).
pub unsafe extern "C" fn get(
    key: *const c_void,
    key_size: isize,
    value: *mut c_void,
    value_size: isize,
) -> isize {
    GETS.fetch_add(1, Ordering::Relaxed);
    if key.is_null() || key_size <= 0 || value_size < 0 {
        return 0;
    }
    // SAFETY: non-null with a positive size; the caller guarantees the length.
    let key = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), key_size as usize) };
    let guard = MAP.read();
    let Some(found) = guard.as_ref().and_then(|map| map.get(key)) else {
        return 0;
    };
    if value.is_null() || found.len() > value_size as usize {
        return 0;
    }
    // SAFETY: `value` has `value_size` >= `found.len()` writable bytes.
    unsafe { std::ptr::copy_nonoverlapping(found.as_ptr(), value.cast::<u8>(), found.len()) };
    HITS.fetch_add(1, Ordering::Relaxed);
    found.len() as isize
}
