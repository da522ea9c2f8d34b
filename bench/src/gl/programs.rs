//! Links every program of the corpus in one of three ways (from source, through the program
//! cache, or from binaries held in memory: the floor), draws each once into a small
//! framebuffer, and hashes the pixels read back. GL calls go through a counting wrapper, so a
//! run reports how many shaders it compiled and programs it linked.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context as _, Result};
use glow::HasContext;
use gpucache_gl::{
    Bindings, Gl, GlContext, GlowGl, ProgramBinary, ProgramCache, ProgramManager, ShaderKind,
};

use super::corpus::Program;
use super::floor::{read_pairs, write_pairs};

/// Width and height of the framebuffer every program draws into.
pub const SIZE: i32 = 32;

/// What drawing one program gave.
#[derive(Clone, Debug)]
pub struct Drawn {
    /// The program's name.
    pub name: String,
    /// Whether the fragment shader compiled and the program linked.
    pub linked: bool,
    /// XXH3 of the RGBA8 pixels (0 when not linked).
    pub pixels: u64,
}

/// Times of a whole run, summed over the programs.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Compiling (through the cache: deciding, and compiling what it did not skip).
    pub compile: Duration,
    /// Linking or loading binaries, status queries included.
    pub link: Duration,
    /// The first draw and the read-back (llvmpipe generates machine code here).
    pub draw: Duration,
}

/// GL calls made by a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `glCompileShader`.
    pub compiles: u64,
    /// `glLinkProgram`.
    pub links: u64,
    /// `glProgramBinary`.
    pub binary_loads: u64,
}

