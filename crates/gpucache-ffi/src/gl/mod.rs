//! The GPU program cache (`gpucache-gl`) on the caller's GL context: linked programs, loaded
//! from cached program binaries when possible, with counters and histograms.

use std::ffi::{c_char, c_void, CStr};
use std::mem::size_of;
use std::ptr;

use gpucache::HistogramSnapshot;
use gpucache_gl::{
    Bindings, GlIdentity, GlowGl, Metric, ProgramCache, ProgramCacheBuilder, ProgramManager,
    INTERLEAVED_ATTRIBS, SEPARATE_ATTRIBS, VERSION,
};

use crate::egl::path_from_c;
use crate::error::{ffi_call, ffi_quiet, Failure, GPUCACHE_ERROR_GL};

/// Bytes of each program binary stored. Value `0`.
pub const GPUCACHE_GL_METRIC_BINARY_SIZE: i32 = 0;
/// Bytes of binaries in memory before each store. Value `1`.
pub const GPUCACHE_GL_METRIC_CACHE_SIZE_BEFORE: i32 = 1;
/// Bytes of binaries in memory after each store. Value `2`.
pub const GPUCACHE_GL_METRIC_CACHE_SIZE_AFTER: i32 = 2;
/// Microseconds from asking for a cached program to having it loaded from its binary.
/// Value `3`.
pub const GPUCACHE_GL_METRIC_BINARY_HIT_TIME: i32 = 3;
/// Microseconds to link a program whose binary was not cached. Value `4`.
pub const GPUCACHE_GL_METRIC_BINARY_MISS_LINK_TIME: i32 = 4;
/// Microseconds to answer a shader compile from the status cache. Value `5`.
pub const GPUCACHE_GL_METRIC_STATUS_HIT_TIME: i32 = 5;
/// Microseconds to compile a shader whose status was not cached. Value `6`.
pub const GPUCACHE_GL_METRIC_STATUS_MISS_COMPILE_TIME: i32 = 6;

/// Finds a GL function by name, or returns NULL: `eglGetProcAddress` cast to this type (EGL
/// 1.5 also returns core functions), `SDL_GL_GetProcAddress`, `glfwGetProcAddress`.
#[allow(non_camel_case_types)]
pub type gpucache_gl_loader = Option<unsafe extern "C" fn(name: *const c_char) -> *mut c_void>;

/// An open program cache, tied to the GL context that was current when it was opened.
/// Opaque; close it with `gpucache_gl_cache_close`. Use it on one thread at a time, where
/// that context (or one sharing its objects) is current.
#[allow(non_camel_case_types)]
pub struct gpucache_gl_cache {
    // Dropping neither calls GL: the cache's flush writes files, and the glow context holds
    // function pointers only (no debug callback is installed). Closing needs no context.
    cache: ProgramCache,
    gl: glow::Context,
}

/// Settings of a program cache. Fill it with `gpucache_gl_config_init`, change what you
/// need, then pass it to `gpucache_gl_cache_open`.
///
/// ABI growth as for `gpucache_egl_config`: later versions only append fields, and the
/// library reads the first `struct_size` bytes, giving fields beyond them their defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct gpucache_gl_config {
    /// `sizeof(gpucache_gl_config)` as the caller knows it.
    pub struct_size: usize,
    /// NUL-terminated directory that persists the programs (each GL identity gets its own
    /// subdirectory), or NULL to keep them in memory only. Default NULL.
    pub directory: *const c_char,
    /// NUL-terminated UTF-8 name of the application's build: programs cached by another
    /// build are not loaded. NULL is the empty name. Default NULL.
    pub build_id: *const c_char,
    /// Bytes of program binaries kept in memory. Default 64 MiB.
    pub max_memory_bytes: u64,
    /// Bytes of program binaries on disk. Default 256 MiB.
    pub max_disk_bytes: u64,
    /// Non-zero: opening starts reading every stored binary into memory in the background.
    /// Default 1.
    pub preload: i32,
    /// Set to 0 (`gpucache_gl_config_init` does); other values are refused.
    pub reserved: u32,
}

