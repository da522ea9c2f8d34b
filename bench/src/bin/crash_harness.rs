//! Crash harness: a process killed at any instant leaves a cache directory that opens, and
//! never yields a corrupt value.
//!
//! ```sh
//! cargo run --release -p gpucache-bench --bin crash_harness -- --iterations 300
//! ```
//!
//! Each iteration spawns this executable as a child (`--child`) that opens a cache on a shared
//! directory (64 KiB segments, 1 MiB limit: rotation, eviction and compaction all happen),
//! stores, overwrites and removes self-verifying values, flushes or compacts, and is SIGKILLed
//! after a random delay (a quarter of the kills land while it may still be opening: tail
//! repair, preload). Meanwhile the parent reads random keys through a cache of its own. After
//! the kill the parent opens the directory, reads every key (alternately through the disk
//! lookup and through the preload) and checks each value, then writes a segment's worth (the
//! directory must take writes after a crash). The next child appends after the crash.
//!
//! Prints one summary line; exits 1 if any corrupt value was returned, 2 on other failures
//! (a directory that does not open or refuses writes after a crash, a child that failed).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpucache::{Cache, CacheBuilder};
use gpucache_bench::selfcheck::{key, value_for, verify};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const PARENT_EPOCH: u64 = 0xFFFF;

#[derive(Clone, Debug)]
struct Opts {
    iterations: u64,
    seed: u64,
    keys: u32,
    compact_percent: u32,
    dir: Option<PathBuf>,
    verbose: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: crash_harness [--iterations N] [--seed S] [--keys K] [--compact-percent P] \
         [--dir PATH] [--verbose]"
    );
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        child(&args[1..]);
        return;
    }
    let mut opts = Opts {
        iterations: 300,
        seed: rand::random(),
        keys: 1200,
        compact_percent: 25,
        dir: None,
        verbose: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--iterations" => opts.iterations = value().parse().unwrap_or_else(|_| usage()),
            "--seed" => opts.seed = value().parse().unwrap_or_else(|_| usage()),
            "--keys" => opts.keys = value().parse().unwrap_or_else(|_| usage()),
            "--compact-percent" => {
                opts.compact_percent = value().parse().unwrap_or_else(|_| usage())
            }
            "--dir" => opts.dir = Some(PathBuf::from(value())),
            "--verbose" => opts.verbose = true,
            _ => usage(),
        }
    }
    std::process::exit(parent(&opts));
}

fn builder(dir: &Path) -> CacheBuilder {
    Cache::builder()
        .directory(dir)
        .identity(&b"crash-harness driver 1"[..])
        .max_segment_bytes(64 << 10)
        // The persisted hash table at any size, so that kills land in its writes too.
        .open_table_min_entries(0)
        .max_disk_bytes(1 << 20)
        .max_memory_bytes(256 << 10)
}

// ---------------------------------------------------------------------------------------
// The child: store, remove, read, flush or compact until killed.

fn child(args: &[String]) {
    let get = |name: &str| -> String {
        let at = args.iter().position(|a| a == name).expect(name);
        args[at + 1].clone()
    };
    let dir = PathBuf::from(get("--dir"));
    let epoch: u64 = get("--epoch").parse().unwrap();
    let keys: u32 = get("--keys").parse().unwrap();
    let compact = get("--mode") == "compact";
    let mut rng = StdRng::seed_from_u64(get("--seed").parse().unwrap());
    let cache = builder(&dir).preload(rng.gen_bool(0.5)).open().unwrap();
    if let Some(e) = cache.disk_error() {
        println!("DISKERROR {e}");
        std::process::exit(4);
    }
    println!("READY");
    let hot = (keys / 12).max(1);
    let start = Instant::now();
    let mut counter = 0u64;
    while start.elapsed() < Duration::from_secs(60) {
        counter += 1;
        let id = if compact || rng.gen_bool(0.5) {
            rng.gen_range(0..hot)
        } else {
            rng.gen_range(0..keys)
        };
        let len = if rng.gen_bool(0.05) {
            rng.gen_range(4000..12_000)
        } else {
            rng.gen_range(32..3000)
        };
        match rng.gen_range(0..100) {
            0..=69 => {
                let _ = cache.insert(&key(id), value_for(id, epoch << 32 | counter, len));
            }
            70..=79 => {
                cache.remove(&key(id));
            }
            80..=97 => {
                if let Some(v) = cache.get(&key(id)) {
                    if let Err(e) = verify(id, &v) {
                        println!("CORRUPT {e}");
                        std::process::exit(3);
                    }
                }
            }
            _ => {
                if !compact {
                    let _ = cache.flush();
                }
            }
        }
        if compact && counter.is_multiple_of(25) {
            let _ = cache.compact();
        }
    }
    println!("DONE");
}

