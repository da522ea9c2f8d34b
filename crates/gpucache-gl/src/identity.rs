//! What a program binary depends on besides its sources: the driver, the API, the
//! application's build and the CPU. Binaries of another identity are never loaded.

use gpucache::codec::LeWriter;

use crate::gl::{self, Gl};

/// The API of the context the binaries are made by. Mesa loads a GLES binary into a desktop
/// GL context without complaint, so the API is part of the identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// Desktop OpenGL (core or compatibility profile).
    Gl,
    /// OpenGL ES.
    Gles,
}

impl Api {
    /// "gl" or "gles".
    pub const fn name(self) -> &'static str {
        match self {
            Api::Gl => "gl",
            Api::Gles => "gles",
        }
    }
}

/// The identity of a context's program binaries.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct GlIdentity {
    /// `GL_VENDOR`.
    pub vendor: String,
    /// `GL_RENDERER`.
    pub renderer: String,
    /// `GL_VERSION` (carries the driver's version on Mesa and most vendors).
    pub version: String,
    /// `GL_SHADING_LANGUAGE_VERSION`.
    pub shading_language_version: String,
    /// GL or GLES.
    pub api: Api,
    /// The application's build: binaries made by another build are not loaded (the
    /// application may change how it builds sources, bindings or uses programs).
    pub build_id: String,
    /// The CPU architecture the process runs on (`std::env::consts::ARCH`).
    pub arch: String,
}

impl GlIdentity {
    /// The identity of the current context of `gl`, for `api` and the application build
    /// `build_id`.
    pub fn query(gl: &impl Gl, api: Api, build_id: impl Into<String>) -> Self {
        Self {
            vendor: gl.get_string(gl::VENDOR),
            renderer: gl.get_string(gl::RENDERER),
            version: gl.get_string(gl::VERSION),
            shading_language_version: gl.get_string(gl::SHADING_LANGUAGE_VERSION),
            api,
            build_id: build_id.into(),
            arch: std::env::consts::ARCH.to_string(),
        }
    }

    /// The identity of the current context of `gl`, its API read from `GL_VERSION` (GLES
    /// versions start with "OpenGL ES", by the GLES specification).
    pub fn detect(gl: &impl Gl, build_id: impl Into<String>) -> Self {
        let api = if gl.get_string(gl::VERSION).starts_with("OpenGL ES") {
            Api::Gles
        } else {
            Api::Gl
        };
        Self::query(gl, api, build_id)
    }

    /// The bytes the cache directory is namespaced by (the engine's
    /// [`Identity`](gpucache::Identity)): a tag, then each field length-prefixed.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut w = LeWriter::new(&mut out);
        w.bytes(b"gpucache-gl identity\0");
        for field in [
            self.vendor.as_str(),
            self.renderer.as_str(),
            self.version.as_str(),
            self.shading_language_version.as_str(),
            self.api.name(),
            self.build_id.as_str(),
            self.arch.as_str(),
        ] {
            w.u32(field.len() as u32).bytes(field.as_bytes());
        }
        out
    }

    /// BLAKE3 of [`to_bytes`](Self::to_bytes): mixed into every shader hash and program key.
    pub fn digest(&self) -> [u8; 32] {
        *blake3::hash(&self.to_bytes()).as_bytes()
    }
}
