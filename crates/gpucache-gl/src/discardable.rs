//! The GL side of discardable memory: a [`Backend`] that owns real GL textures and buffers
//! in one surfaceless EGL context (Mesa llvmpipe here), for the channel's service
//! (`gpucache_discardable::Server`).
//!
//! - A texture gets immutable storage with the levels the client asked for; its size is
//!   width × height × bytes per texel summed over the levels GL reports it has
//!   (`GL_TEXTURE_IMMUTABLE_LEVELS`; glow has no `glGetTexLevelParameter`, so each level's
//!   sides are GL's own rule: halved, down to 1).
//!   A buffer's size is `GL_BUFFER_SIZE`.
//! - "Use" draws a quad sampling the texture into an offscreen framebuffer (a buffer gets a
//!   small `glBufferSubData`).
//! - Deletes arrive batched per context (one call per context per batch). Every client's
//!   objects live in this one context here (the service's share group), so a batch costs no
//!   context switch; a back end with a context per client would make it current once per
//!   batch.

use std::collections::HashMap;

use glow::HasContext;
use gpucache_discardable::{
    Backend, ClientId, ContextId, Deleted, Error as DError, ResourceDesc, ResourceId, TexelFormat,
};

use crate::context::GlContext;
use crate::identity::Api;

/// A GL object behind a discardable resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GlObject {
    /// A 2D texture.
    Texture(glow::Texture),
    /// A buffer.
    Buffer(glow::Buffer),
}

/// Counts of the GL back end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlBackendStats {
    /// Textures made.
    pub textures_created: u64,
    /// Buffers made.
    pub buffers_created: u64,
    /// Quads drawn (and buffer writes).
    pub draws: u64,
    /// Calls of `delete` (batches).
    pub delete_batches: u64,
    /// Objects deleted.
    pub objects_deleted: u64,
}

/// Side of the offscreen target.
const TARGET: i32 = 64;

/// Real GL textures and buffers under discardable memory.
pub struct GlDiscardableBackend {
    objects: HashMap<(ClientId, ResourceId), GlObject>,
    fbo: glow::Framebuffer,
    scratch_fbo: glow::Framebuffer,
    target: glow::Texture,
    program: glow::Program,
    vao: glow::VertexArray,
    stats: GlBackendStats,
    batches: Vec<(ContextId, usize)>,
    /// Last field: dropped after the objects above are deleted in `drop`.
    ctx: GlContext,
}

