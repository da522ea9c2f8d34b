//! redb (an embedded copy-on-write B-tree) as an [`Engine`]: stores are committed in
//! batches, the last commit durable.

use std::path::Path;

use bytes::Bytes;
use redb::{Database, Durability, ReadOnlyTable, ReadableDatabase, TableDefinition};

use super::engine::{Engine, Kind, Value};
use crate::disk::cold_get::GET_MEMORY;

/// redb as compared.
pub const KIND: Kind = Kind {
    name: "redb",
    setup: "16 MiB page cache, one table of byte keys and values, transactions of 1,024 stores (non-durable), the last one durable (fsync); gets copy out of the read transaction",
    open,
    load_every_round: true,
};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
/// Stores per write transaction.
const BATCH: usize = 1024;

struct Redb {
    db: Database,
    pending: Vec<(Vec<u8>, Bytes)>,
    dirty: bool,
    reader: Option<ReadOnlyTable<&'static [u8], &'static [u8]>>,
}

fn open(dir: &Path, _preload: bool) -> anyhow::Result<Box<dyn Engine>> {
    let db = Database::builder()
        .set_cache_size(GET_MEMORY as usize)
        .create(dir.join("cache.redb"))?;
    Ok(Box::new(Redb {
        db,
        pending: Vec::with_capacity(BATCH),
        dirty: false,
        reader: None,
    }))
}

impl Redb {
    fn commit(&mut self, durability: Durability) -> anyhow::Result<()> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(durability)?;
        {
            let mut table = txn.open_table(TABLE)?;
            for (key, value) in self.pending.drain(..) {
                table.insert(key.as_slice(), value.as_ref())?;
            }
        }
        txn.commit()?;
        Ok(())
    }
}

impl Engine for Redb {
    fn insert(&mut self, key: &[u8], value: &Bytes) -> anyhow::Result<()> {
        self.pending.push((key.to_vec(), value.clone()));
        self.dirty = true;
        if self.pending.len() >= BATCH {
            self.commit(Durability::None)?;
        }
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> anyhow::Result<Option<Value>> {
        if self.reader.is_none() {
            self.reader = Some(self.db.begin_read()?.open_table(TABLE)?);
        }
        let table = self.reader.as_ref().expect("opened above");
        Ok(table.get(key)?.map(|v| Value::Owned(v.value().to_vec())))
    }

    fn close(mut self: Box<Self>) -> anyhow::Result<()> {
        self.reader = None;
        if self.dirty {
            self.commit(Durability::Immediate)?;
        }
        Ok(())
    }
}
