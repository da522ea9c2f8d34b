//! gpucache's `Cache` as an [`Engine`].

use std::path::Path;

use bytes::Bytes;
use gpucache::Cache;

use super::engine::{Engine, Kind, Value};
use crate::disk::cold_get::GET_MEMORY;
use crate::disk::ours::{self, GIB};

/// gpucache as compared with its peers.
pub const KIND: Kind = Kind {
    name: "gpucache",
    setup: "16 MiB memory tier, 2 GiB disk limit, 1 GiB write queue, a `flush()` (write and fsync) every 32,768 stores so that its queue (at most 65,536 operations) drops none, and at the end",
    open,
    load_every_round: true,
};

struct Gpucache {
    cache: Cache,
    stores: usize,
}

fn open(dir: &Path, preload: bool) -> anyhow::Result<Box<dyn Engine>> {
    let cache = ours::open(
        gpucache::CacheBuilder::new()
            .directory(dir)
            .max_memory_bytes(GET_MEMORY)
            .max_disk_bytes(2 * GIB)
            .write_queue_bytes(GIB)
            .preload(preload),
    )?;
    Ok(Box::new(Gpucache { cache, stores: 0 }))
}

impl Engine for Gpucache {
    fn insert(&mut self, key: &[u8], value: &Bytes) -> anyhow::Result<()> {
        self.cache.insert(key, value.clone())?;
        self.stores += 1;
        if self.stores.is_multiple_of(ours::PACE) {
            self.cache.flush()?;
        }
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> anyhow::Result<Option<Value>> {
        Ok(self.cache.get(key).map(Value::Shared))
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        self.cache.flush()?;
        Ok(())
    }
}
