//! Hot-path throughput of the in-memory [`gpucache::Store`] against its peers.
//!
//! Each case is one operation (`get` or `put`), a thread count (1 or 2), a key size
//! (20 B or 64 B) and a value size (4 KiB or 64 KiB). The contestants are:
//!
//! - `gpucache::Store` with its default policy (W-TinyLFU), with S3-FIFO (the default
//!   before it) and with LRU,
//! - `quick_cache::sync::Cache<Vec<u8>, Bytes>`,
//! - `moka::sync::Cache<Vec<u8>, Bytes>`,
//! - the floor: `Mutex<HashMap<Vec<u8>, Arc<[u8]>>>` with the default std hasher.
//!
//! Every cache is pre-filled with a working set that fits in it, so gets are hits and puts
//! overwrite existing keys (no eviction). Keys are visited in a fixed pseudo-random order,
//! uniform over the working set; each thread walks its own slice of that order. Values are
//! built once and cloned (a reference-count bump) for every put, so puts measure the cache,
//! not the allocation of values; implementations that need an owned key copy it into a
//! `Vec<u8>` per put, while `gpucache` takes `&[u8]` and copies the key itself.
//!
//! A sample is the number of operations all threads complete in a fixed wall-clock window,
//! divided by that window. Implementations take turns round by round, and the table shows the
//! median sample of each.
//!
//! Knobs: `HOT_PATH_MS` (window per sample, default 200), `HOT_PATH_ROUNDS` (default 5), and
//! `--quick` or `HOT_PATH_QUICK=1` (20 ms, 1 round: a smoke run).

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Barrier, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use gpucache::PolicyKind;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Seed of every pseudo-random choice, so runs are comparable.
const SEED: u64 = 0x5EED_CAC4E;
/// Per-entry overhead that `gpucache` charges on top of key and value.
const GPUCACHE_ENTRY_OVERHEAD: u64 = gpucache::ENTRY_OVERHEAD;
/// Capacity given to each cache, as a multiple of the working set: shards split budgets
/// evenly, so headroom keeps an unlucky shard from evicting.
const CAPACITY_HEADROOM: usize = 2;
/// Keys each thread visits before wrapping around its slice of the order.
const ORDER_LEN_PER_THREAD: usize = 1 << 15;
/// Operations between two looks at the clock.
const OPS_PER_CLOCK_CHECK: usize = 64;
/// Thread counts measured; the order is generated for the largest.
const THREAD_COUNTS: [usize; 2] = [1, 2];
/// Below this fraction of successful operations a case is flagged.
const MIN_SUCCESS_RATIO: f64 = 0.99;

/// Sizes of one workload.
#[derive(Clone, Copy, Debug)]
struct Shape {
    key_bytes: usize,
    value_bytes: usize,
    /// Keys in the working set.
    entries: usize,
}

const SHAPES: [Shape; 4] = [
    Shape {
        key_bytes: 20,
        value_bytes: 4 << 10,
        entries: 4096,
    },
    Shape {
        key_bytes: 20,
        value_bytes: 64 << 10,
        entries: 1024,
    },
    Shape {
        key_bytes: 64,
        value_bytes: 4 << 10,
        entries: 4096,
    },
    Shape {
        key_bytes: 64,
        value_bytes: 64 << 10,
        entries: 1024,
    },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Get,
    Put,
}

impl Op {
    const ALL: [Op; 2] = [Op::Get, Op::Put];

    fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
        }
    }
}

/// The implementations under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Contender {
    GpucacheTinyLfu,
    GpucacheS3Fifo,
    GpucacheLru,
    QuickCache,
    Moka,
    Floor,
}

impl Contender {
    const ALL: [Contender; 6] = [
        Contender::GpucacheTinyLfu,
        Contender::GpucacheS3Fifo,
        Contender::GpucacheLru,
        Contender::QuickCache,
        Contender::Moka,
        Contender::Floor,
    ];

    fn label(self) -> &'static str {
        match self {
            Contender::GpucacheTinyLfu => "gpucache w-tinylfu",
            Contender::GpucacheS3Fifo => "gpucache s3fifo",
            Contender::GpucacheLru => "gpucache lru",
            Contender::QuickCache => "quick_cache",
            Contender::Moka => "moka",
            Contender::Floor => "floor",
        }
    }

    /// Position in [`Contender::ALL`], which lists the variants in declaration order.
    fn index(self) -> usize {
        self as usize
    }
}

