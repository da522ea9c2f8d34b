//! One process of the warm-start benchmark: creates a surfaceless GL context on Mesa,
//! installs the chosen blob-cache callbacks, compiles, links and draws the corpus once, and
//! prints its report (`name value` lines). Mesa's own disk cache is chosen by the caller's
//! environment (`MESA_SHADER_CACHE_*`).
//!
//! Usage: `gl_run --callbacks none|gpucache|floor [--cache-path P] [--programs
//! source|cache|floor] [--programs-path P] [--api gl|gles] [--corpus DIR] [--variants N]
//! [--limit N] [--mesa-context-cache] [--pixels FILE] [--histograms FILE]`.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Parser;
use gpucache_bench::gl::{corpus, run_once, Api, Callbacks, Damage, ProgramMode, RunOptions};

#[derive(Clone, Copy, clap::ValueEnum)]
enum Programs {
    /// Compile and link from source.
    Source,
    /// gpucache-gl's program cache in --programs-path (a directory).
    Cache,
    /// glProgramBinary from binaries read from --programs-path (a file) first.
    Floor,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum ApiArg {
    /// Desktop GL 4.5 compatibility.
    Gl,
    /// OpenGL ES 3.
    Gles,
}

#[derive(Parser)]
struct Args {
    /// Callbacks installed after eglCreateContext.
    #[arg(long, value_enum)]
    callbacks: Callbacks,
    /// gpucache's directory, or the floor's file.
    #[arg(long)]
    cache_path: Option<PathBuf>,
    /// How programs are linked.
    #[arg(long, value_enum, default_value = "source")]
    programs: Programs,
    /// The program cache's directory, or the binary floor's file.
    #[arg(long)]
    programs_path: Option<PathBuf>,
    /// The context's API.
    #[arg(long, value_enum, default_value = "gl")]
    api: ApiArg,
    /// Write the program cache's histograms of this run here.
    #[arg(long)]
    histograms: Option<PathBuf>,
    /// The application build id the program cache is opened with.
    #[arg(long, default_value = "gpucache-bench")]
    build_id: String,
    /// Damage every cached binary before the run (tests of the fallback).
    #[arg(long, value_enum)]
    damage: Option<Damage>,
    /// Link every program but draw none (the program-cache benchmark's measure).
    #[arg(long)]
    no_draw: bool,
    /// The corpus (default: what scripts/fetch-corpus downloads).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// `#define` variants per shader.
    #[arg(long, default_value_t = 1)]
    variants: usize,
    /// Only the first N programs.
    #[arg(long)]
    limit: Option<usize>,
    /// With `--callbacks gpucache`: keep Mesa's own cache on, inside the cache directory, for
    /// what context creation compiles (the hybrid).
    #[arg(long)]
    mesa_context_cache: bool,
    /// Write `name linked pixel-hash` lines here.
    #[arg(long)]
    pixels: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let programs_path = || {
        args.programs_path
            .clone()
            .context("--programs cache|floor needs --programs-path")
    };
    let options = RunOptions {
        callbacks: args.callbacks,
        programs: match args.programs {
            Programs::Source => ProgramMode::Source,
            Programs::Cache => ProgramMode::Cache(programs_path()?),
            Programs::Floor => ProgramMode::Floor(programs_path()?),
        },
        api: match args.api {
            ApiArg::Gl => Api::Gl,
            ApiArg::Gles => Api::Gles,
        },
        build_id: args.build_id.clone(),
        damage: args.damage,
        draw: !args.no_draw,
        corpus: args.corpus.unwrap_or_else(corpus::default_dir),
        variants: args.variants,
        cache_path: args.cache_path,
        limit: args.limit,
        mesa_context_cache: args.mesa_context_cache,
    };
    let (report, drawn, histograms) = run_once(&options)?;
    if let (Some(path), Some(h)) = (&args.histograms, &histograms) {
        std::fs::write(path, gpucache_gl::report::histograms_text(h))
            .with_context(|| format!("writing {}", path.display()))?;
    }
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
