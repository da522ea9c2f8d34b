//! Real GL through Mesa for the warm-start benchmark and the driver tests: one process
//! creates a surfaceless context, installs blob-cache callbacks (or none), then compiles,
//! links and draws every corpus program once.
//!
//! `gl_run` runs [`run_once`] in a process of its own and prints a [`RunReport`];
//! `warm_start` and the tests start it under the environment of each case.

pub mod cases;
pub mod corpus;
pub mod floor;
pub mod mesa;
pub mod pagecache;
pub mod programs;
pub mod report;
mod slow_report;
pub use crate::throttle;
pub mod wall;
pub mod warm_start;

use std::path::PathBuf;

use anyhow::{bail, Context as _, Result};

use crate::disk::measure::ms;

pub use gpucache_gl::{Api, GlContext};
pub use report::RunReport;

/// Which callbacks a run installs after `eglCreateContext`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Callbacks {
    /// None: no cache, or Mesa's own disk cache (chosen by the environment).
    None,
    /// gpucache through its C ABI (`gpucache_egl_configure`, `gpucache_egl_install`).
    Gpucache,
    /// An in-process hash map filled from one file before the context is created.
    Floor,
}

/// How a run links its programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProgramMode {
    /// From source (Mesa's disk cache or the callbacks may still serve the driver's work).
    Source,
    /// Through gpucache-gl's program cache in this directory.
    Cache(PathBuf),
    /// With `glProgramBinary` from binaries held in memory, read from this file first.
    Floor(PathBuf),
}

/// How [`RunOptions::damage`] damages the cached binaries (the stored entries stay
/// well-formed: the driver is what must reject them).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Damage {
    /// One byte in the middle of the binary flipped.
    Flip,
    /// The binary cut to half its length.
    Truncate,
    /// The binary's first 32 bytes (the driver's header) changed, as a binary of another
    /// driver build would have them.
    Foreign,
}

/// What one process does.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The callbacks.
    pub callbacks: Callbacks,
    /// How programs are linked.
    pub programs: ProgramMode,
    /// The context's API.
    pub api: Api,
    /// The build id the program cache is opened with.
    pub build_id: String,
    /// Damage every cached binary of the corpus before the run (tests of the fallback).
    pub damage: Option<Damage>,
    /// Whether each program is drawn once after it is linked.
    pub draw: bool,
    /// The corpus folder.
    pub corpus: PathBuf,
    /// `#define` variants per shader (1 = 80 programs, 10 = 800).
    pub variants: usize,
    /// The cache directory of gpucache, or the floor's file.
    pub cache_path: Option<PathBuf>,
    /// Only the first `limit` programs.
    pub limit: Option<usize>,
    /// With gpucache's callbacks: Mesa's own cache kept on inside gpucache's directory for
    /// what context creation compiles (`gpucache_egl_mesa_context_cache`, the hybrid).
    pub mesa_context_cache: bool,
}

/// Runs the whole job in this process and reports it, with the program cache's histograms
/// of the run when it used one.
pub fn run_once(
    options: &RunOptions,
) -> Result<(
    RunReport,
    Vec<programs::Drawn>,
    Option<gpucache_gl::HistogramSet>,
)> {
    let mut programs = corpus::load(&options.corpus, options.variants, options.api)?;
    if let Some(limit) = options.limit {
        programs.truncate(limit);
    }
    let cache_path = || {
        options
            .cache_path
            .clone()
            .context("this mode needs --cache-path")
    };
    // Before the context: the caches get ready (gpucache's preload thread runs while Mesa
    // creates the context; the floor reads its whole file).
    let setup = std::time::Instant::now();
    match options.callbacks {
        Callbacks::None => {}
        Callbacks::Gpucache => {
            configure_gpucache(&cache_path()?)?;
            if options.mesa_context_cache {
                mesa_context_cache()?;
            }
        }
        Callbacks::Floor => floor::load(&cache_path()?)?,
    }
    let setup = setup.elapsed();
    let context = GlContext::create_with(options.api, |ctx| match options.callbacks {
        Callbacks::None => Ok(()),
        Callbacks::Gpucache => install_gpucache(ctx),
        Callbacks::Floor => Ok(ctx.install_blob_funcs(floor::set, floor::get)?),
    })?;
    let vertex = corpus::vertex_shader(options.api);
    let link_setup = std::time::Instant::now();
    let (drawn, timings, counts, histograms) = match &options.programs {
        ProgramMode::Source => {
            let (d, t, c) = programs::draw_all(
                &context,
                &vertex,
                &programs,
                programs::Linker::Source,
                options.draw,
            )?;
            (d, t, c, None)
        }
        ProgramMode::Cache(dir) => {
            let identity = gpucache_gl::GlIdentity::query(
                &context.gl(),
                options.api,
                options.build_id.clone(),
            );
            let cache = gpucache_gl::ProgramCache::builder()
                .directory(dir)
                .open(&identity)?;
            let opened = link_setup.elapsed();
            if let Some(damage) = options.damage {
                damage_binaries(&cache, &vertex, &programs, damage);
            }
            let (d, mut t, c) = programs::draw_all(
                &context,
                &vertex,
                &programs,
                programs::Linker::Cache(&cache),
                options.draw,
            )?;
            // Opening the program cache is part of having every program linked.
            t.link += opened;
            let h = cache.histograms();
            cache.flush()?;
            (d, t, c, Some(h))
        }
        ProgramMode::Floor(file) => {
            let mut binaries = programs::BinaryFloor::load(file)?;
            let loaded = link_setup.elapsed();
            let (d, mut t, c) = programs::draw_all(
                &context,
                &vertex,
                &programs,
                programs::Linker::Floor(&mut binaries),
                options.draw,
            )?;
            t.link += loaded;
            binaries.save(file)?;
            (d, t, c, None)
        }
    };
    let create = context.create_time();
    // Terminating the display waits for Mesa's cache writes, so every `set` is in before
    // the caches persist.
    let teardown = std::time::Instant::now();
    drop(context);
    let mut report = RunReport {
        programs: drawn.len() as u64,
        linked: drawn.iter().filter(|d| d.linked).count() as u64,
        setup_ms: ms(setup),
        create_ms: ms(create),
        compile_ms: ms(timings.compile),
        link_ms: ms(timings.link),
        draw_ms: ms(timings.draw),
        compiles: counts.compiles,
        links: counts.links,
        binary_loads: counts.binary_loads,
        ..RunReport::default()
    };
    match options.callbacks {
        Callbacks::None => {}
        Callbacks::Gpucache => gpucache_counters(&mut report)?,
        Callbacks::Floor => {
            report.values_bytes = floor::save(&cache_path()?)?;
            let s = floor::stats();
            (report.gets, report.hits, report.sets) = (s.gets, s.hits, s.sets);
        }
    }
    report.teardown_ms = ms(teardown.elapsed());
    Ok((report, drawn, histograms))
}