/// Run settings, from the command line and the environment.
#[derive(Clone, Copy, Debug)]
struct Config {
    window: Duration,
    rounds: usize,
}

impl Config {
    fn from_env() -> Self {
        let quick = std::env::args().skip(1).any(|arg| arg == "--quick")
            || std::env::var("HOT_PATH_QUICK").is_ok_and(|v| v == "1");
        let (default_ms, default_rounds) = if quick { (20, 1) } else { (200, 5) };
        Config {
            window: Duration::from_millis(env_or("HOT_PATH_MS", default_ms)),
            rounds: env_or("HOT_PATH_ROUNDS", default_rounds).max(1) as usize,
        }
    }
}

/// The value of environment variable `name` as a number, or `default` if unset or invalid.
fn env_or(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Err(_) => default,
        Ok(text) => text.trim().parse().unwrap_or_else(|_| {
            eprintln!("ignoring {name}={text:?}: not a whole number; using {default}");
            default
        }),
    }
}

/// One value in the two forms the contenders store.
struct Value {
    bytes: Bytes,
    shared: Arc<[u8]>,
}

/// Keys, values and visiting order of one workload, generated once and shared by all.
struct Dataset {
    shape: Shape,
    keys: Vec<Vec<u8>>,
    values: Vec<Value>,
    /// Indices into `keys`/`values`, uniform over the working set.
    order: Vec<u32>,
}

impl Dataset {
    fn generate(shape: Shape) -> Self {
        let mut rng = StdRng::seed_from_u64(SEED ^ (shape.key_bytes * shape.value_bytes) as u64);
        let keys = (0..shape.entries)
            .map(|i| random_key(&mut rng, i, shape.key_bytes))
            .collect();
        let values = (0..shape.entries)
            .map(|i| make_value(i, shape.value_bytes))
            .collect();
        let max_threads = THREAD_COUNTS.iter().copied().max().unwrap_or(1);
        let order = (0..max_threads * ORDER_LEN_PER_THREAD)
            .map(|_| rng.gen_range(0..shape.entries as u32))
            .collect();
        Dataset {
            shape,
            keys,
            values,
            order,
        }
    }

    /// The order split into one disjoint slice per thread.
    fn slices(&self, threads: usize) -> impl Iterator<Item = &[u32]> {
        self.order.chunks(self.order.len() / threads).take(threads)
    }
}

/// A random key of `len` bytes whose last bytes hold `index`, so keys are distinct.
fn random_key(rng: &mut StdRng, index: usize, len: usize) -> Vec<u8> {
    let mut key = vec![0u8; len];
    rng.fill(&mut key[..]);
    let tag = (index as u64).to_le_bytes();
    let tail = len.saturating_sub(tag.len());
    key[tail..].copy_from_slice(&tag[..len - tail]);
    key
}

/// A value of `len` bytes; each is a separate allocation so that threads reading different
/// entries never share a reference count.
fn make_value(index: usize, len: usize) -> Value {
    let content = vec![index as u8; len];
    Value {
        shared: Arc::from(&content[..]),
        bytes: Bytes::from(content),
    }
}

/// What the benchmark needs from a cache.
trait HotPath: Sync {
    /// Looks `key` up; returns whether it was found.
    fn get(&self, key: &[u8]) -> bool;
    /// Stores `value` for `key`; returns whether it was accepted.
    fn put(&self, key: &[u8], value: &Value) -> bool;
    /// Finishes any deferred bookkeeping after the pre-fill.
    fn settle(&self) {}
}

struct Gpucache(gpucache::Store);

impl Gpucache {
    fn new(shape: Shape, policy: PolicyKind) -> Self {
        let entry_bytes = (shape.key_bytes + shape.value_bytes) as u64 + GPUCACHE_ENTRY_OVERHEAD;
        let store = gpucache::StoreBuilder::new()
            .max_bytes(entry_bytes * (shape.entries * CAPACITY_HEADROOM) as u64)
            .policy(policy)
            .build()
            .expect("building gpucache::Store");
        Gpucache(store)
    }
}

impl HotPath for Gpucache {
    fn get(&self, key: &[u8]) -> bool {
        black_box(self.0.get(key)).is_some()
    }

    fn put(&self, key: &[u8], value: &Value) -> bool {
        self.0.insert(key, value.bytes.clone()).is_ok()
    }
}

struct QuickCache(quick_cache::sync::Cache<Vec<u8>, Bytes>);

impl QuickCache {
    fn new(shape: Shape) -> Self {
        QuickCache(quick_cache::sync::Cache::new(
            shape.entries * CAPACITY_HEADROOM,
        ))
    }
}

