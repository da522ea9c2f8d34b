//! Section 3: store latency seen by the caller (write-behind), and sustained persistence
//! throughput against the disk's sequential write speed, measured in the same rounds.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::data::Dataset;
use super::fsutil::sequential_write_mbps;
use super::measure::{median, median_range, Latencies};
use super::ours;
use super::settings::Settings;
use super::table::Table;

/// Target p99 insert latency, microseconds.
const TARGET_P99_US: f64 = 50.0;
/// Target persistence throughput, as a fraction of sequential writes.
const TARGET_OF_SEQUENTIAL: f64 = 0.5;

/// gpucache's default segment size: it fsyncs each segment when it fills.
const SEGMENT: u64 = 128 << 20;

/// One write-queue setting.
#[derive(Clone, Copy, Debug)]
struct QueueConfig {
    name: &'static str,
    /// `None`: a queue whose byte limit exceeds the whole load.
    bytes: Option<u64>,
    /// Flush every [`ours::PACE`] stores (untimed in the latencies, timed in throughput).
    paced: bool,
}

const CONFIGS: [QueueConfig; 3] = [
    QueueConfig {
        name: "byte limit > load; store all, then flush",
        bytes: None,
        paced: false,
    },
    QueueConfig {
        name: "byte limit > load; flush every 32,768 stores",
        bytes: None,
        paced: true,
    },
    QueueConfig {
        name: "default (64 MiB); store all, then flush",
        bytes: Some(64 << 20),
        paced: false,
    },
];

/// One load of `n` entries into an empty cache.
#[derive(Clone, Debug)]
struct Sample {
    latency_us: [f64; 4],
    inserts_per_s: f64,
    persisted_mbps: f64,
    dropped: u64,
}

/// Inserts every value, flushing every [`ours::PACE`] stores if `paced`; returns the
/// latencies and the time spent outside `flush()`.
fn insert_all(
    cache: &gpucache::Cache,
    data: &Dataset,
    values: Vec<Bytes>,
    paced: bool,
) -> anyhow::Result<(Latencies, Duration)> {
    let mut lat = Latencies::with_capacity(values.len());
    let mut flushing = Duration::ZERO;
    let start = Instant::now();
    for (i, value) in values.into_iter().enumerate() {
        lat.time(|| cache.insert(data.key(i), value))?;
        if paced && (i + 1).is_multiple_of(ours::PACE) {
            let flush = Instant::now();
            cache.flush()?;
            flushing += flush.elapsed();
        }
    }
    Ok((lat, start.elapsed() - flushing))
}

fn measure(
    dir: &Path,
    data: &Dataset,
    values: &[Bytes],
    cfg: QueueConfig,
) -> anyhow::Result<Sample> {
    let n = values.len();
    let queue = cfg.bytes.unwrap_or_else(|| ours::queue_for(n));
    let cache = ours::open(ours::roomy(dir, n).write_queue_bytes(queue))?;
    let owned = values.to_vec();
    let start = Instant::now();
    let (mut lat, inserting) = insert_all(&cache, data, owned, cfg.paced)?;
    cache.flush()?;
    let persisted = start.elapsed();
    let dropped = cache.stats().write_queue_dropped;
    drop(cache);
    std::fs::remove_dir_all(dir)?;
    let kept = Dataset::logical_bytes(n - dropped as usize);
    Ok(Sample {
        latency_us: lat.summary(),
        inserts_per_s: n as f64 / inserting.as_secs_f64(),
        persisted_mbps: kept as f64 / persisted.as_secs_f64() / 1e6,
        dropped,
    })
}

/// Runs the rounds (sequential reference, then each queue setting) and prints the table.
pub fn run(settings: &Settings, data: &Dataset, scratch: &Path) -> anyhow::Result<()> {
    let values = data.values(0);
    let chunk = data.random_block(1 << 20);
    let (mut seq, mut seq_paced) = (Vec::new(), Vec::new());
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); CONFIGS.len()];
    for _ in 0..settings.rounds {
        seq.push(sequential_write_mbps(
            scratch,
            settings.seq_bytes,
            &chunk,
            None,
        )?);
        seq_paced.push(sequential_write_mbps(
            scratch,
            settings.seq_bytes,
            &chunk,
            Some(SEGMENT),
        )?);
        for (k, cfg) in CONFIGS.iter().enumerate() {
            let dir = scratch.join("store");
            samples[k].push(measure(&dir, data, &values, *cfg)?);
        }
    }
    let seq_median = median(&seq);
    let mut table = Table::new(&[
        "write queue",
        "insert p50 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "inserts/s",
        "persisted MB/s (first insert→flush)",
        "sequential MB/s",
        "% of sequential",
        "stores not persisted",
    ]);
    for (cfg, s) in CONFIGS.iter().zip(&samples) {
        let col = |f: &dyn Fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<_>>();
        let ratio: Vec<f64> = s
            .iter()
            .zip(&seq)
            .map(|(x, q)| 100.0 * x.persisted_mbps / q)
            .collect();
        table.row(vec![
            cfg.name.into(),
            median_range(&col(&|x| x.latency_us[0]), 1),
            median_range(&col(&|x| x.latency_us[1]), 1),
            median_range(&col(&|x| x.latency_us[2]), 1),
            median_range(&col(&|x| x.latency_us[3]), 0),
            format!("{:.0}", median(&col(&|x| x.inserts_per_s))),
            median_range(&col(&|x| x.persisted_mbps), 0),
            median_range(&seq, 0),
            format!("{:.0}%", median(&ratio)),
            format!("{:.0}", median(&col(&|x| x.dropped as f64))),
        ]);
    }
    table.print(&format!(
        "3. Store latency and persistence throughput ({} × 8 KiB, values pre-made `Bytes`; memory 1 GiB; sequential reference: {} MiB in 1 MiB writes + fsync; median (min–max) of {} interleaved rounds)",
        settings.entries,
        settings.seq_bytes >> 20,
        settings.rounds
    ));
    verdict(&samples, &seq, seq_median);
    println!(
        "Second reference, same file with an fdatasync every 128 MiB (as gpucache syncs each full segment): {} MB/s; the paced row is {:.0}% of it. The single-fsync reference varies a lot between runs on this VM (writes of a large dirty file sometimes stall).\n",
        median_range(&seq_paced, 0),
        100.0 * median(&samples[1].iter().map(|x| x.persisted_mbps).collect::<Vec<_>>()) / median(&seq_paced),
    );
    Ok(())
}

fn verdict(s: &[Vec<Sample>], seq: &[f64], seq_median: f64) {
    let mark = |ok: bool| if ok { "met" } else { "MISSED" };
    for (cfg, s) in CONFIGS.iter().zip(s).take(2) {
        let p99 = median(&s.iter().map(|x| x.latency_us[1]).collect::<Vec<_>>());
        let ratio = median(
            &s.iter()
                .zip(seq)
                .map(|(x, q)| x.persisted_mbps / q)
                .collect::<Vec<_>>(),
        );
        println!(
            "Queue \"{}\": target insert p99 ≤ {TARGET_P99_US} µs **{}** ({p99:.1} µs); target persistence ≥ {:.0}% of sequential **{}** ({:.0}% of {seq_median:.0} MB/s).",
            cfg.name,
            mark(p99 <= TARGET_P99_US),
            TARGET_OF_SEQUENTIAL * 100.0,
            mark(ratio >= TARGET_OF_SEQUENTIAL),
            ratio * 100.0,
        );
    }
    println!("Persisted MB/s counts only the stores that reached the disk (key + value bytes); inserts/s leaves out the time spent in `flush()`.");
}
