//! The read-only commands: `stats`, `ls`, `get`. None of them writes to the directory.

mod blob;
mod fleet;

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use gpucache::inspect::{self, DirKind, DirStats, RecordLookup, Snapshot};
use gpucache::Identity;
use serde_json::{json, Value};

use crate::output::{self, escape, hex, size, text_or_null};
use crate::Outcome;
use blob::BlobSection;

/// `stats DIR`: meta and space use of a cache directory, or of each cache of a
/// driver-versioned root, with the EGL blob cache's diagnostics where there are some.
pub fn stats(out: &mut dyn Write, dir: &Path, as_json: bool) -> Result<Outcome> {
    if let Some(namespaces) = namespaces(dir) {
        return namespace_stats(out, dir, &namespaces, as_json);
    }
    match inspect::classify(dir)? {
        DirKind::Cache(_) => {
            let snapshot = Snapshot::open(dir)?;
            let (meta, stats) = (snapshot.meta().clone(), snapshot.stats()?);
            drop(snapshot);
            let blob = BlobSection::load(dir);
            blob.warn();
            if as_json {
                let mut value = stats_json(dir, &meta, &stats, &blob);
                value["kind"] = json!("cache");
                output::json(out, &value)?;
            } else {
                print_stats(out, dir, &meta, &stats, &blob)?;
            }
        }
        DirKind::VersionedRoot(ids) => {
            let mut caches = Vec::new();
            for id in &ids {
                let snapshot = Snapshot::open(id)?;
                let (meta, stats) = (snapshot.meta().clone(), snapshot.stats()?);
                drop(snapshot);
                let blob = BlobSection::load(id);
                blob.warn();
                caches.push((id, meta, stats, blob));
            }
            if as_json {
                let list: Vec<Value> = caches
                    .iter()
                    .map(|(id, meta, stats, blob)| stats_json(id, meta, stats, blob))
                    .collect();
                let value = json!({
                    "kind": "driver_versioned_root",
                    "dir": dir.display().to_string(),
                    "caches": list,
                });
                output::json(out, &value)?;
            } else {
                writeln!(
                    out,
                    "{} is a driver-versioned root holding {} caches (one per identity):",
                    dir.display(),
                    caches.len()
                )?;
                for (id, meta, stats, blob) in &caches {
                    writeln!(out)?;
                    print_stats(out, id, meta, stats, blob)?;
                }
            }
        }
    }
    Ok(Outcome::Success)
}

/// The per-application namespaces of a drop-in root (`docs/dropin.md`): subdirectories that
/// are caches or driver-versioned roots, in a directory that is neither itself.
fn namespaces(dir: &Path) -> Option<Vec<std::path::PathBuf>> {
    if dir.join("meta").exists() || !inspect::identity_dirs(dir).ok()?.is_empty() {
        return None;
    }
    let mut subs: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir() && inspect::classify(p).is_ok())
        .collect();
    subs.sort();
    (!subs.is_empty()).then_some(subs)
}

/// A namespace's application and build id, from its name (`<app>-<16 hex digits>`).
fn namespace_parts(name: &str) -> (&str, Option<&str>) {
    match name.rsplit_once('-') {
        Some((app, id)) if id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit()) => {
            (app, Some(id))
        }
        _ => (name, None),
    }
}

fn namespace_stats(
    out: &mut dyn Write,
    dir: &Path,
    namespaces: &[std::path::PathBuf],
    as_json: bool,
) -> Result<Outcome> {
    if as_json {
        let mut list = Vec::new();
        for ns in namespaces {
            let mut buf = Vec::new();
            stats(&mut buf, ns, true)?;
            let name = ns.file_name().unwrap_or_default().to_string_lossy();
            let (app, build_id) = namespace_parts(&name);
            list.push(json!({
                "namespace": name,
                "application": app,
                "build_id": build_id,
                "cache": serde_json::from_slice::<Value>(&buf)?,
            }));
        }
        let value = json!({
            "kind": "dropin_root",
            "dir": dir.display().to_string(),
            "namespaces": list,
        });
        output::json(out, &value)?;
        return Ok(Outcome::Success);
    }
    writeln!(
        out,
        "{} holds {} per-application namespaces (the drop-in's):",
        dir.display(),
        namespaces.len()
    )?;
    for ns in namespaces {
        let name = ns.file_name().unwrap_or_default().to_string_lossy();
        let (app, build_id) = namespace_parts(&name);
        writeln!(out)?;
        writeln!(
            out,
            "== namespace {name}: application {app}, build id {}",
            build_id.unwrap_or("none")
        )?;
        stats(out, ns, false)?;
    }
    Ok(Outcome::Success)
}

