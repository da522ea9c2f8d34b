//! `gpucache fleet push|pull|stats`: a fleet tier's Redis, from the command line
//! (`docs/fleet.md`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use gpucache::{inspect, Cache, Identity};
use gpucache_fleet::{FleetAdmin, FleetKey, KeyRing};
use serde_json::json;

use crate::output::{self, size};
use crate::progress::{Bar, When};
use crate::Outcome;

/// Where the fleet is and its keys: options, or the variables the EGL path reads.
#[derive(clap::Args, Debug)]
pub struct Conn {
    /// The fleet: `redis://host:port`, `rediss://...`, `redis+cluster://h1:p1,h2:p2`.
    /// Default: `GPUCACHE_FLEET_URL`.
    #[arg(long)]
    url: Option<String>,
    /// The fleet key file (owner-only). Default: `GPUCACHE_FLEET_KEY_FILE`.
    #[arg(long)]
    key_file: Option<PathBuf>,
    /// The previous key file, during a rotation. Default: `GPUCACHE_FLEET_PREVIOUS_KEY_FILE`.
    #[arg(long)]
    previous_key_file: Option<PathBuf>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Conn {
    fn url(&self) -> Result<String> {
        self.url
            .clone()
            .or_else(|| env("GPUCACHE_FLEET_URL"))
            .context("no fleet: pass --url or set GPUCACHE_FLEET_URL")
    }

    fn keys(&self, required: bool) -> Result<Option<KeyRing>> {
        let path = self
            .key_file
            .clone()
            .or_else(|| env("GPUCACHE_FLEET_KEY_FILE").map(PathBuf::from));
        let Some(path) = path else {
            if required {
                bail!("no fleet key: pass --key-file or set GPUCACHE_FLEET_KEY_FILE");
            }
            return Ok(None);
        };
        let current = FleetKey::from_file(&path)?;
        let previous = self
            .previous_key_file
            .clone()
            .or_else(|| env("GPUCACHE_FLEET_PREVIOUS_KEY_FILE").map(PathBuf::from))
            .map(|p| FleetKey::from_file(&p))
            .transpose()?;
        Ok(Some(KeyRing::new(current, previous)))
    }

    fn connect(&self, keys_required: bool) -> Result<FleetAdmin> {
        let url = self.url()?;
        let keys = self.keys(keys_required)?;
        FleetAdmin::connect(&url, keys, Duration::from_secs(5))
            .with_context(|| format!("connecting to {}", gpucache_fleet::redact(&url)))
    }
}

/// Pushes every live entry of `dir` (entries the fleet's index names are skipped).
pub fn push(
    out: &mut dyn Write,
    dir: &Path,
    conn: &Conn,
    json: bool,
    when: When,
) -> Result<Outcome> {
    let snapshot = inspect::Snapshot::open(dir)?;
    let identity = snapshot.meta().clone();
    let mut entries = Vec::new();
    let skipped = snapshot.for_each_entry(&mut |k, v| {
        entries.push((k.to_vec(), v.to_vec()));
        Ok(())
    })?;
    drop(snapshot);
    let total: u64 = entries.len() as u64;
    let mut admin = conn.connect(true)?;
    let mut bar = Bar::new(when).entries();
    let report = admin.push(&identity, &entries, &mut |done| bar.update(done, total));
    bar.finish();
    let r = report?;
    if json {
        output::json(
            out,
            &json!({
                "dir": dir.display().to_string(),
                "namespace": format!("{:032x}", identity.namespace()),
                "entries": total,
                "pushed": r.pushed,
                "already_held": r.already_held,
                "unreadable_skipped": skipped,
                "value_bytes": r.value_bytes,
                "wire_bytes": r.wire_bytes,
            }),
        )?;
    } else {
        writeln!(
            out,
            "pushed {} of {total} entries of {} ({} already held); {} of values sent as {}",
            r.pushed,
            dir.display(),
            r.already_held,
            size(r.value_bytes),
            size(r.wire_bytes)
        )?;
    }
    Ok(Outcome::Success)
}

/// Pulls the identity's entries into `dir`: its own identity when it is a cache directory,
/// else `identity` (which creates it).
pub fn pull(
    out: &mut dyn Write,
    dir: &Path,
    identity: Option<&str>,
    conn: &Conn,
    json: bool,
    when: When,
) -> Result<Outcome> {
    let (identity, builder) = if dir.join("meta").exists() {
        if identity.is_some() {
            bail!(
                "{} is a cache directory: its own identity is used",
                dir.display()
            );
        }
        (inspect::read_meta(dir)?, inspect::cache_builder(dir)?)
    } else {
        let Some(text) = identity else {
            bail!(
                "{} is not a cache directory: pass --identity to create it",
                dir.display()
            );
        };
        let identity = Identity::new(text.as_bytes().to_vec());
        let builder = Cache::builder()
            .directory(dir)
            .identity(identity.bytes().to_vec())
            .preload(false);
        (identity, builder)
    };
    let cache = builder.open()?;
    let mut admin = conn.connect(true)?;
    let mut bar = Bar::new(when).entries();
    let report = admin.pull(
        &identity,
        &mut |k, v| {
            cache
                .insert(k, v.to_vec())
                .map_err(|e| gpucache_fleet::Error::Io(std::io::Error::other(e)))
        },
        &mut |done, total| bar.update(done, total),
    );
    bar.finish();
    let r = report?;
    cache.flush()?;
    drop(cache);
    if json {
        output::json(
            out,
            &json!({
                "dir": dir.display().to_string(),
                "namespace": format!("{:032x}", identity.namespace()),
                "pulled": r.pulled,
                "value_bytes": r.value_bytes,
                "gone": r.gone,
                "rejected": r.rejected,
            }),
        )?;
    } else {
        writeln!(
            out,
            "pulled {} entries ({}) into {}; {} evicted from the fleet, {} rejected",
            r.pulled,
            size(r.value_bytes),
            dir.display(),
            r.gone,
            r.rejected
        )?;
    }
    Ok(if r.rejected > 0 {
        Outcome::Negative
    } else {
        Outcome::Success
    })
}

/// What the fleet holds per identity, and each server's memory.
pub fn stats(out: &mut dyn Write, conn: &Conn, json: bool) -> Result<Outcome> {
    let mut admin = conn.connect(false)?;
    let ids = admin.identities()?;
    let nodes = admin.memory()?;
    if json {
        let ids: Vec<_> = ids
            .iter()
            .map(|i| {
                json!({
                    "namespace": i.namespace,
                    "identity": i.identity,
                    "indexed_entries": i.indexed,
                    "pushed_entries": i.pushed_entries,
                    "pushed_bytes": i.pushed_bytes,
                })
            })
            .collect();
        let nodes: Vec<_> = nodes
            .iter()
            .map(|n| {
                json!({
                    "node": n.node,
                    "used_memory": n.used_memory,
                    "maxmemory": n.maxmemory,
                    "maxmemory_policy": n.policy,
                })
            })
            .collect();
        output::json(out, &json!({ "identities": ids, "servers": nodes }))?;
        return Ok(Outcome::Success);
    }
    writeln!(out, "{} identities", ids.len())?;
    for i in &ids {
        writeln!(out, "  {}  {}", i.namespace, i.identity)?;
        writeln!(
            out,
            "    {} entries indexed; {} pushed ({})",
            i.indexed,
            i.pushed_entries,
            size(i.pushed_bytes)
        )?;
    }
    for n in &nodes {
        let max = if n.maxmemory == 0 {
            "no maxmemory".to_string()
        } else {
            format!("maxmemory {}", size(n.maxmemory))
        };
        writeln!(
            out,
            "server {}: {} used, {max}, policy {}",
            n.node,
            size(n.used_memory),
            n.policy
        )?;
    }
    Ok(Outcome::Success)
}