impl std::fmt::Debug for GlDiscardableBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlDiscardableBackend")
            .field("objects", &self.objects.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

fn gl_err(what: &str, e: impl std::fmt::Display) -> DError {
    DError::Backend(format!("{what}: {e}"))
}

fn formats(f: TexelFormat) -> (u32, u64) {
    match f {
        TexelFormat::R8 => (glow::R8, 1),
        TexelFormat::Rg8 => (glow::RG8, 2),
        TexelFormat::Rgba16f => (glow::RGBA16F, 8),
        _ => (glow::RGBA8, 4),
    }
}

impl GlDiscardableBackend {
    /// Sets up the offscreen target and the quad program in `ctx` (current on this thread).
    pub fn new(ctx: GlContext) -> Result<Self, DError> {
        let header = match ctx.api() {
            Api::Gles => "#version 300 es\nprecision mediump float;\n",
            Api::Gl => "#version 330 core\n",
        };
        let vs = format!(
            "{header}out vec2 uv;\nvoid main() {{\n  vec2 p = vec2(float(gl_VertexID & 1), float(gl_VertexID >> 1));\n  uv = p;\n  gl_Position = vec4(p * 2.0 - 1.0, 0.0, 1.0);\n}}\n"
        );
        let fs = format!(
            "{header}in vec2 uv;\nuniform sampler2D tex;\nout vec4 color;\nvoid main() {{ color = texture(tex, uv); }}\n"
        );
        let gl = ctx.glow();
        // SAFETY: `ctx` is current on this thread (GlContext is made current at creation and
        // is not Send); every object used below is made here, in this context.
        unsafe {
            let program = gl.create_program().map_err(|e| gl_err("program", e))?;
            for (kind, src) in [(glow::VERTEX_SHADER, &vs), (glow::FRAGMENT_SHADER, &fs)] {
                let s = gl.create_shader(kind).map_err(|e| gl_err("shader", e))?;
                gl.shader_source(s, src);
                gl.compile_shader(s);
                if !gl.get_shader_compile_status(s) {
                    return Err(gl_err("compile", gl.get_shader_info_log(s)));
                }
                gl.attach_shader(program, s);
                gl.delete_shader(s);
            }
            gl.link_program(program);
            if !gl.get_program_link_status(program) {
                return Err(gl_err("link", gl.get_program_info_log(program)));
            }
            let vao = gl.create_vertex_array().map_err(|e| gl_err("vao", e))?;
            let target = gl.create_texture().map_err(|e| gl_err("texture", e))?;
            gl.bind_texture(glow::TEXTURE_2D, Some(target));
            gl.tex_storage_2d(glow::TEXTURE_2D, 1, glow::RGBA8, TARGET, TARGET);
            let fbo = gl.create_framebuffer().map_err(|e| gl_err("fbo", e))?;
            gl.bind_framebuffer(glow::FRAMEBUFFER, Some(fbo));
            gl.framebuffer_texture_2d(
                glow::FRAMEBUFFER,
                glow::COLOR_ATTACHMENT0,
                glow::TEXTURE_2D,
                Some(target),
                0,
            );
            if gl.check_framebuffer_status(glow::FRAMEBUFFER) != glow::FRAMEBUFFER_COMPLETE {
                return Err(DError::Backend("offscreen framebuffer incomplete".into()));
            }
            let scratch_fbo = gl.create_framebuffer().map_err(|e| gl_err("fbo", e))?;
            gl.use_program(Some(program));
            let loc = gl.get_uniform_location(program, "tex");
            gl.uniform_1_i32(loc.as_ref(), 0);
            Ok(GlDiscardableBackend {
                objects: HashMap::new(),
                fbo,
                scratch_fbo,
                target,
                program,
                vao,
                stats: GlBackendStats::default(),
                batches: Vec::new(),
                ctx,
            })
        }
    }

    /// The context.
    pub fn context(&self) -> &GlContext {
        &self.ctx
    }

    /// The counts.
    pub fn stats(&self) -> GlBackendStats {
        self.stats
    }

    /// The object of a resource, while it exists.
    pub fn object(&self, client: ClientId, resource: ResourceId) -> Option<GlObject> {
        self.objects.get(&(client, resource)).copied()
    }

    /// Live objects.
    pub fn object_count(&self) -> usize {
        self.objects.len()
    }

    /// Asks GL whether the name is a live object (`glIsTexture` / `glIsBuffer`).
    pub fn gl_is_live(&self, object: GlObject) -> bool {
        let gl = self.ctx.glow();
        // SAFETY: the context is current on this thread; `is_*` accept any name.
        unsafe {
            match object {
                GlObject::Texture(t) => gl.is_texture(t),
                GlObject::Buffer(b) => gl.is_buffer(b),
            }
        }
    }

    /// The delete batches so far: (context, objects in the batch).
    pub fn batches(&self) -> &[(ContextId, usize)] {
        &self.batches
    }

    /// The RGBA of the offscreen target's centre (after `glFinish`): what the last draw left.
    pub fn read_centre(&self) -> [u8; 4] {
        let gl = self.ctx.glow();
        let mut px = [0u8; 4];
        // SAFETY: the context is current on this thread; `px` holds one RGBA8 pixel.
        unsafe {
            gl.bind_framebuffer(glow::FRAMEBUFFER, Some(self.fbo));
            gl.finish();
            gl.read_pixels(
                TARGET / 2,
                TARGET / 2,
                1,
                1,
                glow::RGBA,
                glow::UNSIGNED_BYTE,
                glow::PixelPackData::Slice(Some(&mut px)),
            );
        }
        px
    }

    fn check(&self, what: &str) -> Result<(), DError> {
        // SAFETY: the context is current on this thread.
        let e = unsafe { self.ctx.glow().get_error() };
        if e == glow::NO_ERROR {
            Ok(())
        } else {
            Err(DError::Backend(format!("{what}: GL error {e:#x}")))
        }
    }

    fn create_texture(
        &mut self,
        width: u32,
        height: u32,
        levels: u8,
        format: TexelFormat,
        seed: u32,
    ) -> Result<(GlObject, u64), DError> {
        let (internal, bpt) = formats(format);
        let gl = self.ctx.glow();
        // SAFETY: the context is current on this thread; the sizes were validated (at most
        // 16384, levels at most the full chain); the objects are made here.
        let t = unsafe {
            let t = gl.create_texture().map_err(|e| gl_err("texture", e))?;
            gl.active_texture(glow::TEXTURE0);
            gl.bind_texture(glow::TEXTURE_2D, Some(t));
            gl.tex_storage_2d(
                glow::TEXTURE_2D,
                i32::from(levels),
                internal,
                width as i32,
                height as i32,
            );
            gl.tex_parameter_i32(
                glow::TEXTURE_2D,
                glow::TEXTURE_MIN_FILTER,
                glow::LINEAR as i32,
            );
            // Give level 0 a colour of its own (cleared through a scratch framebuffer).
            gl.bind_framebuffer(glow::FRAMEBUFFER, Some(self.scratch_fbo));
            gl.framebuffer_texture_2d(
                glow::FRAMEBUFFER,
                glow::COLOR_ATTACHMENT0,
                glow::TEXTURE_2D,
                Some(t),
                0,
            );
            if gl.check_framebuffer_status(glow::FRAMEBUFFER) == glow::FRAMEBUFFER_COMPLETE {
                let c = |s: u32| (seed.wrapping_mul(0x9E37_79B9) >> s & 0xff) as f32 / 255.0;
                gl.clear_color(c(8), c(16), c(24), 1.0);
                gl.clear(glow::COLOR_BUFFER_BIT);
            }
            gl.framebuffer_texture_2d(
                glow::FRAMEBUFFER,
                glow::COLOR_ATTACHMENT0,
                glow::TEXTURE_2D,
                None,
                0,
            );
            t
        };
        let obj = GlObject::Texture(t);
        if let Err(e) = self.check("glTexStorage2D") {
            self.delete_object(obj);
            return Err(e);
        }
        // The size from the levels GL says the texture has (`GL_TEXTURE_IMMUTABLE_LEVELS`),
        // each level halving both sides down to 1, as GL defines them.
        // SAFETY: the context is current; `t` is bound to TEXTURE_2D.
        let gl_levels =
            unsafe { gl.get_tex_parameter_i32(glow::TEXTURE_2D, glow::TEXTURE_IMMUTABLE_LEVELS) };
        let size = (0..u32::try_from(gl_levels).unwrap_or(0))
            .map(|l| u64::from((width >> l).max(1)) * u64::from((height >> l).max(1)) * bpt)
            .sum();
        self.stats.textures_created += 1;
        Ok((obj, size))
    }

    fn create_buffer(&mut self, bytes: u64) -> Result<(GlObject, u64), DError> {
        let gl = self.ctx.glow();
        let n = i32::try_from(bytes).map_err(|_| DError::SizeTooLarge(bytes))?;
        // SAFETY: the context is current on this thread; the buffer is made here.
        let (b, size) = unsafe {
            let b = gl.create_buffer().map_err(|e| gl_err("buffer", e))?;
            gl.bind_buffer(glow::COPY_WRITE_BUFFER, Some(b));
            gl.buffer_data_size(glow::COPY_WRITE_BUFFER, n, glow::DYNAMIC_DRAW);
            let size = gl.get_buffer_parameter_i32(glow::COPY_WRITE_BUFFER, glow::BUFFER_SIZE);
            (b, size)
        };
        let obj = GlObject::Buffer(b);
        if let Err(e) = self.check("glBufferData") {
            self.delete_object(obj);
            return Err(e);
        }
        self.stats.buffers_created += 1;
        Ok((obj, u64::try_from(size).unwrap_or(0)))
    }

    fn delete_object(&self, obj: GlObject) {
        let gl = self.ctx.glow();
        // SAFETY: the context is current on this thread; the object was made in it.
        unsafe {
            match obj {
                GlObject::Texture(t) => gl.delete_texture(t),
                GlObject::Buffer(b) => gl.delete_buffer(b),
            }
        }
    }
}

impl Backend for GlDiscardableBackend {
    fn create(
        &mut self,
        client: ClientId,
        resource: ResourceId,
        desc: &ResourceDesc,
    ) -> Result<u64, DError> {
        desc.validate()?;
        let (obj, size) = match *desc {
            ResourceDesc::Texture {
                width,
                height,
                levels,
                format,
            } => self.create_texture(width, height, levels, format, client ^ resource << 8)?,
            ResourceDesc::Buffer { bytes } => self.create_buffer(bytes)?,
            _ => return Err(DError::Backend("unsupported resource kind".into())),
        };
        if let Some(old) = self.objects.insert((client, resource), obj) {
            self.delete_object(old);
        }
        Ok(size)
    }

    fn use_resource(&mut self, client: ClientId, resource: ResourceId) -> Result<(), DError> {
        let obj = self
            .object(client, resource)
            .ok_or(DError::UnknownResource { client, resource })?;
        let gl = self.ctx.glow();
        // SAFETY: the context is current on this thread; every object was made in it.
        unsafe {
            match obj {
                GlObject::Texture(t) => {
                    gl.bind_framebuffer(glow::FRAMEBUFFER, Some(self.fbo));
                    gl.viewport(0, 0, TARGET, TARGET);
                    gl.use_program(Some(self.program));
                    gl.bind_vertex_array(Some(self.vao));
                    gl.active_texture(glow::TEXTURE0);
                    gl.bind_texture(glow::TEXTURE_2D, Some(t));
                    gl.draw_arrays(glow::TRIANGLE_STRIP, 0, 4);
                }
                GlObject::Buffer(b) => {
                    gl.bind_buffer(glow::COPY_WRITE_BUFFER, Some(b));
                    gl.buffer_sub_data_u8_slice(glow::COPY_WRITE_BUFFER, 0, &[resource as u8]);
                }
            }
        }
        self.stats.draws += 1;
        self.check("draw")
    }

    fn delete(&mut self, context: ContextId, batch: &[Deleted]) {
        self.stats.delete_batches += 1;
        self.batches.push((context, batch.len()));
        for d in batch {
            if let Some(obj) = self.objects.remove(&(d.client, d.resource)) {
                self.delete_object(obj);
                self.stats.objects_deleted += 1;
            }
        }
    }
}

impl Drop for GlDiscardableBackend {
    fn drop(&mut self) {
        let gl = self.ctx.glow();
        // SAFETY: the context (dropped after this, the last field) is current on this
        // thread; every object was made in it and is deleted once.
        unsafe {
            for (_, obj) in self.objects.drain() {
                match obj {
                    GlObject::Texture(t) => gl.delete_texture(t),
                    GlObject::Buffer(b) => gl.delete_buffer(b),
                }
            }
            gl.delete_framebuffer(self.fbo);
            gl.delete_framebuffer(self.scratch_fbo);
            gl.delete_texture(self.target);
            gl.delete_vertex_array(self.vao);
            gl.delete_program(self.program);
        }
    }
}
