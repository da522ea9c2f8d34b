//! Gives the shared library the SONAME it is installed under (`scripts/install-c-lib`), so
//! that programs linked with `-lgpucache` record `libgpucache.so.0` and not a build path.
//!
//! So that the same name also works from the build tree, it puts the installed names next to
//! what cargo builds (`target/<profile>/` and its `deps/`): `libgpucache.so.0` and
//! `libgpucache.so` linking to `libgpucache_ffi.so`, `libgpucache.a` to `libgpucache_ffi.a`
//! (relative symbolic links, dangling until the library is linked), and a pkg-config file
//! `target/<profile>/pkgconfig/gpucache.pc` pointing at the build tree and the header. A
//! program built with `-L target/debug -lgpucache` then runs with `target/debug` on its
//! library path, as it does against an installed copy.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=gpucache.pc.in");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if !(os == "linux" || os == "android" || os.ends_with("bsd")) {
        return;
    }
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgpucache.so.0");
    // OUT_DIR is <profile dir>/build/gpucache-ffi-<hash>/out; the libraries land in the
    // profile directory and its deps/. Failing to place the links is not a build failure:
    // the installed names still come from scripts/install-c-lib.
    let Some(profile_dir) = std::env::var_os("OUT_DIR")
        .map(PathBuf::from)
        .and_then(|out| out.ancestors().nth(3).map(Path::to_path_buf))
    else {
        return;
    };
    for dir in [profile_dir.clone(), profile_dir.join("deps")] {
        for (name, target) in [
            ("libgpucache.so.0", "libgpucache_ffi.so"),
            ("libgpucache.so", "libgpucache_ffi.so"),
            ("libgpucache.a", "libgpucache_ffi.a"),
        ] {
            if let Err(e) = link(&dir, name, target) {
                println!("cargo:warning=cannot link {name} in {}: {e}", dir.display());
            }
        }
    }
    if let Err(e) = pkg_config_file(&profile_dir) {
        println!("cargo:warning=cannot write the build tree's gpucache.pc: {e}");
    }
}

/// Makes `dir/name` a symbolic link to `target` (relative, in the same directory), replacing
/// whatever was there.
fn link(dir: &Path, name: &str, target: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(name);
    if std::fs::read_link(&path).is_ok_and(|t| t == Path::new(target)) {
        return Ok(());
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    #[cfg(unix)]
    return std::os::unix::fs::symlink(target, &path);
    #[cfg(not(unix))]
    return Ok(());
}

/// Writes `profile_dir/pkgconfig/gpucache.pc` from `gpucache.pc.in` with the build tree as
/// the library directory and the crate's `include/` as the header directory.
fn pkg_config_file(profile_dir: &Path) -> std::io::Result<()> {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    let template = std::fs::read_to_string(manifest.join("gpucache.pc.in"))?;
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let url = std::env::var("CARGO_PKG_REPOSITORY").unwrap_or_default();
    let text = template
        .replace("@PREFIX@", &profile_dir.display().to_string())
        .replace("@VERSION@", &version)
        .replace("@URL@", &url)
        .replace("libdir=${exec_prefix}/lib", "libdir=${exec_prefix}")
        .replace(
            "includedir=${prefix}/include",
            &format!("includedir={}", manifest.join("include").display()),
        );
    let dir = profile_dir.join("pkgconfig");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("gpucache.pc"), text)
}
