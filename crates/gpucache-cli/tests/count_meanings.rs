//! Every blob-cache count has one name and one meaning wherever it is read: the C library's
//! `gpucache_egl_stats`, the Rust API's counters, the `blob-cache-stats` file and
//! `gpucache stats --json`. A driver's calls go through the C callbacks; the four readings
//! must agree field by field.

use std::ffi::{c_void, CString};
use std::mem::size_of;
use std::process::Command;

use gpucache::egl::{self, diagnostics, BlobCounters};
use gpucache_ffi::{
    gpucache_egl_config, gpucache_egl_config_init, gpucache_egl_configure, gpucache_egl_flush,
    gpucache_egl_get, gpucache_egl_set, gpucache_egl_shutdown, gpucache_egl_stats, GPUCACHE_OK,
};
use serde_json::Value;

fn set(key: &[u8], value: &[u8]) {
    // SAFETY: both slices are readable for their lengths.
    unsafe {
        gpucache_egl_set(
            key.as_ptr().cast::<c_void>(),
            key.len() as isize,
            value.as_ptr().cast::<c_void>(),
            value.len() as isize,
        )
    }
}

fn get(key: &[u8], buf: &mut [u8]) -> isize {
    // SAFETY: `key` is readable and `buf` writable for their lengths.
    unsafe {
        gpucache_egl_get(
            key.as_ptr().cast::<c_void>(),
            key.len() as isize,
            buf.as_mut_ptr().cast::<c_void>(),
            buf.len() as isize,
        )
    }
}

fn as_array(c: &BlobCounters) -> [u64; 7] {
    [
        c.gets,
        c.hits,
        c.misses,
        c.gets_buffer_too_small,
        c.sets,
        c.sets_dropped,
        c.calls_while_disabled,
    ]
}

#[test]
fn every_count_means_the_same_in_c_rust_the_file_and_the_cli() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = CString::new(tmp.path().to_str().unwrap()).unwrap();
    let identity = b"mesa 25.0.7 llvmpipe";
    let mut cfg = gpucache_egl_config::default();
    // SAFETY: `cfg` is a valid, writable configuration.
    unsafe { gpucache_egl_config_init(&mut cfg) };
    cfg.directory = dir.as_ptr();
    cfg.identity = identity.as_ptr();
    cfg.identity_len = identity.len();
    cfg.max_value_size = 1000;
    // SAFETY: `cfg` is initialised; its pointers live until the call returns.
    assert_eq!(unsafe { gpucache_egl_configure(&cfg) }, GPUCACHE_OK);

    // Four sets: two stored, one too large, one empty. Five gets: two hits, one too-small
    // buffer, two misses.
    set(b"vertex", &[1; 100]);
    set(b"fragment", &[2; 200]);
    set(b"huge", &[3; 2000]);
    set(b"empty", b"");
    let mut buf = [0u8; 512];
    assert_eq!(get(b"vertex", &mut buf), 100);
    assert_eq!(get(b"fragment", &mut buf), 200);
    assert_eq!(get(b"fragment", &mut buf[..10]), 200);
    assert_eq!(get(b"huge", &mut buf), 0);
    assert_eq!(get(b"absent", &mut buf), 0);
    let expected = [5, 2, 2, 1, 4, 2, 0];

    let mut c = gpucache_ffi::gpucache_egl_stats {
        struct_size: size_of::<gpucache_ffi::gpucache_egl_stats>(),
        ..Default::default()
    };
    // SAFETY: `c` is writable and its `struct_size` is set.
    assert_eq!(unsafe { gpucache_egl_stats(&mut c) }, GPUCACHE_OK);
    let from_c = [
        c.gets,
        c.hits,
        c.misses,
        c.gets_buffer_too_small,
        c.sets,
        c.sets_dropped,
        c.calls_while_disabled,
    ];
    let from_rust = as_array(&egl::stats().unwrap().counters());
    assert_eq!(from_c, expected, "C");
    assert_eq!(from_rust, expected, "Rust");

    assert_eq!(gpucache_egl_flush(), GPUCACHE_OK);
    let file = diagnostics::read_persisted_stats(tmp.path())
        .unwrap()
        .unwrap();
    assert_eq!(as_array(&file.lifetime), expected, "file, lifetime");
    assert_eq!(
        as_array(&file.last.counters),
        expected,
        "file, last process"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_gpucache"))
        .args(["stats", tmp.path().to_str().unwrap(), "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let lifetime = &json["blob_cache"]["lifetime"];
    let names = [
        "gets",
        "hits",
        "misses",
        "gets_buffer_too_small",
        "sets",
        "sets_dropped",
        "calls_while_disabled",
    ];
    let from_cli: Vec<u64> = names
        .iter()
        .map(|n| {
            lifetime[n]
                .as_u64()
                .unwrap_or_else(|| panic!("{n} in {json}"))
        })
        .collect();
    assert_eq!(from_cli, expected, "CLI");
    gpucache_egl_shutdown();
}