// ---------------------------------------------------------------------------------------
// The parent.

#[derive(Default, Debug)]
struct Tally {
    kills: u64,
    kills_before_ready: u64,
    values_verified: u64,
    from_children: u64,
    corrupt_values: u64,
    corrupt_dropped: u64,
    reader_reads: u64,
    reader_hits: u64,
    write_refusals: u64,
    open_failures: u64,
    child_failures: u64,
    fresh_directories: u64,
    orphan_data_files: u64,
}

struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Running {
    fn spawn(cmd: Command) -> Running {
        let (child, lines, stderr) = gpucache_bench::child::spawn_reading(cmd);
        Running {
            child,
            lines,
            stderr,
        }
    }

    fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            if line.contains("READY") {
                return true;
            }
        }
        false
    }

    fn kill(mut self) -> (ExitStatus, Vec<String>, String) {
        let _ = self.child.kill();
        let status = self.child.wait().expect("reap child");
        let lines: Vec<String> = self.lines.iter().collect();
        (status, lines, self.stderr.join().unwrap_or_default())
    }
}

fn listing(dir: &Path) -> String {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| {
                    let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                    format!("{}:{len}", e.file_name().to_string_lossy())
                })
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.join(" ")
}

/// Data files without an index file (a crash between deleting a segment's two files, or
/// between creating them): bytes no limit accounts for.
fn orphan_data_files(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let stem = name.strip_suffix(".dat")?.to_owned();
            Some(!dir.join(format!("{stem}.idx")).exists())
        })
        .filter(|&orphan| orphan)
        .count() as u64
}