impl HotPath for QuickCache {
    fn get(&self, key: &[u8]) -> bool {
        black_box(self.0.get(key)).is_some()
    }

    fn put(&self, key: &[u8], value: &Value) -> bool {
        self.0.insert(key.to_vec(), value.bytes.clone());
        true
    }
}

struct Moka(moka::sync::Cache<Vec<u8>, Bytes>);

impl Moka {
    fn new(shape: Shape) -> Self {
        Moka(moka::sync::Cache::new(
            (shape.entries * CAPACITY_HEADROOM) as u64,
        ))
    }
}

impl HotPath for Moka {
    fn get(&self, key: &[u8]) -> bool {
        black_box(self.0.get(key)).is_some()
    }

    fn put(&self, key: &[u8], value: &Value) -> bool {
        self.0.insert(key.to_vec(), value.bytes.clone());
        true
    }

    fn settle(&self) {
        self.0.run_pending_tasks();
    }
}

/// The floor: one lock around a std map, no eviction at all.
struct Floor(Mutex<HashMap<Vec<u8>, Arc<[u8]>>>);

impl Floor {
    fn new() -> Self {
        Floor(Mutex::new(HashMap::new()))
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, Arc<[u8]>>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl HotPath for Floor {
    fn get(&self, key: &[u8]) -> bool {
        let found = self.map().get(key).cloned();
        black_box(found).is_some()
    }

    fn put(&self, key: &[u8], value: &Value) -> bool {
        self.map().insert(key.to_vec(), Arc::clone(&value.shared));
        true
    }
}

/// One pre-filled instance of every contender for one dataset.
struct Contenders {
    tinylfu: Gpucache,
    s3fifo: Gpucache,
    lru: Gpucache,
    quick: QuickCache,
    moka: Moka,
    floor: Floor,
}

impl Contenders {
    fn prefilled(data: &Dataset) -> Self {
        let contenders = Contenders {
            tinylfu: Gpucache::new(data.shape, PolicyKind::TinyLfu),
            s3fifo: Gpucache::new(data.shape, PolicyKind::S3Fifo),
            lru: Gpucache::new(data.shape, PolicyKind::Lru),
            quick: QuickCache::new(data.shape),
            moka: Moka::new(data.shape),
            floor: Floor::new(),
        };
        prefill(&contenders.tinylfu, data);
        prefill(&contenders.s3fifo, data);
        prefill(&contenders.lru, data);
        prefill(&contenders.quick, data);
        prefill(&contenders.moka, data);
        prefill(&contenders.floor, data);
        contenders
    }

    fn measure(&self, who: Contender, run: &Run<'_>) -> Sample {
        match who {
            Contender::GpucacheTinyLfu => run.measure(&self.tinylfu),
            Contender::GpucacheS3Fifo => run.measure(&self.s3fifo),
            Contender::GpucacheLru => run.measure(&self.lru),
            Contender::QuickCache => run.measure(&self.quick),
            Contender::Moka => run.measure(&self.moka),
            Contender::Floor => run.measure(&self.floor),
        }
    }
}

fn prefill(cache: &impl HotPath, data: &Dataset) {
    for (key, value) in data.keys.iter().zip(&data.values) {
        assert!(cache.put(key, value), "pre-fill refused an entry");
    }
    cache.settle();
}

/// Operations done by one thread in one window.
#[derive(Clone, Copy, Debug, Default)]
struct Tally {
    ops: u64,
    /// Gets that hit, or puts that were accepted.
    succeeded: u64,
    elapsed: Duration,
}

/// Outcome of one window over all threads.
#[derive(Clone, Copy, Debug)]
struct Sample {
    ops_per_sec: f64,
    success_ratio: f64,
}

impl Sample {
    fn from_tallies(tallies: &[Tally]) -> Self {
        let ops: u64 = tallies.iter().map(|t| t.ops).sum();
        let succeeded: u64 = tallies.iter().map(|t| t.succeeded).sum();
        let longest = tallies.iter().map(|t| t.elapsed).max().unwrap_or_default();
        Sample {
            ops_per_sec: ops as f64 / longest.as_secs_f64().max(f64::MIN_POSITIVE),
            success_ratio: succeeded as f64 / ops.max(1) as f64,
        }
    }
}

/// One case: an operation on a dataset with a number of threads for a window.
struct Run<'a> {
    op: Op,
    threads: usize,
    window: Duration,
    data: &'a Dataset,
}

impl Run<'_> {
    /// Runs every thread over its slice of the order, all released together.
    fn measure(&self, cache: &impl HotPath) -> Sample {
        let barrier = Barrier::new(self.threads);
        let tallies: Vec<Tally> = std::thread::scope(|scope| {
            let workers: Vec<_> = self
                .data
                .slices(self.threads)
                .map(|slice| {
                    let barrier = &barrier;
                    scope.spawn(move || {
                        barrier.wait();
                        self.drive(cache, slice)
                    })
                })
                .collect();
            workers
                .into_iter()
                .map(|worker| {
                    worker
                        .join()
                        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
                })
                .collect()
        });
        Sample::from_tallies(&tallies)
    }

