//! Section 7: open to first hit at scale (100k and 1M entries by default), gpucache through
//! its persisted hash table and through the index files (the open before the table: the
//! same build with the table moved away), and with the `peers` feature redb and cacache;
//! hot, and cold through the kernel's block-I/O throttle (hard-disk profile by default),
//! with the I/O each open did.
//!
//! Every open runs in a fresh probe process (this binary with `--probe`): it first runs the
//! same code on a tiny copy in `/dev/shm` (so no code page is read during the timing), then
//! joins the throttled control group, opens, gets one random key and checks it. The loads
//! are kept in the data directory (`--data`) and reused by later runs.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use bytes::Bytes;
use gpucache::{Cache, CacheBuilder};

use super::data::Dataset;
use super::fsutil::evict;
use super::measure::{median, median_range, ms};
use super::ours::{self, GIB, MIB, PACE};
use super::settings::Settings;
use super::table::Table;
use crate::throttle::{Profile, Throttle};

/// The hash table's file in a gpucache directory.
const TABLE_FILE: &str = "seg-table.hix";
/// Entries of the code-warming copies.
const WARM_ENTRIES: usize = 100;

/// One open to first hit in a probe process.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    ms: f64,
    /// Read system calls of the opening thread until the first hit.
    syscr: u64,
    /// Bytes the opening thread read from the device until the first hit.
    dev_bytes: u64,
    /// Device reads of the whole probe process (every thread, until it exited), from the
    /// throttled group's counters; cold runs only.
    group_ios: Option<u64>,
}

/// The engines compared: gpucache through its table, gpucache through its index files, and
/// the peers built in.
fn engines(settings: &Settings) -> Vec<&'static str> {
    let mut all = vec!["gpucache", "gpucache (index files)"];
    if cfg!(feature = "peers") {
        all.extend(["redb", "cacache"]);
    }
    all.retain(|e| {
        e.starts_with("gpucache")
            || settings
                .peers
                .as_ref()
                .is_none_or(|p| p.iter().any(|n| n == e))
    });
    all
}

/// The directory an engine's load lives in (both gpucache variants share one).
fn store_of(engine: &str) -> &'static str {
    if engine.starts_with("gpucache") {
        "gpucache"
    } else if engine == "redb" {
        "redb"
    } else {
        "cacache"
    }
}

fn gpucache_builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .max_memory_bytes(16 * MIB)
        .max_disk_bytes(4 * GIB)
        .write_queue_bytes(GIB)
}

/// Stores the first `n` entries in `dir` (made durable; gpucache leaves its table).
fn load(store: &str, dir: &Path, data: &Dataset, n: usize, vlen: usize) -> anyhow::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    if store == "gpucache" {
        // A table at any size: the code-warming copies are tiny, and must open through one.
        let cache = ours::open(
            gpucache_builder(dir)
                .preload(false)
                .open_table_min_entries(0),
        )?;
        for i in 0..n {
            cache.insert(data.key(i), data.value_of_len(i, 0, vlen))?;
            if (i + 1).is_multiple_of(PACE) {
                cache.flush()?;
            }
        }
        cache.flush()?;
        return Ok(());
    }
    load_peer(store, dir, data, n, vlen)
}

#[cfg(feature = "peers")]
fn load_peer(store: &str, dir: &Path, data: &Dataset, n: usize, vlen: usize) -> anyhow::Result<()> {
    let kind = super::peers::peer(store).context("no such peer")?;
    let mut engine = (kind.open)(dir, true)?;
    for i in 0..n {
        engine.insert(data.key(i), &data.value_of_len(i, 0, vlen))?;
    }
    engine.close()
}

#[cfg(not(feature = "peers"))]
fn load_peer(store: &str, _: &Path, _: &Dataset, _: usize, _: usize) -> anyhow::Result<()> {
    bail!("{store} needs the peers feature")
}

