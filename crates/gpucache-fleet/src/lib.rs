//! The fleet tier of gpucache: a remote tier on Redis (one server or a Redis Cluster) below
//! the disk tier, so that a fleet of identical machines compiles each program once.
//!
//! ```no_run
//! use gpucache::{Cache, Identity};
//! use gpucache_fleet::FleetBuilder;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let identity = Identity::new(b"llvmpipe 25.0.7 gles3 x86_64".to_vec());
//! let fleet = FleetBuilder::new("redis://10.0.0.5:6379", identity.clone())
//!     .key_file("/etc/gpucache/fleet.key") // owner-only, at least 32 bytes
//!     .build()?;
//! let cache = Cache::builder()
//!     .directory("/var/cache/gpucache")
//!     .identity(identity.bytes().to_vec())
//!     .tier(fleet)
//!     .open()?;
//! # drop(cache); Ok(()) }
//! ```
//!
//! The caller's path never waits on the network beyond the read budget (2 ms by default);
//! the identity's entries are pulled in bulk at open on the cache's preload thread, stores
//! are pushed write-behind by the tier's own thread, and every entry is authenticated with a
//! MAC under the fleet key and carries its identity and full key. `docs/fleet.md` has the
//! wire format, the Redis layout, the recommended server configuration and key rotation.
//!
//! No async runtime: the `redis` crate's synchronous API on plain threads.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod admin;
mod conn;
pub mod entry;
mod error;
mod key;
pub mod names;
mod ops;
mod persist;
mod push;
mod stats;
pub mod testing;
mod tier;
mod url;

pub use admin::{FleetAdmin, IdentityInfo, NodeMemory, PullReport, PullSink, PushReport};
pub use conn::{MAX_BACKOFF, MIN_BACKOFF};
pub use entry::Reject;
pub use error::{Error, Result};
pub use key::{FleetKey, KeyRing};
pub use persist::{read_persisted, PersistedFleetStats, FIELDS, FLEET_STATS};
pub use stats::FleetStats;
pub use tier::{FleetBuilder, FleetTier};
pub use url::{redact, FleetUrl};
