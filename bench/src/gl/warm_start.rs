//! The warm-start comparison: fresh processes compile, link and draw the corpus with no
//! cache, with Mesa's three disk caches, with gpucache through the blob-cache callbacks, and
//! with the floor (an in-process map). Cases are interleaved run by run and medians quoted,
//! because whole runs on a noisy machine slow down at random.
//!
//! 1. Populating rounds: each case starts from an empty cache (`no cache` is measured here).
//! 2. Warm rounds: each caching case runs cold (its files evicted from the page cache with
//!    `POSIX_FADV_DONTNEED`, checked with `fincore`), then hot (files just read).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use super::cases::{run, Case, Run, Workload};
use super::pagecache::{self, DiskUsage};
use super::throttle::{Profile, Throttle};
use crate::disk::measure::{median, ms};

/// Settings of one comparison.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The `gl_run` binary.
    pub gl_run: PathBuf,
    /// What every process draws.
    pub workload: Workload,
    /// Populating runs per case (each from an empty cache).
    pub populate_runs: usize,
    /// Warm runs per case, each cold and hot.
    pub warm_runs: usize,
    /// Parent of the cases' folders (emptied first).
    pub dir: PathBuf,
    /// Storage profiles for extra cold runs (the block-I/O throttle); empty: none.
    pub profiles: Vec<Profile>,
}

/// Everything measured for one case.
#[derive(Debug, Default)]
pub struct CaseRuns {
    /// Runs from an empty cache.
    pub populate: Vec<Run>,
    /// Runs with the cache's files evicted from the page cache.
    pub cold: Vec<Run>,
    /// Runs with the cache's files in the page cache.
    pub hot: Vec<Run>,
    /// The cache after the last populating run.
    pub disk: DiskUsage,
    /// Cold runs under each storage profile of [`Results::profiles`], in its order.
    pub slow: Vec<Vec<Run>>,
    /// Bytes of Mesa's own cache inside gpucache's directory (the hybrid's
    /// `mesa-context`), part of `disk`.
    pub mesa_context_bytes: u64,
}

/// The comparison's results, by case in [`Case::ALL`] order.
#[derive(Debug)]
pub struct Results {
    /// Programs per process.
    pub programs: u64,
    /// Per case.
    pub cases: Vec<(Case, CaseRuns)>,
    /// Bytes of the values Mesa stored (what the floor holds).
    pub values_bytes: u64,
    /// The storage profiles measured.
    pub profiles: Vec<Profile>,
    /// Why the profiles were skipped, when they were.
    pub profiles_skipped: Option<String>,
}

fn home(settings: &Settings, case: Case) -> PathBuf {
    settings.dir.join(case.slug())
}

fn log(line: &str) {
    eprintln!("warm_start: {line}");
}

