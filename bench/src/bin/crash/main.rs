//! Crash harness over every front end: SIGKILLs children at random moments while they write
//! and while compaction runs, and after each kill checks what a new process reads.
//!
//! ```sh
//! scripts/crash 60          # cargo build --release, then target/release/crash --seconds 60
//! ```
//!
//! Three kinds of child take turns, each on a directory of its own that every child of that
//! kind appends to: the Rust API (`Cache`: puts, removes, gets, flushes, compactions on 64 KiB
//! segments), the EGL blob cache through the C library (`bench/c/crash_egl_child.c`, built
//! here against `libgpucache_ffi.a`: `gpucache_egl_set`/`get`/`flush`), and D3D12-style disk
//! sessions (new-only stores, finds, flushes). Half the time a second process compacts the
//! same directory meanwhile; the parent reads through a cache of its own. A fifth of the kills
//! land before the child is ready (opening: tail repair, preload).
//!
//! Every child runs a stream of operations that is a pure function of its seed
//! (`model.rs`) and prints `F <seq>` after each flush that succeeded. After the kill the
//! parent replays the stream: operations before the last acknowledged flush are durable,
//! those up to the next flush may have happened. Then it opens the directory through the
//! same front end and reads every key: a value that fails its checks or was never written is
//! **corrupt**; a miss where a flushed value must be is **lost**; a value older than a
//! flushed overwrite or removal is **stale**.
//!
//! Prints one line per kind and a total; exits 1 on any corrupt, lost or stale read, 2 on
//! other failures (a directory that does not open, a child that failed).

mod children;
mod model;

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gpucache::egl::{self, BlobCacheConfig};
use gpucache::session::SessionRegistry;
use model::{key, verify, Kind, Model, Rng, Verdict};

#[derive(Default, Debug, Clone, Copy)]
struct Tally {
    kills: u64,
    kills_before_ready: u64,
    with_compactor: u64,
    acked_flushes: u64,
    reads: u64,
    values: u64,
    /// Reads after a kill of keys whose latest state a flush acknowledged.
    flushed_checked: u64,
    corrupt: u64,
    lost: u64,
    stale: u64,
    failures: u64,
}

impl Tally {
    fn add(&mut self, o: &Tally) {
        self.kills += o.kills;
        self.kills_before_ready += o.kills_before_ready;
        self.with_compactor += o.with_compactor;
        self.acked_flushes += o.acked_flushes;
        self.reads += o.reads;
        self.values += o.values;
        self.flushed_checked += o.flushed_checked;
        self.corrupt += o.corrupt;
        self.lost += o.lost;
        self.stale += o.stale;
        self.failures += o.failures;
    }

    fn line(&self, name: &str) -> String {
        format!(
            "{name}: kills={} (before ready {}, with a compactor {}) flushes_acked={} reads={} \
             values={} flushed_checked={} corrupt={} lost={} stale={} failures={}",
            self.kills,
            self.kills_before_ready,
            self.with_compactor,
            self.acked_flushes,
            self.reads,
            self.values,
            self.flushed_checked,
            self.corrupt,
            self.lost,
            self.stale,
            self.failures
        )
    }
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

    /// Waits for `READY`; the lines read on the way are returned by `kill`.
    fn wait_ready(&mut self, timeout: Duration, seen: &mut Vec<String>) -> bool {
        let deadline = Instant::now() + timeout;
        while let Ok(line) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        {
            let ready = line == "READY";
            seen.push(line);
            if ready {
                return true;
            }
        }
        false
    }

    /// SIGKILLs the child; returns whether the kill ended it, and everything it printed.
    fn kill(mut self, mut seen: Vec<String>) -> (bool, Option<i32>, Vec<String>, String) {
        let _ = self.child.kill();
        let status = self.child.wait().expect("reap child");
        seen.extend(self.lines.iter());
        use std::os::unix::process::ExitStatusExt;
        let stderr = self.stderr.join().unwrap_or_default();
        (status.signal() == Some(9), status.code(), seen, stderr)
    }
}

struct Opts {
    seconds: f64,
    seed: u64,
    root: Option<PathBuf>,
    c_lib: Option<PathBuf>,
    verbose: bool,
}

fn usage() -> ! {
    eprintln!("usage: crash [--seconds S] [--seed N] [--dir PATH] [--c-lib libgpucache_ffi.a] [--verbose]");
    std::process::exit(2);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        children::run(&args[1..]);
        return;
    }
    let mut opts = Opts {
        seconds: 60.0,
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        root: None,
        c_lib: None,
        verbose: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().cloned().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--seconds" => opts.seconds = value().parse().unwrap_or_else(|_| usage()),
            "--seed" => opts.seed = value().parse().unwrap_or_else(|_| usage()),
            "--dir" => opts.root = Some(PathBuf::from(value())),
            "--c-lib" => opts.c_lib = Some(PathBuf::from(value())),
            "--verbose" => opts.verbose = true,
            _ => usage(),
        }
    }
    std::process::exit(parent(&opts));
}

