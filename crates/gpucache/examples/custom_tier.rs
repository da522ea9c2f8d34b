//! The smallest tier: a map below the disk tier. `docs/design.md` walks through it.
//!
//! Run: `cargo run -p gpucache --example custom_tier`

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};

use gpucache::tier::{PreloadSink, Tier, TierStats, WriteContext, WriteOp};
use gpucache::{Bytes, Cache, Lookup};

/// Keeps entries in a map. A real tier (a fleet's Redis) would verify what it reads and
/// declare a `read_budget`, so that the cache never waits on the network for long.
#[derive(Debug, Default)]
struct MapTier {
    map: Mutex<HashMap<Vec<u8>, Bytes>>,
}

impl Tier for MapTier {
    fn name(&self) -> &str {
        "map"
    }

    fn read(&self, key: &[u8]) -> Lookup {
        match self.map.lock().unwrap().get(key) {
            Some(value) => Lookup::Hit(value.clone()),
            None => Lookup::Miss,
        }
    }

    fn write(&self, ops: &[WriteOp<'_>], _ctx: &WriteContext<'_>) -> io::Result<()> {
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
        for (key, value) in self.map.lock().unwrap().iter() {
            if !sink(key, value) {
                return;
            }
        }
    }

    fn stats(&self) -> TierStats {
        let mut stats = TierStats::new("map");
        stats.entries = self.map.lock().unwrap().len() as u64;
        stats
    }
}

fn main() -> gpucache::Result<()> {
    let dir = std::env::temp_dir().join(format!("gpucache-custom-tier-{}", std::process::id()));
    let shared = Arc::new(MapTier::default());

    // A first "machine" stores a program; the write-behind thread feeds the disk and the map.
    let first = Cache::builder()
        .directory(dir.join("first"))
        .tier(shared.clone())
        .open()?;
    first.insert(b"program-hash", b"binary".to_vec())?;
    first.flush()?;

    // A second one starts with an empty directory and finds it below its disk tier.
    let second = Cache::builder()
        .directory(dir.join("second"))
        .tier(shared.clone())
        .preload(false)
        .open()?;
    assert_eq!(second.get(b"program-hash").as_deref(), Some(&b"binary"[..]));
    for tier in second.stats().tiers {
        println!("{}: {} entries", tier.name, tier.entries);
    }
    drop((first, second));
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
