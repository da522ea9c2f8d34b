//! The fleet benchmark (issue 14): a fresh machine (an empty cache directory) warmed from
//! the fleet, against no cache and against a local warm start, on the kodi corpus with real
//! Mesa 25 (llvmpipe) through gpucache's C ABI; then N processes with empty directories
//! starting at once against one Redis, and Redis's memory per cached byte.
//!
//! Every process is `gl_run` in the warm-start benchmark's `gpucache` case (the hybrid),
//! with `GPUCACHE_FLEET_URL` / `GPUCACHE_FLEET_KEY_FILE` set for the fleet cases. A real
//! `redis-server` is started on a loopback port of its own and stopped at the end. Cases
//! are interleaved run by run and medians quoted.
//!
//! Usage: `fleet_bench [--variants 1,10] [--runs N] [--procs 8] [--limit N] [--dir DIR]`
//! (`target/release/fleet_bench`; build `gl_run` too).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use gpucache_bench::disk::measure::{median, median_range, ms};
use gpucache_bench::gl::cases::{Case, Workload};
use gpucache_bench::gl::warm_start::sibling_gl_run;
use gpucache_bench::gl::{corpus, RunReport};
use gpucache_fleet::testing::RedisServer;
use gpucache_fleet::{FleetAdmin, FleetKey, KeyRing};

#[derive(Parser)]
struct Args {
    /// Corpus sizes: `#define` variants per shader (1 = 80 programs, 10 = 800).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    variants: Vec<usize>,
    /// Measured runs per case (default 5 at 80 programs, 3 above).
    #[arg(long)]
    runs: Option<usize>,
    /// No-cache runs (default: --runs); at 800 programs each takes minutes.
    #[arg(long)]
    nocache_runs: Option<usize>,
    /// Processes started at once for the fleet-warm-up measure.
    #[arg(long, default_value_t = 8)]
    procs: usize,
    /// Also start --procs processes without a cache at once, for scale (slow).
    #[arg(long)]
    concurrent_nocache: bool,
    /// Only the first N programs.
    #[arg(long)]
    limit: Option<usize>,
    /// Where the caches live (default: .cache/fleet-bench in the project).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The corpus (default: what scripts/fetch-corpus downloads).
    #[arg(long)]
    corpus: Option<PathBuf>,
}

/// One process's report and wall time.
struct Run {
    report: RunReport,
    wall: Duration,
}

struct Fleet {
    url: String,
    key: PathBuf,
}

fn command(
    gl_run: &Path,
    home: &Path,
    workload: &Workload,
    fleet: Option<&Fleet>,
) -> Result<Command> {
    let mut cmd = Case::Gpucache.command(gl_run, home, workload)?;
    cmd.env_remove("GPUCACHE_FLEET_URL")
        .env_remove("GPUCACHE_FLEET_KEY_FILE");
    if let Some(f) = fleet {
        cmd.env("GPUCACHE_FLEET_URL", &f.url)
            .env("GPUCACHE_FLEET_KEY_FILE", &f.key);
    }
    Ok(cmd)
}

fn finish(label: &str, out: std::process::Output, wall: Duration) -> Result<Run> {
    if !out.status.success() {
        bail!(
            "{label} run failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let report = RunReport::parse(&String::from_utf8_lossy(&out.stdout))?;
    Ok(Run { report, wall })
}

fn run(label: &str, mut cmd: Command) -> Result<Run> {
    let start = Instant::now();
    let out = cmd.output().with_context(|| format!("starting {label}"))?;
    finish(label, out, start.elapsed())
}

fn fresh(dir: &Path) -> Result<PathBuf> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(dir.to_path_buf())
}

/// `used_memory` and `used_memory_dataset` of `INFO memory`.
fn used_memory(redis: &RedisServer) -> Result<(u64, u64)> {
    let info = redis.cli(&["INFO", "memory"])?;
    let field = |name: &str| -> Result<u64> {
        info.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(':')))
            .and_then(|v| v.trim().parse().ok())
            .with_context(|| format!("INFO memory has no {name}"))
    };
    Ok((field("used_memory")?, field("used_memory_dataset")?))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let gl_run = sibling_gl_run()?;
    let root = args
        .dir
        .unwrap_or_else(|| corpus::workspace_root().join(".cache/fleet-bench"));
    for &variants in &args.variants {
        let workload = Workload {
            corpus: args.corpus.clone().unwrap_or_else(corpus::default_dir),
            variants,
            limit: args.limit,
        };
        let runs = args.runs.unwrap_or(if variants <= 1 { 5 } else { 3 });
        let plan = Plan {
            runs,
            nocache_runs: args.nocache_runs.unwrap_or(runs),
            procs: args.procs,
            concurrent_nocache: args.concurrent_nocache,
        };
        bench(
            &gl_run,
            &root.join(format!("v{variants}")),
            &workload,
            &plan,
        )?;
    }
    Ok(())
}

