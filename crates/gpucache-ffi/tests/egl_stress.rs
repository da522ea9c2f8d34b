//! The blob-cache callbacks under the load Mesa puts on them: writer threads call
//! `gpucache_egl_set` while the main thread calls `gpucache_egl_get` with a fixed 64 KiB
//! buffer, values larger than that buffer included, and the cache is shut down and
//! configured again while the writers run. Every non-zero answer must be the exact value
//! of the key (each value derives from its key, so any newest value is the right one).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use gpucache_ffi::*;

/// The global blob cache is shared by the tests of this binary.
static SERIAL: Mutex<()> = Mutex::new(());

const KEYS: u32 = 384;
const WRITERS: u32 = 4;
const MESA_BUFFER: usize = 64 * 1024;
const POISON: u8 = 0xA5;

fn key(i: u32) -> [u8; 20] {
    let mut k = [0u8; 20];
    for (j, b) in k.iter_mut().enumerate() {
        *b = (i.wrapping_mul(2_654_435_761) >> (j % 4 * 8)) as u8 ^ j as u8;
    }
    k
}

/// Sizes from 1 byte to ~190 KiB; one key in eight is larger than Mesa's buffer.
fn value(i: u32) -> Vec<u8> {
    let len = if i.is_multiple_of(8) {
        MESA_BUFFER + 1 + (i as usize * 977) % 130_000
    } else {
        1 + (i as usize * 7919) % (MESA_BUFFER - 1)
    };
    (0..len)
        .map(|j| (i as usize ^ j.wrapping_mul(31) ^ (j >> 7)) as u8)
        .collect()
}

fn configure(miss_on_oversize: bool) {
    let mut cfg = gpucache_egl_config::default();
    // SAFETY: `cfg` is a valid, writable config.
    unsafe { gpucache_egl_config_init(&mut cfg) };
    cfg.miss_on_oversize = i32::from(miss_on_oversize);
    // SAFETY: `cfg` is valid with NULL directory and identity.
    assert_eq!(unsafe { gpucache_egl_configure(&cfg) }, GPUCACHE_OK);
}

fn set(k: &[u8], v: &[u8]) {
    // SAFETY: both slices are readable for their lengths during the call.
    unsafe {
        gpucache_egl_set(
            k.as_ptr().cast::<c_void>(),
            k.len() as EGLsizeiANDROID,
            v.as_ptr().cast::<c_void>(),
            v.len() as EGLsizeiANDROID,
        )
    }
}

fn get(k: &[u8], buf: &mut [u8]) -> EGLsizeiANDROID {
    // SAFETY: `k` is readable and `buf` writable for their lengths during the call.
    unsafe {
        gpucache_egl_get(
            k.as_ptr().cast::<c_void>(),
            k.len() as EGLsizeiANDROID,
            buf.as_mut_ptr().cast::<c_void>(),
            buf.len() as EGLsizeiANDROID,
        )
    }
}

#[derive(Default)]
struct Seen {
    gets: u64,
    copied: u64,
    oversize_answers: u64,
}

/// One Mesa-style `get` of key `i`, checked against the key's value.
fn checked_get(i: u32, values: &[Vec<u8>], buf: &mut [u8], mesa: bool, seen: &mut Seen) {
    buf.fill(POISON);
    let n = get(&key(i), buf);
    let expected = &values[i as usize];
    seen.gets += 1;
    if n == 0 {
        return;
    }
    let n = usize::try_from(n).expect("a non-negative answer");
    assert_eq!(n, expected.len(), "key {i}: wrong size");
    if n <= buf.len() {
        assert!(buf[..n] == expected[..], "key {i}: wrong bytes");
        assert!(
            buf[n..].iter().all(|&b| b == POISON),
            "key {i}: wrote past the value"
        );
        seen.copied += 1;
    } else {
        assert!(
            !mesa,
            "key {i}: a size larger than Mesa's buffer with miss-on-oversize on"
        );
        assert!(
            buf.iter().all(|&b| b == POISON),
            "key {i}: wrote into a too-small buffer"
        );
        seen.oversize_answers += 1;
    }
}

