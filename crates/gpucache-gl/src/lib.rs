//! The GPU program cache of Chromium's design (seeds 000/001) over gpucache, on real GL.
//!
//! - [`ProgramCache`]: status storage (which shaders compiled, which programs linked, with
//!   the reference counts that let eviction forget shaders) and binary storage (program
//!   binaries in the engine's memory tier, persisted by its disk tier: preloaded at open,
//!   written behind), namespaced by a [`GlIdentity`].
//! - [`ProgramManager`]: the compile/link/load flow over a [`Gl`]: deferred compiles, binary
//!   loads on a hit, compile and link with the cache replaced when a binary is rejected.
//! - [`GlContext`] and [`GlowGl`]: a surfaceless EGL context (GLES 3 or desktop GL) and the
//!   [`Gl`] trait on it through `glow`.
//! - [`GlDiscardableBackend`]: real GL textures and buffers under discardable memory
//!   (`gpucache-discardable`'s service back end; see docs/discardable.md).
//!
//! ```no_run
//! use gpucache_gl::{Api, Bindings, GlContext, GlIdentity, ProgramCache, ProgramManager};
//!
//! let context = GlContext::create(Api::Gles)?;
//! let gl = context.gl();
//! let identity = GlIdentity::query(&gl, Api::Gles, "my-app 1.0");
//! let cache = ProgramCache::builder().directory("/tmp/programs").open(&identity)?;
//! let manager = ProgramManager::new(&gl, &cache);
//! let vertex = "#version 300 es\nin vec4 pos; void main() { gl_Position = pos; }";
//! let fragment = "#version 300 es\nprecision mediump float; out vec4 c; void main() { c = vec4(1.0); }";
//! let program = manager.program(vertex, fragment, &Bindings::new().attribute("pos", 0))?;
//! println!("loaded from the cache: {}", program.from_cache);
//! # Ok::<(), gpucache_gl::Error>(())
//! ```

#![deny(clippy::undocumented_unsafe_blocks)]

mod cache;
mod context;
pub mod discardable;
mod entry;
mod error;
mod gl;
mod glow_gl;
mod histograms;
mod identity;
mod keys;
mod manager;
pub mod report;
mod status;

pub use cache::{
    ProgramCache, ProgramCacheBuilder, ProgramCacheStats, HISTOGRAMS_STREAM, PROGRAMS_STREAM,
};
pub use context::GlContext;
pub use discardable::{GlBackendStats, GlDiscardableBackend, GlObject};
pub use entry::{ProgramEntry, ENTRY_VERSION};
pub use error::Error;
pub use gl::{
    Gl, ProgramBinary, ShaderKind, INTERLEAVED_ATTRIBS, RENDERER, SEPARATE_ATTRIBS,
    SHADING_LANGUAGE_VERSION, VENDOR, VERSION,
};
pub use glow_gl::GlowGl;
pub use histograms::{HistogramSet, Metric, PersistedHistograms};
pub use identity::{Api, GlIdentity};
pub use keys::{program_key, shader_hash, Bindings, ProgramKey, ShaderHash};
pub use manager::{LinkedProgram, ProgramManager, Shader};
pub use status::{decode_programs as decode_program_table, Status, StatusStorage};