/// Runs the comparison.
pub fn measure(settings: &Settings) -> Result<Results> {
    let mut cases: Vec<(Case, CaseRuns)> = Case::ALL
        .iter()
        .map(|&c| (c, CaseRuns::default()))
        .collect();
    let n = cases.len();
    for round in 0..settings.populate_runs.max(1) {
        for i in 0..n {
            let (case, runs) = &mut cases[(i + round) % n];
            let home = home(settings, *case);
            if home.exists() {
                std::fs::remove_dir_all(&home)?;
            }
            std::fs::create_dir_all(&home)?;
            let r = run(*case, &settings.gl_run, &home, &settings.workload)?;
            log(&format!(
                "populate {round} {}: {:.0} ms compile+link+draw",
                case.label(),
                r.report.cld_ms()
            ));
            case.check_folders(&home)?;
            runs.populate.push(r);
        }
    }
    for (case, runs) in &mut cases {
        let path = case.cache_path(&home(settings, *case));
        runs.disk = pagecache::disk_usage(&path)?;
        if let Some(mesa_context) = find_dir(&path, gpucache_ffi::MESA_CONTEXT_CACHE_SUBDIR, 3) {
            runs.mesa_context_bytes = pagecache::disk_usage(&mesa_context)?.allocated;
        }
        runs.slow = vec![Vec::new(); settings.profiles.len()];
    }
    let (throttle, profiles_skipped) = throttle_or_note(settings);
    let profiles = if throttle.is_some() {
        settings.profiles.clone()
    } else {
        Vec::new()
    };
    for round in 0..settings.warm_runs {
        for i in 0..n {
            let (case, runs) = &mut cases[(i + round) % n];
            if !case.caches() {
                continue;
            }
            let home = home(settings, *case);
            pagecache::evict(&case.cache_path(&home))
                .with_context(|| format!("evicting {}", case.label()))?;
            let cold = run(*case, &settings.gl_run, &home, &settings.workload)?;
            let hot = run(*case, &settings.gl_run, &home, &settings.workload)?;
            log(&format!(
                "warm {round} {}: cold {:.0} ms, hot {:.0} ms",
                case.label(),
                cold.report.cld_ms(),
                hot.report.cld_ms()
            ));
            runs.cold.push(cold);
            runs.hot.push(hot);
            if let Some(throttle) = &throttle {
                for (p, profile) in profiles.iter().enumerate() {
                    let r = slow_run(throttle, profile, *case, settings, &home)?;
                    log(&format!(
                        "warm {round} {} on {}: cold {:.0} ms, wall {:.0} ms, {:?}",
                        case.label(),
                        profile.name,
                        r.report.cld_ms(),
                        ms(r.wall),
                        r.io.unwrap_or_default()
                    ));
                    runs.slow[p].push(r);
                }
            }
        }
    }
    let floor = &cases
        .iter()
        .find(|(c, _)| *c == Case::Floor)
        .expect("floor")
        .1;
    let values_bytes = floor.populate.last().map_or(0, |r| r.report.values_bytes);
    let programs = floor.populate.last().map_or(0, |r| r.report.programs);
    drop(throttle);
    Ok(Results {
        programs,
        cases,
        values_bytes,
        profiles,
        profiles_skipped,
    })
}

/// The block-I/O throttle for `settings.profiles` (none without profiles), or why there is
/// none, printed as a note: the profiles are then skipped.
pub(super) fn throttle_or_note(settings: &Settings) -> (Option<Throttle>, Option<String>) {
    if settings.profiles.is_empty() {
        return (None, None);
    }
    match Throttle::create(&settings.dir) {
        Ok(t) => (Some(t), None),
        Err(e) => {
            let note = format!("storage profiles skipped: no block-I/O throttle ({e:#})");
            println!("Note: {note}\n");
            (None, Some(note))
        }
    }
}

/// The directory named `name` at `path` or up to `depth` levels below it (the drop-in's is
/// inside its namespace and identity directories).
fn find_dir(path: &Path, name: &str, depth: usize) -> Option<PathBuf> {
    let here = path.join(name);
    if here.is_dir() {
        return Some(here);
    }
    if depth == 0 {
        return None;
    }
    let mut subs: Vec<PathBuf> = std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subs.sort();
    subs.iter().find_map(|s| find_dir(s, name, depth - 1))
}

/// One cold run under `profile`: the case's files evicted, this process moved into the
/// throttled group for the run (so is the child it starts), the group's reads counted.
pub(super) fn slow_run(
    throttle: &Throttle,
    profile: &Profile,
    case: Case,
    settings: &Settings,
    home: &Path,
) -> Result<Run> {
    pagecache::evict(&case.cache_path(home))
        .with_context(|| format!("evicting {}", case.label()))?;
    throttle.limit(profile)?;
    let before = throttle.counts()?;
    throttle.enter()?;
    let result = run(case, &settings.gl_run, home, &settings.workload);
    throttle.leave()?;
    let after = throttle.counts()?;
    let mut r = result?;
    r.io = Some(super::throttle::IoCount {
        reads: after.reads.saturating_sub(before.reads),
        bytes: after.bytes.saturating_sub(before.bytes),
    });
    Ok(r)
}