    fn drive(&self, cache: &impl HotPath, slice: &[u32]) -> Tally {
        let data = self.data;
        match self.op {
            Op::Get => loop_for(self.window, slice, |i| cache.get(&data.keys[i])),
            Op::Put => loop_for(self.window, slice, |i| {
                cache.put(&data.keys[i], &data.values[i])
            }),
        }
    }
}

/// Applies `op` to the indices of `slice`, cyclically, until `window` has passed.
fn loop_for(window: Duration, slice: &[u32], mut op: impl FnMut(usize) -> bool) -> Tally {
    let start = Instant::now();
    let deadline = start + window;
    let mut tally = Tally::default();
    loop {
        for batch in slice.chunks(OPS_PER_CLOCK_CHECK) {
            for &index in batch {
                tally.succeeded += u64::from(op(index as usize));
            }
            tally.ops += batch.len() as u64;
            if Instant::now() >= deadline {
                tally.elapsed = start.elapsed();
                return tally;
            }
        }
    }
}

/// Median throughput of each contender in one case.
struct CaseResult {
    op: Op,
    threads: usize,
    shape: Shape,
    /// Indexed like [`Contender::ALL`].
    median_ops_per_sec: [f64; Contender::ALL.len()],
}

impl CaseResult {
    fn ops_per_sec(&self, who: Contender) -> f64 {
        self.median_ops_per_sec[who.index()]
    }

    fn ns_per_op_per_thread(&self, who: Contender) -> f64 {
        self.threads as f64 * 1e9 / self.ops_per_sec(who)
    }
}

/// Runs one case: `rounds` rounds, each giving every contender one window, starting with a
/// different contender each round so no one always goes first.
fn run_case(contenders: &Contenders, run: &Run<'_>, rounds: usize) -> CaseResult {
    let mut samples: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); Contender::ALL.len()];
    for round in 0..rounds {
        for &who in Contender::ALL
            .iter()
            .cycle()
            .skip(round)
            .take(Contender::ALL.len())
        {
            let sample = contenders.measure(who, run);
            warn_if_failing(who, run, sample);
            samples[who.index()].push(sample.ops_per_sec);
        }
    }
    let mut median_ops_per_sec = [0.0; Contender::ALL.len()];
    for (median, mut values) in median_ops_per_sec.iter_mut().zip(samples) {
        *median = median_of(&mut values);
    }
    CaseResult {
        op: run.op,
        threads: run.threads,
        shape: run.data.shape,
        median_ops_per_sec,
    }
}

fn warn_if_failing(who: Contender, run: &Run<'_>, sample: Sample) {
    if sample.success_ratio < MIN_SUCCESS_RATIO {
        let what = match run.op {
            Op::Get => "hit",
            Op::Put => "accepted",
        };
        eprintln!(
            "warning: {} {} with {} thread(s), key {} B, value {} B: only {:.1}% {what}",
            who.label(),
            run.op.name(),
            run.threads,
            run.data.shape.key_bytes,
            run.data.shape.value_bytes,
            sample.success_ratio * 100.0,
        );
    }
}

