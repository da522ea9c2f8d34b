//! Mesa 25 as `scripts/setup-mesa` unpacks it into `.cache/mesa25`: the environment a
//! process needs to load it instead of the system's Mesa.

use std::path::PathBuf;

use anyhow::{bail, Result};

use super::corpus::workspace_root;

/// The folder `scripts/setup-mesa` fills.
pub fn root() -> PathBuf {
    workspace_root().join(".cache/mesa25")
}

/// `(name, value)` pairs that make libEGL load Mesa 25's llvmpipe.
pub fn env() -> Result<Vec<(&'static str, String)>> {
    let root = root();
    let lib = root.join("usr/lib/x86_64-linux-gnu");
    let vendor = root.join("egl_vendor.json");
    if !lib.join("libEGL_mesa.so.0").exists() || !vendor.exists() {
        bail!(
            "Mesa 25 is not unpacked in {} (run scripts/setup-mesa)",
            root.display()
        );
    }
    let mut library_path = lib.display().to_string();
    if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
        if !old.is_empty() {
            library_path = format!("{library_path}:{old}");
        }
    }
    Ok(vec![
        ("LD_LIBRARY_PATH", library_path),
        ("LIBGL_DRIVERS_PATH", lib.join("dri").display().to_string()),
        (
            "__EGL_VENDOR_LIBRARY_FILENAMES",
            vendor.display().to_string(),
        ),
        ("GALLIUM_DRIVER", "llvmpipe".to_string()),
    ])
}