/// How programs get linked.
pub enum Linker<'a> {
    /// Compile and link from source, no program cache.
    Source,
    /// Through gpucache-gl's program cache.
    Cache(&'a ProgramCache),
    /// `glProgramBinary` from binaries held in memory, read from one file before the run (a
    /// program it lacks is compiled, linked and added).
    Floor(&'a mut BinaryFloor),
}

/// Binaries by program name, the floor of the program-cache benchmark.
#[derive(Debug, Default)]
pub struct BinaryFloor {
    binaries: HashMap<String, ProgramBinary>,
    changed: bool,
}

impl BinaryFloor {
    /// Reads the file (a missing file is an empty floor).
    pub fn load(path: &Path) -> Result<Self> {
        let mut floor = Self::default();
        match std::fs::read(path) {
            Ok(bytes) => {
                for (key, value) in
                    read_pairs(&bytes).with_context(|| path.display().to_string())?
                {
                    if value.len() < 4 {
                        bail!("{}: a binary without its format", path.display());
                    }
                    let format = u32::from_le_bytes(value[..4].try_into().unwrap());
                    floor.binaries.insert(
                        String::from_utf8_lossy(&key).into_owned(),
                        ProgramBinary {
                            format,
                            data: value[4..].to_vec(),
                        },
                    );
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
        Ok(floor)
    }

    /// Writes the file if a program was added.
    pub fn save(&self, path: &Path) -> Result<()> {
        if !self.changed {
            return Ok(());
        }
        let pairs = self.binaries.iter().map(|(name, b)| {
            let mut value = b.format.to_le_bytes().to_vec();
            value.extend_from_slice(&b.data);
            (name.as_bytes().to_vec(), value)
        });
        std::fs::write(path, write_pairs(pairs))
            .with_context(|| format!("writing {}", path.display()))
    }
}

/// A [`Gl`] that counts the calls a cache exists to avoid.
pub struct CountingGl<'a> {
    inner: GlowGl<'a>,
    compiles: Cell<u64>,
    links: Cell<u64>,
    binary_loads: Cell<u64>,
}

impl<'a> CountingGl<'a> {
    /// Counts the calls made through `inner`.
    pub fn new(inner: GlowGl<'a>) -> Self {
        Self {
            inner,
            compiles: Cell::new(0),
            links: Cell::new(0),
            binary_loads: Cell::new(0),
        }
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        Counts {
            compiles: self.compiles.get(),
            links: self.links.get(),
            binary_loads: self.binary_loads.get(),
        }
    }
}

impl Gl for CountingGl<'_> {
    fn get_string(&self, name: u32) -> String {
        self.inner.get_string(name)
    }
    fn num_program_binary_formats(&self) -> i32 {
        self.inner.num_program_binary_formats()
    }
    fn create_shader(&self, kind: ShaderKind) -> Option<u32> {
        self.inner.create_shader(kind)
    }
    fn shader_source(&self, shader: u32, source: &str) {
        self.inner.shader_source(shader, source)
    }
    fn compile_shader(&self, shader: u32) {
        self.compiles.set(self.compiles.get() + 1);
        self.inner.compile_shader(shader)
    }
    fn compile_status(&self, shader: u32) -> bool {
        self.inner.compile_status(shader)
    }
    fn shader_info_log(&self, shader: u32) -> String {
        self.inner.shader_info_log(shader)
    }
    fn delete_shader(&self, shader: u32) {
        self.inner.delete_shader(shader)
    }
    fn create_program(&self) -> Option<u32> {
        self.inner.create_program()
    }
    fn attach_shader(&self, program: u32, shader: u32) {
        self.inner.attach_shader(program, shader)
    }
    fn detach_shader(&self, program: u32, shader: u32) {
        self.inner.detach_shader(program, shader)
    }
    fn bind_attrib_location(&self, program: u32, index: u32, name: &str) {
        self.inner.bind_attrib_location(program, index, name)
    }
    fn bind_frag_data_location(&self, program: u32, color: u32, name: &str) {
        self.inner.bind_frag_data_location(program, color, name)
    }
    fn transform_feedback_varyings(&self, program: u32, varyings: &[&str], mode: u32) {
        self.inner
            .transform_feedback_varyings(program, varyings, mode)
    }
    fn set_binary_retrievable_hint(&self, program: u32) {
        self.inner.set_binary_retrievable_hint(program)
    }
    fn link_program(&self, program: u32) {
        self.links.set(self.links.get() + 1);
        self.inner.link_program(program)
    }
    fn link_status(&self, program: u32) -> bool {
        self.inner.link_status(program)
    }
    fn program_info_log(&self, program: u32) -> String {
        self.inner.program_info_log(program)
    }
    fn get_program_binary(&self, program: u32) -> Option<ProgramBinary> {
        self.inner.get_program_binary(program)
    }
    fn program_binary(&self, program: u32, format: u32, data: &[u8]) {
        self.binary_loads.set(self.binary_loads.get() + 1);
        self.inner.program_binary(program, format, data)
    }
    fn active_attributes(&self, program: u32) -> Vec<(String, i32)> {
        self.inner.active_attributes(program)
    }
    fn active_uniforms(&self, program: u32) -> Vec<(String, i32)> {
        self.inner.active_uniforms(program)
    }
    fn delete_program(&self, program: u32) {
        self.inner.delete_program(program)
    }
}

/// Links (however `linker` says) and draws every program once, in order (`draw` false: links
/// only, pixel hashes 0).
pub fn draw_all(
    context: &GlContext,
    vertex: &str,
    programs: &[Program],
    mut linker: Linker<'_>,
    draw: bool,
) -> Result<(Vec<Drawn>, Timings, Counts)> {
    let glow = context.glow();
    let gl = CountingGl::new(context.gl());
    let mut timings = Timings::default();
    let target = Target::new(glow)?;
    let manager = match &linker {
        Linker::Cache(cache) => Some(ProgramManager::new(&gl, cache)),
        _ => None,
    };
    // The shared vertex shader: compiled once (or deferred, through the cache); the floor
    // compiles it only if a program is missing from its binaries.
    let start = Instant::now();
    let floor_has_all = match &linker {
        Linker::Floor(f) => programs.iter().all(|p| f.binaries.contains_key(&p.name)),
        _ => false,
    };
    let shared = match &manager {
        Some(m) => SharedVertex::Cached(m.compile_shader(ShaderKind::Vertex, vertex)?),
        None if floor_has_all => SharedVertex::Plain(0),
        None => {
            let v = compile(&gl, ShaderKind::Vertex, vertex)?
                .ok_or_else(|| anyhow!("the vertex shader does not compile"))?;
            SharedVertex::Plain(v)
        }
    };
    timings.compile += start.elapsed();

    let mut drawn = Vec::with_capacity(programs.len());
    for program in programs {
        let linked = match (&mut linker, &manager, &shared) {
            (_, Some(m), SharedVertex::Cached(v)) => {
                let t = Instant::now();
                let f = m.compile_shader(ShaderKind::Fragment, &program.fragment)?;
                timings.compile += t.elapsed();
                let t = Instant::now();
                let linked = if f.compiled() {
                    m.link(v, &f, &Bindings::new()).ok().map(|p| p.program)
                } else {
                    None
                };
                timings.link += t.elapsed();
                m.delete_shader(f);
                linked
            }
            (Linker::Floor(floor), None, SharedVertex::Plain(v)) => {
                match floor.binaries.get(&program.name) {
                    Some(binary) => {
                        let t = Instant::now();
                        let p = gl
                            .create_program()
                            .ok_or_else(|| anyhow!("glCreateProgram"))?;
                        gl.program_binary(p, binary.format, &binary.data);
                        let ok = gl.link_status(p);
                        timings.link += t.elapsed();
                        ok.then_some(p)
                    }
                    None => {
                        let p = compile_and_link(&gl, *v, program, &mut timings)?;
                        if let Some(binary) = p.and_then(|p| gl.get_program_binary(p)) {
                            floor.binaries.insert(program.name.clone(), binary);
                            floor.changed = true;
                        }
                        p
                    }
                }
            }
            (_, None, SharedVertex::Plain(v)) => compile_and_link(&gl, *v, program, &mut timings)?,
            _ => unreachable!("the vertex shader matches the linker"),
        };
        let Some(linked) = linked else {
            drawn.push(Drawn {
                name: program.name.clone(),
                linked: false,
                pixels: 0,
            });
            continue;
        };
        let t = Instant::now();
        let pixels = if draw { target.draw(glow, linked) } else { 0 };
        timings.draw += t.elapsed();
        gl.delete_program(linked);
        drawn.push(Drawn {
            name: program.name.clone(),
            linked: true,
            pixels,
        });
    }
    match shared {
        SharedVertex::Cached(v) => manager
            .expect("a cached vertex shader has its manager")
            .delete_shader(v),
        SharedVertex::Plain(0) => {}
        SharedVertex::Plain(v) => gl.delete_shader(v),
    }
    target.delete(glow);
    let counts = gl.counts();
    Ok((drawn, timings, counts))
}

enum SharedVertex {
    /// A GL shader name; 0 when the floor needs none.
    Plain(u32),
    Cached(gpucache_gl::Shader),
}

/// Compiles a shader; `None` when it does not compile.
fn compile(gl: &impl Gl, kind: ShaderKind, source: &str) -> Result<Option<u32>> {
    let s = gl
        .create_shader(kind)
        .ok_or_else(|| anyhow!("glCreateShader"))?;
    gl.shader_source(s, source);
    gl.compile_shader(s);
    if gl.compile_status(s) {
        Ok(Some(s))
    } else {
        gl.delete_shader(s);
        Ok(None)
    }
}

/// Compiles the fragment shader and links it with `vertex`; `None` when either fails.
fn compile_and_link(
    gl: &impl Gl,
    vertex: u32,
    program: &Program,
    timings: &mut Timings,
) -> Result<Option<u32>> {
    let t = Instant::now();
    let fragment = compile(gl, ShaderKind::Fragment, &program.fragment)?;
    timings.compile += t.elapsed();
    let Some(fragment) = fragment else {
        return Ok(None);
    };
    let t = Instant::now();
    let p = gl
        .create_program()
        .ok_or_else(|| anyhow!("glCreateProgram"))?;
    gl.attach_shader(p, vertex);
    gl.attach_shader(p, fragment);
    gl.set_binary_retrievable_hint(p);
    gl.link_program(p);
    let ok = gl.link_status(p);
    timings.link += t.elapsed();
    gl.detach_shader(p, vertex);
    gl.detach_shader(p, fragment);
    gl.delete_shader(fragment);
    if ok {
        Ok(Some(p))
    } else {
        gl.delete_program(p);
        Ok(None)
    }
}

/// The framebuffer, its renderbuffer and an empty vertex array.
struct Target {
    fbo: glow::NativeFramebuffer,
    rbo: glow::NativeRenderbuffer,
    vao: glow::NativeVertexArray,
}

impl Target {
    fn new(gl: &glow::Context) -> Result<Self> {
        // SAFETY: the context is current on this thread; every object is created here.
        unsafe {
            let fbo = gl.create_framebuffer().map_err(|e| anyhow!(e))?;
            let rbo = gl.create_renderbuffer().map_err(|e| anyhow!(e))?;
            gl.bind_renderbuffer(glow::RENDERBUFFER, Some(rbo));
            gl.renderbuffer_storage(glow::RENDERBUFFER, glow::RGBA8, SIZE, SIZE);
            gl.bind_framebuffer(glow::FRAMEBUFFER, Some(fbo));
            gl.framebuffer_renderbuffer(
                glow::FRAMEBUFFER,
                glow::COLOR_ATTACHMENT0,
                glow::RENDERBUFFER,
                Some(rbo),
            );
            gl.viewport(0, 0, SIZE, SIZE);
            let vao = gl.create_vertex_array().map_err(|e| anyhow!(e))?;
            gl.bind_vertex_array(Some(vao));
            Ok(Self { fbo, rbo, vao })
        }
    }

    /// Draws the full-screen triangle with `program` and hashes the pixels.
    fn draw(&self, gl: &glow::Context, program: u32) -> u64 {
        let mut pixels = vec![0u8; (SIZE * SIZE * 4) as usize];
        let program =
            glow::NativeProgram(std::num::NonZeroU32::new(program).expect("a program name"));
        // SAFETY: the context is current; `program` is linked and `pixels` holds SIZE² RGBA8.
        unsafe {
            gl.use_program(Some(program));
            let size = SIZE as f32;
            if let Some(l) = gl.get_uniform_location(program, "iResolution") {
                gl.uniform_3_f32(Some(&l), size, size, 1.0);
            }
            for name in ["iTime", "iGlobalTime"] {
                if let Some(l) = gl.get_uniform_location(program, name) {
                    gl.uniform_1_f32(Some(&l), 1.0);
                }
            }
            gl.clear_color(0.0, 0.0, 0.0, 0.0);
            gl.clear(glow::COLOR_BUFFER_BIT);
            gl.draw_arrays(glow::TRIANGLES, 0, 3);
            gl.read_pixels(
                0,
                0,
                SIZE,
                SIZE,
                glow::RGBA,
                glow::UNSIGNED_BYTE,
                glow::PixelPackData::Slice(Some(&mut pixels)),
            );
            gl.use_program(None);
        }
        xxhash_rust::xxh3::xxh3_64(&pixels)
    }

    fn delete(self, gl: &glow::Context) {
        // SAFETY: the context is current; the objects were created by `new`.
        unsafe {
            gl.delete_vertex_array(self.vao);
            gl.delete_framebuffer(self.fbo);
            gl.delete_renderbuffer(self.rbo);
        }
    }
}