/// Opens `store` in `dir` and gets key `i` (checked); the open engine is returned so that
/// closing it is not timed.
fn open_and_get(
    store: &str,
    dir: &Path,
    data: &Dataset,
    i: usize,
    vlen: usize,
) -> anyhow::Result<Box<dyn std::any::Any>> {
    let expected = data.value_of_len(i, 0, vlen);
    if store == "gpucache" {
        let cache = ours::open(gpucache_builder(dir))?;
        let got = cache.get(data.key(i));
        ensure!(got.as_ref() == Some(&expected), "gpucache missed key {i}");
        return Ok(Box::new(cache));
    }
    open_and_get_peer(store, dir, data.key(i), &expected)
}

#[cfg(feature = "peers")]
fn open_and_get_peer(
    store: &str,
    dir: &Path,
    key: &[u8],
    expected: &Bytes,
) -> anyhow::Result<Box<dyn std::any::Any>> {
    let kind = super::peers::peer(store).context("no such peer")?;
    let mut engine = (kind.open)(dir, true)?;
    let got = engine.get(key)?;
    ensure!(
        got.is_some_and(|v| *v == **expected),
        "{store} missed the key"
    );
    Ok(Box::new(engine))
}

#[cfg(not(feature = "peers"))]
fn open_and_get_peer(
    store: &str,
    _: &Path,
    _: &[u8],
    _: &Bytes,
) -> anyhow::Result<Box<dyn std::any::Any>> {
    bail!("{store} needs the peers feature")
}

/// `(read syscalls, bytes read from the device)` of the calling thread.
fn thread_io() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/thread-self/io").unwrap_or_default();
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("syscr:"), field("read_bytes:"))
}

/// The probe process: `--probe STORE DIR N VLEN INDEX WARM_DIR CGROUP_PROCS|-`.
pub fn probe_main(args: &[String]) -> anyhow::Result<()> {
    let [store, dir, n, vlen, i, warm, procs] = args else {
        bail!("--probe STORE DIR N VLEN INDEX WARM_DIR CGROUP_PROCS|-");
    };
    let (n, vlen, i): (usize, usize, usize) = (n.parse()?, vlen.parse()?, i.parse()?);
    let data = Dataset::new(n.max(WARM_ENTRIES));
    // The same code on a tiny copy, both ways for gpucache, so that no code page is read
    // while timing.
    for copy in warm_copies(store) {
        drop(open_and_get(
            store,
            &Path::new(warm).join(copy),
            &data,
            1,
            vlen,
        )?);
    }
    if procs != "-" {
        std::fs::write(procs, std::process::id().to_string()).context("joining the group")?;
    }
    let before = thread_io();
    let start = Instant::now();
    let engine = open_and_get(store, Path::new(dir), &data, i, vlen)?;
    let elapsed = ms(start.elapsed());
    let after = thread_io();
    println!(
        "probe {elapsed} {} {}",
        after.0 - before.0,
        after.1 - before.1
    );
    // Exit without closing: the probe wrote nothing, and closing is not what is measured.
    std::mem::forget(engine);
    std::process::exit(0);
}

fn warm_copies(store: &str) -> Vec<String> {
    if store == "gpucache" {
        vec!["gpucache".into(), "gpucache-full".into()]
    } else {
        vec![store.into()]
    }
}

