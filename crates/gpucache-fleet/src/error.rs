//! The crate's error type.

use std::io;
use std::path::PathBuf;

/// What can go wrong while configuring or using a fleet tier.
///
/// Once a tier runs, nothing here reaches the cache's callers: a down server, a refused
/// write or a rejected entry is a miss and a counted error in the tier's stats. These errors
/// come from building a tier ([`FleetBuilder::build`](crate::FleetBuilder::build)) and from
/// the administration calls the `gpucache fleet` command makes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error (reading the key file, a socket).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The fleet URL cannot be used.
    #[error("bad fleet URL {url:?}: {why}")]
    BadUrl {
        /// The URL as given (with any password replaced by `***`).
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The key file can be read by others than its owner, or is owned by another user.
    #[error("fleet key file {path} is not private ({why}): run `chmod 600 {path}` as its owner")]
    KeyFileNotPrivate {
        /// The key file.
        path: PathBuf,
        /// Its mode or owner, in words.
        why: String,
    },
    /// The key file holds too little key material.
    #[error("fleet key file {path} holds {len} bytes; at least 32 are needed")]
    KeyTooShort {
        /// The key file.
        path: PathBuf,
        /// Bytes it holds (after trimming white space at both ends).
        len: usize,
    },
    /// No key file was configured.
    #[error("no fleet key: set a key file (GPUCACHE_FLEET_KEY_FILE)")]
    NoKey,
    /// The server answered with an error, or could not be reached.
    #[error("redis: {0}")]
    Redis(String),
    /// `rediss://` was asked for in a build without the `tls-rustls` feature.
    #[error("rediss:// needs gpucache-fleet built with the `tls-rustls` feature")]
    TlsNotBuilt,
}

impl From<redis::RedisError> for Error {
    fn from(e: redis::RedisError) -> Self {
        Error::Redis(e.to_string())
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