/// Replaces every cached binary of `programs` with a damaged copy.
fn damage_binaries(
    cache: &gpucache_gl::ProgramCache,
    vertex: &str,
    programs: &[corpus::Program],
    damage: Damage,
) {
    use gpucache_gl::ShaderKind;
    cache.wait_for_preload();
    let v = cache.shader_hash(ShaderKind::Vertex, vertex);
    for program in programs {
        let f = cache.shader_hash(ShaderKind::Fragment, &program.fragment);
        let key = cache.program_key(&v, &f, &gpucache_gl::Bindings::new());
        let Some(mut entry) = cache.load(&key) else {
            continue;
        };
        let data = &mut entry.binary.data;
        match damage {
            Damage::Flip => {
                let middle = data.len() / 2;
                data[middle] ^= 0xff;
            }
            Damage::Truncate => data.truncate(data.len() / 2),
            Damage::Foreign => data.iter_mut().take(32).for_each(|b| *b ^= 0x5a),
        }
        cache.store(&key, &entry);
    }
}

/// Configured through the C ABI with the defaults (miss-on-oversize off): the install
/// helper must turn it on because the display is Mesa's.
fn configure_gpucache(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    let mut config = std::mem::MaybeUninit::<gpucache_ffi::gpucache_egl_config>::zeroed();
    // SAFETY: `config` is writable; `gpucache_egl_config_init` fills every field.
    let mut config = unsafe {
        gpucache_ffi::gpucache_egl_config_init(config.as_mut_ptr());
        config.assume_init()
    };
    config.directory = dir.as_ptr();
    // SAFETY: `config` is initialised and `dir` outlives the call (the cache copies it).
    let code = unsafe { gpucache_ffi::gpucache_egl_configure(&config) };
    if code != gpucache_ffi::GPUCACHE_OK {
        bail!("gpucache_egl_configure: {}", error_name(code));
    }
    Ok(())
}

/// The hybrid: Mesa's own cache in `<dir>/mesa-context`, set before the display exists.
fn mesa_context_cache() -> Result<()> {
    // SAFETY: called before the display is created, while this process has no other thread
    // that reads or writes the environment (gpucache's preload thread does not).
    let code = unsafe { gpucache_ffi::gpucache_egl_mesa_context_cache(0) };
    if code != gpucache_ffi::GPUCACHE_OK {
        bail!("gpucache_egl_mesa_context_cache: {}", error_name(code));
    }
    Ok(())
}

fn install_gpucache(ctx: &GlContext) -> Result<()> {
    // SAFETY: the display is initialized and a context was created on it.
    let code = unsafe { gpucache_ffi::gpucache_egl_install(ctx.display_ptr()) };
    if code != gpucache_ffi::GPUCACHE_OK {
        bail!("gpucache_egl_install: {}", error_name(code));
    }
    Ok(())
}

fn error_name(code: i32) -> String {
    // SAFETY: the function returns a static NUL-terminated string for any code.
    unsafe { std::ffi::CStr::from_ptr(gpucache_ffi::gpucache_error_name(code)) }
        .to_string_lossy()
        .into_owned()
}

fn gpucache_counters(report: &mut RunReport) -> Result<()> {
    let mut stats = std::mem::MaybeUninit::<gpucache_ffi::gpucache_egl_stats>::zeroed();
    // SAFETY: a zeroed stats structure is valid; the call fills it after reading
    // `struct_size`.
    let stats = unsafe {
        (*stats.as_mut_ptr()).struct_size = std::mem::size_of::<gpucache_ffi::gpucache_egl_stats>();
        let code = gpucache_ffi::gpucache_egl_stats(stats.as_mut_ptr());
        if code != gpucache_ffi::GPUCACHE_OK {
            bail!("gpucache_egl_stats: {}", error_name(code));
        }
        stats.assume_init()
    };
    report.gets = stats.gets;
    report.hits = stats.hits;
    report.sets = stats.sets;
    report.sets_dropped = stats.sets_dropped;
    report.gets_buffer_too_small = stats.gets_buffer_too_small;
    report.miss_on_oversize = stats.miss_on_oversize != 0;
    // Persist before the process ends (what an application's exit handler does).
    gpucache_ffi::gpucache_egl_shutdown_at_exit();
    Ok(())
}
