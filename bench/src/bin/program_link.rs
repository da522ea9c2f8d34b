//! The program cache's benchmark: the time to have every program of the corpus linked,
//! cold (compiled and linked from source, no cache of any kind) against warm (through
//! gpucache-gl's program cache) against the floor (the same binaries loaded with raw
//! `glProgramBinary` from memory, read from one file first), each a fresh `gl_run` process
//! with Mesa's own cache disabled, the three cases interleaved round by round, medians.
//! No program is drawn: this measures compile and link, the program cache's share.
//!
//! Usage: `program_link [--variants N] [--api gl|gles|both] [--rounds N] [--dir DIR]`.
//! Prints a table and the seed's histograms of one cold and one warm run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use gpucache_bench::gl::{corpus, mesa, RunReport};

#[derive(Parser)]
struct Args {
    /// `#define` variants per shader (1 = 80 programs, 10 = 800).
    #[arg(long, default_value_t = 1)]
    variants: usize,
    /// gl, gles or both.
    #[arg(long, default_value = "both")]
    api: String,
    /// Interleaved rounds (each runs every case once).
    #[arg(long, default_value_t = 7)]
    rounds: usize,
    /// Where the caches go (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Warm and floor runs also install gpucache's blob callbacks (populated first), as a
    /// deployment on Mesa does: llvmpipe then finds the code it generates at link time.
    #[arg(long)]
    blob_callbacks: bool,
}

fn gl_run() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.parent().unwrap_or(Path::new(".")).join("gl_run");
    if !path.exists() {
        bail!("{} is missing: build the gl_run binary too", path.display());
    }
    Ok(path)
}

fn run(args: &[&str], variants: usize, blob: Option<&Path>) -> Result<RunReport> {
    let mut cmd = Command::new(gl_run()?);
    match blob {
        Some(dir) => cmd
            .args(["--callbacks", "gpucache", "--cache-path"])
            .arg(dir),
        None => cmd.args(["--callbacks", "none"]),
    };
    let out = cmd
        .envs(mesa::env()?)
        .env("MESA_SHADER_CACHE_DISABLE", "true")
        .arg("--no-draw")
        .args(["--variants", &variants.to_string()])
        .arg("--corpus")
        .arg(corpus::default_dir())
        .args(args)
        .output()
        .context("starting gl_run")?;
    if !out.status.success() {
        bail!("gl_run {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    RunReport::parse(&String::from_utf8_lossy(&out.stdout))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

struct Row {
    api: String,
    programs: u64,
    cold: f64,
    warm: f64,
    floor: f64,
    warm_wall: f64,
}

fn bench_api(api: &str, args: &Args, dir: &Path) -> Result<(Row, String, String)> {
    let programs = dir.join(format!("{api}-programs"));
    let floor = dir.join(format!("{api}-floor.bin"));
    let (p, f) = (programs.to_str().unwrap(), floor.to_str().unwrap());
    let cold_hist = dir.join(format!("{api}-cold-histograms.txt"));
    let warm_hist = dir.join(format!("{api}-warm-histograms.txt"));
    let blob_dir = dir.join(format!("{api}-blob"));
    let blob = args.blob_callbacks.then_some(blob_dir.as_path());
    let v = args.variants;
    // Every run of the benchmark starts from empty caches.
    for stale in [&programs, &blob_dir] {
        if stale.exists() {
            std::fs::remove_dir_all(stale)?;
        }
    }
    if floor.exists() {
        std::fs::remove_file(&floor)?;
    }
    // Populate: the first run through the empty program cache is the cold run whose
    // histograms are printed; the floor's file is written by its own first run.
    let first = run(
        &[
            "--api",
            api,
            "--programs",
            "cache",
            "--programs-path",
            p,
            "--histograms",
            cold_hist.to_str().unwrap(),
        ],
        v,
        blob,
    )?;
    run(
        &["--api", api, "--programs", "floor", "--programs-path", f],
        v,
        blob,
    )?;
    let (mut cold, mut warm, mut fl, mut warm_wall) = (vec![], vec![], vec![], vec![]);
    for round in 0..args.rounds {
        // Rotate the order so that no case always runs first.
        for case in (0..3).map(|i| (i + round) % 3) {
            let started = std::time::Instant::now();
            let r = match case {
                // Cold: nothing cached at all.
                0 => run(&["--api", api, "--programs", "source"], v, None)?,
                1 => run(
                    &["--api", api, "--programs", "cache", "--programs-path", p],
                    v,
                    blob,
                )?,
                _ => run(
                    &["--api", api, "--programs", "floor", "--programs-path", f],
                    v,
                    blob,
                )?,
            };
            let wall = started.elapsed().as_secs_f64() * 1e3;
            if r.linked != first.linked {
                bail!("{api}: case {case} linked {} of {}", r.linked, first.linked);
            }
            match case {
                0 => cold.push(r.linked_ms()),
                1 => {
                    if r.links != 0 || r.compiles > r.programs - r.linked {
                        bail!("{api}: a warm run compiled or linked: {r:?}");
                    }
                    warm.push(r.linked_ms());
                    warm_wall.push(wall);
                }
                _ => fl.push(r.linked_ms()),
            }
        }
        eprint!(".");
    }
    run(
        &[
            "--api",
            api,
            "--programs",
            "cache",
            "--programs-path",
            p,
            "--histograms",
            warm_hist.to_str().unwrap(),
        ],
        v,
        blob,
    )?;
    let row = Row {
        api: api.to_string(),
        programs: first.programs,
        cold: median(cold),
        warm: median(warm),
        floor: median(fl),
        warm_wall: median(warm_wall),
    };
    Ok((
        row,
        std::fs::read_to_string(cold_hist)?,
        std::fs::read_to_string(warm_hist)?,
    ))
}

fn main() -> Result<()> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let apis: Vec<&str> = match args.api.as_str() {
        "both" => vec!["gl", "gles"],
        "gl" => vec!["gl"],
        "gles" => vec!["gles"],
        other => bail!("--api gl|gles|both, not {other}"),
    };
    let mut rows = Vec::new();
    let mut histograms = String::new();
    for api in apis {
        let (row, cold, warm) = bench_api(api, &args, &dir)?;
        histograms.push_str(&format!(
            "\n### {api}, {} programs: cold run (through the empty cache)\n\n```\n{cold}```\n\n### {api}: warm run\n\n```\n{warm}```\n",
            row.programs
        ));
        rows.push(row);
    }
    eprintln!();
    println!(
        "Every program linked, ms (median of {} interleaved rounds, fresh process per run, Mesa's cache disabled, no draws; warm and floor {}):\n",
        args.rounds,
        if args.blob_callbacks { "with gpucache's blob callbacks" } else { "without blob callbacks" }
    );
    println!("| API | programs | cold (from source) | warm (program cache) | floor (raw glProgramBinary) | cold / warm | warm / floor | warm process wall |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2}× | {:.3}× | {:.0} |",
            r.api,
            r.programs,
            r.cold,
            r.warm,
            r.floor,
            r.cold / r.warm,
            r.warm / r.floor,
            r.warm_wall
        );
    }
    println!();
    for r in &rows {
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        println!(
            "- {} × {}: warm {:.2}× faster than cold (target ≥ 6×): {}; {:.3}× the floor (target ≤ 1.15×): {}",
            r.api,
            r.programs,
            r.cold / r.warm,
            verdict(r.cold / r.warm >= 6.0),
            r.warm / r.floor,
            verdict(r.warm / r.floor <= 1.15)
        );
    }
    println!("{histograms}");
    Ok(())
}
