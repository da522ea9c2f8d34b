//! `gpucache_egl_mesa_context_cache`: Mesa's own cache pointed into gpucache's directory
//! (the environment Mesa reads), its refusals, and the sparse index. It changes the process
//! environment, so this file holds one test (a process of its own). The same helper under
//! real Mesa is tested in `bench/tests/mesa_blob_cache.rs`.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use gpucache_ffi::*;

fn configure(dir: Option<&std::path::Path>) -> i32 {
    let c_dir = dir.map(|d| CString::new(d.as_os_str().as_bytes()).unwrap());
    let mut config = gpucache_egl_config {
        struct_size: std::mem::size_of::<gpucache_egl_config>(),
        ..Default::default()
    };
    // SAFETY: `config` is a writable config whose `struct_size` is set.
    unsafe { gpucache_egl_config_init(&mut config) };
    config.directory = c_dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr());
    // SAFETY: `config` is initialised; `c_dir` outlives the call.
    unsafe { gpucache_egl_configure(&config) }
}

fn hybrid(max_bytes: u64) -> i32 {
    // SAFETY: this test is the only thread of its process that touches the environment.
    unsafe { gpucache_egl_mesa_context_cache(max_bytes) }
}

#[test]
fn mesa_is_pointed_into_the_cache_directory_bounded_and_sparse() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    for name in [
        "MESA_SHADER_CACHE_DIR",
        "MESA_SHADER_CACHE_DISABLE",
        "MESA_GLSL_CACHE_DISABLE",
        "MESA_SHADER_CACHE_MAX_SIZE",
    ] {
        std::env::remove_var(name);
    }
    std::env::set_var("MESA_GLSL_CACHE_DIR", "/elsewhere");
    gpucache_egl_shutdown();
    assert_eq!(hybrid(0), GPUCACHE_ERROR_NOT_CONFIGURED);
    assert_eq!(configure(None), GPUCACHE_OK);
    assert_eq!(
        hybrid(0),
        GPUCACHE_ERROR_UNSUPPORTED,
        "a memory-only cache has no directory to hold Mesa's files"
    );
    assert_eq!(configure(Some(&dir)), GPUCACHE_OK);
    std::env::set_var("MESA_SHADER_CACHE_DISABLE", "true");
    assert_eq!(
        hybrid(0),
        GPUCACHE_ERROR_UNSUPPORTED,
        "the caller's choice to disable Mesa's cache is kept"
    );
    assert!(std::env::var_os("MESA_SHADER_CACHE_DIR").is_none());
    std::env::remove_var("MESA_SHADER_CACHE_DISABLE");

    assert_eq!(hybrid(3000), GPUCACHE_OK);
    let mesa = dir.join(MESA_CONTEXT_CACHE_SUBDIR);
    assert_eq!(
        std::env::var_os("MESA_SHADER_CACHE_DIR").unwrap(),
        mesa.as_os_str()
    );
    assert_eq!(std::env::var("MESA_SHADER_CACHE_MAX_SIZE").unwrap(), "3K");
    assert_eq!(
        std::env::var("MESA_DISK_CACHE_DATABASE_NUM_PARTS").unwrap(),
        "1"
    );
    assert!(std::env::var_os("MESA_GLSL_CACHE_DIR").is_none());
    let index = std::fs::metadata(mesa.join("mesa_shader_cache_db/index")).unwrap();
    assert_eq!(index.len(), 8 + 65_536 * 20, "the size Mesa expects");
    assert!(
        index.blocks() * 512 < 64 * 1024,
        "sparse: {} bytes allocated",
        index.blocks() * 512
    );
    assert_eq!(
        std::fs::metadata(&mesa).unwrap().mode() & 0o777,
        0o700,
        "private like the cache's own folders"
    );
    // Mesa's database part, made before Mesa makes it with its own modes (0755, 0644).
    let part = mesa.join("mesa_shader_cache_db/part0");
    assert_eq!(std::fs::metadata(&part).unwrap().mode() & 0o777, 0o700);
    for name in ["mesa_cache.db", "mesa_cache.idx"] {
        let file = std::fs::metadata(part.join(name)).unwrap();
        assert_eq!(file.mode() & 0o777, 0o600, "{name}");
        assert_eq!(file.len(), 0, "{name}: empty, as Mesa's O_CREAT leaves it");
    }
    // A cache an older version left with Mesa's modes is made private; contents are kept.
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(part.join("mesa_cache.db"), b"mesa's bytes").unwrap();
    std::fs::set_permissions(part.join("mesa_cache.db"), PermissionsExt::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&part, PermissionsExt::from_mode(0o755)).unwrap();
    // Again (another process start): the index is kept as it is.
    assert_eq!(hybrid(0), GPUCACHE_OK);
    assert_eq!(std::fs::metadata(&part).unwrap().mode() & 0o777, 0o700);
    let db = std::fs::metadata(part.join("mesa_cache.db")).unwrap();
    assert_eq!(db.mode() & 0o777, 0o600);
    assert_eq!(
        std::fs::read(part.join("mesa_cache.db")).unwrap(),
        b"mesa's bytes"
    );
    assert_eq!(
        std::env::var("MESA_SHADER_CACHE_MAX_SIZE").unwrap(),
        "4096K"
    );
    gpucache_egl_shutdown();
}
