//! A recording GL: a small fake driver that logs every call, so that tests can check the
//! exact call sequence of the flow. It proves call order only; tests/real_gl.rs proves the
//! behaviour on Mesa.
//!
//! The fake: a source containing `#error` fails to compile (log "ERROR: <source>"), a
//! program whose fragment source contains `LINK_ERROR` fails to link; a binary is
//! `FAKE` + both sources, and `glProgramBinary` accepts exactly such bytes.

#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use gpucache_gl::{Gl, ProgramBinary, ShaderKind, RENDERER, VENDOR, VERSION};

pub const FORMAT: u32 = 0xFA4E;

#[derive(Default)]
struct Program {
    attached: Vec<u32>,
    bound: Vec<(String, u32)>,
    linked: bool,
    sources: Option<(String, String)>,
}

#[derive(Default)]
pub struct RecordingGl {
    pub calls: RefCell<Vec<String>>,
    next: Cell<u32>,
    shaders: RefCell<HashMap<u32, (ShaderKind, String, bool)>>,
    programs: RefCell<HashMap<u32, Program>>,
    pub renderer: RefCell<String>,
}

impl RecordingGl {
    pub fn new() -> Self {
        let gl = Self::default();
        *gl.renderer.borrow_mut() = "recording".into();
        gl
    }

    /// The calls logged since the last take.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.calls.borrow_mut())
    }

    /// Only the calls whose name starts with one of `names`.
    pub fn take_only(&self, names: &[&str]) -> Vec<String> {
        self.take()
            .into_iter()
            .filter(|c| names.iter().any(|n| c.starts_with(n)))
            .collect()
    }

    fn log(&self, call: String) {
        self.calls.borrow_mut().push(call);
    }

    fn name(&self) -> u32 {
        self.next.set(self.next.get() + 1);
        self.next.get()
    }

    pub fn binary_of(vertex: &str, fragment: &str) -> Vec<u8> {
        let mut b = b"FAKE".to_vec();
        b.extend_from_slice(&(vertex.len() as u32).to_le_bytes());
        b.extend_from_slice(vertex.as_bytes());
        b.extend_from_slice(fragment.as_bytes());
        b
    }

    fn parse_binary(data: &[u8]) -> Option<(String, String)> {
        let rest = data.strip_prefix(b"FAKE")?;
        let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
        let v = std::str::from_utf8(rest.get(4..4 + n)?).ok()?;
        let f = std::str::from_utf8(rest.get(4 + n..)?).ok()?;
        Some((v.to_string(), f.to_string()))
    }
}