#[test]
fn mesa_shaped_concurrent_sets_and_gets_with_reconfiguration() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let values: Vec<Vec<u8>> = (0..KEYS).map(value).collect();
    configure(true);
    let stop = AtomicBool::new(false);
    let reconfigurations = AtomicU64::new(0);
    let mut buf = vec![0u8; MESA_BUFFER];
    let mut mesa = Seen::default();
    let mut spec = Seen::default();

    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let (values, stop) = (&values, &stop);
            scope.spawn(move || {
                let mut i = w * 97;
                while !stop.load(Ordering::Relaxed) {
                    i = (i + 7 * (w + 1)) % KEYS;
                    set(&key(i), &values[i as usize]);
                }
            });
        }
        // Counters read while everything churns.
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let mut st = gpucache_egl_stats {
                    struct_size: std::mem::size_of::<gpucache_egl_stats>(),
                    ..Default::default()
                };
                // SAFETY: `st` is writable and its struct_size is set.
                let rc = unsafe { gpucache_egl_stats(&mut st) };
                assert!(rc == GPUCACHE_OK || rc == GPUCACHE_ERROR_NOT_CONFIGURED);
                std::thread::sleep(Duration::from_millis(5));
            }
        });

        // Phase 1, Mesa: miss-on-oversize on, shut down and configured again repeatedly.
        let mut rng = 0x9E37_79B9_u32;
        let phase = Instant::now();
        let mut next_cycle = Instant::now() + Duration::from_millis(150);
        while phase.elapsed() < Duration::from_millis(1200) {
            rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            checked_get(rng % KEYS, &values, &mut buf, true, &mut mesa);
            if Instant::now() >= next_cycle {
                gpucache_egl_shutdown();
                // Between shutdown and configure: set ignored, get 0.
                assert_eq!(get(&key(1), &mut buf), 0);
                configure(true);
                reconfigurations.fetch_add(1, Ordering::Relaxed);
                next_cycle = Instant::now() + Duration::from_millis(150);
            }
        }

        // Phase 2, the extension's behaviour: sizes of values that do not fit are answered.
        assert_eq!(gpucache_egl_set_miss_on_oversize(0), GPUCACHE_OK);
        let phase = Instant::now();
        while phase.elapsed() < Duration::from_millis(600) {
            rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            checked_get(rng % KEYS, &values, &mut buf, false, &mut spec);
        }
        stop.store(true, Ordering::Relaxed);
    });

    eprintln!(
        "Mesa phase: {} gets, {} copied; spec phase: {} gets, {} copied, {} sizes of \
         values over 64 KiB; {} reconfigurations",
        mesa.gets,
        mesa.copied,
        spec.gets,
        spec.copied,
        spec.oversize_answers,
        reconfigurations.load(Ordering::Relaxed)
    );
    assert!(reconfigurations.load(Ordering::Relaxed) >= 3);
    assert!(mesa.copied > 0, "phase 1 never hit: {} gets", mesa.gets);
    assert!(
        spec.copied > 0 && spec.oversize_answers > 0,
        "phase 2: {} gets",
        spec.gets
    );

    // Quiet now: the counters add up.
    let mut st = gpucache_egl_stats {
        struct_size: std::mem::size_of::<gpucache_egl_stats>(),
        ..Default::default()
    };
    // SAFETY: `st` is writable and its struct_size is set.
    assert_eq!(unsafe { gpucache_egl_stats(&mut st) }, GPUCACHE_OK);
    assert_eq!(st.gets, st.hits + st.misses + st.gets_buffer_too_small);
    assert!(st.sets > 0 && st.miss_on_oversize == 0);
    gpucache_egl_shutdown();
    assert_eq!(get(&key(1), &mut buf), 0);
}

/// Shutdown and configure in a tight loop on one thread while others call the callbacks:
/// nothing crashes, and once shut down for good every call is a no-op.
#[test]
fn shutdown_races_with_callbacks() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for t in 0..3u32 {
            let stop = &stop;
            scope.spawn(move || {
                let mut buf = vec![0u8; 4096];
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    i = i.wrapping_add(1);
                    let k = key(i % 64);
                    set(&k, &[t as u8; 100]);
                    let n = get(&k, &mut buf);
                    assert!(n == 0 || n == 100);
                }
            });
        }
        for round in 0..60u32 {
            configure(round.is_multiple_of(2));
            std::thread::sleep(Duration::from_millis(2));
            gpucache_egl_shutdown();
        }
        stop.store(true, Ordering::Relaxed);
    });
    gpucache_egl_shutdown();
    set(&key(0), b"ignored");
    assert_eq!(get(&key(0), &mut [0u8; 16]), 0);
}
