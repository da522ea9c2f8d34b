//! Tests of the program cache's C API.

use std::mem::offset_of;

use super::*;
use crate::error::{gpucache_last_error_message, GPUCACHE_ERROR_INVALID_ARGUMENT};

fn last_error() -> String {
    // SAFETY: a NUL-terminated string valid until the next failing call; copied at once.
    unsafe { CStr::from_ptr(gpucache_last_error_message()) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn metrics_are_numbered_in_the_order_of_metric_all() {
    let c = [
        (GPUCACHE_GL_METRIC_BINARY_SIZE, Metric::BinarySize),
        (
            GPUCACHE_GL_METRIC_CACHE_SIZE_BEFORE,
            Metric::CacheSizeBefore,
        ),
        (GPUCACHE_GL_METRIC_CACHE_SIZE_AFTER, Metric::CacheSizeAfter),
        (GPUCACHE_GL_METRIC_BINARY_HIT_TIME, Metric::BinaryHitTime),
        (
            GPUCACHE_GL_METRIC_BINARY_MISS_LINK_TIME,
            Metric::BinaryMissLinkTime,
        ),
        (GPUCACHE_GL_METRIC_STATUS_HIT_TIME, Metric::StatusHitTime),
        (
            GPUCACHE_GL_METRIC_STATUS_MISS_COMPILE_TIME,
            Metric::StatusMissCompileTime,
        ),
    ];
    assert_eq!(c.len(), Metric::ALL.len(), "a metric has no constant");
    for (constant, metric) in c {
        assert_eq!(Metric::ALL[constant as usize], metric);
    }
}

/// The C defaults are the Rust builder's.
#[test]
fn c_defaults_are_the_builder_defaults() {
    let mut c = gpucache_gl_config {
        struct_size: 0,
        max_memory_bytes: 1,
        preload: 0,
        ..Default::default()
    };
    // SAFETY: `c` is a valid, writable config.
    unsafe { gpucache_gl_config_init(&mut c) };
    assert_eq!(c.struct_size, size_of::<gpucache_gl_config>());
    // SAFETY: `c` has NULL strings.
    let (builder, build_id) = unsafe { to_builder(&c) }.unwrap();
    assert_eq!(
        format!("{builder:?}"),
        format!("{:?}", ProgramCache::builder())
    );
    assert_eq!(build_id, "");
}

#[test]
fn layouts_are_the_documented_ones() {
    if size_of::<usize>() == 8 {
        assert_eq!(size_of::<gpucache_gl_config>(), 48);
        assert_eq!(size_of::<gpucache_gl_binding>(), 16);
        assert_eq!(size_of::<gpucache_gl_program_desc>(), 80);
        assert_eq!(size_of::<gpucache_gl_stats>(), 112);
        assert_eq!(size_of::<gpucache_histogram_summary>(), 72);
    }
    assert_eq!(offset_of!(gpucache_gl_config, struct_size), 0);
    assert_eq!(offset_of!(gpucache_gl_program_desc, struct_size), 0);
    assert_eq!(offset_of!(gpucache_gl_stats, struct_size), 0);
    assert_eq!(offset_of!(gpucache_histogram_summary, struct_size), 0);
}

#[test]
fn bad_configs_are_refused() {
    let mut c = gpucache_gl_config {
        reserved: 1,
        ..Default::default()
    };
    let check = |c: &gpucache_gl_config| {
        // SAFETY: the tests' strings are NULL or static NUL-terminated strings.
        unsafe { to_builder(c) }
            .map(|(_, id)| id)
            .map_err(|f| f.message)
    };
    assert!(check(&c).unwrap_err().contains("reserved"));
    c.reserved = 0;
    c.directory = c"".as_ptr();
    assert!(check(&c).unwrap_err().contains("empty"));
    c.directory = c"/tmp/x".as_ptr();
    c.build_id = c"\xff\xfe".as_ptr();
    assert!(check(&c).unwrap_err().contains("build_id is not UTF-8"));
    c.build_id = c"app 1.0".as_ptr();
    assert_eq!(check(&c).unwrap(), "app 1.0");

    let small = gpucache_gl_config {
        struct_size: CONFIG_SIZE_V1 - 1,
        ..Default::default()
    };
    // SAFETY: `small` is a whole, readable config.
    assert!(unsafe { read_sized(&small, CONFIG_SIZE_V1, "gpucache_gl_config") }.is_err());
}

unsafe extern "C" fn no_functions(_: *const c_char) -> *mut c_void {
    ptr::null_mut()
}

extern "system" fn get_string_without_context(_: u32) -> *const u8 {
    ptr::null()
}

unsafe extern "C" fn no_context(name: *const c_char) -> *mut c_void {
    // SAFETY: the library passes NUL-terminated names.
    if unsafe { CStr::from_ptr(name) } == c"glGetString" {
        get_string_without_context as *mut c_void
    } else {
        ptr::null_mut()
    }
}

#[test]
fn opening_needs_a_loader_and_a_current_context() {
    let mut out = ptr::NonNull::<gpucache_gl_cache>::dangling().as_ptr();
    let open = |loader: gpucache_gl_loader, out: *mut *mut gpucache_gl_cache| {
        // SAFETY: `out` is NULL or valid, and the loaders have the documented type.
        unsafe { gpucache_gl_cache_open(ptr::null(), loader, out) }
    };
    assert_eq!(open(None, &mut out), GPUCACHE_ERROR_INVALID_ARGUMENT);
    assert!(out.is_null(), "out is cleared on failure");
    let rc = open(Some(no_functions), ptr::null_mut());
    assert_eq!(rc, GPUCACHE_ERROR_INVALID_ARGUMENT);
    assert_eq!(open(Some(no_functions), &mut out), GPUCACHE_ERROR_GL);
    assert!(last_error().contains("glGetString"), "{}", last_error());
    assert_eq!(open(Some(no_context), &mut out), GPUCACHE_ERROR_GL);
    let message = last_error();
    assert!(message.contains("no GL context is current"), "{message}");
    assert!(out.is_null());
}

#[test]
fn null_handles_are_refused() {
    let desc = gpucache_gl_program_desc::default();
    let (mut program, mut from_cache) = (7u32, 7i32);
    let mut stats = gpucache_gl_stats {
        struct_size: size_of::<gpucache_gl_stats>(),
        ..Default::default()
    };
    let mut summary = gpucache_histogram_summary {
        struct_size: size_of::<gpucache_histogram_summary>(),
        ..Default::default()
    };
    // SAFETY: NULL handles and valid output pointers.
    unsafe {
        let rc = gpucache_gl_program(ptr::null_mut(), &desc, &mut program, &mut from_cache);
        assert_eq!(rc, GPUCACHE_ERROR_INVALID_ARGUMENT);
        assert_eq!(
            (program, from_cache),
            (0, 0),
            "outputs are cleared on failure"
        );
        let rc = gpucache_gl_program(ptr::null_mut(), &desc, ptr::null_mut(), ptr::null_mut());
        assert_eq!(rc, GPUCACHE_ERROR_INVALID_ARGUMENT);
        assert_eq!(
            gpucache_gl_cache_flush(ptr::null_mut()),
            GPUCACHE_ERROR_INVALID_ARGUMENT
        );
        assert_eq!(
            gpucache_gl_stats(ptr::null(), &mut stats),
            GPUCACHE_ERROR_INVALID_ARGUMENT
        );
        let rc = gpucache_gl_histogram(ptr::null(), 0, 0, &mut summary);
        assert_eq!(rc, GPUCACHE_ERROR_INVALID_ARGUMENT);
        gpucache_gl_cache_close(ptr::null_mut());
    }
}

fn bindings_of(desc: &gpucache_gl_program_desc) -> Result<Bindings, String> {
    // SAFETY: the tests' descriptions point to live arrays and static strings.
    unsafe { to_bindings(desc) }.map_err(|f| f.message)
}

#[test]
fn bindings_are_read_and_checked() {
    let attributes = [
        gpucache_gl_binding {
            name: c"pos".as_ptr(),
            location: 3,
        },
        gpucache_gl_binding {
            name: c"uv".as_ptr(),
            location: 1,
        },
    ];
    let varyings = [c"v_out".as_ptr()];
    let mut d = gpucache_gl_program_desc {
        attributes: attributes.as_ptr(),
        attribute_count: 2,
        varyings: varyings.as_ptr(),
        varying_count: 1,
        varying_buffer_mode: INTERLEAVED_ATTRIBS,
        ..Default::default()
    };
    let expected = Bindings::new()
        .attribute("pos", 3)
        .attribute("uv", 1)
        .transform_feedback(["v_out"], INTERLEAVED_ATTRIBS);
    assert_eq!(bindings_of(&d).unwrap(), expected);

    d.varying_buffer_mode = 0;
    assert!(bindings_of(&d).unwrap_err().contains("varying_buffer_mode"));
    d.varying_count = 0;
    assert_eq!(
        bindings_of(&d).unwrap().transform_feedback.len(),
        0,
        "mode ignored"
    );

    d.frag_data_count = 1;
    assert!(bindings_of(&d).unwrap_err().contains("frag_data is NULL"));
    d.frag_data_count = 0;

    let bad = [gpucache_gl_binding {
        name: ptr::null(),
        location: 0,
    }];
    d.attributes = bad.as_ptr();
    d.attribute_count = 1;
    assert!(bindings_of(&d)
        .unwrap_err()
        .contains("attributes[0].name is NULL"));
    let bad = [gpucache_gl_binding {
        name: c"\xc3(".as_ptr(),
        location: 0,
    }];
    d.attributes = bad.as_ptr();
    assert!(bindings_of(&d).unwrap_err().contains("not UTF-8"));
    d.attribute_count = usize::MAX;
    assert!(bindings_of(&d).unwrap_err().contains("too large"));
    d.attribute_count = 0;
    d.reserved = 1;
    assert!(bindings_of(&d).unwrap_err().contains("reserved"));
}

#[test]
fn summaries_of_empty_histograms_are_zero() {
    let empty = summarize(&HistogramSnapshot::default(), 0);
    assert_eq!(
        empty,
        gpucache_histogram_summary {
            struct_size: size_of::<gpucache_histogram_summary>(),
            ..Default::default()
        }
    );
}

#[test]
fn sized_writes_respect_the_callers_size() {
    let mut small = gpucache_histogram_summary {
        struct_size: SUMMARY_SIZE_V1 - 8,
        ..Default::default()
    };
    let value = gpucache_histogram_summary {
        count: 5,
        ..Default::default()
    };
    // SAFETY: `small` is a whole, writable structure.
    let r = unsafe { write_sized(&mut small, value, SUMMARY_SIZE_V1, "summary") };
    assert!(r.is_err());
    assert_eq!(small.count, 0, "nothing written");
    let mut exact = gpucache_histogram_summary {
        struct_size: SUMMARY_SIZE_V1,
        ..Default::default()
    };
    // SAFETY: as above.
    unsafe { write_sized(&mut exact, value, SUMMARY_SIZE_V1, "summary") }.unwrap();
    assert_eq!(exact.count, 5);
    assert_eq!(exact.struct_size, SUMMARY_SIZE_V1);
}
