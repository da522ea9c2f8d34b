//! The warm-start benchmark (issue "C ABI and EGL_ANDROID_blob_cache on a real driver"):
//! fresh processes compile, link and draw the kodi shadertoy corpus on Mesa 25 (llvmpipe)
//! with no cache, Mesa's three disk caches, gpucache through the blob-cache callbacks, and
//! an in-process map (the floor); hot and cold page cache, and cold on emulated slow
//! storage (eMMC, SATA SSD, hard disk). Prints Markdown tables.
//!
//! Needs Mesa 25 and the corpus: `scripts/run` sets both up and runs this.
//! Usage: `warm_start [--variants 1,10] [--warm-runs N] [--populate-runs N] [--limit N]
//! [--dir DIR] [--storage emmc,ssd,hdd|IOPS:BPS|none]`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use gpucache_bench::gl::cases::Workload;
use gpucache_bench::gl::corpus;
use gpucache_bench::gl::throttle::Profile;
use gpucache_bench::gl::warm_start::{measure, sibling_gl_run, Settings};

#[derive(Parser)]
struct Args {
    /// Corpus sizes to compare: `#define` variants per shader (1 = 80 programs, 10 = 800).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    variants: Vec<usize>,
    /// Warm runs per case, each once cold and once hot (default 15 for 80 programs, 10 for
    /// larger corpora).
    #[arg(long)]
    warm_runs: Option<usize>,
    /// Populating runs per case (default 3 for 80 programs, 1 for larger corpora).
    #[arg(long)]
    populate_runs: Option<usize>,
    /// Only the first N programs.
    #[arg(long)]
    limit: Option<usize>,
    /// Where the cases' caches live (default: .cache/warm-start in the project).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Storage profiles for extra cold runs through the kernel's block-I/O throttle: `emmc`,
    /// `ssd`, `hdd`, `IOPS:BYTES_PER_S`, or `none`. Skipped with a note where the throttle
    /// is unavailable (it needs root and cgroup v1 blkio or the v2 io controller).
    #[arg(long, value_delimiter = ',', default_value = "emmc,ssd,hdd")]
    storage: Vec<String>,
    /// The corpus (default: what scripts/fetch-corpus downloads).
    #[arg(long)]
    corpus: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let gl_run = sibling_gl_run()?;
    let dir = args
        .dir
        .unwrap_or_else(|| corpus::workspace_root().join(".cache/warm-start"));
    let profiles = Profile::parse_list(&args.storage)?;
    for variants in args.variants {
        let settings = Settings {
            gl_run: gl_run.clone(),
            workload: Workload {
                corpus: args.corpus.clone().unwrap_or_else(corpus::default_dir),
                variants,
                limit: args.limit,
            },
            populate_runs: args
                .populate_runs
                .unwrap_or(if variants <= 1 { 3 } else { 1 }),
            warm_runs: args
                .warm_runs
                .unwrap_or(if variants <= 1 { 15 } else { 10 }),
            dir: dir.join(format!("v{variants}")),
            profiles: profiles.clone(),
        };
        let results = measure(&settings).context("warm-start comparison")?;
        println!("{}", results.render());
    }
    Ok(())
}