/// The size of the first published `gpucache_gl_config`; smaller sizes are refused.
const CONFIG_SIZE_V1: usize = size_of::<gpucache_gl_config>();

impl Default for gpucache_gl_config {
    fn default() -> Self {
        Self {
            struct_size: size_of::<Self>(),
            directory: ptr::null(),
            build_id: ptr::null(),
            max_memory_bytes: 64 << 20,
            max_disk_bytes: 256 << 20,
            preload: 1,
            reserved: 0,
        }
    }
}

/// A name and the location bound to it before linking: an attribute location
/// (`glBindAttribLocation`) or a fragment output's color number (`glBindFragDataLocation`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct gpucache_gl_binding {
    /// NUL-terminated UTF-8 name.
    pub name: *const c_char,
    /// The location or color number.
    pub location: u32,
}

/// What a program is linked from. Zero it, set `struct_size = sizeof(gpucache_gl_program_desc)`
/// and the sources; every other field is optional (NULL or 0). The bindings and varyings
/// are part of the program's cache key, as they change the linked result.
///
/// ABI growth as for `gpucache_gl_config`; fields beyond `struct_size` are zero.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
#[allow(non_camel_case_types)]
pub struct gpucache_gl_program_desc {
    /// `sizeof(gpucache_gl_program_desc)` as the caller knows it.
    pub struct_size: usize,
    /// NUL-terminated UTF-8 source of the vertex shader.
    pub vertex_source: *const c_char,
    /// NUL-terminated UTF-8 source of the fragment shader.
    pub fragment_source: *const c_char,
    /// `attribute_count` attribute bindings; NULL when the count is 0.
    pub attributes: *const gpucache_gl_binding,
    /// Number of `attributes`.
    pub attribute_count: usize,
    /// `frag_data_count` fragment output bindings (desktop GL; a GLES driver ignores them or
    /// records a GL error); NULL when the count is 0.
    pub frag_data: *const gpucache_gl_binding,
    /// Number of `frag_data`.
    pub frag_data_count: usize,
    /// `varying_count` NUL-terminated transform-feedback varyings, in order; NULL when the
    /// count is 0.
    pub varyings: *const *const c_char,
    /// Number of `varyings`.
    pub varying_count: usize,
    /// `GL_INTERLEAVED_ATTRIBS` (0x8C8C) or `GL_SEPARATE_ATTRIBS` (0x8C8D) with varyings;
    /// ignored without.
    pub varying_buffer_mode: u32,
    /// Set to 0; other values are refused.
    pub reserved: u32,
}

/// The size of the first published `gpucache_gl_program_desc`; smaller sizes are refused.
const DESC_SIZE_V1: usize = size_of::<gpucache_gl_program_desc>();

impl Default for gpucache_gl_program_desc {
    fn default() -> Self {
        Self {
            struct_size: size_of::<Self>(),
            vertex_source: ptr::null(),
            fragment_source: ptr::null(),
            attributes: ptr::null(),
            attribute_count: 0,
            frag_data: ptr::null(),
            frag_data_count: 0,
            varyings: ptr::null(),
            varying_count: 0,
            varying_buffer_mode: 0,
            reserved: 0,
        }
    }
}

/// Counters of a program cache, since it was opened. In C write
/// `struct gpucache_gl_stats`: the name is also the function's, like `struct stat`.
///
/// ABI growth as for `gpucache_egl_stats`: set `struct_size` to `sizeof(gpucache_gl_stats)`
/// before the call; the library writes at most that many bytes and sets `struct_size` to the
/// number it wrote.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct gpucache_gl_stats {
    /// In: the size of the caller's structure. Out: the bytes written.
    pub struct_size: usize,
    /// Programs whose link status is cached (their binaries are cached).
    pub programs: u64,
    /// Shaders whose compile status is cached.
    pub shaders: u64,
    /// Binary lookups answered, from memory or disk.
    pub hits: u64,
    /// Binary lookups that found nothing.
    pub misses: u64,
    /// Bytes of binaries in memory now (keys, values and the per-entry overhead).
    pub memory_bytes: u64,
    /// Binaries in memory now.
    pub memory_entries: u64,
    /// The memory byte budget (`max_memory_bytes`).
    pub memory_max_bytes: u64,
    /// Binaries evicted from memory to make room, or refused there at the door (they stay on
    /// disk).
    pub memory_evictions: u64,
    /// Binaries read into memory by the start-up preload.
    pub preloaded: u64,
    /// Bytes of the cache's files on disk; 0 without a directory.
    pub disk_bytes: u64,
    /// Binaries on disk; 0 without a directory.
    pub disk_entries: u64,
    /// Failed disk reads and writes (the cache keeps serving from memory).
    pub disk_errors: u64,
    /// 1 when a directory was configured and its disk tier takes writes now, else 0 (no
    /// directory, a read-only one, or the last write failed: a full disk).
    pub disk_available: i32,
    /// Written as 0.
    pub reserved: u32,
}

