//! [`Gl`] on a real context through `glow`.

use std::num::NonZeroU32;
use std::panic::{catch_unwind, AssertUnwindSafe};

use glow::HasContext;

use crate::gl::{Gl, ProgramBinary, ShaderKind};

/// The [`Gl`] trait on a `glow` context (current on the calling thread).
#[derive(Clone, Copy)]
pub struct GlowGl<'a> {
    gl: &'a glow::Context,
}

impl std::fmt::Debug for GlowGl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GlowGl").finish_non_exhaustive()
    }
}

impl<'a> GlowGl<'a> {
    /// Wraps a context; every call goes to it.
    ///
    /// # Safety
    /// The context must be current on the thread that calls any method of the result, for
    /// as long as the result lives ([`GlContext::gl`](crate::GlContext::gl) guarantees it).
    pub unsafe fn new(gl: &'a glow::Context) -> Self {
        Self { gl }
    }
}

fn shader(name: u32) -> Option<glow::NativeShader> {
    NonZeroU32::new(name).map(glow::NativeShader)
}

fn program(name: u32) -> Option<glow::NativeProgram> {
    NonZeroU32::new(name).map(glow::NativeProgram)
}

/// GL names are NUL-terminated: a name with a NUL cannot be passed (glow would panic).
fn has_nul(name: &str) -> bool {
    name.as_bytes().contains(&0)
}

// Every `unsafe` block below relies on the same facts: the context is current on this thread
// (the caller's contract for `GlowGl`), and the object names passed were created by it or
// are rejected by GL with an error, never by undefined behaviour.
impl Gl for GlowGl<'_> {
    fn get_string(&self, name: u32) -> String {
        // glow panics on a null string (no current context, or an unknown name).
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        catch_unwind(AssertUnwindSafe(|| unsafe {
            self.gl.get_parameter_string(name)
        }))
        .unwrap_or_default()
    }

    fn num_program_binary_formats(&self) -> i32 {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        unsafe { self.gl.get_parameter_i32(glow::NUM_PROGRAM_BINARY_FORMATS) }
    }

    fn create_shader(&self, kind: ShaderKind) -> Option<u32> {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        unsafe { self.gl.create_shader(kind.gl_enum()) }
            .ok()
            .map(|s| s.0.get())
    }

    fn shader_source(&self, name: u32, source: &str) {
        if let Some(s) = shader(name) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.shader_source(s, source) }
        }
    }

    fn compile_shader(&self, name: u32) {
        if let Some(s) = shader(name) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.compile_shader(s) }
        }
    }

    fn compile_status(&self, name: u32) -> bool {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        shader(name).is_some_and(|s| unsafe { self.gl.get_shader_compile_status(s) })
    }

    fn shader_info_log(&self, name: u32) -> String {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        shader(name).map_or_else(String::new, |s| unsafe { self.gl.get_shader_info_log(s) })
    }

    fn delete_shader(&self, name: u32) {
        if let Some(s) = shader(name) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.delete_shader(s) }
        }
    }

    fn create_program(&self) -> Option<u32> {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        unsafe { self.gl.create_program() }.ok().map(|p| p.0.get())
    }

    fn attach_shader(&self, p: u32, s: u32) {
        if let (Some(p), Some(s)) = (program(p), shader(s)) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.attach_shader(p, s) }
        }
    }

    fn detach_shader(&self, p: u32, s: u32) {
        if let (Some(p), Some(s)) = (program(p), shader(s)) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.detach_shader(p, s) }
        }
    }

    fn bind_attrib_location(&self, p: u32, index: u32, name: &str) {
        if let Some(p) = program(p).filter(|_| !has_nul(name)) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.bind_attrib_location(p, index, name) }
        }
    }

    fn bind_frag_data_location(&self, p: u32, color: u32, name: &str) {
        if let Some(p) = program(p).filter(|_| !has_nul(name)) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.bind_frag_data_location(p, color, name) }
        }
    }

    fn transform_feedback_varyings(&self, p: u32, varyings: &[&str], buffer_mode: u32) {
        if let Some(p) = program(p).filter(|_| !varyings.iter().any(|v| has_nul(v))) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe {
                self.gl
                    .transform_feedback_varyings(p, varyings, buffer_mode)
            }
        }
    }

    fn set_binary_retrievable_hint(&self, p: u32) {
        if let Some(p) = program(p) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.program_binary_retrievable_hint(p, true) }
        }
    }

    fn link_program(&self, p: u32) {
        if let Some(p) = program(p) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.link_program(p) }
        }
    }

    fn link_status(&self, p: u32) -> bool {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        program(p).is_some_and(|p| unsafe { self.gl.get_program_link_status(p) })
    }

    fn program_info_log(&self, p: u32) -> String {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        program(p).map_or_else(String::new, |p| unsafe { self.gl.get_program_info_log(p) })
    }

    fn get_program_binary(&self, p: u32) -> Option<ProgramBinary> {
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        let binary = unsafe { self.gl.get_program_binary(program(p)?) }?;
        (!binary.buffer.is_empty()).then_some(ProgramBinary {
            format: binary.format,
            data: binary.buffer,
        })
    }

    fn program_binary(&self, p: u32, format: u32, data: &[u8]) {
        if let Some(p) = program(p) {
            let binary = glow::ProgramBinary {
                buffer: data.to_vec(),
                format,
            };
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.program_binary(p, &binary) }
        }
    }

    fn active_attributes(&self, p: u32) -> Vec<(String, i32)> {
        let Some(p) = program(p) else {
            return Vec::new();
        };
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        unsafe {
            (0..self.gl.get_active_attributes(p))
                .filter_map(|i| self.gl.get_active_attribute(p, i))
                .filter(|a| !has_nul(&a.name))
                .map(|a| {
                    let location = self
                        .gl
                        .get_attrib_location(p, &a.name)
                        .map_or(-1, |l| l as i32);
                    (a.name, location)
                })
                .collect()
        }
    }

    fn active_uniforms(&self, p: u32) -> Vec<(String, i32)> {
        let Some(p) = program(p) else {
            return Vec::new();
        };
        // SAFETY: the context is current (GlowGl's contract); names come from it.
        unsafe {
            (0..self.gl.get_active_uniforms(p))
                .filter_map(|i| self.gl.get_active_uniform(p, i))
                .filter(|u| !has_nul(&u.name))
                .map(|u| {
                    let location = self
                        .gl
                        .get_uniform_location(p, &u.name)
                        .map_or(-1, |l| l.0 as i32);
                    (u.name, location)
                })
                .collect()
        }
    }

    fn delete_program(&self, p: u32) {
        if let Some(p) = program(p) {
            // SAFETY: the context is current (GlowGl's contract); names come from it.
            unsafe { self.gl.delete_program(p) }
        }
    }
}
