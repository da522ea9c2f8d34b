//! Process wall time in paired rounds: the drop-in (an unmodified application) and gpucache
//! linked in, against Mesa's three back ends, hot, cold and on the emulated storage
//! profiles. Each round runs every case once per condition back to back; the verdicts use
//! the median per-round ratio and a sign test (`bench/src/gl/wall.rs` says why).
//!
//! Usage: `wall_time [--cases mesa-db,mesa-multi,mesa-single,gpucache,dropin] [--rounds 21]
//! [--variants 1] [--storage emmc,ssd,hdd|none] [--dir DIR]`. Needs what `warm_start` needs
//! (Mesa 25 and the corpus: `scripts/setup-mesa`, `scripts/fetch-corpus`).

use std::path::PathBuf;

use clap::Parser;
use gpucache_bench::gl::cases::Workload;
use gpucache_bench::gl::corpus;
use gpucache_bench::gl::throttle::Profile;
use gpucache_bench::gl::wall::{default_dir, measure, parse_cases};
use gpucache_bench::gl::warm_start::{sibling_gl_run, Settings};

#[derive(Parser)]
struct Args {
    /// The cases, by the warm-start benchmark's folder names.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "mesa-db,mesa-multi,mesa-single,gpucache,dropin"
    )]
    cases: Vec<String>,
    /// Rounds (each case once per condition in each).
    #[arg(long, default_value_t = 21)]
    rounds: usize,
    /// `#define` variants per shader (1 = 80 programs, 10 = 800).
    #[arg(long, default_value_t = 1)]
    variants: usize,
    /// Storage profiles for the throttled cold runs: `emmc`, `ssd`, `hdd`, `IOPS:BPS`, or
    /// `none`.
    #[arg(long, value_delimiter = ',', default_value = "emmc,ssd,hdd")]
    storage: Vec<String>,
    /// Where the cases' caches live (default: .cache/wall-time in the project).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The corpus (default: what scripts/fetch-corpus downloads).
    #[arg(long)]
    corpus: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let cases = parse_cases(&args.cases)?;
    let profiles = Profile::parse_list(&args.storage)?;
    let settings = Settings {
        gl_run: sibling_gl_run()?,
        workload: Workload {
            corpus: args.corpus.unwrap_or_else(corpus::default_dir),
            variants: args.variants,
            limit: None,
        },
        populate_runs: 1,
        warm_runs: args.rounds,
        dir: args
            .dir
            .unwrap_or_else(default_dir)
            .join(format!("v{}", args.variants)),
        profiles,
    };
    let paired = measure(&settings, &cases)?;
    println!("{}", paired.render());
    Ok(())
}
