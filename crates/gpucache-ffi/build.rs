//! Gives the shared library the SONAME it is installed under (`scripts/install-c-lib`), so
//! that programs linked with `-lgpucache` record `libgpucache.so.0` and not a build path.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libgpucache.so.0");
    }
}