/// The size of the first published `gpucache_gl_stats`; smaller sizes are refused.
const STATS_SIZE_V1: usize = size_of::<gpucache_gl_stats>();

/// One histogram, summarised. Values are bytes or microseconds (see the
/// `GPUCACHE_GL_METRIC_*` constants); every field but `runs` is 0 when `count` is 0.
/// Quantiles are exact to within a bucket (12.5%), clamped to `min` and `max`.
///
/// ABI growth as for `gpucache_gl_stats`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub struct gpucache_histogram_summary {
    /// In: the size of the caller's structure. Out: the bytes written.
    pub struct_size: usize,
    /// Values recorded.
    pub count: u64,
    /// Their sum (wrapping past `UINT64_MAX`).
    pub sum: u64,
    /// The smallest.
    pub min: u64,
    /// The largest.
    pub max: u64,
    /// The median.
    pub p50: u64,
    /// The 90th percentile.
    pub p90: u64,
    /// The 99th percentile.
    pub p99: u64,
    /// Processes whose values are included: 1 for this process's run; for the persisted
    /// histograms, the runs that recorded anything and flushed (0 when none did).
    pub runs: u64,
}

/// The size of the first published `gpucache_histogram_summary`; smaller sizes are refused.
const SUMMARY_SIZE_V1: usize = size_of::<gpucache_histogram_summary>();

/// Fills `config` with the defaults (memory only, empty build id, 64 MiB in memory, 256 MiB
/// on disk, preload on) and sets `struct_size`. NULL is ignored. `struct_size` is handled as
/// by `gpucache_egl_config_init`.
///
/// # Safety
///
/// `config` is NULL or points to a writable `gpucache_gl_config` (its `struct_size` field
/// readable).
#[no_mangle]
pub unsafe extern "C" fn gpucache_gl_config_init(config: *mut gpucache_gl_config) {
    ffi_quiet((), || {
        if config.is_null() {
            return;
        }
        // SAFETY: `config` is non-NULL and its leading `struct_size` readable (the caller's
        // contract; every version starts with it).
        let given = unsafe { ptr::addr_of!((*config).struct_size).read() };
        let size = if (CONFIG_SIZE_V1..=size_of::<gpucache_gl_config>()).contains(&given) {
            given
        } else {
            CONFIG_SIZE_V1
        };
        let defaults = gpucache_gl_config {
            struct_size: size,
            ..Default::default()
        };
        // SAFETY: the caller's structure is at least `size` bytes (the first version, or the
        // size the caller gave); the two do not overlap.
        unsafe {
            ptr::copy_nonoverlapping(
                ptr::addr_of!(defaults).cast::<u8>(),
                config.cast::<u8>(),
                size,
            );
        }
    });
}