/// Runs one probe; `cold`: the page cache is dropped first and the probe joins `throttle`.
fn probe(
    store: &str,
    dir: &Path,
    n: usize,
    vlen: usize,
    i: usize,
    warm: &Path,
    cold: Option<&Throttle>,
) -> anyhow::Result<Sample> {
    if cold.is_some() {
        drop_caches(dir)?;
    }
    let counts = cold.map(Throttle::counts).transpose()?;
    let procs = cold.map_or_else(|| "-".into(), |t| t.procs_file().display().to_string());
    let out = Command::new(std::env::current_exe()?)
        .arg("--probe")
        .args([store, &dir.display().to_string(), &n.to_string()])
        .args([
            vlen.to_string(),
            i.to_string(),
            warm.display().to_string(),
            procs,
        ])
        .output()
        .context("running a probe")?;
    ensure!(
        out.status.success(),
        "probe of {store} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("probe "))
        .context("no probe line")?;
    let f: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    ensure!(f.len() == 3, "bad probe line {line:?}");
    let group_ios = match (cold, counts) {
        (Some(t), Some(c)) => Some(t.counts()?.reads - c.reads),
        _ => None,
    };
    Ok(Sample {
        ms: f[0],
        syscr: f[1] as u64,
        dev_bytes: f[2] as u64,
        group_ios,
    })
}

/// Empties the page cache (and the dentry and inode caches): `drop_caches` as root, else
/// only `dir`'s pages (`POSIX_FADV_DONTNEED`).
fn drop_caches(dir: &Path) -> anyhow::Result<()> {
    rustix::fs::sync();
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
        evict(dir)?;
    }
    Ok(())
}

