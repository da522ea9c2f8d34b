//! Disk overhead (issue 11, item 4.7): bytes of segment files ÷ value bytes, and overhead
//! bytes per entry, after one process populates a directory and after two populate it at
//! once. Corpora: the kodi shadertoy corpus through real Mesa 25 (`gl_run` with gpucache's
//! blob-cache callbacks, as the warm-start benchmark runs it), and two synthetic corpora of
//! 2,000 values of 200 B to 4 KiB (log-uniform) under 20-byte keys: compiled-code-like and
//! random (incompressible). Prints a Markdown table.
//!
//! Usage: `disk_overhead [--no-kodi] [--values N] [--dir DIR]`. The kodi rows need Mesa 25
//! and the corpus (`scripts/setup-mesa`, `scripts/fetch-corpus`) and the `gl_run` binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use gpucache_bench::gl::cases::{Case, Workload};
use gpucache_bench::gl::corpus;
use gpucache_bench::gl::warm_start::sibling_gl_run;

#[derive(Parser)]
struct Args {
    /// Skip the kodi corpus (no Mesa needed).
    #[arg(long)]
    no_kodi: bool,
    /// Values per synthetic corpus.
    #[arg(long, default_value_t = 2000)]
    values: usize,
    /// Where the directories are made (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Internal: populate DIR with synthetic corpus KIND (code|random) and exit.
    #[arg(long, num_args = 2, value_names = ["DIR", "KIND"], hide = true)]
    populate: Option<Vec<String>>,
}

const SEED: u64 = 0x6770_7563_6163_6865;

/// splitmix64: the same corpus in every process.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn synthetic(kind: &str, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut rng = Rng(SEED);
    (0..n)
        .map(|_| {
            let key: Vec<u8> = (0..20).map(|_| rng.next() as u8).collect();
            let unit = rng.next() as f64 / u64::MAX as f64;
            let len = (200.0 * (4096.0f64 / 200.0).powf(unit)) as usize;
            let value = if kind == "code" {
                code_like(&mut rng, len)
            } else {
                (0..len).map(|_| rng.next() as u8).collect()
            };
            (key, value)
        })
        .collect()
}

/// A 16-byte random hash, then 8-byte instruction words: a skewed opcode out of 48, three
/// 6-bit register fields, an immediate that is mostly zero or small.
fn code_like(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..16).map(|_| rng.next() as u8).collect();
    while v.len() < len {
        let r = rng.next();
        let op = (r % 48).min((r >> 8) % 48);
        let regs = (r >> 16) & 0x3_FFFF;
        let imm = match (r >> 40) % 4 {
            0 | 1 => 0,
            2 => (r >> 48) & 0xFF,
            _ => (r >> 44) & 0xF_FFFF,
        };
        v.extend_from_slice(&(op | regs << 8 | imm << 32).to_le_bytes());
    }
    v.truncate(len);
    v
}

fn populate(dir: &Path, kind: &str, n: usize) -> Result<()> {
    let cache = gpucache::Cache::builder()
        .directory(dir)
        .identity(&b"disk-overhead bench"[..])
        .max_memory_bytes(256 << 20)
        .open()?;
    for (k, v) in synthetic(kind, n) {
        cache.insert(&k, v)?;
    }
    cache.flush()?;
    Ok(())
}

/// Bytes of every `seg-*` file under `dir`, and the cache directories (holding `meta`) found.
fn segment_bytes(dir: &Path, caches: &mut Vec<PathBuf>) -> Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if e.file_type()?.is_dir() {
            total += segment_bytes(&e.path(), caches)?;
        } else if name.starts_with("seg-") {
            total += e.metadata()?.len();
        } else if name == "meta" {
            caches.push(dir.to_path_buf());
        }
    }
    Ok(total)
}

struct Measure {
    entries: u64,
    value_bytes: u64,
    file_bytes: u64,
}

/// Entries and raw value bytes as listed by `gpucache ls` (decompressed lengths), and the
/// segment files' bytes.
fn measure(dir: &Path) -> Result<Measure> {
    let mut caches = Vec::new();
    let file_bytes = segment_bytes(dir, &mut caches)?;
    let (mut entries, mut value_bytes) = (0, 0);
    for c in caches {
        let listing = gpucache::inspect::entries(&c)?;
        entries += listing.entries.len() as u64;
        value_bytes += listing
            .entries
            .iter()
            .map(|e| u64::from(e.value_len))
            .sum::<u64>();
    }
    Ok(Measure {
        entries,
        value_bytes,
        file_bytes,
    })
}

fn run_all(mut cmds: Vec<Command>) -> Result<()> {
    let children: Vec<_> = cmds
        .iter_mut()
        .map(|c| {
            c.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
        })
        .collect::<std::io::Result<_>>()?;
    for c in children {
        let out = c.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "populating process failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    Ok(())
}

fn row(name: &str, one: &Measure, two: &Measure) -> String {
    let cell = |m: &Measure| {
        format!(
            "{:.3}× | {:.0} B",
            m.file_bytes as f64 / m.value_bytes.max(1) as f64,
            (m.file_bytes as f64 - m.value_bytes as f64) / m.entries.max(1) as f64
        )
    };
    format!(
        "| {name} | {} | {:.0} B | {} | {} |",
        one.entries,
        one.value_bytes as f64 / one.entries.max(1) as f64,
        cell(one),
        cell(two)
    )
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(p) = &args.populate {
        return populate(Path::new(&p[0]), &p[1], args.values);
    }
    let tmp = tempfile::tempdir()?;
    let base = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for kind in ["code", "random"] {
        let mut m = Vec::new();
        for procs in [1, 2] {
            let dir = base.join(format!("{kind}-{procs}"));
            let _ = std::fs::remove_dir_all(&dir);
            let cmds = (0..procs)
                .map(|_| {
                    let mut c = Command::new(&exe);
                    c.arg("--populate")
                        .arg(&dir)
                        .arg(kind)
                        .args(["--values", &args.values.to_string()]);
                    c
                })
                .collect();
            run_all(cmds)?;
            m.push(measure(&dir)?);
        }
        let name = if kind == "code" {
            "synthetic, compiled-code-like"
        } else {
            "synthetic, random bytes"
        };
        rows.push(row(name, &m[0], &m[1]));
    }
    if !args.no_kodi {
        let gl_run = sibling_gl_run()?;
        let workload = Workload {
            corpus: corpus::default_dir(),
            variants: 1,
            limit: None,
        };
        let mut m = Vec::new();
        for procs in [1, 2] {
            let home = base.join(format!("kodi-{procs}"));
            let _ = std::fs::remove_dir_all(&home);
            std::fs::create_dir_all(&home)?;
            let cmds = (0..procs)
                .map(|_| Case::Gpucache.command(&gl_run, &home, &workload))
                .collect::<Result<Vec<_>>>()?;
            run_all(cmds).context("gl_run on the kodi corpus")?;
            m.push(measure(&Case::Gpucache.cache_path(&home))?);
        }
        rows.push(row("kodi (80 programs, Mesa 25)", &m[0], &m[1]));
    }
    println!(
        "| corpus | entries | mean value | one process: on disk ÷ values | overhead/entry | \
         two processes at once: on disk ÷ values | overhead/entry |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}
