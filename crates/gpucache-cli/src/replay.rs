//! `gpucache replay`: replays a key trace through the memory tier, once per policy.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;

use anyhow::{Context, Result};
use gpucache::{PolicyKind, StoreBuilder};

/// Reads one key per line (`-` for standard input), skipping empty lines.
fn read_trace(path: &Path) -> Result<Vec<Vec<u8>>> {
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(BufReader::new(std::io::stdin()))
    } else {
        let file = std::fs::File::open(path)
            .with_context(|| format!("cannot open trace {}", path.display()))?;
        Box::new(BufReader::new(file))
    };
    let mut keys = Vec::new();
    for line in reader.lines() {
        let line = line.with_context(|| format!("cannot read trace {}", path.display()))?;
        let key = line.trim_end();
        if !key.is_empty() {
            keys.push(key.as_bytes().to_vec());
        }
    }
    Ok(keys)
}

/// Replays the trace with each policy (a miss stores the key) and prints hit ratios.
pub fn run(
    out: &mut dyn Write,
    path: &Path,
    capacity: u64,
    policies: &[PolicyKind],
    json: bool,
) -> Result<()> {
    anyhow::ensure!(capacity > 0, "--capacity must be at least 1");
    let keys = read_trace(path)?;
    let mut rows = Vec::new();
    for &policy in policies {
        let store = StoreBuilder::new()
            .max_entries(capacity)
            .max_bytes(u64::MAX / 2)
            .shards(1)
            .policy(policy)
            .build()?;
        for key in &keys {
            if store.get(key).is_none() {
                store.insert(key, vec![0u8; 1])?;
            }
        }
        rows.push((policy, store.stats()));
    }
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|(p, s)| {
                format!(
                    "{{\"policy\":\"{}\",\"requests\":{},\"hits\":{},\"hit_ratio\":{:.6},\"evictions\":{}}}",
                    p.name(),
                    s.hits + s.misses,
                    s.hits,
                    s.hit_ratio(),
                    s.evictions
                )
            })
            .collect();
        writeln!(out, "[{}]", items.join(","))?;
    } else {
        writeln!(out, "{} requests, capacity {capacity} entries", keys.len())?;
        writeln!(
            out,
            "{:<10} {:>10} {:>10} {:>10}",
            "policy", "hits", "hit ratio", "evictions"
        )?;
        for (p, s) in &rows {
            writeln!(
                out,
                "{:<10} {:>10} {:>9.2}% {:>10}",
                p.name(),
                s.hits,
                100.0 * s.hit_ratio(),
                s.evictions
            )?;
        }
    }
    Ok(())
}