/// Opens a program cache for the GL context current on the calling thread and stores the
/// handle in `*out` (NULL on failure). `config` NULL means the defaults.
///
/// GL functions are found with `loader` and bound to that context. The cache is namespaced
/// by the context's `GL_VENDOR`, `GL_RENDERER`, `GL_VERSION`, `GL_SHADING_LANGUAGE_VERSION`,
/// API (GL or GLES), `build_id` and the CPU architecture: binaries of another identity are
/// never loaded. Every later call with the handle must be made on a thread where this
/// context, or one sharing its objects, is current (`gpucache_gl_cache_close` excepted).
///
/// Returns `GPUCACHE_OK`; `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL `out` or `loader`, bad
/// `struct_size` or `reserved`, an empty `directory`, a `build_id` that is not UTF-8);
/// `GPUCACHE_ERROR_GL` (the loader finds no `glGetString`, or no context is current: it
/// answers NULL for `GL_VERSION`); `GPUCACHE_ERROR_IO`. A directory that cannot be used is
/// not an error: the cache is then memory-only (`disk_available` 0 in the stats).
///
/// # Safety
///
/// `config` is NULL or a readable `gpucache_gl_config` of `config->struct_size` bytes whose
/// strings are NULL or NUL-terminated; `out` is NULL or writable; `loader` is NULL or returns
/// NULL or the named GL function, callable on this thread with the context current.
#[no_mangle]
pub unsafe extern "C" fn gpucache_gl_cache_open(
    config: *const gpucache_gl_config,
    loader: gpucache_gl_loader,
    out: *mut *mut gpucache_gl_cache,
) -> i32 {
    ffi_call("gpucache_gl_cache_open", || {
        if out.is_null() {
            return Err(Failure::invalid("out is NULL"));
        }
        // SAFETY: `out` is non-NULL and writable per the contract.
        unsafe { out.write(ptr::null_mut()) };
        let loader = loader.ok_or_else(|| Failure::invalid("loader is NULL"))?;
        let config = if config.is_null() {
            gpucache_gl_config::default()
        } else {
            // SAFETY: forwarded caller contract: readable for its `struct_size` bytes, and
            // any bits are valid for the structure's fields.
            unsafe { read_sized(config, CONFIG_SIZE_V1, "gpucache_gl_config") }?
        };
        // SAFETY: forwarded caller contract: the strings are NULL or NUL-terminated.
        let (builder, build_id) = unsafe { to_builder(&config) }?;
        // SAFETY: the loader returns NULL or the named GL function (the caller's contract);
        // `name` is NUL-terminated.
        let resolve = |name: &CStr| unsafe { loader(name.as_ptr()) }.cast_const();
        // SAFETY: as above, a non-NULL answer is the named GL function.
        unsafe { require_current_context(&resolve) }?;
        // SAFETY: the functions resolved belong to the context current on this thread,
        // which answered GL_VERSION just now, so glow's own GL_VERSION query succeeds.
        let gl = unsafe { glow::Context::from_loader_function_cstr(resolve) };
        // SAFETY: the context is current on this thread for the whole call (checked above,
        // and the caller's contract), and `gl_api` does not outlive it.
        let gl_api = unsafe { GlowGl::new(&gl) };
        let identity = GlIdentity::detect(&gl_api, build_id);
        let cache = builder.open(&identity)?;
        let handle = Box::into_raw(Box::new(gpucache_gl_cache { cache, gl }));
        // SAFETY: as above.
        unsafe { out.write(handle) };
        Ok(())
    })
}

/// The builder and build id a C config describes.
///
/// # Safety
///
/// `config.directory` and `config.build_id` are NULL or NUL-terminated.
unsafe fn to_builder(
    config: &gpucache_gl_config,
) -> Result<(ProgramCacheBuilder, String), Failure> {
    if config.reserved != 0 {
        return Err(Failure::invalid("reserved is not 0"));
    }
    let mut builder = ProgramCache::builder()
        .max_memory_bytes(config.max_memory_bytes)
        .max_disk_bytes(config.max_disk_bytes)
        .preload(config.preload != 0);
    if !config.directory.is_null() {
        // SAFETY: a non-NULL `directory` is NUL-terminated per the contract.
        let dir = unsafe { CStr::from_ptr(config.directory) };
        if dir.is_empty() {
            return Err(Failure::invalid(
                "directory is an empty string (use NULL for memory only)",
            ));
        }
        builder = builder.directory(path_from_c(dir));
    }
    // SAFETY: forwarded contract for `build_id`.
    let build_id = unsafe { optional_str(config.build_id, "build_id") }?.unwrap_or("");
    Ok((builder, build_id.to_owned()))
}