/// The static C library to build the EGL child with: `--c-lib`, else the newest
/// `libgpucache_ffi.a` beside this executable or in its `deps/`.
fn find_c_lib(opts: &Opts) -> Option<PathBuf> {
    if let Some(p) = &opts.c_lib {
        return Some(p.clone());
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libgpucache_ffi.a"),
        dir.join("deps/libgpucache_ffi.a"),
        dir.join("../libgpucache_ffi.a"),
    ]
    .into_iter()
    .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
    .max()
    .map(|(_, p)| p)
}

/// Compiles the EGL child against the C library.
fn build_egl_child(opts: &Opts, out: &Path) -> Result<PathBuf, String> {
    let lib = find_c_lib(opts).ok_or("libgpucache_ffi.a not found: cargo build -p gpucache-ffi")?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = out.join("crash_egl_child");
    let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(manifest.join("../crates/gpucache-ffi/include"))
        .arg(manifest.join("c/crash_egl_child.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&exe)
        .status()
        .map_err(|e| format!("cannot run {cc:?}: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building the EGL child against {} failed",
            lib.display()
        ));
    }
    Ok(exe)
}

fn parent(opts: &Opts) -> i32 {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = opts
        .root
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&root).expect("root directory");
    let egl_child = match build_egl_child(opts, tmp.path()) {
        Ok(exe) => exe,
        Err(e) => {
            eprintln!("crash: {e}");
            return 2;
        }
    };
    let exe = std::env::current_exe().expect("current_exe");
    let mut rng = Rng::new(opts.seed);
    let mut models: Vec<Model> = Kind::ALL.iter().map(|&k| Model::new(k)).collect();
    let mut tallies = [Tally::default(); 3];
    let mut epoch = 0u64;
    let deadline = started + Duration::from_secs_f64(opts.seconds);
    while Instant::now() < deadline {
        epoch += 1;
        let which = (epoch % 3) as usize;
        let kind = Kind::ALL[which];
        let dir = root.join(kind.name());
        let seed = rng.next_u64();
        let mut cmd = match kind {
            Kind::Egl => Command::new(&egl_child),
            _ => {
                let mut c = Command::new(&exe);
                c.args(["--child", kind.name()]);
                c
            }
        };
        cmd.arg(&dir).arg(epoch.to_string()).arg(seed.to_string());
        iteration(
            opts,
            kind,
            &dir,
            cmd,
            &exe,
            epoch,
            seed,
            &mut rng,
            &mut models[which],
            &mut tallies[which],
        );
    }
    let mut total = Tally::default();
    for (kind, t) in Kind::ALL.iter().zip(&tallies) {
        println!("crash: {}", t.line(kind.name()));
        total.add(t);
    }
    println!(
        "crash: {} wall={:.1}s seed={}",
        total.line("total"),
        started.elapsed().as_secs_f64(),
        opts.seed
    );
    if total.corrupt + total.lost + total.stale > 0 {
        1
    } else if total.failures > 0 {
        2
    } else {
        0
    }
}

