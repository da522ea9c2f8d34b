//! A display's identity: what the cached entries depend on, and so the name of the
//! `id-<hash>` directory they live in.
//!
//! It is read inside the application's first `eglCreateContext`, so it must be cheap: the
//! display's strings, the driver's name, and the build ids of the libraries that hold the
//! compiler (read from their files' ELF notes), not `eglGetDisplayDriverConfig`, whose XML
//! took 0.18 ms to build (see `docs/dropin.md`, "Namespaces and identity").

use std::ffi::{c_int, c_void, CStr};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::egl::{has_token, EGLDisplay, Real, EGL_VERSION};

/// The identity of `dpy`: `EGL_VENDOR`, `EGL_VERSION`, and where the display advertises
/// `EGL_MESA_query_driver` the driver's name; the build ids of the loaded Mesa driver
/// libraries (`libgallium-*.so`, `*_dri.so`), or, when none is loaded, a hash of the
/// driver's configuration; and the build id of the real vendor library.
///
/// # Safety
///
/// `dpy` is an initialised display of `real`'s EGL.
pub unsafe fn of_display(
    real: &Real,
    dpy: EGLDisplay,
    extensions: &[u8],
    vendor: &[u8],
) -> Vec<u8> {
    let mut id = b"gpucache-dropin 1\nvendor=".to_vec();
    id.extend_from_slice(vendor);
    id.extend_from_slice(b"\nversion=");
    // SAFETY: the caller's contract.
    id.extend(unsafe { real.query(dpy, EGL_VERSION) }.unwrap_or_default());
    if has_token(extensions, b"EGL_MESA_query_driver") {
        if let Some(name) = real.driver_name {
            // SAFETY: the display advertises EGL_MESA_query_driver; the answer is NULL or
            // a NUL-terminated string owned by the driver.
            let n = unsafe { name(dpy) };
            if !n.is_null() {
                id.extend_from_slice(b"\ndriver=");
                // SAFETY: non-NULL, NUL-terminated (above).
                id.extend_from_slice(unsafe { CStr::from_ptr(n) }.to_bytes());
            }
        }
        let builds = driver_build_ids();
        if builds.is_empty() {
            // SAFETY: as above.
            if let Some(hash) = unsafe { driver_config_hash(real, dpy) } {
                id.extend(format!("\ndriver_config={hash:016x}").bytes());
            }
        }
        for build in builds {
            id.extend_from_slice(b"\ndriver_build_id=");
            id.extend(hex(&build));
        }
    }
    // Any error the queries left behind is not the application's.
    real.take_error();
    if let Some(build) = real.library.as_deref().and_then(crate::elf::build_id) {
        id.extend_from_slice(b"\nlibrary_build_id=");
        id.extend(hex(&build));
    }
    id
}

fn hex(bytes: &[u8]) -> impl Iterator<Item = u8> + '_ {
    bytes.iter().flat_map(|b| format!("{b:02x}").into_bytes())
}

/// A hash of `eglGetDisplayDriverConfig`'s answer (the driver's option definitions).
///
/// # Safety
///
/// `dpy` is an initialised display of `real`'s EGL that advertises `EGL_MESA_query_driver`.
unsafe fn driver_config_hash(real: &Real, dpy: EGLDisplay) -> Option<u64> {
    let config = real.driver_config?;
    // SAFETY: the caller's contract; the answer is NULL or a string the caller frees with
    // free().
    let c = unsafe { config(dpy) };
    if c.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated; freed once, right after.
    let hash = fnv1a(unsafe { CStr::from_ptr(c) }.to_bytes());
    // SAFETY: allocated by the driver with malloc, as the extension says.
    unsafe { libc::free(c.cast()) };
    Some(hash)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The build ids of the Mesa driver libraries loaded in this process, in the order of
/// their paths: Mesa 24.2 and later build every Gallium driver into `libgallium-<version>.so`,
/// earlier releases into `<driver>_dri.so`. The driver is loaded by `eglInitialize`, before
/// any context.
fn driver_build_ids() -> Vec<Vec<u8>> {
    let mut paths = loaded_objects()
        .into_iter()
        .filter(|p| p.file_name().is_some_and(is_driver_library))
        .collect::<Vec<_>>();
    paths.sort();
    paths.dedup();
    paths
        .iter()
        .filter_map(|p| crate::elf::build_id(p))
        .collect()
}

/// Whether a file name is a Mesa driver library's.
fn is_driver_library(name: &std::ffi::OsStr) -> bool {
    let name = name.as_bytes();
    name.starts_with(b"libgallium") || name.windows(7).any(|w| w == b"_dri.so")
}

/// The paths of the shared objects loaded in this process (`dl_iterate_phdr`).
fn loaded_objects() -> Vec<PathBuf> {
    /// Collects each object's non-empty name into the `Vec<PathBuf>` behind `data`.
    ///
    /// # Safety
    ///
    /// `info` is a valid `dl_phdr_info` and `data` points to a `Vec<PathBuf>` that nothing
    /// else uses during the call (`dl_iterate_phdr`'s contract with the caller below).
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: the function's contract.
        let (info, paths) = unsafe { (&*info, &mut *data.cast::<Vec<PathBuf>>()) };
        if !info.dlpi_name.is_null() {
            // SAFETY: a non-NULL name is a NUL-terminated string owned by the loader.
            let name = unsafe { CStr::from_ptr(info.dlpi_name) };
            if !name.is_empty() {
                paths.push(PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())));
            }
        }
        0
    }
    let mut paths: Vec<PathBuf> = Vec::new();
    // SAFETY: `each` matches the callback's type and only reads the entry it is given and
    // appends to `paths`, which lives across the call and is used by nothing else meanwhile.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut paths as *mut Vec<PathBuf>).cast()) };
    paths
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_libraries_are_told_by_name() {
        for name in [
            "libgallium-25.0.7-2~bpo12+1.so",
            "libgallium-24.2.8.so",
            "swrast_dri.so",
            "radeonsi_dri.so",
        ] {
            assert!(is_driver_library(name.as_ref()), "{name}");
        }
        for name in [
            "libEGL_mesa.so.0",
            "libc.so.6",
            "libdril_drm.so",
            "libgbm.so.1",
        ] {
            assert!(!is_driver_library(name.as_ref()), "{name}");
        }
    }

    #[test]
    fn the_loaded_objects_include_the_c_library() {
        let objects = loaded_objects();
        assert!(
            objects.iter().any(|p| p
                .file_name()
                .is_some_and(|n| n.as_bytes().starts_with(b"libc."))),
            "{objects:?}"
        );
    }
}
