//! The committed header is what cbindgen generates from the crate's sources now.
//! `GPUCACHE_BLESS=1` rewrites it instead of failing.

use std::path::Path;

#[test]
fn committed_header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable and valid");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses the crate");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = crate_dir.join("include/gpucache.h");
    let committed = std::fs::read(&path).unwrap_or_default();
    if fresh == committed {
        return;
    }
    if std::env::var_os("GPUCACHE_BLESS").is_some_and(|v| v == "1") {
        std::fs::write(&path, &fresh).expect("include/gpucache.h is writable");
        eprintln!("rewrote {}", path.display());
        return;
    }
    let line = String::from_utf8_lossy(&committed)
        .lines()
        .zip(String::from_utf8_lossy(&fresh).lines())
        .position(|(a, b)| a != b)
        .map_or_else(|| "the length".to_owned(), |n| format!("line {}", n + 1));
    panic!(
        "{} is stale (first difference at {line}): the C API changed. Regenerate it with \
         `GPUCACHE_BLESS=1 cargo test -p gpucache-ffi --test header` and commit the result.",
        path.display()
    );
}
