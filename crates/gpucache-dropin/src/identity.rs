//! A display's identity: what the cached entries depend on, and so the name of the
//! `id-<hash>` directory they live in.
//!
//! It is read inside the application's first `eglCreateContext`, so it must be cheap: the
//! display's strings, the driver's name, and the build ids of the libraries that hold the
//! compiler (read from their loaded images' ELF notes), not `eglGetDisplayDriverConfig`,
//! whose XML took 0.18 ms to build (see `docs/dropin.md`, "Namespaces and identity").

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
/// any context. Read from the loaded images (their `PT_NOTE` segments), not the files: the
/// build that runs, with no I/O.
fn driver_build_ids() -> Vec<Vec<u8>> {
    let mut drivers = loaded_build_ids(is_driver_library);
    drivers.sort();
    drivers.dedup();
    drivers.into_iter().map(|(_, id)| id).collect()
}

/// Whether a file name is a Mesa driver library's.
fn is_driver_library(name: &[u8]) -> bool {
    name.starts_with(b"libgallium") || name.windows(7).any(|w| w == b"_dri.so")
}

#[cfg(target_pointer_width = "64")]
type Phdr = libc::Elf64_Phdr;
#[cfg(target_pointer_width = "32")]
type Phdr = libc::Elf32_Phdr;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const PF_R: u32 = 4;

/// The paths and build ids of the shared objects loaded in this process whose file names
/// `wanted` accepts (`dl_iterate_phdr`), read from their loaded images.
fn loaded_build_ids(wanted: fn(&[u8]) -> bool) -> Vec<(PathBuf, Vec<u8>)> {
    struct Search {
        wanted: fn(&[u8]) -> bool,
        found: Vec<(PathBuf, Vec<u8>)>,
    }
    /// Adds each wanted object with a build id to the `Search` behind `data`.
    ///
    /// # Safety
    ///
    /// `info` is a valid `dl_phdr_info` and `data` points to a `Search` that nothing else
    /// uses during the call (`dl_iterate_phdr`'s contract with the caller below).
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _: usize, data: *mut c_void) -> c_int {
        // SAFETY: the function's contract.
        let (info, search) = unsafe { (&*info, &mut *data.cast::<Search>()) };
        if info.dlpi_name.is_null() || info.dlpi_phdr.is_null() {
            return 0;
        }
        // SAFETY: a non-NULL name is a NUL-terminated string owned by the loader.
        let name = unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes();
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(name));
        if !path
            .file_name()
            .is_some_and(|n| (search.wanted)(n.as_bytes()))
        {
            return 0;
        }
        // SAFETY: the loader's program headers of this object, `dlpi_phnum` of them, valid
        // during the callback.
        let phdrs =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        // SAFETY: the headers of the object loaded at `dlpi_addr`.
        if let Some(id) = unsafe { loaded_build_id(info.dlpi_addr as usize, phdrs) } {
            search.found.push((path, id));
        }
        0
    }
    let mut search = Search {
        wanted,
        found: Vec::new(),
    };
    // SAFETY: `each` matches the callback's type and only reads the entry it is given and
    // writes `search`, which lives across the call and is used by nothing else meanwhile.
    unsafe { libc::dl_iterate_phdr(Some(each), (&mut search as *mut Search).cast()) };
    search.found
}

/// The build id in the `PT_NOTE` segments of an object loaded at `base`, reading only notes
/// that lie in the file-backed part of a readable loaded segment (mapped readable).
///
/// # Safety
///
/// `phdrs` are the program headers of an object that the loader mapped at `base` and keeps
/// mapped during the call.
unsafe fn loaded_build_id(base: usize, phdrs: &[Phdr]) -> Option<Vec<u8>> {
    let mapped = |at: usize, len: usize| {
        phdrs.iter().any(|l| {
            let (start, size) = (l.p_vaddr as usize, l.p_filesz as usize);
            let (end, segment_end) = (at.checked_add(len), start.checked_add(size));
            l.p_type == PT_LOAD
                && l.p_flags & PF_R != 0
                && at >= start
                && end.is_some_and(|e| segment_end.is_some_and(|s| e <= s))
        })
    };
    for note in phdrs.iter().filter(|p| p.p_type == PT_NOTE) {
        let (at, len) = (note.p_vaddr as usize, note.p_filesz as usize);
        let Some(address) = base
            .checked_add(at)
            .filter(|a| a.checked_add(len).is_some())
        else {
            continue;
        };
        if len == 0 || len > 1 << 16 || !mapped(at, len) {
            continue;
        }
        // SAFETY: the range lies in a readable loaded segment's file-backed part, which the
        // loader mapped at `base` (the caller's contract).
        let bytes = unsafe { std::slice::from_raw_parts(address as *const u8, len) };
        if let Some(id) = crate::elf::find_build_id(bytes) {
            return Some(id);
        }
    }
    None
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
            assert!(is_driver_library(name.as_bytes()), "{name}");
        }
        for name in [
            "libEGL_mesa.so.0",
            "libc.so.6",
            "libgbm.so.1",
            "va_drv_video.so",
        ] {
            assert!(!is_driver_library(name.as_bytes()), "{name}");
        }
    }

    #[test]
    fn a_loaded_objects_build_id_is_read_from_memory_as_from_its_file() {
        let libc = loaded_build_ids(|n| n.starts_with(b"libc."));
        assert_eq!(
            libc.len(),
            1,
            "Debian's libc is loaded and has a build id: {libc:?}"
        );
        let (path, from_memory) = &libc[0];
        assert_eq!(Some(from_memory.clone()), crate::elf::build_id(path));
    }
}
