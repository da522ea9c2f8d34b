//! The compile/link/load flow (the seed's `ProgramManager`) over a [`Gl`].
//!
//! - Compiling a shader whose compile status is cached as success compiles nothing: the
//!   shader is *deferred*, and reports success.
//! - Linking looks the program up first. On a hit the binary is loaded with
//!   `glProgramBinary` and nothing is compiled or linked. When the load fails (`LINK_STATUS`
//!   false: a corrupt, truncated, foreign or stale binary), or on a miss, the deferred shaders
//!   are compiled, the program linked, and its binary stored, replacing the old one.
//! - A failed compile or link caches nothing, and its info log reaches the caller as GL
//!   wrote it.

use std::cell::RefCell;
use std::time::Instant;

use crate::cache::ProgramCache;
use crate::entry::ProgramEntry;
use crate::gl::{Gl, ShaderKind};
use crate::histograms::Metric;
use crate::keys::{Bindings, ShaderHash};
use crate::status::Status;
use crate::Error;

/// A shader: compiled, deferred (its compile status is cached as success), or failed.
///
/// Holds a GL shader object once compiled; give it back with
/// [`ProgramManager::delete_shader`] (dropping it leaks the object, as forgetting
/// `glDeleteShader` would).
#[derive(Debug)]
pub struct Shader {
    kind: ShaderKind,
    hash: ShaderHash,
    source: String,
    state: RefCell<ShaderState>,
}

#[derive(Debug)]
enum ShaderState {
    Deferred,
    Compiled(u32),
    Failed { name: u32, log: String },
}

impl Shader {
    /// The stage.
    pub fn kind(&self) -> ShaderKind {
        self.kind
    }

    /// The hash its status is cached under.
    pub fn hash(&self) -> &ShaderHash {
        &self.hash
    }

    /// `GL_COMPILE_STATUS` as the application sees it: true for a deferred shader.
    pub fn compiled(&self) -> bool {
        !matches!(*self.state.borrow(), ShaderState::Failed { .. })
    }

    /// Whether compiling it was skipped so far because its status is cached.
    pub fn deferred(&self) -> bool {
        matches!(*self.state.borrow(), ShaderState::Deferred)
    }

    /// The compile log of a failed shader, as GL wrote it.
    pub fn info_log(&self) -> Option<String> {
        match &*self.state.borrow() {
            ShaderState::Failed { log, .. } => Some(log.clone()),
            _ => None,
        }
    }
}

/// A linked program and what it was linked from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkedProgram {
    /// The GL program object.
    pub program: u32,
    /// Whether it was loaded from a cached binary (nothing compiled or linked).
    pub from_cache: bool,
    /// Active attributes and their locations.
    pub attributes: Vec<(String, i32)>,
    /// Active uniforms and their locations (-1 for uniforms in blocks).
    pub uniforms: Vec<(String, i32)>,
}

impl LinkedProgram {
    /// The location of a uniform, without asking GL.
    pub fn uniform_location(&self, name: &str) -> Option<i32> {
        lookup(&self.uniforms, name)
    }

    /// The location of an attribute, without asking GL.
    pub fn attribute_location(&self, name: &str) -> Option<i32> {
        lookup(&self.attributes, name)
    }
}

/// Finds `name`, or `name[0]` (GL names arrays by their first element).
fn lookup(map: &[(String, i32)], name: &str) -> Option<i32> {
    map.iter()
        .find(|(n, _)| n == name || n.strip_suffix("[0]") == Some(name))
        .map(|&(_, location)| location)
        .filter(|&location| location >= 0)
}

/// Compiles, links and loads programs through a [`ProgramCache`] on one GL context (use it
/// on the thread where the context is current).
#[derive(Debug)]
pub struct ProgramManager<'a, G: Gl> {
    gl: &'a G,
    cache: &'a ProgramCache,
}

impl<'a, G: Gl> ProgramManager<'a, G> {
    /// A manager of the programs of `gl`'s context.
    pub fn new(gl: &'a G, cache: &'a ProgramCache) -> Self {
        Self { gl, cache }
    }

    /// The cache.
    pub fn cache(&self) -> &ProgramCache {
        self.cache
    }

    /// Compiles a shader, unless its compile status is cached as success: then nothing is
    /// compiled until a link needs it. A compile error is a [`Shader`] that is not
    /// [`compiled`](Shader::compiled); `Err` only when GL cannot create a shader object.
    pub fn compile_shader(&self, kind: ShaderKind, source: &str) -> Result<Shader, Error> {
        let started = Instant::now();
        let hash = self.cache.shader_hash(kind, source);
        let shader = Shader {
            kind,
            hash,
            source: source.to_string(),
            state: RefCell::new(ShaderState::Deferred),
        };
        if self.cache.shader_status(&hash) == Status::Success {
            self.cache.record(Metric::StatusHitTime, started.elapsed());
            return Ok(shader);
        }
        self.compile_now(&shader)?;
        Ok(shader)
    }

    /// Deletes the shader's GL object, if it has one.
    pub fn delete_shader(&self, shader: Shader) {
        match shader.state.into_inner() {
            ShaderState::Compiled(name) | ShaderState::Failed { name, .. } => {
                self.gl.delete_shader(name)
            }
            ShaderState::Deferred => {}
        }
    }

