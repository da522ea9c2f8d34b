//! The GL calls the program cache makes, as a trait: [`GlowGl`](crate::GlowGl) implements it
//! on a real context, tests implement it with a recording fake.
//!
//! Object names are plain `u32` (`GLuint`); 0 is never a valid shader or program. Calls that
//! GL reports through `glGetError` or a status query are reported here the same way: the
//! trait does not turn GL's answers into errors, the flow in [`ProgramManager`] does.
//!
//! [`ProgramManager`]: crate::ProgramManager

/// `GL_VENDOR`.
pub const VENDOR: u32 = 0x1F00;
/// `GL_RENDERER`.
pub const RENDERER: u32 = 0x1F01;
/// `GL_VERSION`.
pub const VERSION: u32 = 0x1F02;
/// `GL_SHADING_LANGUAGE_VERSION`.
pub const SHADING_LANGUAGE_VERSION: u32 = 0x8B8C;
/// `GL_INTERLEAVED_ATTRIBS`.
pub const INTERLEAVED_ATTRIBS: u32 = 0x8C8C;
/// `GL_SEPARATE_ATTRIBS`.
pub const SEPARATE_ATTRIBS: u32 = 0x8C8D;

/// The stage of a shader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ShaderKind {
    /// `GL_VERTEX_SHADER`.
    Vertex,
    /// `GL_FRAGMENT_SHADER`.
    Fragment,
}

impl ShaderKind {
    /// The GL enum.
    pub const fn gl_enum(self) -> u32 {
        match self {
            ShaderKind::Vertex => 0x8B31,
            ShaderKind::Fragment => 0x8B30,
        }
    }

    /// "vertex" or "fragment".
    pub const fn name(self) -> &'static str {
        match self {
            ShaderKind::Vertex => "vertex",
            ShaderKind::Fragment => "fragment",
        }
    }
}

/// A program binary as `glGetProgramBinary` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramBinary {
    /// `binaryFormat`.
    pub format: u32,
    /// The bytes.
    pub data: Vec<u8>,
}

/// The GL entry points of one context, called on the thread where it is current.
///
/// Every method mirrors one GL call (or a call and its status query); see the GL and GLES 3
/// specifications for their meaning.
pub trait Gl {
    /// `glGetString(name)`, empty when GL returns null.
    fn get_string(&self, name: u32) -> String;
    /// `glGetIntegerv(GL_NUM_PROGRAM_BINARY_FORMATS)`.
    fn num_program_binary_formats(&self) -> i32;

    /// `glCreateShader`; `None` when GL returns 0.
    fn create_shader(&self, kind: ShaderKind) -> Option<u32>;
    /// `glShaderSource` with one string.
    fn shader_source(&self, shader: u32, source: &str);
    /// `glCompileShader`.
    fn compile_shader(&self, shader: u32);
    /// `glGetShaderiv(GL_COMPILE_STATUS)`.
    fn compile_status(&self, shader: u32) -> bool;
    /// `glGetShaderInfoLog`.
    fn shader_info_log(&self, shader: u32) -> String;
    /// `glDeleteShader`.
    fn delete_shader(&self, shader: u32);

    /// `glCreateProgram`; `None` when GL returns 0.
    fn create_program(&self) -> Option<u32>;
    /// `glAttachShader`.
    fn attach_shader(&self, program: u32, shader: u32);
    /// `glDetachShader`.
    fn detach_shader(&self, program: u32, shader: u32);
    /// `glBindAttribLocation`.
    fn bind_attrib_location(&self, program: u32, index: u32, name: &str);
    /// `glBindFragDataLocation` (desktop GL only; a GLES back end ignores it).
    fn bind_frag_data_location(&self, program: u32, color: u32, name: &str);
    /// `glTransformFeedbackVaryings`.
    fn transform_feedback_varyings(&self, program: u32, varyings: &[&str], buffer_mode: u32);
    /// `glProgramParameteri(GL_PROGRAM_BINARY_RETRIEVABLE_HINT, GL_TRUE)`.
    fn set_binary_retrievable_hint(&self, program: u32);
    /// `glLinkProgram`.
    fn link_program(&self, program: u32);
    /// `glGetProgramiv(GL_LINK_STATUS)`.
    fn link_status(&self, program: u32) -> bool;
    /// `glGetProgramInfoLog`.
    fn program_info_log(&self, program: u32) -> String;
    /// `glGetProgramBinary`; `None` when the program has no binary (length 0).
    fn get_program_binary(&self, program: u32) -> Option<ProgramBinary>;
    /// `glProgramBinary`. Whether it took is [`link_status`](Self::link_status).
    fn program_binary(&self, program: u32, format: u32, data: &[u8]);
    /// The active attributes and their locations (`glGetActiveAttrib` +
    /// `glGetAttribLocation` for each).
    fn active_attributes(&self, program: u32) -> Vec<(String, i32)>;
    /// The active uniforms and their locations (`glGetActiveUniform` +
    /// `glGetUniformLocation`; -1 for uniforms in blocks).
    fn active_uniforms(&self, program: u32) -> Vec<(String, i32)>;
    /// `glDeleteProgram`.
    fn delete_program(&self, program: u32);
}