fn stats_json(dir: &Path, meta: &Identity, s: &DirStats, blob: &BlobSection) -> Value {
    let mut value = json!({
        "dir": dir.display().to_string(),
        "format_version": inspect::FORMAT_VERSION,
        "cache_version": meta.version(),
        "identity_text": text_or_null(meta.bytes()),
        "identity_hex": hex(meta.bytes()),
        "driver_versioned": meta.driver_versioned(),
        "segments": s.segments,
        "bad_segments": s.bad_segments,
        "live_entries": s.live_entries,
        "live_bytes": s.live_bytes,
        "key_value_bytes": s.key_value_bytes,
        "file_bytes": s.file_bytes,
        "dead_bytes": s.dead_bytes,
        "space_amplification": s.space_amplification(),
    });
    if let Ok(a) = inspect::access_report(dir) {
        value["mode"] = json!(format!("{:04o}", a.mode));
        value["owner_uid"] = json!(a.owner);
        value["writable"] = json!(a.not_writable.is_none());
        value["not_writable"] = json!(a.not_writable);
        value["free_bytes"] = json!(a.free_bytes);
    }
    blob.add_json(&mut value);
    fleet::add_json(fleet::load(dir).as_ref(), &mut value);
    value
}

fn print_stats(
    out: &mut dyn Write,
    dir: &Path,
    meta: &Identity,
    s: &DirStats,
    blob: &BlobSection,
) -> Result<()> {
    let amplification = s
        .space_amplification()
        .map_or("n/a (nothing live)".to_owned(), |a| format!("{a:.3}"));
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let rows = [
        ("directory", dir.display().to_string()),
        ("format version", inspect::FORMAT_VERSION.to_string()),
        ("cache version", meta.version().to_string()),
        ("identity", output::identity(meta.bytes())),
        (
            "driver-versioned",
            yes_no(meta.driver_versioned()).to_owned(),
        ),
        ("segments", s.segments.to_string()),
        ("unreadable segments", s.bad_segments.to_string()),
        ("live entries", s.live_entries.to_string()),
        ("live key+value bytes", size(s.key_value_bytes)),
        ("live record bytes", size(s.live_bytes)),
        ("file bytes", size(s.file_bytes)),
        ("dead bytes", size(s.dead_bytes)),
        ("space amplification", amplification),
    ];
    for (name, value) in rows {
        writeln!(out, "{name:<22}{value}")?;
    }
    if let Ok(a) = inspect::access_report(dir) {
        let rows = [
            (
                "access",
                format!("mode {:04o}, owner uid {}", a.mode, a.owner),
            ),
            (
                "writable",
                a.not_writable
                    .map_or("yes".to_owned(), |why| format!("no: {why}")),
            ),
            (
                "free space",
                a.free_bytes.map_or("unknown".to_owned(), size),
            ),
        ];
        for (name, value) in rows {
            writeln!(out, "{name:<22}{value}")?;
        }
    }
    blob.print(out)?;
    fleet::print(fleet::load(dir).as_ref(), out)
}

/// `ls DIR`: one line per live entry, in write order.
pub fn ls(out: &mut dyn Write, dir: &Path, text: bool, as_json: bool) -> Result<Outcome> {
    // Collected first: the snapshot's shared lock is not held while output is written.
    let listing = inspect::entries(dir)?;
    if as_json {
        writeln!(out, "[")?;
        let n = listing.entries.len();
        for (i, e) in listing.entries.iter().enumerate() {
            let item = json!({
                "key": hex(&e.key),
                "key_text": text_or_null(&e.key),
                "value_len": e.value_len,
                "segment": e.segment,
                "offset": e.offset,
            });
            let comma = if i + 1 < n { "," } else { "" };
            writeln!(out, "{item}{comma}")?;
        }
        writeln!(out, "]")?;
    } else {
        for e in &listing.entries {
            let key = if text { escape(&e.key) } else { hex(&e.key) };
            writeln!(
                out,
                "{:>10} {:08x} {:>10} {key}",
                e.value_len, e.segment, e.offset
            )?;
        }
    }
    if listing.unreadable > 0 {
        eprintln!(
            "warning: {} live entries have unreadable records (run `gpucache verify`)",
            listing.unreadable
        );
    }
    Ok(Outcome::Success)
}

/// `get DIR KEY`: the value's raw bytes to `out_file` or standard output.
pub fn get(
    out: &mut dyn Write,
    dir: &Path,
    key: &[u8],
    out_file: Option<&Path>,
) -> Result<Outcome> {
    match inspect::get(dir, key)? {
        RecordLookup::Found(value) => {
            match out_file {
                Some(path) => std::fs::write(path, &value)
                    .with_context(|| format!("cannot write {}", path.display()))?,
                None => out.write_all(&value)?,
            }
            Ok(Outcome::Success)
        }
        RecordLookup::Absent => {
            eprintln!("gpucache: key {} not found in {}", hex(key), dir.display());
            Ok(Outcome::Negative)
        }
        RecordLookup::Corrupt(why) => {
            eprintln!(
                "gpucache: the record of key {} is corrupt ({why}); nothing written",
                hex(key)
            );
            Ok(Outcome::Negative)
        }
    }
}
