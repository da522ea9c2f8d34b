//! The disk tier: a directory of append-only segments shared by any number of processes,
//! crash-safe, bounded by bytes and entries. `docs/disk-format.md` describes the files.
//!
//! - [`tier`]: [`DiskTier`], the directory as a [`Tier`](crate::Tier) of a cache;
//! - [`read`] and [`write`]: lookups, the multi-process refresh and preload; batches under
//!   the directory lock, eviction and compaction;
//! - [`format`], [`index`], [`dir`]: the bytes, the in-memory index, the file layout;
//! - [`table`] and [`lazy`]: the persisted hash table, and lookups through it while the
//!   in-memory index is not yet full (opening in O(1));
//! - [`access`]: the modes of what gpucache creates, and the owner check;
//! - [`repair`]: damaged segments rebuilt from their data files (or removed) by a writer;
//! - [`stream`]: metadata streams that front ends keep beside the entries;
//! - [`inspect`]: read-only views of a directory for tools.
//!
//! The rest of the crate uses only what is listed below.

mod access;
mod dir;
mod format;
mod index;
pub(crate) mod inspect;
mod lazy;
mod read;
mod repair;
mod stats;
mod stream;
mod table;
mod tier;
mod write;

pub use access::DirAccess;
pub use access::{access_report, AccessReport};
pub(crate) use access::{check_owner, check_owner_open, DirHandle};
pub(crate) use dir::identity_subdir;
pub use stats::DiskStats;
pub use stream::MetadataStream;
pub(crate) use tier::{DiskConfig, DiskTier};

/// Entry points for the fuzz targets in `fuzz/`: every parser of on-disk bytes.
#[cfg(fuzzing)]
pub(crate) mod fuzzing {
    pub use super::format::{
        decode_index_entry, decode_meta, decode_record, decode_segment_header, decompress_value,
        encode_meta, encode_segment_header, record_value, SegmentFile,
    };
    pub use super::lazy::trusted_table_for_fuzzing;
    pub use super::table::{
        decode_header as decode_table_header, decode_page as decode_table_page,
        encode_header as encode_table_header, find_in_page as find_in_table_page, SLOTS_PER_PAGE,
    };
}
