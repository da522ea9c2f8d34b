//! The C ABI of gpucache (`include/gpucache.h`, generated from this crate by cbindgen).
//!
//! - The `EGL_ANDROID_blob_cache` callbacks [`gpucache_egl_set`] and [`gpucache_egl_get`]
//!   over a process-global cache ([`gpucache_egl_configure`], [`gpucache_egl_flush`],
//!   [`gpucache_egl_shutdown`], [`gpucache_egl_shutdown_at_exit`], [`gpucache_egl_stats()`]) and an install helper for an
//!   `EGLDisplay` ([`gpucache_egl_install`]), and Mesa's own cache kept inside gpucache's
//!   directory for what context creation compiles ([`gpucache_egl_mesa_context_cache`]).
//! - D3D12-style cache sessions ([`gpucache_session_open`] and the `gpucache_session_*`
//!   functions) and cache control ([`gpucache_cache_control`]).
//! - The GPU program cache (`gpucache-gl`) on the caller's GL context
//!   ([`gpucache_gl_cache_open`], [`gpucache_gl_program`] and the `gpucache_gl_*` functions):
//!   linked programs loaded from cached program binaries, with counters and histograms.
//! - A fleet tier on Redis below the blob cache's directory (`fleet_url` in the
//!   configuration, or `GPUCACHE_FLEET_URL`; `docs/fleet.md`).
//! - Stable result codes (`GPUCACHE_OK`, negative `GPUCACHE_ERROR_*`), their names
//!   ([`gpucache_error_name`]) and a per-thread message ([`gpucache_last_error_message`]).
//!
//! Every entry point accepts bad input (NULL pointers, negative sizes, calls before
//! configuration or after shutdown) with a defined answer, and no panic crosses the
//! boundary. `docs/c-api.md` is the guide.

#![deny(clippy::undocumented_unsafe_blocks)]

mod egl;
mod error;
mod fleet;
mod gl;
mod install;
mod mesa_env;
mod session;

pub use egl::*;
pub use error::*;
pub use gl::*;
pub use install::*;
pub use mesa_env::*;
pub use session::*;
