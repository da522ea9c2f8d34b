//! Maintenance through the library's writer (which takes the directory's exclusive lock):
//! import, clear, compact.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use crate::disk::inspect::{
    classify, has_meta_file, identity_dirs, invalid, io_at, read_meta, segment_file_bytes,
    BundleReader, DirKind,
};
use crate::{Cache, CacheBuilder, Identity, Result};

/// What [`import_bundle`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImportReport {
    /// The cache directory written (for a driver-versioned bundle imported into a root, the
    /// identity's subdirectory).
    pub dir: PathBuf,
    /// Entries stored.
    pub entries: u64,
    /// Key and value bytes stored.
    pub key_value_bytes: u64,
    /// The identity the directory had before, when `force` replaced another one.
    pub replaced: Option<Identity>,
}

/// Stores every entry of the bundle file `bundle` into `dir`, through a [`Cache`] opened
/// with the bundle's identity (an entry replaces the key's current value).
///
/// The whole bundle is checked before anything is stored. `dir` may be a cache directory of
/// the bundle's identity, version and flags; a new or empty directory (created for the
/// bundle); or, for a driver-versioned bundle, a root, whose `id-<hash>` subdirectory is
/// used. A directory of another identity, version or flags, or with an unreadable meta file,
/// is refused unless `force`, which wipes it and gives it to the bundle's identity, as an
/// application opening it with that identity would.
pub fn import_bundle(dir: &Path, bundle: &Path, force: bool) -> Result<ImportReport> {
    let open = || -> Result<BundleReader<io::BufReader<File>>> {
        let file = File::open(bundle).map_err(|e| io_at(bundle, e))?;
        let len = file.metadata().map_err(|e| io_at(bundle, e))?.len();
        BundleReader::new(io::BufReader::with_capacity(1 << 20, file), len)
    };
    let mut reader = open()?;
    let mut largest = 0u64;
    while let Some(e) = reader.next_entry()? {
        largest = largest.max((e.key.len() + e.value.len()) as u64);
    }
    let header = reader.header().clone();
    let (target, replaced) = import_target(dir, &header, force)?;
    let cache = builder_at(&target, &header)?
        .max_segment_bytes((largest + 4096).max(128 << 20))
        .write_queue_bytes(2 * largest + (64 << 20))
        .open()?;
    check_writable(&cache, &target)?;
    let mut report = ImportReport {
        dir: target,
        entries: 0,
        key_value_bytes: 0,
        replaced,
    };
    let mut reader = open()?;
    let mut pending = 0u64;
    while let Some(e) = reader.next_entry()? {
        let len = (e.key.len() + e.value.len()) as u64;
        cache.insert(&e.key, e.value)?;
        report.entries += 1;
        report.key_value_bytes += len;
        pending += len;
        if pending >= 16 << 20 {
            cache.flush()?;
            pending = 0;
        }
    }
    if report.entries > 0 {
        cache.flush()?;
    }
    let stats = cache.stats();
    let disk = stats.disk.unwrap_or_default();
    let lost = stats.write_queue_dropped + disk.too_large_skipped;
    if lost > 0 || disk.write_errors > 0 {
        return Err(invalid(format!(
            "{lost} entries were not written ({} write errors; last: {})",
            disk.write_errors,
            disk.last_error.unwrap_or_default()
        )));
    }
    Ok(report)
}

/// Where a bundle goes, and the meta `force` replaces there.
fn import_target(
    dir: &Path,
    header: &Identity,
    force: bool,
) -> Result<(PathBuf, Option<Identity>)> {
    let has_meta = has_meta_file(dir);
    let is_empty = !dir.exists()
        || fs::read_dir(dir)
            .map_err(|e| io_at(dir, e))?
            .next()
            .is_none();
    let target = if has_meta {
        dir.to_path_buf()
    } else if header.driver_versioned() {
        Cache::builder()
            .directory(dir)
            .identity(header.bytes().to_vec())
            .driver_versioned(true)
            .resolved_directory()
            .unwrap_or_default()
    } else if is_empty {
        return Ok((dir.to_path_buf(), None));
    } else if !identity_dirs(dir)?.is_empty() {
        return Err(invalid(format!(
            "{} is a driver-versioned root and the bundle is not driver-versioned; \
             import it into a cache directory",
            dir.display()
        )));
    } else {
        return Err(invalid(format!(
            "{}: not empty and not a gpucache directory; refusing to import into it",
            dir.display()
        )));
    };
    if !has_meta_file(&target) {
        return Ok((target, None));
    }
    let differs = match classify(&target) {
        Ok(DirKind::Cache(meta)) if meta == *header => return Ok((target, None)),
        Ok(DirKind::Cache(meta)) => format!(
            "holds identity {:?} version {} driver-versioned {}, the bundle {:?} version {} \
             driver-versioned {}",
            meta.display_bytes(),
            meta.version(),
            meta.driver_versioned(),
            header.display_bytes(),
            header.version(),
            header.driver_versioned()
        ),
        Ok(DirKind::VersionedRoot(_)) => "is a driver-versioned root".into(),
        Err(e) => e.to_string(),
    };
    if !force {
        return Err(invalid(format!(
            "{} {differs}; pass --force to wipe it and import",
            target.display()
        )));
    }
    let old = read_meta(&target).ok();
    Ok((target, old))
}

