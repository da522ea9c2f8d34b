//! cacache (one content file per entry plus hashed index buckets) through its sync API, as
//! an [`Engine`].

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use cacache::Algorithm;

use super::engine::{Engine, Kind, Value};
use crate::disk::fsutil::sync_fs;

/// cacache as compared.
pub const KIND: Kind = Kind {
    name: "cacache",
    setup: "sync API, XXH3 integrity (cheaper than its SHA-256 default), keys as hex; never fsyncs, so closing adds `syncfs`; no memory tier. Loaded in the first round only (two file creations and a rename per store make a load take minutes); later rounds reopen and read that load",
    open,
    load_every_round: false,
};

struct Cacache {
    dir: PathBuf,
}

fn open(dir: &Path, _preload: bool) -> anyhow::Result<Box<dyn Engine>> {
    Ok(Box::new(Cacache {
        dir: dir.to_path_buf(),
    }))
}

/// cacache keys are strings.
fn hex(key: &[u8]) -> String {
    key.iter()
        .fold(String::with_capacity(key.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

impl Engine for Cacache {
    fn insert(&mut self, key: &[u8], value: &Bytes) -> anyhow::Result<()> {
        cacache::write_sync_with_algo(Algorithm::Xxh3, &self.dir, hex(key), value)?;
        Ok(())
    }

    fn get(&mut self, key: &[u8]) -> anyhow::Result<Option<Value>> {
        match cacache::read_sync(&self.dir, hex(key)) {
            Ok(v) => Ok(Some(Value::Owned(v))),
            Err(cacache::Error::EntryNotFound(..)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    fn close(self: Box<Self>) -> anyhow::Result<()> {
        sync_fs(&self.dir)?;
        Ok(())
    }
}