/// `GPUCACHE_ERROR_GL` unless `glGetString(GL_VERSION)` answers: a context is current.
///
/// # Safety
///
/// `resolve` returns NULL or the named GL function, callable on this thread.
unsafe fn require_current_context(resolve: &dyn Fn(&CStr) -> *const c_void) -> Result<(), Failure> {
    // GL entry points use APIENTRY, which is "system" (stdcall on 32-bit Windows).
    type GetStringFn = unsafe extern "system" fn(u32) -> *const u8;
    let get_string = resolve(c"glGetString");
    if get_string.is_null() {
        return Err(Failure::new(
            GPUCACHE_ERROR_GL,
            "the loader does not find glGetString",
        ));
    }
    // SAFETY: a non-NULL address of glGetString, whose type this is (GL 1.0, GLES 2.0).
    let get_string = unsafe { std::mem::transmute::<*const c_void, GetStringFn>(get_string) };
    // SAFETY: glGetString takes any enum. The caller makes a context current; when it did
    // not, GL's dispatch (libglvnd, Mesa) answers NULL, which is what this catches.
    if unsafe { get_string(VERSION) }.is_null() {
        return Err(Failure::new(
            GPUCACHE_ERROR_GL,
            "glGetString(GL_VERSION) returned NULL: no GL context is current on this thread",
        ));
    }
    Ok(())
}

/// Compiles and links the program `desc` describes, or loads it from its cached binary, and
/// writes its name to `*program_out` and 1 (loaded from the cache) or 0 (compiled and
/// linked, and its binary cached) to `*from_cache_out`. On failure both are 0.
///
/// The program belongs to the caller: delete it with `glDeleteProgram`. The shaders are
/// deleted before the call returns. A shader whose compile status is cached is not compiled
/// unless the program must be linked from source.
///
/// Returns `GPUCACHE_OK`; `GPUCACHE_ERROR_COMPILE` or `GPUCACHE_ERROR_LINK` with GL's info
/// log in `gpucache_last_error_message()`; `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL `cache`,
/// `desc`, `program_out`, source or name; NULL array with a non-zero count; bad
/// `struct_size`, `reserved` or `varying_buffer_mode`; a string that is not UTF-8);
/// `GPUCACHE_ERROR_GL` (GL created no shader or program object, as when no context is
/// current).
///
/// # Safety
///
/// `cache` is NULL or an open cache whose context (or one sharing its objects) is current on
/// this thread, used by no other thread during the call; `desc` is NULL or a readable
/// `gpucache_gl_program_desc` of `desc->struct_size` bytes whose strings are NULL or
/// NUL-terminated and whose arrays are NULL or readable for their counts; `program_out` and
/// `from_cache_out` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn gpucache_gl_program(
    cache: *mut gpucache_gl_cache,
    desc: *const gpucache_gl_program_desc,
    program_out: *mut u32,
    from_cache_out: *mut i32,
) -> i32 {
    ffi_call("gpucache_gl_program", || {
        if program_out.is_null() {
            return Err(Failure::invalid("program_out is NULL"));
        }
        // SAFETY: `program_out` is non-NULL and writable per the contract.
        unsafe { program_out.write(0) };
        if !from_cache_out.is_null() {
            // SAFETY: `from_cache_out` is non-NULL and writable per the contract.
            unsafe { from_cache_out.write(0) };
        }
        // SAFETY: forwarded caller contract.
        let cache = unsafe { handle(cache) }?;
        if desc.is_null() {
            return Err(Failure::invalid("desc is NULL"));
        }
        // SAFETY: forwarded caller contract: readable for its `struct_size` bytes, and any
        // bits are valid for the structure's fields.
        let desc = unsafe { read_sized(desc, DESC_SIZE_V1, "gpucache_gl_program_desc") }?;
        // SAFETY: forwarded caller contract for the strings and arrays.
        let (vertex, fragment, bindings) = unsafe {
            (
                required_str(desc.vertex_source, "vertex_source")?,
                required_str(desc.fragment_source, "fragment_source")?,
                to_bindings(&desc)?,
            )
        };
        // SAFETY: the cache's context is current on this thread (the caller's contract) for
        // the whole call, and `gl` does not outlive it.
        let gl = unsafe { GlowGl::new(&cache.gl) };
        let linked = ProgramManager::new(&gl, &cache.cache).program(vertex, fragment, &bindings)?;
        // SAFETY: as above.
        unsafe { program_out.write(linked.program) };
        if !from_cache_out.is_null() {
            // SAFETY: as above.
            unsafe { from_cache_out.write(i32::from(linked.from_cache)) };
        }
        Ok(())
    })
}