/// How many processes of each kind.
struct Plan {
    runs: usize,
    nocache_runs: usize,
    procs: usize,
    concurrent_nocache: bool,
}

fn phases(r: &RunReport) -> String {
    format!(
        "setup {:.0} create {:.0} compile {:.0} link {:.0} draw {:.0} ms; {} of {} gets hit",
        r.setup_ms, r.create_ms, r.compile_ms, r.link_ms, r.draw_ms, r.hits, r.gets
    )
}

fn log(line: &str) {
    eprintln!("fleet_bench: {line}");
}

fn bench(gl_run: &Path, dir: &Path, workload: &Workload, plan: &Plan) -> Result<()> {
    let (runs, procs) = (plan.runs, plan.procs);
    let dir = fresh(dir)?;
    let redis = RedisServer::start(&["--maxmemory-policy", "allkeys-lru"])?;
    let key = dir.join("fleet.key");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&key, "fleet-bench key: 32 bytes or more of secret")?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    }
    let fleet = Fleet {
        url: redis.url(),
        key: key.clone(),
    };
    let baseline = used_memory(&redis)?;

    // The first machine compiles everything; its stores reach its directory and the fleet.
    let seed = fresh(&dir.join("seed"))?;
    let first = run("seed", command(gl_run, &seed, workload, Some(&fleet))?)?;
    log(&format!(
        "seed: {} programs, {:.0} ms compile+link+draw, {} sets",
        first.report.programs,
        first.report.cld_ms(),
        first.report.sets
    ));

    let (mut none, mut local, mut remote) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..runs {
        if round < plan.nocache_runs {
            let home = fresh(&dir.join("nocache"))?;
            let r = run("no cache", Case::NoCache.command(gl_run, &home, workload)?)?;
            log(&format!("{round} no cache: {:.0} ms", r.report.cld_ms()));
            none.push(r);
        }
        // A local warm start: the seed machine's own directory, no fleet.
        let r = run("local warm", command(gl_run, &seed, workload, None)?)?;
        log(&format!("{round} local warm: {}", phases(&r.report)));
        local.push(r);
        // A fresh machine: empty directory, the fleet.
        let home = fresh(&dir.join("fresh"))?;
        let r = run("fleet", command(gl_run, &home, workload, Some(&fleet))?)?;
        log(&format!(
            "{round} fresh from the fleet: {}",
            phases(&r.report)
        ));
        remote.push(r);
    }

    // N machines with empty directories start at once.
    let start = Instant::now();
    let mut children = Vec::new();
    for i in 0..procs {
        let home = fresh(&dir.join(format!("many-{i}")))?;
        let mut cmd = command(gl_run, &home, workload, Some(&fleet))?;
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        children.push(cmd.spawn()?);
    }
    let mut many = Vec::new();
    for child in children {
        let out = child.wait_with_output()?;
        many.push(finish("concurrent", out, start.elapsed())?);
    }
    let all_warm = start.elapsed();
    // And N processes compiling from nothing at once, for scale.
    let start = Instant::now();
    let mut children = Vec::new();
    for i in 0..if plan.concurrent_nocache { procs } else { 0 } {
        let home = fresh(&dir.join(format!("many-cold-{i}")))?;
        let mut cmd = Case::NoCache.command(gl_run, &home, workload)?;
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        children.push(cmd.spawn()?);
    }
    for child in children {
        let out = child.wait_with_output()?;
        finish("concurrent no cache", out, start.elapsed())?;
    }
    let all_cold = start.elapsed();

    // What the fleet holds, and what it costs Redis.
    let keys = KeyRing::new(FleetKey::from_file(&key)?, None);
    let mut admin = FleetAdmin::connect(&fleet.url, Some(keys), Duration::from_secs(5))?;
    let ids = admin.identities()?;
    let mut value_bytes = 0;
    let mut entries = 0;
    for id in &ids {
        let identity = gpucache::Identity::new(Vec::new());
        if id.namespace != format!("{:032x}", identity.namespace()) {
            continue;
        }
        let r = admin.pull(&identity, &mut |_, _| Ok(()), &mut |_, _| {})?;
        value_bytes += r.value_bytes;
        entries += r.pulled;
    }
    let wire: u64 = ids.iter().map(|i| i.pushed_bytes).sum();
    let (used, dataset) = used_memory(&redis)?;
    let (used, dataset) = (
        used.saturating_sub(baseline.0),
        dataset.saturating_sub(baseline.1),
    );

    let cld = |rs: &[Run]| rs.iter().map(|r| r.report.cld_ms()).collect::<Vec<_>>();
    let wall = |rs: &[Run]| rs.iter().map(|r| ms(r.wall)).collect::<Vec<_>>();
    let (n, l, f) = (
        median(&cld(&none)),
        median(&cld(&local)),
        median(&cld(&remote)),
    );
    let hits: u64 = remote.iter().map(|r| r.report.hits).sum();
    let gets: u64 = remote.iter().map(|r| r.report.gets).sum();
    println!(
        "\n{} programs ({} runs per case, medians with ranges; compile+link+draw in ms, \
         process wall time in ms)\n",
        first.report.programs, runs
    );
    println!("| case | compile+link+draw | × no cache | × local warm | wall |");
    println!("|---|---|---|---|---|");
    for (label, rs, m) in [
        ("no cache", &none, n),
        ("local warm start", &local, l),
        ("fresh machine, warmed from the fleet", &remote, f),
    ] {
        println!(
            "| {label} | {} | {:.1}× faster | {:.2}× | {} |",
            median_range(&cld(rs), 0),
            n / m,
            m / l,
            median_range(&wall(rs), 0),
        );
    }
    println!(
        "\n- fresh machines: {hits} of {gets} gets hit ({:.1}%)",
        100.0 * hits as f64 / gets.max(1) as f64
    );
    let many_cld = cld(&many);
    println!(
        "- {procs} fresh machines at once: all warm (every process exited) after {:.0} ms; \
         compile+link+draw per process median {:.0} ms, worst {:.0} ms",
        ms(all_warm),
        median(&many_cld),
        many_cld.iter().copied().fold(0.0, f64::max),
    );
    if plan.concurrent_nocache {
        println!(
            "- {procs} processes without a cache at once: {:.0} ms",
            ms(all_cold)
        );
    }
    println!(
        "- the fleet holds {entries} entries: {:.2} MB of values sent as {:.2} MB \
         (compressed, with headers and MACs: {:.2}× the values); Redis used_memory grew by \
         {:.2} MB: {:.2} bytes of Redis memory per cached value byte (used_memory_dataset: \
         {:.2} MB, {:.2} per value byte)",
        value_bytes as f64 / 1e6,
        wire as f64 / 1e6,
        wire as f64 / value_bytes.max(1) as f64,
        used as f64 / 1e6,
        used as f64 / value_bytes.max(1) as f64,
        dataset as f64 / 1e6,
        dataset as f64 / value_bytes.max(1) as f64,
    );
    let targets = [
        ("≥ 30× faster than no cache", n / f >= 30.0),
        ("within 1.2× of a local warm start", f <= 1.2 * l),
    ];
    for (name, met) in targets {
        println!("- target {name}: {}", if met { "met" } else { "NOT met" });
    }
    Ok(())
}
