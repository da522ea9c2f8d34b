//! `gpucache clear` and `gpucache compact`: safe while other processes use the cache.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use gpucache::inspect;
use serde_json::json;

use crate::output::{self, size};
use crate::Outcome;

/// Removes every entry; the directory keeps its identity.
pub fn clear(out: &mut dyn Write, dir: &Path, as_json: bool) -> Result<Outcome> {
    let removed = inspect::clear(dir)?;
    if as_json {
        let value = json!({ "dir": dir.display().to_string(), "removed_entries": removed });
        output::json(out, &value)?;
    } else {
        writeln!(out, "cleared {}: removed {removed} entries", dir.display())?;
    }
    Ok(Outcome::Success)
}

/// Reclaims all dead space.
pub fn compact(out: &mut dyn Write, dir: &Path, as_json: bool) -> Result<Outcome> {
    let r = inspect::compact(dir)?;
    if as_json {
        let value = json!({
            "dir": dir.display().to_string(),
            "file_bytes_before": r.file_bytes_before,
            "file_bytes_after": r.file_bytes_after,
            "segments_rewritten": r.segments_rewritten,
            "records_copied": r.records_copied,
            "corrupt_dropped": r.corrupt_dropped,
        });
        output::json(out, &value)?;
    } else {
        writeln!(
            out,
            "compacted {}: file bytes {} -> {}",
            dir.display(),
            size(r.file_bytes_before),
            size(r.file_bytes_after)
        )?;
        writeln!(
            out,
            "rewrote {} segments, copied {} live records",
            r.segments_rewritten, r.records_copied
        )?;
    }
    if r.corrupt_dropped > 0 {
        eprintln!(
            "warning: dropped {} corrupt records (they could not be read anyway)",
            r.corrupt_dropped
        );
    }
    Ok(Outcome::Success)
}
