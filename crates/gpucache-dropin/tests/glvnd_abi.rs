//! The drop-in's mirror of GLVND's `__EGLapiImports` matches `glvnd/libeglabi.h`
//! (`libglvnd-dev`): a C program prints the header's size and offsets.

use std::mem::{offset_of, size_of};
use std::process::Command;

use EGL_gpucache::egl::EglApiImports;

#[test]
fn imports_layout_matches_the_header() {
    let header = std::path::Path::new("/usr/include/glvnd/libeglabi.h");
    assert!(
        header.exists(),
        "libglvnd-dev is not installed (scripts/install-deps installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("abi.c");
    std::fs::write(
        &src,
        r#"#include <stddef.h>
#include <stdio.h>
#include <glvnd/libeglabi.h>
int main(void) {
    printf("%zu %zu %zu %zu %u\n", sizeof(__EGLapiImports),
           offsetof(__EGLapiImports, getProcAddress),
           offsetof(__EGLapiImports, getDispatchAddress),
           offsetof(__EGLapiImports, findNativeDisplayPlatform),
           (unsigned)EGL_VENDOR_ABI_MAJOR_VERSION);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.path().join("abi");
    let status = Command::new("cc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(status.success());
    let out = Command::new(&exe).output().unwrap();
    let got = String::from_utf8(out.stdout).unwrap();
    let want = format!(
        "{} {} {} {} 0\n",
        size_of::<EglApiImports>(),
        offset_of!(EglApiImports, get_proc_address),
        offset_of!(EglApiImports, get_dispatch_address),
        offset_of!(EglApiImports, find_native_display_platform),
    );
    assert_eq!(got, want);
}
