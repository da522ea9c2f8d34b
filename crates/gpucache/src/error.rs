//! The crate's error type.

use std::io;
use std::path::PathBuf;

use crate::codec::FormatError;

/// Everything that can go wrong in gpucache.
///
/// The session variants mirror the D3D12 shader-cache results (`DXGI_ERROR_*`) so that a C
/// front end can map them one to one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// `find` found no entry for the key (`DXGI_ERROR_NOT_FOUND`).
    #[error("no entry for this key")]
    NotFound,
    /// `store` found an entry with the same key (`DXGI_ERROR_ALREADY_EXISTS`), or a session was
    /// opened with another version while sessions of the old version are still open.
    #[error("{0}")]
    AlreadyExists(&'static str),
    /// Another key with the same hash is stored (`DXGI_ERROR_CACHE_HASH_COLLISION`).
    #[error("another key with the same hash is stored")]
    HashCollision,
    /// The entry does not fit without evicting, and this cache does not evict
    /// (`DXGI_ERROR_CACHE_FULL`).
    #[error("cache is full: {needed} bytes needed, {available} available")]
    CacheFull {
        /// Bytes the entry would be charged (key + value + per-entry overhead).
        needed: u64,
        /// Bytes left under the cache's budget.
        available: u64,
    },
    /// A single value is larger than the cache accepts; the previous value, if any, is kept.
    #[error("value of {size} bytes exceeds the limit of {limit} bytes")]
    ValueTooLarge {
        /// The value's size.
        size: u64,
        /// The largest value accepted.
        limit: u64,
    },
    /// The caller's buffer is smaller than the value; nothing was written.
    #[error("buffer of {given} bytes is smaller than the value's {needed} bytes")]
    BufferTooSmall {
        /// The value's size.
        needed: u64,
        /// The buffer's size.
        given: u64,
    },
    /// The cache kind is disabled by cache control (`DXGI_ERROR_NOT_CURRENTLY_AVAILABLE`).
    #[error("cache is disabled by cache control")]
    NotCurrentlyAvailable,
    /// An argument is out of its allowed range.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Bytes read back (a metadata stream, a file given to a tool) fail their checks.
    #[error("corrupt: {0}")]
    Corrupt(#[from] FormatError),
    /// The cache directory belongs to another user, who could read or plant its entries;
    /// gpucache writes only into directories of its own user (or root) unless
    /// [`CacheBuilder::allow_foreign_owner`](crate::CacheBuilder::allow_foreign_owner).
    #[error("{} belongs to user {owner}, not to this process's user {euid}", path.display())]
    ForeignOwner {
        /// The directory.
        path: PathBuf,
        /// Its owner's user id.
        owner: u32,
        /// This process's effective user id.
        euid: u32,
    },
    /// Cache control outside developer mode (D3D12 allows `ShaderCacheControl` only in
    /// developer mode); see [`crate::control::developer_mode`].
    #[error(
        "cache control needs developer mode: set GPUCACHE_DEVELOPER_MODE=1, or create \
         $XDG_CONFIG_HOME/gpucache/developer-mode (your own, mode 0600) or \
         /etc/gpucache/developer-mode (root's)"
    )]
    DeveloperModeRequired,
    /// The feature exists in the API but is not implemented yet.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
}

/// Shorthand for `Result<T, gpucache::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;