    /// Links `vertex` and `fragment` with `bindings`, loading the program from the cache
    /// when it can (see the module documentation).
    ///
    /// Errors: [`Error::Compile`] with GL's log when a shader failed to compile (now, or
    /// when a deferred shader is compiled for this link); [`Error::Link`] with GL's log when
    /// the link fails; [`Error::Gl`] when GL cannot create an object.
    pub fn link(
        &self,
        vertex: &Shader,
        fragment: &Shader,
        bindings: &Bindings,
    ) -> Result<LinkedProgram, Error> {
        let started = Instant::now();
        let key = self
            .cache
            .program_key(&vertex.hash, &fragment.hash, bindings);
        if let Some(entry) = self.cache.load(&key) {
            if entry.vertex == vertex.hash && entry.fragment == fragment.hash {
                let program = self.create_program()?;
                self.gl
                    .program_binary(program, entry.binary.format, &entry.binary.data);
                if self.gl.link_status(program) {
                    self.cache.record(Metric::BinaryHitTime, started.elapsed());
                    return Ok(LinkedProgram {
                        program,
                        from_cache: true,
                        attributes: entry.attributes,
                        uniforms: entry.uniforms,
                    });
                }
                tracing::debug!(
                    ?key,
                    "the driver rejected a cached binary; linking from source"
                );
                self.gl.delete_program(program);
            }
        }

        for shader in [vertex, fragment] {
            self.compile_now(shader)?;
            if let ShaderState::Failed { log, .. } = &*shader.state.borrow() {
                return Err(Error::Compile {
                    kind: shader.kind,
                    log: log.clone(),
                });
            }
        }
        let (ShaderState::Compiled(v), ShaderState::Compiled(f)) =
            (&*vertex.state.borrow(), &*fragment.state.borrow())
        else {
            unreachable!("both shaders were compiled above");
        };
        let (v, f) = (*v, *f);

        let started = Instant::now();
        let gl = self.gl;
        let program = self.create_program()?;
        gl.attach_shader(program, v);
        gl.attach_shader(program, f);
        for (name, location) in &bindings.attributes {
            gl.bind_attrib_location(program, *location, name);
        }
        for (name, color) in &bindings.frag_data {
            gl.bind_frag_data_location(program, *color, name);
        }
        if !bindings.transform_feedback.is_empty() {
            let varyings: Vec<&str> = bindings
                .transform_feedback
                .iter()
                .map(String::as_str)
                .collect();
            gl.transform_feedback_varyings(program, &varyings, bindings.transform_feedback_mode);
        }
        gl.set_binary_retrievable_hint(program);
        gl.link_program(program);
        let linked = gl.link_status(program);
        gl.detach_shader(program, v);
        gl.detach_shader(program, f);
        if !linked {
            let log = gl.program_info_log(program);
            gl.delete_program(program);
            return Err(Error::Link { log });
        }
        self.cache
            .record(Metric::BinaryMissLinkTime, started.elapsed());

        let attributes = gl.active_attributes(program);
        let uniforms = gl.active_uniforms(program);
        match gl.get_program_binary(program) {
            Some(binary) => {
                self.cache.store(
                    &key,
                    &ProgramEntry {
                        vertex: vertex.hash,
                        fragment: fragment.hash,
                        binary,
                        attributes: attributes.clone(),
                        uniforms: uniforms.clone(),
                    },
                );
            }
            None => tracing::debug!(?key, "the driver gives no binary; not cached"),
        }
        Ok(LinkedProgram {
            program,
            from_cache: false,
            attributes,
            uniforms,
        })
    }

    /// Compiles both sources and links them (see [`link`](Self::link)), deleting the
    /// shaders afterwards.
    pub fn program(
        &self,
        vertex: &str,
        fragment: &str,
        bindings: &Bindings,
    ) -> Result<LinkedProgram, Error> {
        let v = self.compile_shader(ShaderKind::Vertex, vertex)?;
        let f = match self.compile_shader(ShaderKind::Fragment, fragment) {
            Ok(f) => f,
            Err(e) => {
                self.delete_shader(v);
                return Err(e);
            }
        };
        let linked = if !v.compiled() || !f.compiled() {
            let failed = if v.compiled() { &f } else { &v };
            Err(Error::Compile {
                kind: failed.kind,
                log: failed.info_log().unwrap_or_default(),
            })
        } else {
            self.link(&v, &f, bindings)
        };
        self.delete_shader(v);
        self.delete_shader(f);
        linked
    }

    /// Deletes a program.
    pub fn delete_program(&self, program: LinkedProgram) {
        self.gl.delete_program(program.program);
    }

    /// Compiles a deferred shader (or a new one); records the status and the time.
    fn compile_now(&self, shader: &Shader) -> Result<(), Error> {
        if !shader.deferred() {
            return Ok(());
        }
        let started = Instant::now();
        let gl = self.gl;
        let name = gl
            .create_shader(shader.kind)
            .ok_or(Error::Gl("glCreateShader returned 0"))?;
        gl.shader_source(name, &shader.source);
        gl.compile_shader(name);
        let state = if gl.compile_status(name) {
            self.cache.shader_compiled(shader.hash);
            self.cache
                .record(Metric::StatusMissCompileTime, started.elapsed());
            ShaderState::Compiled(name)
        } else {
            ShaderState::Failed {
                name,
                log: gl.shader_info_log(name),
            }
        };
        *shader.state.borrow_mut() = state;
        Ok(())
    }

    fn create_program(&self) -> Result<u32, Error> {
        self.gl
            .create_program()
            .ok_or(Error::Gl("glCreateProgram returned 0"))
    }
}
