//! The fleet tier of the blob cache, from the configuration's `fleet_*` fields or the
//! `GPUCACHE_FLEET_*` environment variables (`docs/fleet.md`).

use std::ffi::{c_char, CStr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gpucache::tier::Tier;
use gpucache::Identity;
use gpucache_fleet::FleetBuilder;

use crate::egl::{gpucache_egl_config, path_from_c};
use crate::error::Failure;

/// A non-NULL C string as text, or `None`.
///
/// # Safety
///
/// `s` is NULL or NUL-terminated.
unsafe fn c_string(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()).filter(|s| !s.is_empty())
}

/// A non-NULL C string as a path, or `None`.
///
/// # Safety
///
/// `s` is NULL or NUL-terminated.
unsafe fn c_path(s: *const c_char) -> Option<PathBuf> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the caller's contract.
    let s = unsafe { CStr::from_ptr(s) };
    (!s.is_empty()).then(|| path_from_c(s))
}

/// The fleet tier the configuration asks for (its fields first, then the environment), or
/// `None` when no URL is given either way.
///
/// # Safety
///
/// The configuration's `fleet_*` strings are NULL or NUL-terminated.
pub(crate) unsafe fn tier(
    cfg: &gpucache_egl_config,
    identity: &[u8],
    directory: Option<&std::path::Path>,
) -> Result<Option<Arc<dyn Tier>>, Failure> {
    let identity = Identity::new(identity.to_vec());
    // SAFETY: forwarded caller contract.
    let (url, key, previous) = unsafe {
        (
            c_string(cfg.fleet_url),
            c_path(cfg.fleet_key_file),
            c_path(cfg.fleet_previous_key_file),
        )
    };
    let from_env = url.is_none();
    let builder = match url {
        Some(url) => FleetBuilder::new(url, identity.clone()),
        None => match FleetBuilder::from_env(identity.clone()) {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            Err(e) => return Err(Failure::invalid(format!("GPUCACHE_FLEET_*: {e}"))),
        },
    };
    let mut builder = builder;
    if let Some(key) = key {
        builder = builder.key_file(key);
    } else if !from_env {
        match std::env::var_os("GPUCACHE_FLEET_KEY_FILE").filter(|v| !v.is_empty()) {
            Some(key) => builder = builder.key_file(PathBuf::from(key)),
            None => {
                return Err(Failure::invalid(
                    "fleet_url is set but no fleet key file (fleet_key_file or \
                     GPUCACHE_FLEET_KEY_FILE)",
                ))
            }
        }
    }
    if let Some(previous) = previous {
        builder = builder.previous_key_file(previous);
    } else if let Some(p) = std::env::var_os("GPUCACHE_FLEET_PREVIOUS_KEY_FILE") {
        if !from_env && !p.is_empty() {
            builder = builder.previous_key_file(PathBuf::from(p));
        }
    }
    if let Some(dir) = directory {
        // The fleet's counters beside the blob cache's, for `gpucache stats DIR`.
        builder = builder.stats_directory(dir);
    }
    if cfg.fleet_read_budget_us > 0 {
        builder = builder.read_budget(Duration::from_micros(cfg.fleet_read_budget_us));
    }
    let tier = builder
        .build()
        .map_err(|e| Failure::invalid(format!("fleet: {e}")))?;
    Ok(Some(tier))
}
