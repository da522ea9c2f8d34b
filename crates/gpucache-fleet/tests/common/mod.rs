//! Shared pieces of the fleet tests: key files, caches with a fleet tier, test values.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpucache::{Cache, Identity};
use gpucache_fleet::testing::{redis_available, TempDir};
use gpucache_fleet::{FleetBuilder, FleetTier};

pub const IDENTITY: &[u8] = b"llvmpipe (LLVM 15) 25.0.7 gl4.5 x86_64";

/// Skips the test (returns `true`) when redis-server is missing and the run is not CI.
pub fn skip_without_redis() -> bool {
    if redis_available() {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "redis-server is missing: run scripts/install-deps"
    );
    eprintln!("skipped: redis-server is not installed (scripts/install-deps)");
    true
}

/// Writes an owner-only key file of `material` in `dir`.
pub fn key_file(dir: &Path, name: &str, material: &[u8]) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, material).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

pub struct Machine {
    pub cache: Cache,
    pub fleet: Arc<FleetTier>,
}

pub fn identity() -> Identity {
    Identity::new(IDENTITY.to_vec())
}

/// A fleet tier for `identity` with the key in `key`.
pub fn fleet(
    url: &str,
    key: &Path,
    f: impl FnOnce(FleetBuilder) -> FleetBuilder,
) -> Arc<FleetTier> {
    f(FleetBuilder::new(url, identity()).key_file(key))
        .build()
        .unwrap()
}

/// A cache on `dir` over the fleet at `url`.
pub fn machine(dir: &Path, url: &str, key: &Path, preload: bool) -> Machine {
    machine_with(dir, url, key, preload, |b| b)
}

pub fn machine_with(
    dir: &Path,
    url: &str,
    key: &Path,
    preload: bool,
    f: impl FnOnce(FleetBuilder) -> FleetBuilder,
) -> Machine {
    let fleet = fleet(url, key, f);
    let cache = Cache::builder()
        .directory(dir)
        .identity(IDENTITY.to_vec())
        .preload(preload)
        .tier(fleet.clone())
        .open()
        .unwrap();
    Machine { cache, fleet }
}

/// A program-like value: compressible, different per `i`.
pub fn value(i: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    let mut x = i.wrapping_mul(2_654_435_761).wrapping_add(1);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        // Few distinct bytes, runs: compresses like machine code and IR do, roughly.
        v.extend_from_slice(&[(x % 16) as u8; 3]);
        v.extend_from_slice(&i.to_le_bytes());
    }
    v.truncate(len);
    v
}

pub fn key(i: u32) -> Vec<u8> {
    format!("program-{i:05}").into_bytes()
}

/// Polls `f` until it holds, at most `timeout`.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn tmp() -> TempDir {
    TempDir::new("gpucache-fleet-test").unwrap()
}
