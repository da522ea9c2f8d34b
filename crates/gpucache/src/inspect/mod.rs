//! Inspection and maintenance of cache directories, for tools such as the `gpucache` command.
//!
//! A cache directory holds `meta`, `lock` and `seg-XXXXXXXX.dat`/`.idx` files
//! (`docs/disk-format.md`); a driver-versioned root holds one such directory per identity,
//! named `id-<16 hex digits>`. The functions here:
//!
//! - **Read** ([`read_meta`], [`Snapshot`], [`stats`], [`entries`], [`get`], [`verify`],
//!   [`export_bundle`]) without writing anything: files are opened read-only, so they work on
//!   a read-only directory. They hold the directory's `lock` *shared* while they read, so no
//!   writer's batch is half-applied under them (writers wait for at most that long).
//! - **Maintain** ([`clear`], [`compact`], [`import_bundle`]) under the exclusive lock that
//!   writers take, so they are safe while other processes use the cache.
//! - **Bundle** ([`BundleWriter`], [`BundleReader`], [`parse_bundle`]): a single-file copy of
//!   a cache's live entries (`docs/bundle-format.md`). Parsing never panics and checks every
//!   length against the bytes that remain before allocating.
//!
//! The live entries are found exactly as the library finds them: the index files are applied
//! in (segment, offset) order, the latest record of a key wins and a tombstone removes it.
//! Every value returned has passed its record's CRC32C, key-hash and length checks.
//!
//! Errors are [`Error::Io`](crate::Error::Io) for operating-system failures and [`Error::InvalidArgument`](crate::Error::InvalidArgument) for
//! everything else: not a cache directory, a corrupt meta file or bundle, a mismatch.

mod maintain;

pub use crate::disk::inspect::{
    classify, entries, export_bundle, get, identity_dirs, is_identity_dir_name, parse_bundle,
    read_meta, stats, verify, Bundle, BundleEntry, BundleReader, BundleWriter, DirKind, DirStats,
    EntryFn, EntryInfo, ExportReport, Listing, RecordLookup, Snapshot, VerifyReport, BUNDLE_MAGIC,
    BUNDLE_VERSION, FORMAT_VERSION,
};
pub use crate::disk::{access_report, AccessReport};
pub use maintain::{cache_builder, clear, compact, import_bundle, CompactReport, ImportReport};