/// The bindings a description names.
///
/// # Safety
///
/// The description's arrays are NULL or readable for their counts, and the strings in them
/// NULL or NUL-terminated.
unsafe fn to_bindings(desc: &gpucache_gl_program_desc) -> Result<Bindings, Failure> {
    if desc.reserved != 0 {
        return Err(Failure::invalid("reserved is not 0"));
    }
    let mut bindings = Bindings::new();
    // SAFETY: forwarded contract for the arrays and their names.
    unsafe {
        let attributes = array(desc.attributes, desc.attribute_count, "attributes")?;
        for (i, b) in attributes.iter().enumerate() {
            let name = required_str(b.name, &format!("attributes[{i}].name"))?;
            bindings = bindings.attribute(name, b.location);
        }
        let frag_data = array(desc.frag_data, desc.frag_data_count, "frag_data")?;
        for (i, b) in frag_data.iter().enumerate() {
            let name = required_str(b.name, &format!("frag_data[{i}].name"))?;
            bindings = bindings.frag_data(name, b.location);
        }
        let varyings = array(desc.varyings, desc.varying_count, "varyings")?;
        if !varyings.is_empty() {
            let mode = desc.varying_buffer_mode;
            if mode != INTERLEAVED_ATTRIBS && mode != SEPARATE_ATTRIBS {
                return Err(Failure::invalid(format!(
                    "varying_buffer_mode 0x{mode:X} is neither GL_INTERLEAVED_ATTRIBS nor \
                     GL_SEPARATE_ATTRIBS"
                )));
            }
            let names = varyings
                .iter()
                .enumerate()
                .map(|(i, &v)| required_str(v, &format!("varyings[{i}]")))
                .collect::<Result<Vec<_>, _>>()?;
            bindings = bindings.transform_feedback(names, mode);
        }
    }
    Ok(bindings)
}

/// Writes the cache's pending binaries to its directory and merges its program table and
/// histograms into the directory's metadata, where the next process finds them.
///
/// Returns `GPUCACHE_OK` (also for a memory-only cache), `GPUCACHE_ERROR_IO` or
/// `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL `cache`).
///
/// # Safety
///
/// `cache` is NULL or an open cache, used by no other thread during the call. No GL context
/// is needed.
#[no_mangle]
pub unsafe extern "C" fn gpucache_gl_cache_flush(cache: *mut gpucache_gl_cache) -> i32 {
    ffi_call("gpucache_gl_cache_flush", || {
        // SAFETY: forwarded caller contract.
        unsafe { handle(cache) }?.cache.flush()?;
        Ok(())
    })
}

/// Flushes the cache (as `gpucache_gl_cache_flush`, ignoring errors: flush first to see
/// them) and frees it. NULL is ignored. Programs it returned stay valid. No GL context is
/// needed.
///
/// # Safety
///
/// `cache` is NULL or an open cache, not used by any thread after this call.
#[no_mangle]
pub unsafe extern "C" fn gpucache_gl_cache_close(cache: *mut gpucache_gl_cache) {
    ffi_quiet((), || {
        if !cache.is_null() {
            // SAFETY: a non-NULL handle came from `Box::into_raw` in `gpucache_gl_cache_open`
            // and is closed once, per the contract.
            drop(unsafe { Box::from_raw(cache) });
        }
    });
}

