//! The C ABI of gpucache (`include/gpucache.h`, generated from this crate by cbindgen).
//!
//! - The `EGL_ANDROID_blob_cache` callbacks [`gpucache_egl_set`] and [`gpucache_egl_get`]
//!   over a process-global cache ([`gpucache_egl_configure`], [`gpucache_egl_flush`],
//!   [`gpucache_egl_shutdown`], [`gpucache_egl_stats`]) and an install helper for an
//!   `EGLDisplay` ([`gpucache_egl_install`]).
//! - D3D12-style cache sessions ([`gpucache_session_open`] and the `gpucache_session_*`
//!   functions) and cache control ([`gpucache_cache_control`]).
//! - Stable result codes (`GPUCACHE_OK`, negative `GPUCACHE_ERROR_*`), their names
//!   ([`gpucache_error_name`]) and a per-thread message ([`gpucache_last_error_message`]).
//!
//! Every entry point accepts bad input (NULL pointers, negative sizes, calls before
//! configuration or after shutdown) with a defined answer, and no panic crosses the
//! boundary. `docs/c-api.md` is the guide.

#![deny(clippy::undocumented_unsafe_blocks)]

mod egl;
mod error;
mod install;
mod session;

pub use egl::*;
pub use error::*;
pub use install::*;
pub use session::*;
