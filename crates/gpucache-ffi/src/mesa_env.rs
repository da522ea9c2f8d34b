//! The "hybrid" set-up for Mesa: Mesa's own disk cache kept on, inside gpucache's directory
//! and bounded, for the internal shaders it compiles while `eglCreateContext` runs (before
//! any callback can be installed); every program after that goes to gpucache's callbacks.
//! `docs/context-creation.md` has the measurements and the reasons.

use std::path::{Path, PathBuf};

use crate::error::{ffi_call, Failure, GPUCACHE_ERROR_IO, GPUCACHE_ERROR_UNSUPPORTED};

/// The subdirectory of gpucache's directory that Mesa's own cache is pointed at.
pub const MESA_CONTEXT_CACHE_SUBDIR: &str = "mesa-context";

/// Mesa's size-tracking index in the cache folder (`disk_cache_mmap_cache_index`): 8 bytes
/// of total size and 65,536 20-byte keys. Mesa `posix_fallocate`s it to this size when it
/// has another size; one that already has it is only mapped.
const MESA_INDEX_SIZE: u64 = 8 + 65_536 * 20;

/// The bound when the caller passes 0: what context creation compiles on Mesa 25 llvmpipe
/// is a few KiB, so 4 MiB holds it for many driver versions.
const DEFAULT_MAX_BYTES: u64 = 4 << 20;

/// Points Mesa's own disk cache at `<directory>/mesa-context` inside the configured blob
/// cache's directory, bounded by `max_bytes` (0: 4 MiB; rounded up to whole KiB), so that
/// what Mesa compiles while creating a context (its internal shaders) is cached by Mesa,
/// while every program compiled after `gpucache_egl_install` goes to gpucache's callbacks.
///
/// Order: `gpucache_egl_configure`, this, `eglInitialize`, `eglCreateContext`,
/// `gpucache_egl_install`. It sets environment variables that Mesa reads when it creates
/// its disk cache: `MESA_SHADER_CACHE_DIR`, `MESA_SHADER_CACHE_MAX_SIZE` and
/// `MESA_DISK_CACHE_DATABASE_NUM_PARTS=1` (Mesa 25's default database back end in one
/// part: two files instead of a hundred; its 1.3 MB size index is created sparse beforehand,
/// so only the pages Mesa writes take space), and removes the deprecated `MESA_GLSL_CACHE_DIR`
/// and `MESA_GLSL_CACHE_MAX_SIZE` so that nothing else chooses the folder or the bound.
/// Drivers other than Mesa ignore these variables.
///
/// Returns `GPUCACHE_OK`, `GPUCACHE_ERROR_NOT_CONFIGURED` (no blob cache),
/// `GPUCACHE_ERROR_UNSUPPORTED` (the cache has no directory, or the environment disables
/// Mesa's cache with `MESA_SHADER_CACHE_DISABLE`/`MESA_GLSL_CACHE_DISABLE`: the caller's
/// choice is kept) or `GPUCACHE_ERROR_IO` (the subdirectory cannot be created).
///
/// # Safety
///
/// It changes the process environment: call it before other threads may read or change the
/// environment (in practice, early, before EGL is initialised and before threads that call
/// `getenv` start).
#[no_mangle]
pub unsafe extern "C" fn gpucache_egl_mesa_context_cache(max_bytes: u64) -> i32 {
    ffi_call("gpucache_egl_mesa_context_cache", || {
        let dir = context_cache_dir()?;
        for name in ["MESA_SHADER_CACHE_DISABLE", "MESA_GLSL_CACHE_DISABLE"] {
            if std::env::var(name).is_ok_and(|v| is_true(&v)) {
                return Err(Failure::new(
                    GPUCACHE_ERROR_UNSUPPORTED,
                    format!("{name} disables Mesa's cache in this environment"),
                ));
            }
        }
        create_private_dir(&dir)?;
        presize_index(&dir.join("mesa_shader_cache_db"))?;
        private_db_files(&dir.join("mesa_shader_cache_db").join("part0"))?;
        let max = if max_bytes == 0 {
            DEFAULT_MAX_BYTES
        } else {
            max_bytes
        };
        // Mesa reads a bare number as GiB: give KiB explicitly.
        let kib = max.div_ceil(1024).max(1);
        // The caller's contract: no other thread reads or writes the environment meanwhile.
        std::env::set_var("MESA_SHADER_CACHE_DIR", &dir);
        std::env::set_var("MESA_SHADER_CACHE_MAX_SIZE", format!("{kib}K"));
        std::env::set_var("MESA_DISK_CACHE_DATABASE_NUM_PARTS", "1");
        std::env::remove_var("MESA_GLSL_CACHE_DIR");
        std::env::remove_var("MESA_GLSL_CACHE_MAX_SIZE");
        Ok(())
    })
}

