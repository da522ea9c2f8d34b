//! The process-global caches: the EGL blob cache behind `egl::set`/`egl::get` and cache
//! control by kind. One test, because it changes process-wide state.

mod common;

use gpucache::egl::{self, BlobCacheConfig};
use gpucache::session::{self, SessionDesc};
use gpucache::{cache_control, CacheControl, CacheKinds, Error};

#[test]
fn global_blob_cache_and_cache_control() {
    // Cache control is for developers; the refusal outside is tests/developer_mode.rs.
    if !common::in_developer_mode("global_blob_cache_and_cache_control") {
        return;
    }
    let mut buf = [0u8; 64];

    // Before configuration: set is ignored, get misses.
    egl::set(b"k", b"v");
    assert_eq!(egl::get(b"k", &mut buf), 0);
    assert!(egl::stats().is_none());

    egl::configure(BlobCacheConfig::default()).unwrap();
    egl::set(b"k", b"value");
    assert_eq!(egl::get(b"k", &mut buf), 5);
    assert_eq!(&buf[..5], b"value");

    // Sets and gets from other threads reach the same cache.
    std::thread::spawn(|| egl::set(b"t", b"from a thread"))
        .join()
        .unwrap();
    assert_eq!(egl::get(b"t", &mut buf), 13);

    // Driver-managed control reaches the blob cache; application control the sessions.
    let s = session::open(SessionDesc::new([1; 16]).max_in_memory_bytes(1 << 16)).unwrap();
    s.store(b"app", b"entry".to_vec()).unwrap();
    cache_control(CacheKinds::IMPLICIT_DRIVER_MANAGED, CacheControl::DISABLE).unwrap();
    assert_eq!(egl::get(b"k", &mut buf), 0, "disabled: miss");
    egl::set(b"new", b"ignored");
    assert!(s.find(b"app").is_ok(), "application caches unaffected");
    cache_control(CacheKinds::IMPLICIT_DRIVER_MANAGED, CacheControl::ENABLE).unwrap();
    assert_eq!(egl::get(b"k", &mut buf), 5, "enable keeps contents");
    assert_eq!(egl::get(b"new", &mut buf), 0);
    assert_eq!(egl::stats().unwrap().calls_while_disabled, 2);

    cache_control(
        CacheKinds::IMPLICIT_DRIVER_MANAGED | CacheKinds::APPLICATION_MANAGED,
        CacheControl::CLEAR | CacheControl::DISABLE,
    )
    .unwrap();
    assert!(matches!(s.find(b"app"), Err(Error::NotCurrentlyAvailable)));
    cache_control(CacheKinds::APPLICATION_MANAGED, CacheControl::ENABLE).unwrap();
    assert!(matches!(s.find(b"app"), Err(Error::NotFound)), "cleared");
    cache_control(CacheKinds::IMPLICIT_DRIVER_MANAGED, CacheControl::ENABLE).unwrap();
    assert_eq!(egl::get(b"k", &mut buf), 0, "cleared");
    assert!(matches!(
        cache_control(
            CacheKinds::APPLICATION_MANAGED,
            CacheControl::ENABLE | CacheControl::DISABLE
        ),
        Err(Error::InvalidArgument(_))
    ));

    // Reconfiguring replaces the cache; shutdown makes everything a miss again.
    egl::set(b"k", b"again");
    egl::configure(BlobCacheConfig::default().miss_on_oversize(true)).unwrap();
    assert_eq!(egl::get(b"k", &mut buf), 0);
    egl::set(b"big", &[1u8; 100]);
    assert_eq!(egl::get(b"big", &mut buf), 0, "miss on oversize");
    egl::shutdown();
    egl::set(b"k", b"v");
    assert_eq!(egl::get(b"k", &mut buf), 0);
}
