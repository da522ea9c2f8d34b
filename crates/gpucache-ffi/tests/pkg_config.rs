//! `scripts/install-c-lib` installs a usable C library: the header, the static and shared
//! libraries and a pkg-config file with which a C program compiles, links and runs.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use common::{artifact_dir, cc, crate_dir, repo_root, run, sanitized, scratch, STRICT_SANITIZED};

/// `pkg-config --cflags --libs gpucache` (with `--static` if asked), or the same flags read
/// from the `.pc` file when pkg-config is not installed.
fn flags(pc_dir: &Path, statically: bool) -> Vec<String> {
    let mut cmd = Command::new("pkg-config");
    cmd.env("PKG_CONFIG_PATH", pc_dir)
        .args(["--cflags", "--libs"]);
    if statically {
        cmd.arg("--static");
    }
    match cmd.arg("gpucache").output() {
        Ok(out) => {
            assert!(
                out.status.success(),
                "pkg-config failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout)
                .split_whitespace()
                .map(str::to_owned)
                .collect()
        }
        Err(_) => {
            eprintln!("note: pkg-config is not installed; reading gpucache.pc directly");
            flags_from_pc_file(&pc_dir.join("gpucache.pc"), statically)
        }
    }
}

/// The subset of the pkg-config format that `gpucache.pc.in` uses: `name=value` variables,
/// `Field: value` lines and `${name}` references.
fn flags_from_pc_file(pc: &Path, statically: bool) -> Vec<String> {
    let text = std::fs::read_to_string(pc).expect("gpucache.pc is readable");
    let mut vars: HashMap<String, String> = HashMap::new();
    let mut fields: HashMap<String, String> = HashMap::new();
    let expand = |s: &str, vars: &HashMap<String, String>| {
        let mut out = s.to_owned();
        while let Some(start) = out.find("${") {
            let end = start + out[start..].find('}').expect("closed ${");
            let value = vars.get(&out[start + 2..end]).cloned().unwrap_or_default();
            out.replace_range(start..=end, &value);
        }
        out
    };
    for line in text.lines() {
        if let Some((k, v)) = line.split_once('=').filter(|(k, _)| !k.contains(':')) {
            let v = expand(v.trim(), &vars);
            vars.insert(k.trim().to_owned(), v);
        } else if let Some((k, v)) = line.split_once(':') {
            fields.insert(k.trim().to_owned(), expand(v.trim(), &vars));
        }
    }
    let mut wanted = vec!["Cflags", "Libs"];
    if statically {
        wanted.push("Libs.private");
    }
    wanted
        .iter()
        .flat_map(|f| {
            fields
                .get(*f)
                .map(String::as_str)
                .unwrap_or("")
                .split_whitespace()
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn installed_library_links_through_its_pkg_config_file() {
    let dir = scratch("install-c-lib");
    let prefix = dir.join("prefix");
    // The libraries cargo built for this test run; the script's default builds release.
    run(Command::new("bash")
        .arg(repo_root().join("scripts/install-c-lib"))
        .arg("--from")
        .arg(artifact_dir())
        .arg(&prefix));
    let lib = prefix.join("lib");
    for file in [
        "include/gpucache.h",
        "lib/libgpucache.a",
        "lib/libgpucache.so.0.1.0",
        "lib/libgpucache.so.0",
        "lib/libgpucache.so",
        "lib/pkgconfig/gpucache.pc",
    ] {
        assert!(prefix.join(file).exists(), "{file} was not installed");
    }
    let header = std::fs::read(prefix.join("include/gpucache.h")).unwrap();
    assert_eq!(
        header,
        std::fs::read(crate_dir().join("include/gpucache.h")).unwrap()
    );

    let pc_dir = lib.join("pkgconfig");
    let dynamic = flags(&pc_dir, false);
    assert!(dynamic.iter().any(|f| f == "-lgpucache"), "{dynamic:?}");
    assert!(
        dynamic
            .iter()
            .any(|f| *f == format!("-I{}", prefix.join("include").display())),
        "{dynamic:?}"
    );
    let statically = flags(&pc_dir, true);
    for needed in ["-lpthread", "-ldl", "-lm"] {
        assert!(
            statically.iter().any(|f| f == needed),
            "{needed} in {statically:?}"
        );
    }

    // The example, against the shared library, as its comment says to build it (sanitized
    // like every C program of these tests, which also lets it load the library built by
    // scripts/sanitize).
    let program = dir.join("blob_cache");
    run(cc()
        .args(STRICT_SANITIZED)
        .arg(crate_dir().join("examples/blob_cache.c"))
        .args(&dynamic)
        .arg("-o")
        .arg(&program));
    let cache = dir.join("cache");
    let cold = run(sanitized(&program).arg(&cache).env("LD_LIBRARY_PATH", &lib));
    assert!(cold.contains("cold: compiled and stored"), "{cold}");
    let warm = run(sanitized(&program).arg(&cache).env("LD_LIBRARY_PATH", &lib));
    assert!(warm.contains("warm: found a"), "{warm}");

    // It loaded the installed library, by its SONAME.
    let ldd = Command::new("ldd")
        .arg(&program)
        .env("LD_LIBRARY_PATH", &lib)
        .output();
    if let Ok(out) = ldd {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("libgpucache.so.0 =>"), "{text}");
        assert!(text.contains(&lib.display().to_string()), "{text}");
    }
}

#[test]
fn pc_file_reader_matches_the_template() {
    // The fallback reader understands the template the script fills in.
    let dir = scratch("pc-reader");
    let template = std::fs::read_to_string(crate_dir().join("gpucache.pc.in")).unwrap();
    let pc = template
        .replace("@PREFIX@", "/opt/g")
        .replace("@VERSION@", "9.9.9")
        .replace("@URL@", "https://example.invalid");
    std::fs::write(dir.join("gpucache.pc"), pc).unwrap();
    let flags = flags_from_pc_file(&dir.join("gpucache.pc"), true);
    assert_eq!(
        &flags[..3],
        ["-I/opt/g/include", "-L/opt/g/lib", "-lgpucache"]
    );
    assert!(flags.iter().any(|f| f == "-ldl"));
}