fn parent(opts: &Opts) -> i32 {
    let started = Instant::now();
    let mut rng = StdRng::seed_from_u64(opts.seed);
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = opts.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let mut generation = 0;
    let mut dir = root.join(format!("cache-{generation}"));
    let exe = std::env::current_exe().expect("current_exe");
    let mut t = Tally::default();
    for it in 0..opts.iterations {
        let compact = rng.gen_range(0..100) < opts.compact_percent;
        // The parent reads through a cache of its own while the child writes.
        let reader = builder(&dir)
            .max_memory_bytes(64 << 10)
            .preload(false)
            .open()
            .expect("reader cache");
        let mut cmd = Command::new(&exe);
        cmd.arg("--child")
            .arg("--dir")
            .arg(&dir)
            .args(["--epoch", &(it + 1).to_string()])
            .args(["--seed", &rng.gen::<u64>().to_string()])
            .args(["--keys", &opts.keys.to_string()])
            .args(["--mode", if compact { "compact" } else { "mixed" }]);
        let child = Running::spawn(cmd);
        let window = if rng.gen_bool(0.25) {
            t.kills_before_ready += 1;
            Duration::from_millis(rng.gen_range(0..40))
        } else {
            if !child.wait_ready(Duration::from_secs(60)) {
                eprintln!("iteration {it}: the child never became ready");
            }
            Duration::from_millis(rng.gen_range(5..200))
        };
        let until = Instant::now() + window;
        while Instant::now() < until {
            let id = rng.gen_range(0..opts.keys);
            t.reader_reads += 1;
            if let Some(v) = reader.get(&key(id)) {
                t.reader_hits += 1;
                if let Err(e) = verify(id, &v) {
                    t.corrupt_values += 1;
                    eprintln!("iteration {it}: concurrent reader got a corrupt value: {e}");
                }
            }
        }
        let (status, lines, stderr) = child.kill();
        drop(reader);
        use std::os::unix::process::ExitStatusExt;
        if status.signal() == Some(9) {
            t.kills += 1;
        } else if !status.success() {
            t.child_failures += 1;
            if status.code() == Some(3) {
                t.corrupt_values += 1;
            }
            eprintln!(
                "iteration {it}: child failed: {status:?}\n{}\n{stderr}",
                lines.join("\n")
            );
        }
        if !check_after_crash(&dir, it, rng.gen_bool(0.5), opts, &mut t) {
            // The directory is stuck: go on with a fresh one so the run keeps testing.
            generation += 1;
            t.fresh_directories += 1;
            dir = root.join(format!("cache-{generation}"));
        }
    }
    let wall = started.elapsed();
    t.orphan_data_files = (0..=generation)
        .map(|g| orphan_data_files(&root.join(format!("cache-{g}"))))
        .sum();
    println!(
        "crash_harness: iterations={} kills={} (before ready: {}) values_verified={} \
         (written by killed children: {}) corrupt_values={} corrupt_dropped={} \
         reader_reads={} (hits {}) write_refusals_after_crash={} open_failures={} \
         child_failures={} fresh_directories={} orphan_data_files_left={} wall={:.1}s seed={}",
        opts.iterations,
        t.kills,
        t.kills_before_ready,
        t.values_verified,
        t.from_children,
        t.corrupt_values,
        t.corrupt_dropped,
        t.reader_reads,
        t.reader_hits,
        t.write_refusals,
        t.open_failures,
        t.child_failures,
        t.fresh_directories,
        t.orphan_data_files,
        wall.as_secs_f64(),
        opts.seed
    );
    if t.corrupt_values > 0 {
        1
    } else if t.write_refusals + t.open_failures + t.child_failures > 0 {
        2
    } else {
        0
    }
}

/// Opens the directory after a kill, verifies every key, and writes a segment's worth.
/// Returns whether the directory is still usable.
fn check_after_crash(dir: &Path, it: u64, preload: bool, opts: &Opts, t: &mut Tally) -> bool {
    let cache = match builder(dir).preload(preload).open() {
        Ok(c) if c.disk_error().is_none() => c,
        other => {
            t.open_failures += 1;
            eprintln!(
                "iteration {it}: the directory does not open: {:?}",
                other.map(|c| c.disk_error().map(str::to_owned))
            );
            return false;
        }
    };
    if preload {
        cache.wait_for_preload();
    }
    let keys = opts.keys;
    let mut verified = 0;
    for id in 0..keys {
        if let Some(v) = cache.get(&key(id)) {
            match verify(id, &v) {
                Ok(version) => {
                    verified += 1;
                    t.from_children += u64::from(version >> 32 != PARENT_EPOCH);
                }
                Err(e) => {
                    t.corrupt_values += 1;
                    eprintln!("iteration {it}: corrupt value (preload {preload}): {e}");
                }
            }
        }
    }
    t.values_verified += verified;
    let d = cache.stats().disk.expect("disk tier");
    t.corrupt_dropped += d.corrupt_dropped;
    for j in 0..48u32 {
        let id = keys - 1 - j;
        let version = PARENT_EPOCH << 32 | it << 8 | u64::from(j);
        let _ = cache.insert(&key(id), value_for(id, version, 2000));
    }
    let flushed = cache.flush();
    let d = cache.stats().disk.expect("disk tier");
    if opts.verbose {
        println!(
            "iteration {it}: {verified} verified, {} entries, {} segments, {} corrupt dropped",
            d.entries, d.segments, d.corrupt_dropped
        );
    }
    if flushed.is_err() || d.write_errors > 0 {
        t.write_refusals += 1;
        eprintln!(
            "iteration {it}: the directory refuses writes after a crash: {flushed:?}, {:?}; \
             files: {}",
            d.last_error,
            listing(dir)
        );
        return false;
    }
    true
}
