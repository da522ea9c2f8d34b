//! One name from the build tree and from an install (issue 11, item 4.8): a C program linked
//! against the build tree with `-lgpucache` records the SONAME `libgpucache.so.0` and runs
//! with only the build directory on its library path, as it does against an installed copy.

mod common;

use std::path::Path;
use std::process::Command;

use common::{artifact_dir, cc, crate_dir, output, run, sanitized, scratch, STRICT_SANITIZED};

const PROGRAM: &str = r#"
#include <gpucache.h>
#include <stdio.h>
#include <string.h>

int main(void) {
    const char *name = gpucache_error_name(GPUCACHE_ERROR_NOT_FOUND);
    if (strcmp(name, "GPUCACHE_ERROR_NOT_FOUND") != 0) {
        fprintf(stderr, "unexpected name %s\n", name);
        return 1;
    }
    puts("linked by soname");
    return 0;
}
"#;

fn build_and_run(lib_dir: &Path, include: &Path, name: &str) {
    let dir = scratch(name);
    let src = dir.join("by_soname.c");
    std::fs::write(&src, PROGRAM).unwrap();
    let exe = dir.join("by_soname");
    // Sanitized like every C test: under scripts/sanitize the library itself is instrumented
    // and needs the AddressSanitizer runtime from the program.
    run(cc()
        .args(STRICT_SANITIZED)
        .arg("-I")
        .arg(include)
        .arg(&src)
        .arg("-L")
        .arg(lib_dir)
        .arg("-lgpucache")
        .arg("-o")
        .arg(&exe));
    // The dynamic section names the SONAME, not the build file name.
    if let Ok(out) = Command::new("readelf").arg("-d").arg(&exe).output() {
        let dynamic = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            assert!(
                dynamic.contains("[libgpucache.so.0]"),
                "NEEDED is not libgpucache.so.0:\n{dynamic}"
            );
        }
    }
    let out = output(
        sanitized(&exe)
            .env("LD_LIBRARY_PATH", lib_dir)
            .env_remove("LD_PRELOAD"),
    );
    assert!(
        out.status.success(),
        "the program linked against {} does not run: {}\n{}",
        lib_dir.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "linked by soname\n");
}

#[test]
fn a_program_linked_against_the_build_tree_runs_by_its_soname() {
    // target/<profile>/deps: where cargo put the library this test run links with.
    let deps = artifact_dir();
    for name in ["libgpucache.so.0", "libgpucache.so", "libgpucache.a"] {
        assert!(
            deps.join(name).exists(),
            "{name} is missing from {}",
            deps.display()
        );
    }
    build_and_run(&deps, &crate_dir().join("include"), "build-tree-soname");
}

#[test]
fn the_build_tree_has_a_pkg_config_file() {
    let profile = artifact_dir().parent().unwrap().to_path_buf();
    let pc = std::fs::read_to_string(profile.join("pkgconfig/gpucache.pc"))
        .expect("target/<profile>/pkgconfig/gpucache.pc");
    assert!(
        pc.contains(&format!("prefix={}\n", profile.display())),
        "{pc}"
    );
    assert!(pc.contains("libdir=${exec_prefix}\n"), "{pc}");
    assert!(
        pc.contains(&format!(
            "includedir={}",
            crate_dir().join("include").display()
        )),
        "{pc}"
    );
    assert!(pc.contains("-lgpucache"), "{pc}");
    // pkg-config, where installed, accepts it.
    if let Ok(out) = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", profile.join("pkgconfig"))
        .args(["--libs", "gpucache"])
        .output()
    {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let libs = String::from_utf8_lossy(&out.stdout);
        assert!(libs.contains(&format!("-L{}", profile.display())), "{libs}");
    }
}