/// Loads (once: a marker notes a finished load) every store of `n` entries under `root`.
fn ensure_loaded(root: &Path, stores: &[&str], n: usize, vlen: usize) -> anyhow::Result<PathBuf> {
    let base = root.join(format!("n{n}-v{vlen}"));
    std::fs::create_dir_all(&base)?;
    let data = Dataset::new(n);
    for &store in stores {
        let marker = base.join(format!("{store}.complete"));
        if marker.exists() {
            continue;
        }
        let started = Instant::now();
        load(store, &base.join(store), &data, n, vlen)?;
        std::fs::write(&marker, "")?;
        eprintln!(
            "disk_bench: loaded {n} entries into {store} in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(base)
}

/// Tiny copies of every store, for the probes to warm their code on.
fn warm_dirs(stores: &[&str], vlen: usize) -> anyhow::Result<tempfile::TempDir> {
    let shm = Path::new("/dev/shm");
    let warm = if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("disk-bench-warm-")
            .tempdir_in(shm)?
    } else {
        tempfile::Builder::new()
            .prefix("disk-bench-warm-")
            .tempdir()?
    };
    let data = Dataset::new(WARM_ENTRIES);
    for &store in stores {
        load(store, &warm.path().join(store), &data, WARM_ENTRIES, vlen)?;
        if store == "gpucache" {
            load(
                store,
                &warm.path().join("gpucache-full"),
                &data,
                WARM_ENTRIES,
                vlen,
            )?;
            std::fs::remove_file(warm.path().join("gpucache-full").join(TABLE_FILE))?;
        }
    }
    Ok(warm)
}

/// Runs the section and prints its table.
pub fn run(settings: &Settings, scratch: &Path) -> anyhow::Result<()> {
    let root = settings
        .data_dir
        .clone()
        .unwrap_or_else(|| scratch.join("scale"));
    let engines = engines(settings);
    let mut stores: Vec<&str> = engines.iter().map(|e| store_of(e)).collect();
    stores.dedup();
    let profiles = Profile::parse_list(&settings.storage)?;
    std::fs::create_dir_all(&root)?;
    // A fresh group per cold probe (below): reads a probe left queued in a group (its
    // background threads' when it exited) would delay the next probe's first reads.
    let throttled = if profiles.is_empty() {
        false
    } else {
        match Throttle::create(&root) {
            Ok(_) => true,
            Err(e) => {
                println!("No throttled runs: {e:#}.\n");
                false
            }
        }
    };
    let vlen = settings.scale_value_len;
    let warm = warm_dirs(&stores, vlen)?;
    let mut table = Table::new(&[
        "entries",
        "engine",
        "page cache",
        "open→first hit ms",
        "read calls (opening thread)",
        "KB from device (opening thread)",
        "device reads (whole process)",
        "÷ cacache, paired (rounds faster)",
    ]);
    for &n in &settings.scale_sizes {
        let base = ensure_loaded(&root, &stores, n, vlen)?;
        // Per engine: hot samples, then per profile cold samples.
        let cases = 1 + if throttled { profiles.len() } else { 0 };
        let mut samples = vec![vec![Vec::<Sample>::new(); cases]; engines.len()];
        for round in 0..settings.rounds {
            let i = Dataset::shuffled(n, 500 + round as u64)[0];
            for k in 0..engines.len() {
                let e = (k + round) % engines.len();
                let (engine, store) = (engines[e], store_of(engines[e]));
                let dir = base.join(store);
                let off = dir.join(format!("{TABLE_FILE}.off"));
                if engine == "gpucache (index files)" {
                    std::fs::rename(dir.join(TABLE_FILE), &off)?;
                }
                let result = (|| -> anyhow::Result<()> {
                    for (p, profile) in profiles.iter().enumerate().filter(|_| throttled) {
                        let t = Throttle::create(&root)?;
                        t.limit(profile)?;
                        let s = probe(store, &dir, n, vlen, i, warm.path(), Some(&t))?;
                        samples[e][1 + p].push(s);
                    }
                    probe(store, &dir, n, vlen, i, warm.path(), None)?;
                    let s = probe(store, &dir, n, vlen, i, warm.path(), None)?;
                    samples[e][0].push(s);
                    Ok(())
                })();
                if engine == "gpucache (index files)" {
                    std::fs::rename(&off, dir.join(TABLE_FILE))?;
                }
                result?;
            }
        }
        let peer = engines.iter().position(|&e| e == "cacache");
        for (e, engine) in engines.iter().enumerate() {
            for (c, s) in samples[e].iter().enumerate() {
                let cache = if c == 0 {
                    "hot".to_string()
                } else {
                    format!("cold, {}", profiles[c - 1])
                };
                let mut cells = row(n, engine, &cache, s);
                cells.push(match peer.filter(|&p| p != e) {
                    Some(p) => paired(s, &samples[p][c]),
                    None => "–".into(),
                });
                table.row(cells);
            }
        }
    }
    table.print(&format!(
        "7. Open to first hit at scale (median (min–max) of {} rounds; 20 B keys, {vlen} B values; a fresh process per open, its code warm; gpucache 16 MiB memory with preload on)",
        settings.rounds
    ));
    println!("Read calls and device bytes are the opening thread's, from open to the first hit (`/proc/thread-self/io`); device reads are the throttled group's count for the whole probe, background threads included.\n");
    Ok(())
}

/// The median over rounds of `s`'s time ÷ `peer`'s in the same round, and the rounds `s`
/// was faster: the two run seconds apart, so the machine's slow and fast phases, which move
/// medians taken apart by more than the engines differ, cancel out.
fn paired(s: &[Sample], peer: &[Sample]) -> String {
    let ratios: Vec<f64> = s.iter().zip(peer).map(|(a, b)| a.ms / b.ms).collect();
    let faster = ratios.iter().filter(|&&r| r < 1.0).count();
    format!("{:.3} ({faster} of {})", median(&ratios), ratios.len())
}

fn row(n: usize, engine: &str, cache: &str, s: &[Sample]) -> Vec<String> {
    let col = |f: fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<_>>();
    vec![
        n.to_string(),
        engine.to_string(),
        cache.to_string(),
        // Hot opens take tens of microseconds: three decimals there, one for cold opens.
        median_range(
            &col(|s| s.ms),
            if median(&col(|s| s.ms)) < 1.0 { 3 } else { 1 },
        ),
        format!("{:.0}", median(&col(|s| s.syscr as f64))),
        format!("{:.0}", median(&col(|s| s.dev_bytes as f64 / 1e3))),
        if s.iter().all(|s| s.group_ios.is_some()) && !s.is_empty() {
            format!("{:.0}", median(&col(|s| s.group_ios.unwrap_or(0) as f64)))
        } else {
            "–".into()
        },
    ]
}
