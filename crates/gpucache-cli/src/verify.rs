//! `gpucache verify`: checks every record of every segment, read-only.

use std::io::Write;
use std::path::Path;

use anyhow::Result;
use gpucache::inspect;
use serde_json::json;

use crate::output::{self, size};
use crate::progress::{Bar, When};
use crate::Outcome;

/// Verifies `dir`; [`Outcome::Negative`] (exit 1) if anything is corrupt.
pub fn run(out: &mut dyn Write, dir: &Path, as_json: bool, progress: When) -> Result<Outcome> {
    let mut bar = Bar::new(progress);
    let report = inspect::verify(dir, &mut |done, total| bar.update(done, total));
    bar.finish();
    let r = report?;
    let clean = r.is_clean();
    if as_json {
        let value = json!({
            "dir": dir.display().to_string(),
            "clean": clean,
            "segments": r.segments,
            "records_ok": r.records_ok,
            "records_corrupt": r.records_corrupt,
            "records_orphaned": r.records_orphaned,
            "index_entries_corrupt": r.index_entries_corrupt,
            "bad_segment_headers": r.bad_segment_headers,
            "orphan_files": r.orphan_files,
            "torn_tail_bytes": r.torn_tail_bytes,
            "bytes_checked": r.bytes_checked,
            "problems": r.problems,
        });
        output::json(out, &value)?;
    } else {
        let rows = [
            ("segments", r.segments),
            ("records ok", r.records_ok),
            ("records corrupt", r.records_corrupt),
            ("records orphaned", r.records_orphaned),
            ("index entries corrupt", r.index_entries_corrupt),
            ("bad segment headers", r.bad_segment_headers),
            ("orphan files", r.orphan_files),
            ("torn tail bytes", r.torn_tail_bytes),
        ];
        for (name, value) in rows {
            writeln!(out, "{name:<23}{value}")?;
        }
        writeln!(out, "{:<23}{}", "bytes checked", size(r.bytes_checked))?;
        for p in &r.problems {
            writeln!(out, "  {p}")?;
        }
        let verdict = if clean { "clean" } else { "CORRUPT" };
        writeln!(out, "{}: {verdict}", dir.display())?;
    }
    Ok(if clean {
        Outcome::Success
    } else {
        Outcome::Negative
    })
}
