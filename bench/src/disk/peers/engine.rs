//! What the comparison needs of an engine: store, read back, close durably.

use std::ops::Deref;
use std::path::Path;

use bytes::Bytes;

/// A value read back, in the engine's own representation.
#[derive(Debug)]
pub enum Value {
    /// Shared without copying.
    Shared(Bytes),
    /// Copied out of the engine.
    Owned(Vec<u8>),
}

impl Deref for Value {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Value::Shared(b) => b,
            Value::Owned(v) => v,
        }
    }
}

/// An open disk cache or store.
pub trait Engine {
    /// Stores `value` under `key` (persisted by [`close`](Engine::close) at the latest).
    fn insert(&mut self, key: &[u8], value: &Bytes) -> anyhow::Result<()>;
    /// Reads `key` back.
    fn get(&mut self, key: &[u8]) -> anyhow::Result<Option<Value>>;
    /// Makes everything stored durable (on disk and fsynced) and closes.
    fn close(self: Box<Self>) -> anyhow::Result<()>;
}

/// How to open an engine in a directory. `preload` asks engines that fill memory at open to
/// do so (gpucache; the peers have no such step).
pub type OpenFn = fn(dir: &Path, preload: bool) -> anyhow::Result<Box<dyn Engine>>;

/// One engine of the comparison.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    /// Name in tables.
    pub name: &'static str,
    /// How it is set up, for the notes under the table.
    pub setup: &'static str,
    /// Opens (creating or recovering) the engine in a directory.
    pub open: OpenFn,
    /// Whether the load is repeated every round; `false` for an engine whose load takes
    /// minutes (later rounds reopen and read what the first round stored).
    pub load_every_round: bool,
}
