//! Section 6 (feature `peers`): gpucache, foyer, cacache and redb doing the same work in the
//! same run, rounds interleaved: load every entry and make it durable, reopen cold and hot
//! to a first hit, then random gets with the page cache cold.

mod cacache_peer;
mod engine;
mod foyer_peer;
mod gpucache_engine;
mod redb_peer;
mod report;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::ensure;
use bytes::Bytes;

use super::data::Dataset;
use super::fsutil::{evict, resident, usage, Usage};
use super::measure::{ms, Latencies};
use super::settings::Settings;
pub(crate) use engine::Kind;

/// The engines, gpucache first.
const ALL_KINDS: [Kind; 4] = [
    gpucache_engine::KIND,
    foyer_peer::KIND,
    cacache_peer::KIND,
    redb_peer::KIND,
];

/// What one round measured of one engine.
#[derive(Clone, Debug, Default)]
pub(super) struct Sample {
    /// `None` in rounds that reuse an earlier round's load.
    pub(super) store_mbps: Option<f64>,
    pub(super) usage: Option<Usage>,
    /// Bytes of the engine's files in the page cache after eviction (per `fincore`).
    pub(super) resident_at_cold_open: Option<u64>,
    pub(super) open_cold_ms: f64,
    pub(super) open_hot_ms: f64,
    pub(super) gets_per_s: f64,
    pub(super) get_p99_us: f64,
    /// Page cache filled by opening and the cold gets, KiB per get (per `fincore`).
    pub(super) read_kib_per_get: Option<f64>,
    pub(super) hit_pct: f64,
    pub(super) wrong: u64,
}

fn dir_of(scratch: &Path, kind: &Kind) -> PathBuf {
    scratch.join(format!("peer-{}", kind.name))
}

/// Stores every value in a fresh directory; MB/s from the first insert until durable.
fn store(kind: &Kind, dir: &Path, data: &Dataset, values: &[Bytes]) -> anyhow::Result<f64> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut engine = (kind.open)(dir, true)?;
    let start = Instant::now();
    for (i, value) in values.iter().enumerate() {
        engine.insert(data.key(i), value)?;
    }
    engine.close()?;
    let secs = start.elapsed().as_secs_f64();
    Ok(Dataset::logical_bytes(values.len()) as f64 / secs / 1e6)
}

/// Milliseconds from opening until the first get of key `i` returns (checked).
fn open_to_first_hit(kind: &Kind, dir: &Path, data: &Dataset, i: usize) -> anyhow::Result<f64> {
    let start = Instant::now();
    let mut engine = (kind.open)(dir, true)?;
    let got = engine.get(data.key(i))?;
    let elapsed = ms(start.elapsed());
    ensure!(
        got.is_some_and(|v| *v == *data.value(i, 0)),
        "{}: first get of key {i} missed",
        kind.name
    );
    engine.close()?;
    Ok(elapsed)
}

/// Random gets of `keys` after evicting the page cache, without preload.
fn cold_gets(
    kind: &Kind,
    dir: &Path,
    data: &Dataset,
    keys: &[usize],
    s: &mut Sample,
) -> anyhow::Result<()> {
    evict(dir)?;
    let mut engine = (kind.open)(dir, false)?;
    let mut lat = Latencies::with_capacity(keys.len());
    let (mut hits, mut wrong) = (0u64, 0u64);
    let start = Instant::now();
    for &i in keys {
        match lat.time(|| engine.get(data.key(i)))? {
            Some(v) if *v == *data.value(i, 0) => hits += 1,
            Some(_) => wrong += 1,
            None => {}
        }
    }
    s.gets_per_s = keys.len() as f64 / start.elapsed().as_secs_f64();
    s.get_p99_us = lat.quantile_us(0.99);
    s.hit_pct = 100.0 * hits as f64 / keys.len() as f64;
    s.wrong = wrong;
    s.read_kib_per_get = resident(dir).map(|b| b as f64 / 1024.0 / keys.len() as f64);
    engine.close()
}

/// One round: every engine loads, then every engine reopens, then every engine reads; the
/// engines take turns going first.
fn round(
    kinds: &[Kind],
    scratch: &Path,
    data: &Dataset,
    values: &[Bytes],
    sample: usize,
    r: usize,
) -> anyhow::Result<Vec<Sample>> {
    let mut out = vec![Sample::default(); kinds.len()];
    let order: Vec<usize> = (0..kinds.len()).map(|j| (j + r) % kinds.len()).collect();
    for &k in &order {
        let (kind, s) = (&kinds[k], &mut out[k]);
        if r == 0 || kind.load_every_round {
            let dir = dir_of(scratch, kind);
            s.store_mbps = Some(store(kind, &dir, data, values)?);
            s.usage = Some(usage(&dir)?);
        }
    }
    let first = Dataset::shuffled(values.len(), 200 + r as u64)[0];
    for &k in &order {
        let (kind, s) = (&kinds[k], &mut out[k]);
        let dir = dir_of(scratch, kind);
        evict(&dir)?;
        s.resident_at_cold_open = resident(&dir);
        s.open_cold_ms = open_to_first_hit(kind, &dir, data, first)?;
        s.open_hot_ms = open_to_first_hit(kind, &dir, data, first)?;
    }
    let keys = &Dataset::shuffled(values.len(), 300 + r as u64)[..sample];
    for &k in &order {
        cold_gets(
            &kinds[k],
            &dir_of(scratch, &kinds[k]),
            data,
            keys,
            &mut out[k],
        )?;
    }
    Ok(out)
}

/// Runs the rounds, prints the table, the engines' setups and the verdicts; removes the
/// engines' directories.
pub fn run(settings: &Settings, data: &Dataset, scratch: &Path) -> anyhow::Result<()> {
    let kinds = selected(settings)?;
    let values = data.values(0);
    let n = values.len();
    let sample = settings.get_sample.min(n);
    let mut per_kind: Vec<Vec<Sample>> = vec![Vec::new(); kinds.len()];
    for r in 0..settings.rounds {
        for (k, s) in round(&kinds, scratch, data, &values, sample, r)?
            .into_iter()
            .enumerate()
        {
            per_kind[k].push(s);
        }
    }
    report::print_table(settings, &kinds, n, sample, &per_kind);
    report::verdicts(&kinds, &per_kind);
    for kind in &kinds {
        std::fs::remove_dir_all(dir_of(scratch, kind))?;
    }
    Ok(())
}

/// The peer engine named `name` (not gpucache), for the open-at-scale probes.
pub(crate) fn peer(name: &str) -> Option<Kind> {
    ALL_KINDS[1..].iter().find(|k| k.name == name).copied()
}

/// gpucache and the peers `--peers` names (all by default).
fn selected(settings: &Settings) -> anyhow::Result<Vec<Kind>> {
    let Some(names) = &settings.peers else {
        return Ok(ALL_KINDS.to_vec());
    };
    if let Some(bad) = names
        .iter()
        .find(|n| !ALL_KINDS.iter().any(|k| k.name == *n))
    {
        anyhow::bail!("--peers: no engine named {bad:?}");
    }
    Ok(ALL_KINDS
        .iter()
        .filter(|k| k.name == ALL_KINDS[0].name || names.iter().any(|n| n == k.name))
        .copied()
        .collect())
}