/// A builder that opens the cache directory `dir` with exactly the given identity (so the
/// library does not wipe it), no preload, a small memory tier and no disk limits (nothing is
/// evicted). A driver-versioned cache is opened through its root, so `dir` must be named
/// after its identity's hash, as the library names it.
fn builder_at(dir: &Path, identity: &Identity) -> Result<CacheBuilder> {
    let versioned = identity.driver_versioned();
    let base = match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) if versioned => parent,
        None if versioned => Path::new("."),
        _ => dir,
    };
    let builder = Cache::builder()
        .directory(base)
        .identity(identity.bytes().to_vec())
        .version(identity.version())
        .driver_versioned(versioned)
        .max_disk_bytes(u64::MAX)
        .max_memory_bytes(1 << 20)
        .preload(false);
    let resolved = builder.resolved_directory().unwrap_or_default();
    if resolved.file_name() != dir.file_name() {
        return Err(invalid(format!(
            "{}: a driver-versioned cache of this identity lives in {}, not here",
            dir.display(),
            resolved.display()
        )));
    }
    Ok(builder)
}

/// A [`CacheBuilder`] that opens the cache directory `dir` with the identity, version and
/// flags of its meta file, so that opening it does not wipe it (for a driver-versioned
/// directory, the builder's directory is the root). Its disk limits are lifted and preload
/// is off; set what you need.
pub fn cache_builder(dir: &Path) -> Result<CacheBuilder> {
    builder_at(dir, &read_meta(dir)?)
}

fn check_writable(cache: &Cache, dir: &Path) -> Result<()> {
    if let Some(why) = cache.disk_error() {
        return Err(invalid(format!("{}: {why}", dir.display())));
    }
    if !cache.stats().disk.is_some_and(|d| d.writable) {
        return Err(invalid(format!(
            "{}: directory is read-only",
            dir.display()
        )));
    }
    Ok(())
}

/// Removes every entry of the cache directory `dir` through the library (a [`Cache`] opened
/// with the directory's own identity, so its meta is kept), under the exclusive lock.
/// Returns the number of live entries there were.
pub fn clear(dir: &Path) -> Result<u64> {
    let cache = cache_builder(dir)?.open()?;
    check_writable(&cache, dir)?;
    let before = cache.stats().disk.map_or(0, |d| d.entries);
    cache.clear()?;
    Ok(before)
}

// ---------------------------------------------------------------------------------------
// Compaction.

/// What [`compact`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactReport {
    /// Bytes of segment files before.
    pub file_bytes_before: u64,
    /// Bytes of segment files after.
    pub file_bytes_after: u64,
    /// Segments rewritten (every segment holding dead records) and deleted.
    pub segments_rewritten: u64,
    /// Live records copied into new segments.
    pub records_copied: u64,
    /// Live records dropped because they fail their checks.
    pub corrupt_dropped: u64,
}

/// Reclaims all dead space of the cache directory `dir` through the library's compaction
/// (under the directory lock, like any writer): every segment holding dead records, the
/// newest included, has its live records copied forward and is deleted.
pub fn compact(dir: &Path) -> Result<CompactReport> {
    read_meta(dir)?;
    let file_bytes_before = segment_file_bytes(dir)?;
    let cache = cache_builder(dir)?.preload(false).open()?;
    check_writable(&cache, dir)?;
    cache.compact()?;
    let disk = cache.stats().disk.unwrap_or_default();
    drop(cache);
    Ok(CompactReport {
        file_bytes_before,
        file_bytes_after: segment_file_bytes(dir)?,
        segments_rewritten: disk.compacted_segments,
        records_copied: disk.records_written,
        corrupt_dropped: disk.corrupt_dropped,
    })
}