/// Mesa's truth values for its boolean options (`env_var_as_boolean`).
fn is_true(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "y" | "yes")
}

/// `<the blob cache's directory>/mesa-context`.
fn context_cache_dir() -> Result<PathBuf, Failure> {
    let cache = gpucache::egl::current().ok_or_else(Failure::not_configured)?;
    let dir = cache
        .cache()
        .directory()
        .map(Path::to_path_buf)
        .ok_or_else(|| {
            Failure::new(
                GPUCACHE_ERROR_UNSUPPORTED,
                "the blob cache has no directory (memory only, or its directory could not be used)",
            )
        })?;
    Ok(dir.join(MESA_CONTEXT_CACHE_SUBDIR))
}

/// Creates Mesa's index file sparse (`set_len`), so that only the pages Mesa writes take
/// disk space: Mesa would otherwise allocate all 1.3 MB of it for a few KiB of shaders.
fn presize_index(db_dir: &Path) -> Result<(), Failure> {
    create_private_dir(db_dir)?;
    let path = db_dir.join("index");
    let file = open_private_file(&path)?;
    let len = file.metadata().map_err(|e| io_failure(&path, e))?.len();
    if len == 0 {
        file.set_len(MESA_INDEX_SIZE)
            .map_err(|e| io_failure(&path, e))?;
    }
    Ok(())
}

/// Creates the one database part's folder and its two files (empty, as Mesa's own `open`
/// with `O_CREAT` would leave them, and Mesa writes its headers into an empty file) private,
/// 0700 and 0600: Mesa creates them 0755 and 0644 under the usual umask. Files of an older
/// cache with other modes are made private.
fn private_db_files(part: &Path) -> Result<(), Failure> {
    create_private_dir(part)?;
    for name in ["mesa_cache.db", "mesa_cache.idx"] {
        open_private_file(&part.join(name))?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(part).map_err(|e| io_failure(part, e))?;
        narrow(part, m.permissions().mode())?;
    }
    Ok(())
}

/// Opens `path` for writing, creating it 0600 (its contents kept); an existing file with
/// group or other access loses it.
fn open_private_file(path: &Path) -> Result<std::fs::File, Failure> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(false);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let file = options.open(path).map_err(|e| io_failure(path, e))?;
        let m = file.metadata().map_err(|e| io_failure(path, e))?;
        narrow(path, m.permissions().mode())?;
        Ok(file)
    }
    #[cfg(not(unix))]
    options.open(path).map_err(|e| io_failure(path, e))
}

/// Takes group and other access away from `path`, whose mode is `mode`.
#[cfg(unix)]
fn narrow(path: &Path, mode: u32) -> Result<(), Failure> {
    use std::os::unix::fs::PermissionsExt;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7700))
            .map_err(|e| io_failure(path, e))?;
    }
    Ok(())
}

fn io_failure(path: &Path, e: std::io::Error) -> Failure {
    Failure::new(
        GPUCACHE_ERROR_IO,
        format!("creating {}: {e}", path.display()),
    )
}

fn create_private_dir(dir: &Path) -> Result<(), Failure> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(|e| {
        Failure::new(
            GPUCACHE_ERROR_IO,
            format!("creating {}: {e}", dir.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mesa_truth_values() {
        for v in ["1", "true", "TRUE", "yes", "y"] {
            assert!(is_true(v), "{v}");
        }
        for v in ["0", "false", "", "no", "off"] {
            assert!(!is_true(v), "{v}");
        }
    }
}
