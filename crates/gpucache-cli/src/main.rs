//! `gpucache`: the command-line tool.
//!
//! Today it replays key traces through the memory tier so that a user can compare eviction
//! policies on their own access log; the disk-cache commands (`stats`, `ls`, `verify`, ...)
//! arrive with the disk tier.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use gpucache::{PolicyKind, StoreBuilder};

#[derive(Parser)]
#[command(
    name = "gpucache",
    version,
    about = "Inspect and exercise gpucache caches"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a trace (one key per line; `-` for standard input) through the memory tier and
    /// report the hit ratio of each policy: a miss stores the key.
    Replay {
        /// The trace file.
        trace: PathBuf,
        /// Cache capacity in entries.
        #[arg(long, default_value_t = 1000)]
        capacity: u64,
        /// Policies to compare (lru, s3-fifo).
        #[arg(long, value_delimiter = ',', default_value = "lru,s3-fifo")]
        policy: Vec<PolicyKind>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::Replay {
            trace,
            capacity,
            policy,
            json,
        } => replay(&trace, capacity, &policy, json),
    }
}

fn read_trace(path: &PathBuf) -> Result<Vec<Vec<u8>>> {
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

fn replay(path: &PathBuf, capacity: u64, policies: &[PolicyKind], json: bool) -> Result<()> {
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
        println!("[{}]", items.join(","));
    } else {
        println!("{} requests, capacity {capacity} entries", keys.len());
        println!(
            "{:<10} {:>10} {:>10} {:>10}",
            "policy", "hits", "hit ratio", "evictions"
        );
        for (p, s) in &rows {
            println!(
                "{:<10} {:>10} {:>9.2}% {:>10}",
                p.name(),
                s.hits,
                100.0 * s.hit_ratio(),
                s.evictions
            );
        }
    }
    Ok(())
}