#[allow(clippy::too_many_arguments)]
fn iteration(
    opts: &Opts,
    kind: Kind,
    dir: &Path,
    cmd: Command,
    exe: &Path,
    epoch: u64,
    seed: u64,
    rng: &mut Rng,
    model: &mut Model,
    t: &mut Tally,
) {
    let compactor = (rng.next_u64().is_multiple_of(2)).then(|| {
        let mut c = Command::new(exe);
        c.args(["--child", "compactor"]).arg(dir).arg(kind.name());
        t.with_compactor += 1;
        Running::spawn(c)
    });
    let mut child = Running::spawn(cmd);
    let mut seen = Vec::new();
    let window = if rng.next_u64().is_multiple_of(5) {
        t.kills_before_ready += 1;
        Duration::from_millis(rng.next_u64() % 30)
    } else {
        if !child.wait_ready(Duration::from_secs(30), &mut seen) {
            eprintln!(
                "{} epoch {epoch}: the child never became ready",
                kind.name()
            );
        }
        Duration::from_millis(5 + rng.next_u64() % 150)
    };
    // Read through a cache of our own meanwhile: nothing read may be corrupt.
    let until = Instant::now() + window;
    match children::plain_cache(kind, dir) {
        Ok(reader) => {
            while Instant::now() < until {
                let id = match kind {
                    Kind::Session => model::session_id(epoch, rng.next_u64() % 4000),
                    _ => (rng.next_u64() % u64::from(model::KEYS)) as u32,
                };
                t.reads += 1;
                if let Some(v) = reader.get(&key(id)) {
                    if let Err(e) = verify(id, &v) {
                        t.corrupt += 1;
                        eprintln!("{} epoch {epoch}: concurrent read: {e}", kind.name());
                    }
                }
            }
        }
        Err(e) => {
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            eprintln!("{} epoch {epoch}: reader does not open: {e}", kind.name());
        }
    }
    let (killed, code, lines, stderr) = child.kill(seen);
    if let Some(c) = compactor {
        let (c_killed, _, c_lines, c_err) = c.kill(Vec::new());
        if !c_killed {
            t.failures += 1;
            eprintln!(
                "{} epoch {epoch}: compactor failed\n{}\n{c_err}",
                kind.name(),
                c_lines.join("\n")
            );
        }
    }
    if killed {
        t.kills += 1;
    } else {
        t.failures += 1;
        if code == Some(3) {
            t.corrupt += 1;
        }
        eprintln!(
            "{} epoch {epoch}: child exited {code:?}\n{}\n{stderr}",
            kind.name(),
            lines.join("\n")
        );
    }
    let acked = lines
        .iter()
        .filter_map(|l| l.strip_prefix("F ")?.parse::<u64>().ok())
        .inspect(|_| t.acked_flushes += 1)
        .max();
    let upper = model.apply(epoch, seed, acked);
    let ids = model.keys_to_check(rng);
    let before = *t;
    check(kind, dir, &ids, model, rng, t, epoch);
    if opts.verbose {
        println!(
            "{} epoch {epoch}: acked {acked:?} upper {upper}; {} keys read, {} values, corrupt {} lost {} stale {}",
            kind.name(),
            ids.len(),
            t.values - before.values,
            t.corrupt - before.corrupt,
            t.lost - before.lost,
            t.stale - before.stale
        );
    }
}

/// Opens the directory through the kind's own front end and judges a read of every key.
fn check(
    kind: Kind,
    dir: &Path,
    ids: &[u32],
    model: &Model,
    rng: &mut Rng,
    t: &mut Tally,
    epoch: u64,
) {
    let judge = |id: u32, read: Option<&[u8]>, t: &mut Tally| {
        t.reads += 1;
        t.values += u64::from(read.is_some());
        t.flushed_checked += u64::from(model.flushed(id));
        let (verdict, why) = model.judge(id, read);
        match verdict {
            Verdict::Ok => return,
            Verdict::Corrupt => t.corrupt += 1,
            Verdict::Lost => t.lost += 1,
            Verdict::Stale => t.stale += 1,
        }
        eprintln!("{} epoch {epoch}: {verdict:?}: {why}", kind.name());
    };
    match kind {
        Kind::Cache => {
            let preload = rng.next_u64().is_multiple_of(2);
            let cache = match children::builder(dir).preload(preload).open() {
                Ok(c) if c.disk_error().is_none() => c,
                other => {
                    t.failures += 1;
                    eprintln!(
                        "cache epoch {epoch}: does not open: {:?}",
                        other.map(|c| c.disk_error().map(str::to_owned))
                    );
                    return;
                }
            };
            if preload {
                cache.wait_for_preload();
            }
            for &id in ids {
                let v = cache.get(&key(id));
                judge(id, v.as_deref(), t);
            }
        }
        Kind::Egl => {
            let config =
                BlobCacheConfig::new().cache(|c| c.directory(dir).identity(model::IDENTITY));
            if let Err(e) = egl::configure(config) {
                t.failures += 1;
                eprintln!("egl epoch {epoch}: does not configure: {e}");
                return;
            }
            let mut buf = vec![0u8; 16 << 10];
            for &id in ids {
                let n = egl::get(&key(id), &mut buf);
                judge(id, (n > 0).then(|| &buf[..n.min(buf.len())]), t);
            }
            egl::shutdown();
        }
        Kind::Session => {
            let registry = SessionRegistry::with_root(dir);
            let session = match registry.open(children::session_desc()) {
                Ok(s) => s,
                Err(e) => {
                    t.failures += 1;
                    eprintln!("session epoch {epoch}: does not open: {e}");
                    return;
                }
            };
            for &id in ids {
                match session.find(&key(id)) {
                    Ok(v) => judge(id, Some(&v), t),
                    Err(gpucache::Error::NotFound) => judge(id, None, t),
                    Err(e) => {
                        t.failures += 1;
                        eprintln!("session epoch {epoch}: find: {e}");
                    }
                }
            }
        }
    }
}