/// Fills `out` with the cache's counters (see `gpucache_gl_stats`). Set
/// `out->struct_size = sizeof *out` first. No GL context is needed.
///
/// Returns `GPUCACHE_OK` or `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL pointer, `struct_size`
/// too small).
///
/// # Safety
///
/// `cache` is NULL or an open cache; `out` is NULL or a writable structure of
/// `out->struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpucache_gl_stats(
    cache: *const gpucache_gl_cache,
    out: *mut gpucache_gl_stats,
) -> i32 {
    ffi_call("gpucache_gl_stats", || {
        // SAFETY: forwarded caller contract.
        let s = unsafe { handle(cache) }?.cache.stats();
        let memory = &s.cache.memory;
        let disk = s.cache.disk.as_ref();
        let stats = gpucache_gl_stats {
            struct_size: size_of::<gpucache_gl_stats>(),
            programs: s.programs as u64,
            shaders: s.shaders as u64,
            hits: s.cache.hits,
            misses: s.cache.misses,
            memory_bytes: memory.bytes,
            memory_entries: memory.entries,
            memory_max_bytes: memory.max_bytes,
            memory_evictions: memory.evictions,
            preloaded: s.cache.preloaded,
            disk_bytes: disk.map_or(0, |d| d.file_bytes),
            disk_entries: disk.map_or(0, |d| d.entries),
            // A directory that could not be opened at all counts as one error.
            disk_errors: disk.map_or(0, |d| d.read_errors + d.write_errors)
                + u64::from(s.cache.disk_error.is_some()),
            disk_available: i32::from(disk.is_some_and(|d| d.available)),
            reserved: 0,
        };
        // SAFETY: forwarded caller contract.
        unsafe { write_sized(out, stats, STATS_SIZE_V1, "gpucache_gl_stats") }
    })
}

/// Summarises one histogram (`metric` is a `GPUCACHE_GL_METRIC_*` constant) into `out`:
/// with `persisted` 0, this process's values since the cache was opened; with 1, every run
/// kept in the cache directory, as of the last flush of any process (this one's values
/// count once it has flushed). Without a directory, or before any flush, the persisted
/// summary is all zero. Set `out->struct_size = sizeof *out` first. No GL context is needed.
///
/// Returns `GPUCACHE_OK`; `GPUCACHE_ERROR_INVALID_ARGUMENT` (NULL pointer, unknown metric,
/// `persisted` neither 0 nor 1, `struct_size` too small); `GPUCACHE_ERROR_IO` or
/// `GPUCACHE_ERROR_CORRUPT` (the directory's histograms cannot be read).
///
/// # Safety
///
/// `cache` is NULL or an open cache; `out` is NULL or a writable structure of
/// `out->struct_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn gpucache_gl_histogram(
    cache: *const gpucache_gl_cache,
    metric: i32,
    persisted: i32,
    out: *mut gpucache_histogram_summary,
) -> i32 {
    ffi_call("gpucache_gl_histogram", || {
        // SAFETY: forwarded caller contract.
        let cache = &unsafe { handle(cache) }?.cache;
        let metric = usize::try_from(metric)
            .ok()
            .and_then(|i| Metric::ALL.get(i).copied())
            .ok_or_else(|| Failure::invalid(format!("unknown metric {metric}")))?;
        let summary = match persisted {
            0 => summarize(cache.histograms().get(metric), 1),
            1 => match cache.persisted_histograms()? {
                Some(p) => summarize(p.total.get(metric), p.runs),
                None => summarize(&HistogramSnapshot::default(), 0),
            },
            other => {
                return Err(Failure::invalid(format!(
                    "persisted is {other}, not 0 (this run) or 1 (every run)"
                )))
            }
        };
        // SAFETY: forwarded caller contract.
        unsafe { write_sized(out, summary, SUMMARY_SIZE_V1, "gpucache_histogram_summary") }
    })
}

fn summarize(h: &HistogramSnapshot, runs: u64) -> gpucache_histogram_summary {
    let q = |q| h.quantile(q).unwrap_or(0);
    gpucache_histogram_summary {
        struct_size: size_of::<gpucache_histogram_summary>(),
        count: h.count(),
        sum: h.sum(),
        min: h.min().unwrap_or(0),
        max: h.max().unwrap_or(0),
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        runs,
    }
}

/// The cache behind a handle.
///
/// # Safety
///
/// `cache` is NULL or a handle from `gpucache_gl_cache_open` not yet closed.
unsafe fn handle<'a>(cache: *const gpucache_gl_cache) -> Result<&'a gpucache_gl_cache, Failure> {
    // SAFETY: a non-NULL handle points to a live `gpucache_gl_cache` per the contract.
    unsafe { cache.as_ref() }.ok_or_else(|| Failure::invalid("cache is NULL"))
}

