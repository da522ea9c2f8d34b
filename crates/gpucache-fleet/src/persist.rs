//! The fleet tier's counters kept in the cache directory, so that `gpucache stats DIR`
//! shows how the fleet served the processes that used it: the `fleet-stats` metadata
//! stream (envelope `GPUC` + tag `FLTS`, version 1; `docs/fleet.md`).
//!
//! Body: field count `n` (u32), the lifetime totals (`n` × u64), the last process's counts
//! (`n` × u64), the last process's pid (u32), its last error (u32 length + UTF-8, 0: none).
//! Fields in [`FIELDS`] order; a reader ignores fields past those it knows, and a writer that
//! knows more starts the unknown ones of an older file at zero.

use std::path::Path;
use std::time::Duration;

use gpucache::codec::{LeReader, LeWriter};
use gpucache::{Identity, MetadataStream};

use crate::stats::FleetStats;

/// The stream.
pub const FLEET_STATS: MetadataStream = MetadataStream::new("fleet-stats", *b"FLTS", 1);

/// The counters kept, in body order.
pub const FIELDS: [&str; 16] = [
    "hits",
    "misses",
    "reads_skipped",
    "read_errors",
    "rejected_mac",
    "rejected_identity",
    "rejected_key",
    "rejected_format",
    "pulled",
    "pushed",
    "pushed_value_bytes",
    "pushed_wire_bytes",
    "push_deduplicated",
    "push_dropped",
    "push_errors",
    "connect_errors",
];

pub(crate) fn values(s: &FleetStats) -> [u64; 16] {
    [
        s.hits,
        s.misses,
        s.reads_skipped,
        s.read_errors,
        s.rejected_mac,
        s.rejected_identity,
        s.rejected_key,
        s.rejected_format,
        s.pulled,
        s.pushed,
        s.pushed_value_bytes,
        s.pushed_wire_bytes,
        s.push_deduplicated,
        s.push_dropped,
        s.push_errors,
        s.connect_errors,
    ]
}

/// The fleet counters of a cache directory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PersistedFleetStats {
    /// Totals over every process that used the directory with a fleet: `(name, value)` in
    /// [`FIELDS`] order.
    pub lifetime: Vec<(&'static str, u64)>,
    /// The last process's counts since it opened.
    pub last: Vec<(&'static str, u64)>,
    /// The last process's pid.
    pub last_pid: u32,
    /// The last process's last error.
    pub last_error: Option<String>,
}

impl PersistedFleetStats {
    /// Every failure counted over the directory's lifetime.
    pub fn lifetime_errors(&self) -> u64 {
        self.lifetime
            .iter()
            .filter(|(n, _)| n.ends_with("_errors") || n.starts_with("rejected_"))
            .map(|(_, v)| v)
            .sum()
    }
}

struct Body {
    lifetime: [u64; 16],
    last: [u64; 16],
    pid: u32,
    error: Option<String>,
}

fn decode(bytes: &[u8]) -> Option<Body> {
    let mut r = LeReader::new(bytes);
    let n = r.u32().ok()? as usize;
    let read = |r: &mut LeReader<'_>| -> Option<[u64; 16]> {
        let mut v = [0; 16];
        for i in 0..n {
            let x = r.u64().ok()?;
            if let Some(slot) = v.get_mut(i) {
                *slot = x;
            }
        }
        Some(v)
    };
    let lifetime = read(&mut r)?;
    let last = read(&mut r)?;
    let pid = r.u32().ok()?;
    let len = r.u32().ok()? as usize;
    let error =
        (len > 0).then(|| String::from_utf8_lossy(r.bytes(len).unwrap_or_default()).into_owned());
    Some(Body {
        lifetime,
        last,
        pid,
        error,
    })
}

fn encode(b: &Body) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = LeWriter::new(&mut out);
    w.u32(16);
    for v in b.lifetime.iter().chain(&b.last) {
        w.u64(*v);
    }
    w.u32(b.pid);
    let e = b.error.as_deref().unwrap_or("").as_bytes();
    w.u32(e.len() as u32).bytes(e);
    out
}

/// Adds `delta` to the directory's totals and records `last` as the last process's.
pub(crate) fn update(
    dir: &Path,
    identity: &Identity,
    delta: &[u64; 16],
    last: &[u64; 16],
    error: Option<String>,
) -> gpucache::Result<()> {
    FLEET_STATS.update(dir, identity, Duration::from_millis(500), |old| {
        let mut lifetime = old
            .as_deref()
            .and_then(decode)
            .map_or([0; 16], |b| b.lifetime);
        for (t, d) in lifetime.iter_mut().zip(delta) {
            *t = t.saturating_add(*d);
        }
        encode(&Body {
            lifetime,
            last: *last,
            pid: std::process::id(),
            error,
        })
    })
}

/// Reads the fleet counters of cache directory `dir`: `None` when no fleet tier ever wrote
/// them (or the file fails its checks).
pub fn read_persisted(dir: &Path) -> gpucache::Result<Option<PersistedFleetStats>> {
    let Some(body) = FLEET_STATS.read(dir)? else {
        return Ok(None);
    };
    let Some(b) = decode(&body) else {
        return Ok(None);
    };
    let pair = |v: [u64; 16]| FIELDS.iter().copied().zip(v).collect();
    Ok(Some(PersistedFleetStats {
        lifetime: pair(b.lifetime),
        last: pair(b.last),
        last_pid: b.pid,
        last_error: b.error,
    }))
}
