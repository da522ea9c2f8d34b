//! One process of the warm-start benchmark: creates a surfaceless GL context on Mesa,
//! installs the chosen blob-cache callbacks, compiles, links and draws the corpus once, and
//! prints its report (`name value` lines). Mesa's own disk cache is chosen by the caller's
//! environment (`MESA_SHADER_CACHE_*`).
//!
//! Usage: `gl_run --callbacks none|gpucache|floor [--cache-path P] [--corpus DIR]
//! [--variants N] [--limit N] [--pixels FILE]`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use gpucache_bench::gl::{corpus, run_once, Callbacks, RunOptions};

#[derive(Parser)]
struct Args {
    /// Callbacks installed after eglCreateContext.
    #[arg(long, value_enum)]
    callbacks: Callbacks,
    /// gpucache's directory, or the floor's file.
    #[arg(long)]
    cache_path: Option<PathBuf>,
    /// The corpus (default: what scripts/fetch-corpus downloads).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// `#define` variants per shader.
    #[arg(long, default_value_t = 1)]
    variants: usize,
    /// Only the first N programs.
    #[arg(long)]
    limit: Option<usize>,
    /// Write `name linked pixel-hash` lines here.
    #[arg(long)]
    pixels: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let options = RunOptions {
        callbacks: args.callbacks,
        corpus: args.corpus.unwrap_or_else(corpus::default_dir),
        variants: args.variants,
        cache_path: args.cache_path,
        limit: args.limit,
    };
    let (report, drawn) = run_once(&options)?;
    if let Some(path) = args.pixels {
        let lines: String = drawn
            .iter()
            .map(|d| format!("{} {} {:016x}\n", d.name, d.linked as u8, d.pixels))
            .collect();
        std::fs::write(&path, lines).with_context(|| format!("writing {}", path.display()))?;
    }
    print!("{}", report.to_text());
    Ok(())
}