fn median_of(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Runs every case, dataset by dataset.
fn run_all(config: Config) -> Vec<CaseResult> {
    let mut results = Vec::new();
    for shape in SHAPES {
        eprintln!(
            "measuring key {} B, value {} B ({} entries)...",
            shape.key_bytes, shape.value_bytes, shape.entries
        );
        let data = Dataset::generate(shape);
        let contenders = Contenders::prefilled(&data);
        for op in Op::ALL {
            for threads in THREAD_COUNTS {
                let run = Run {
                    op,
                    threads,
                    window: config.window,
                    data: &data,
                };
                results.push(run_case(&contenders, &run, config.rounds));
            }
        }
    }
    results
}

/// Floor time per op ÷ gpucache time per op must stay at most this for gets.
const GET_TIME_RATIO_TARGET: f64 = 1.3;
/// gpucache throughput ÷ quick_cache throughput must be at least this.
const QUICK_CACHE_RATIO_TARGET: f64 = 1.0;

fn print_header(config: Config) {
    println!("# gpucache hot path");
    println!();
    println!(
        "Median of {} round(s) of {} ms per contender and case; working set pre-filled \
         (gets hit, puts overwrite), uniform random keys.",
        config.rounds,
        config.window.as_millis()
    );
    println!(
        "Cells: total Mops/s over all threads (ns per op per thread). \
         Ratios use gpucache with its default policy (W-TinyLFU)."
    );
    println!(
        "- `w-tinylfu/s3fifo time ratio` = W-TinyLFU ns/op ÷ S3-FIFO ns/op \
         (S3-FIFO: the default before W-TinyLFU); at most 1 is no slower."
    );
    println!(
        "- `floor/gpucache time ratio` = gpucache ns/op ÷ floor ns/op \
         (floor = Mutex<HashMap>); target ≤ {GET_TIME_RATIO_TARGET} for get."
    );
    println!(
        "- `gpucache/quick_cache throughput` = gpucache ops/s ÷ quick_cache ops/s; \
         target ≥ {QUICK_CACHE_RATIO_TARGET}."
    );
    println!("- `*` marks a ratio that misses its target.");
}

fn print_table(op: Op, results: &[CaseResult]) {
    let mut header = vec!["threads".to_string(), "key B".into(), "value B".into()];
    header.extend(
        Contender::ALL
            .iter()
            .map(|c| format!("{} Mops/s (ns)", c.label())),
    );
    header.push("w-tinylfu/s3fifo time ratio".into());
    header.push("floor/gpucache time ratio".into());
    header.push("gpucache/quick_cache throughput".into());
    let rows: Vec<Vec<String>> = results
        .iter()
        .filter(|r| r.op == op)
        .map(table_row)
        .collect();
    println!();
    println!("## {}", op.name());
    println!();
    print_markdown(&header, &rows);
}

fn table_row(result: &CaseResult) -> Vec<String> {
    let mut row = vec![
        result.threads.to_string(),
        result.shape.key_bytes.to_string(),
        result.shape.value_bytes.to_string(),
    ];
    row.extend(Contender::ALL.iter().map(|&who| {
        format!(
            "{:.2} ({:.0})",
            result.ops_per_sec(who) / 1e6,
            result.ns_per_op_per_thread(who)
        )
    }));
    // gpucache is its default policy (W-TinyLFU); S3-FIFO was the default before it.
    let gpucache = Contender::GpucacheTinyLfu;
    row.push(format!(
        "{:.2}",
        result.ns_per_op_per_thread(gpucache)
            / result.ns_per_op_per_thread(Contender::GpucacheS3Fifo)
    ));
    let time_ratio =
        result.ns_per_op_per_thread(gpucache) / result.ns_per_op_per_thread(Contender::Floor);
    let time_target_missed = result.op == Op::Get && time_ratio > GET_TIME_RATIO_TARGET;
    row.push(marked(time_ratio, time_target_missed));
    let throughput_ratio = result.ops_per_sec(gpucache) / result.ops_per_sec(Contender::QuickCache);
    row.push(marked(
        throughput_ratio,
        throughput_ratio < QUICK_CACHE_RATIO_TARGET,
    ));
    row
}

fn marked(ratio: f64, missed: bool) -> String {
    format!("{ratio:.2}{}", if missed { " *" } else { "" })
}

/// Prints a Markdown table with right-aligned, padded columns.
fn print_markdown(header: &[String], rows: &[Vec<String>]) {
    let widths: Vec<usize> = (0..header.len())
        .map(|col| {
            std::iter::once(&header[col])
                .chain(rows.iter().map(|row| &row[col]))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| format!("{cell:>width$}"))
            .collect();
        println!("| {} |", padded.join(" | "));
    };
    line(header);
    let rule: Vec<String> = widths
        .iter()
        .map(|&width| format!("{}:", "-".repeat(width.saturating_sub(1))))
        .collect();
    line(&rule);
    for row in rows {
        line(row);
    }
}

fn main() {
    let config = Config::from_env();
    let started = Instant::now();
    let results = run_all(config);
    print_header(config);
    for op in Op::ALL {
        print_table(op, &results);
    }
    eprintln!("done in {:.1} s", started.elapsed().as_secs_f64());
}