impl Gl for RecordingGl {
    fn get_string(&self, name: u32) -> String {
        match name {
            VENDOR => "gpucache tests".into(),
            RENDERER => self.renderer.borrow().clone(),
            VERSION => "4.5 (recording)".into(),
            _ => "4.50".into(),
        }
    }
    fn num_program_binary_formats(&self) -> i32 {
        1
    }
    fn create_shader(&self, kind: ShaderKind) -> Option<u32> {
        let n = self.name();
        self.log(format!("CreateShader({}) = {n}", kind.name()));
        self.shaders
            .borrow_mut()
            .insert(n, (kind, String::new(), false));
        Some(n)
    }
    fn shader_source(&self, shader: u32, source: &str) {
        self.log(format!("ShaderSource({shader})"));
        if let Some(s) = self.shaders.borrow_mut().get_mut(&shader) {
            s.1 = source.to_string();
        }
    }
    fn compile_shader(&self, shader: u32) {
        self.log(format!("CompileShader({shader})"));
        if let Some(s) = self.shaders.borrow_mut().get_mut(&shader) {
            s.2 = !s.1.contains("#error");
        }
    }
    fn compile_status(&self, shader: u32) -> bool {
        self.shaders.borrow().get(&shader).is_some_and(|s| s.2)
    }
    fn shader_info_log(&self, shader: u32) -> String {
        self.shaders
            .borrow()
            .get(&shader)
            .map_or_else(String::new, |s| format!("ERROR: {}", s.1))
    }
    fn delete_shader(&self, shader: u32) {
        self.log(format!("DeleteShader({shader})"));
        self.shaders.borrow_mut().remove(&shader);
    }
    fn create_program(&self) -> Option<u32> {
        let n = self.name();
        self.log(format!("CreateProgram() = {n}"));
        self.programs.borrow_mut().insert(n, Program::default());
        Some(n)
    }
    fn attach_shader(&self, program: u32, shader: u32) {
        self.log(format!("AttachShader({program}, {shader})"));
        if let Some(p) = self.programs.borrow_mut().get_mut(&program) {
            p.attached.push(shader);
        }
    }
    fn detach_shader(&self, program: u32, shader: u32) {
        self.log(format!("DetachShader({program}, {shader})"));
        if let Some(p) = self.programs.borrow_mut().get_mut(&program) {
            p.attached.retain(|&s| s != shader);
        }
    }
    fn bind_attrib_location(&self, program: u32, index: u32, name: &str) {
        self.log(format!("BindAttribLocation({program}, {index}, {name})"));
        if let Some(p) = self.programs.borrow_mut().get_mut(&program) {
            p.bound.push((name.to_string(), index));
        }
    }
    fn bind_frag_data_location(&self, program: u32, color: u32, name: &str) {
        self.log(format!("BindFragDataLocation({program}, {color}, {name})"));
    }
    fn transform_feedback_varyings(&self, program: u32, varyings: &[&str], mode: u32) {
        self.log(format!(
            "TransformFeedbackVaryings({program}, {varyings:?}, {mode:#x})"
        ));
    }
    fn set_binary_retrievable_hint(&self, program: u32) {
        self.log(format!("ProgramParameteri({program}, RETRIEVABLE_HINT)"));
    }
    fn link_program(&self, program: u32) {
        self.log(format!("LinkProgram({program})"));
        let shaders = self.shaders.borrow();
        if let Some(p) = self.programs.borrow_mut().get_mut(&program) {
            let find = |kind| {
                p.attached
                    .iter()
                    .filter_map(|s| shaders.get(s))
                    .find(|s| s.0 == kind && s.2)
                    .map(|s| s.1.clone())
            };
            p.sources = find(ShaderKind::Vertex).zip(find(ShaderKind::Fragment));
            p.linked = p
                .sources
                .as_ref()
                .is_some_and(|(_, f)| !f.contains("LINK_ERROR"));
        }
    }
    fn link_status(&self, program: u32) -> bool {
        self.programs
            .borrow()
            .get(&program)
            .is_some_and(|p| p.linked)
    }
    fn program_info_log(&self, program: u32) -> String {
        format!("error: program {program} does not link (LINK_ERROR)")
    }
    fn get_program_binary(&self, program: u32) -> Option<ProgramBinary> {
        self.log(format!("GetProgramBinary({program})"));
        let programs = self.programs.borrow();
        let p = programs.get(&program).filter(|p| p.linked)?;
        let (v, f) = p.sources.as_ref()?;
        Some(ProgramBinary {
            format: FORMAT,
            data: Self::binary_of(v, f),
        })
    }
    fn program_binary(&self, program: u32, format: u32, data: &[u8]) {
        self.log(format!(
            "ProgramBinary({program}, {format:#x}, {} bytes)",
            data.len()
        ));
        if let Some(p) = self.programs.borrow_mut().get_mut(&program) {
            p.sources = Self::parse_binary(data).filter(|_| format == FORMAT);
            p.linked = p.sources.is_some();
        }
    }
    fn active_attributes(&self, program: u32) -> Vec<(String, i32)> {
        self.log(format!("GetActiveAttributes({program})"));
        let programs = self.programs.borrow();
        let mut bound: Vec<(String, i32)> = programs
            .get(&program)
            .map(|p| {
                p.bound
                    .iter()
                    .map(|(n, l)| (n.clone(), *l as i32))
                    .collect()
            })
            .unwrap_or_default();
        bound.sort();
        bound
    }
    fn active_uniforms(&self, program: u32) -> Vec<(String, i32)> {
        self.log(format!("GetActiveUniforms({program})"));
        vec![("iTime".into(), 0), ("iResolution".into(), 1)]
    }
    fn delete_program(&self, program: u32) {
        self.log(format!("DeleteProgram({program})"));
        self.programs.borrow_mut().remove(&program);
    }
}