/// A NUL-terminated UTF-8 string, or `None` for NULL.
///
/// # Safety
///
/// `s` is NULL or NUL-terminated, and outlives the result.
unsafe fn optional_str<'a>(s: *const c_char, what: &str) -> Result<Option<&'a str>, Failure> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    let s = unsafe { CStr::from_ptr(s) };
    s.to_str()
        .map(Some)
        .map_err(|e| Failure::invalid(format!("{what} is not UTF-8 (byte {})", e.valid_up_to())))
}

/// A NUL-terminated UTF-8 string that must be there.
///
/// # Safety
///
/// As for [`optional_str`].
unsafe fn required_str<'a>(s: *const c_char, what: &str) -> Result<&'a str, Failure> {
    // SAFETY: forwarded contract.
    unsafe { optional_str(s, what) }?.ok_or_else(|| Failure::invalid(format!("{what} is NULL")))
}

/// The `count` elements at `p`; NULL is allowed for 0 elements.
///
/// # Safety
///
/// A non-NULL `p` is readable for `count` elements while the slice lives.
unsafe fn array<'a, T>(p: *const T, count: usize, what: &str) -> Result<&'a [T], Failure> {
    if count == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Failure::invalid(format!(
            "{what} is NULL but its count is {count}"
        )));
    }
    if count > isize::MAX as usize / size_of::<T>().max(1) {
        return Err(Failure::invalid(format!(
            "{what} count {count} is too large"
        )));
    }
    // SAFETY: non-NULL, the total size is at most isize::MAX, readable per the contract.
    Ok(unsafe { std::slice::from_raw_parts(p, count) })
}

/// The caller's versioned structure: its first `struct_size` bytes, and the defaults of the
/// fields past them.
///
/// # Safety
///
/// `p` is non-NULL, starts with a readable `size_t struct_size` and is readable for that many
/// bytes; every bit pattern is a valid `T` (pointers and integers only).
unsafe fn read_sized<T: Copy + Default>(p: *const T, v1: usize, name: &str) -> Result<T, Failure> {
    // SAFETY: every version of the structure starts with `struct_size` (the caller's
    // contract; the tests check the offset).
    let given = unsafe { p.cast::<usize>().read() };
    if given < v1 {
        return Err(Failure::invalid(format!(
            "struct_size {given} is smaller than any {name} (set it to sizeof({name}))"
        )));
    }
    let mut value = T::default();
    let n = given.min(size_of::<T>());
    // SAFETY: the caller's structure is readable for `given` >= `n` bytes, `value` is at
    // least `n` bytes, they do not overlap, and any bits are valid for its fields.
    unsafe { ptr::copy_nonoverlapping(p.cast::<u8>(), ptr::addr_of_mut!(value).cast::<u8>(), n) };
    Ok(value)
}

/// Writes `value` to the caller's versioned structure: at most its `struct_size` bytes, then
/// the number written to its `struct_size`.
///
/// # Safety
///
/// `out` is NULL or starts with a readable `size_t struct_size` and is writable for that many
/// bytes; `T` starts with `struct_size`.
unsafe fn write_sized<T>(out: *mut T, value: T, v1: usize, name: &str) -> Result<(), Failure> {
    if out.is_null() {
        return Err(Failure::invalid("out is NULL"));
    }
    // SAFETY: `out` is non-NULL and starts with a readable `struct_size` per the contract.
    let given = unsafe { out.cast::<usize>().read() };
    if given < v1 {
        return Err(Failure::invalid(format!(
            "struct_size {given} is smaller than any {name} (set it to sizeof({name}))"
        )));
    }
    let n = given.min(size_of::<T>());
    // SAFETY: the caller's structure is writable for `given` >= `n` bytes, `value` is at
    // least `n` bytes, and they do not overlap; `struct_size` is the first field of both.
    unsafe {
        ptr::copy_nonoverlapping(ptr::addr_of!(value).cast::<u8>(), out.cast::<u8>(), n);
        out.cast::<usize>().write(n);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