pub(super) fn median_of(runs: &[Run], f: impl Fn(&Run) -> f64) -> f64 {
    median(&runs.iter().map(f).collect::<Vec<_>>())
}

pub(super) fn cld(runs: &[Run]) -> f64 {
    median_of(runs, |r| r.report.cld_ms())
}

pub(super) fn wall(runs: &[Run]) -> f64 {
    median_of(runs, |r| ms(r.wall))
}

pub(super) fn create(runs: &[Run]) -> f64 {
    median_of(runs, |r| r.report.create_ms)
}

impl Results {
    pub(super) fn case(&self, case: Case) -> &CaseRuns {
        &self
            .cases
            .iter()
            .find(|(c, _)| *c == case)
            .expect("every case")
            .1
    }

    /// The Markdown table and the targets' verdicts.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let floor = self.case(Case::Floor);
        let nocache = cld(&self.case(Case::NoCache).populate);
        let (floor_hot, floor_cold) = (cld(&floor.hot), cld(&floor.cold));
        let _ = writeln!(
            out,
            "### {} programs: compile+link+draw per process, medians (ms)\n",
            self.programs
        );
        let _ = writeln!(
            out,
            "| case | first run | × no cache | hot | × floor | hot wall | hot create | cold | × floor | cold wall | on disk (allocated) | × values | files |"
        );
        let _ = writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for (case, runs) in &self.cases {
            let first = cld(&runs.populate);
            let mut row = format!(
                "| {} | {first:.0} | {:.2}× |",
                case.label(),
                first / nocache
            );
            if case.caches() {
                let (hot, cold) = (cld(&runs.hot), cld(&runs.cold));
                let _ = write!(
                    row,
                    " {hot:.1} | {:.2}× | {:.0} | {:.1} | {cold:.1} | {:.2}× | {:.0} | {:.2} MB | {:.3}× | {} |",
                    hot / floor_hot,
                    wall(&runs.hot),
                    create(&runs.hot),
                    cold / floor_cold,
                    wall(&runs.cold),
                    runs.disk.allocated as f64 / 1e6,
                    runs.disk.allocated as f64 / self.values_bytes as f64,
                    runs.disk.files,
                );
            } else {
                let _ = write!(
                    row,
                    " | | {:.0} | {:.1} | | | | | | |",
                    wall(&runs.populate),
                    create(&runs.populate)
                );
            }
            let _ = writeln!(out, "{row}");
        }
        let _ = writeln!(
            out,
            "\nValues stored by Mesa: {:.2} MB. Hot = cache files in the page cache; cold = evicted with POSIX_FADV_DONTNEED (fincore: 0 bytes resident) before the run.",
            self.values_bytes as f64 / 1e6
        );
        out.push_str(&self.verdicts());
        out.push_str(&self.render_profiles());
        out
    }

    fn verdicts(&self) -> String {
        let mut out = String::new();
        let g = self.case(Case::Gpucache);
        let floor = self.case(Case::Floor);
        let mesa = [Case::MesaDb, Case::MesaMultiFile, Case::MesaSingleFile];
        let verdict = |ok: bool| if ok { "met" } else { "MISSED" };
        let hot = cld(&g.hot) / cld(&floor.hot);
        let best_mesa_hot = mesa
            .iter()
            .map(|&c| cld(&self.case(c).hot))
            .fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            out,
            "\n- hot page cache: gpucache {hot:.3}× the floor (target ≤ 1.05×): {}; vs the best Mesa back end {:.3}× (target ≤ 1×): {}",
            verdict(hot <= 1.05),
            cld(&g.hot) / best_mesa_hot,
            verdict(cld(&g.hot) <= best_mesa_hot)
        );
        let best_mesa_cold = mesa
            .iter()
            .map(|&c| cld(&self.case(c).cold))
            .fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            out,
            "- cold page cache: gpucache {:.1} ms vs the best Mesa back end {best_mesa_cold:.1} ms (target: ahead of all): {}",
            cld(&g.cold),
            verdict(cld(&g.cold) < best_mesa_cold)
        );
        let space = g.disk.allocated as f64 / self.values_bytes as f64;
        let _ = writeln!(
            out,
            "- bytes on disk: gpucache allocates {space:.3}× the values (target ≤ 1.05×): {}",
            verdict(space <= 1.05)
        );
        let first = cld(&g.populate) / cld(&self.case(Case::NoCache).populate);
        let _ = writeln!(
            out,
            "- first, populating run: gpucache {first:.3}× no cache (target ≤ 1.05×): {}",
            verdict(first <= 1.05)
        );
        let gp = self.case(Case::GpucachePrograms);
        let best_mesa_wall = mesa
            .iter()
            .map(|&c| wall(&self.case(c).hot))
            .fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            out,
            "- program cache + blob cache, hot: compile+link+draw {:.3}× the best Mesa back end (target ≤ 0.95×): {}; {:.3}× the blob cache alone (target < 1×): {}; wall {:.0} ms vs the best Mesa back end's {best_mesa_wall:.0} ms (target: below every one): {}",
            cld(&gp.hot) / best_mesa_hot,
            verdict(cld(&gp.hot) <= 0.95 * best_mesa_hot),
            cld(&gp.hot) / cld(&g.hot),
            verdict(cld(&gp.hot) < cld(&g.hot)),
            wall(&gp.hot),
            verdict(wall(&gp.hot) < best_mesa_wall)
        );
        let best = |f: &dyn Fn(&[Run]) -> f64, hot: bool| {
            mesa.iter()
                .map(|&c| {
                    let r = self.case(c);
                    f(if hot { &r.hot } else { &r.cold })
                })
                .fold(f64::INFINITY, f64::min)
        };
        let _ = writeln!(
            out,
            "- process wall time (the hybrid: Mesa's cache for context creation in gpucache's directory, {:.1} KB of it): hot {:.0} ms against the best Mesa back end's {:.0} ms: {}; cold {:.0} against {:.0} ms: {}; context creation hot {:.1} ms against {:.1} ms",
            g.mesa_context_bytes as f64 / 1e3,
            wall(&g.hot),
            best(&wall, true),
            verdict(wall(&g.hot) <= best(&wall, true)),
            wall(&g.cold),
            best(&wall, false),
            verdict(wall(&g.cold) <= best(&wall, false)),
            create(&g.hot),
            best(&create, true),
        );
        let d = self.case(Case::Dropin);
        let space =
            d.disk.allocated as f64 / (self.values_bytes as f64 + d.mesa_context_bytes as f64);
        let _ = writeln!(
            out,
            "- drop-in (unmodified gl_run, nothing but the vendor JSON and its settings): hot wall {:.0} ms against the best Mesa back end's {:.0} ms (target: no more): {}; cold wall {:.0} against {:.0} ms; compile+link+draw hot {:.1} ms (gpucache linked in: {:.1}); bytes on disk {:.3}× the values plus Mesa's context-creation files ({:.1} KB; target ≤ 1.05×): {}",
            wall(&d.hot),
            best(&wall, true),
            verdict(wall(&d.hot) <= best(&wall, true)),
            wall(&d.cold),
            best(&wall, false),
            cld(&d.hot),
            cld(&g.hot),
            space,
            d.mesa_context_bytes as f64 / 1e3,
            verdict(space <= 1.05),
        );
        let (gets, hits): (u64, u64) = g
            .hot
            .iter()
            .chain(&g.cold)
            .fold((0, 0), |(a, b), r| (a + r.report.gets, b + r.report.hits));
        let _ = writeln!(
            out,
            "- gpucache warm runs: {hits} of {gets} gets hit; {} values refused for Mesa's 64 KiB buffer",
            g.hot.iter().chain(&g.cold).map(|r| r.report.gets_buffer_too_small).sum::<u64>()
        );
        out
    }
}

/// `gl_run` next to the running binary.
pub fn sibling_gl_run() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let path = dir.join("gl_run");
    if !path.exists() {
        anyhow::bail!("{} is missing: build the gl_run binary too", path.display());
    }
    Ok(path)
}
