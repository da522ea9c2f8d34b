//! The crate's error type.

use std::io;

use crate::gl::ShaderKind;

/// What can go wrong in the program cache and its GL back end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A shader failed to compile; `log` is GL's info log.
    #[error("the {} shader does not compile: {log}", kind.name())]
    Compile {
        /// Which shader.
        kind: ShaderKind,
        /// `glGetShaderInfoLog`.
        log: String,
    },
    /// The program failed to link; `log` is GL's info log.
    #[error("the program does not link: {log}")]
    Link {
        /// `glGetProgramInfoLog`.
        log: String,
    },
    /// GL could not create an object.
    #[error("GL: {0}")]
    Gl(&'static str),
    /// The EGL context could not be created or made current.
    #[error("EGL: {0}")]
    Context(String),
    /// A stored value or stream failed its checks.
    #[error(transparent)]
    Corrupt(#[from] gpucache::FormatError),
    /// The engine failed (directory, disk tier, arguments).
    #[error(transparent)]
    Cache(gpucache::Error),
    /// An I/O error.
    #[error(transparent)]
    Io(#[from] io::Error),
}

impl From<gpucache::Error> for Error {
    fn from(e: gpucache::Error) -> Self {
        match e {
            gpucache::Error::Io(e) => Error::Io(e),
            e => Error::Cache(e),
        }
    }
}
