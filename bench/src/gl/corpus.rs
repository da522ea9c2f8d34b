//! The kodi shadertoy corpus (fetched by `scripts/fetch-corpus`) turned into complete GLSL
//! 1.50 (desktop GL) or GLSL ES 3.00 fragment shaders, optionally under several `#define`
//! variants each.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use gpucache_gl::Api;

/// One fragment shader to compile, link and draw.
#[derive(Clone, Debug)]
pub struct Program {
    /// `<file stem>` or `<file stem>#v<variant>`.
    pub name: String,
    /// Complete fragment shader source.
    pub fragment: String,
}

/// The folder `scripts/fetch-corpus` fills, relative to the workspace root.
pub fn default_dir() -> PathBuf {
    workspace_root().join(".cache/corpus/kodi/shaders")
}

/// The workspace root (the parent of this crate's folder).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_path_buf()
}

/// The shadertoy inputs every corpus shader may use, and an output.
const HEADER: &str = "\
uniform vec3 iResolution;
uniform float iTime;
uniform float iGlobalTime;
uniform float iTimeDelta;
uniform int iFrame;
uniform vec4 iMouse;
uniform vec4 iDate;
uniform float iSampleRate;
uniform vec3 iChannelResolution[4];
uniform float iChannelTime[4];
uniform sampler2D iChannel0;
uniform sampler2D iChannel1;
uniform sampler2D iChannel2;
uniform sampler2D iChannel3;
#define texture2D texture
out vec4 gpucacheFragColor;
";

const MAIN: &str = "
void main() {
    vec4 color = vec4(0.0);
    mainImage(color, gl_FragCoord.xy);
    gpucacheFragColor = color;
}
";

const VERTEX_BODY: &str = "
void main() {
    vec2 p = vec2(float((gl_VertexID & 1) << 2) - 1.0, float((gl_VertexID & 2) << 1) - 1.0);
    gl_Position = vec4(p, 0.0, 1.0);
}
";

/// The `#version` line (and precision, for GLES) of `api`.
fn version_line(api: Api) -> &'static str {
    match api {
        Api::Gl => "#version 150\n",
        Api::Gles => "#version 300 es\nprecision highp float;\nprecision highp int;\n",
    }
}

/// A full-screen triangle from `gl_VertexID`, no attributes.
pub fn vertex_shader(api: Api) -> String {
    format!("{}{VERTEX_BODY}", version_line(api))
}

/// The corpus's shaders in file-name order, each under `variants` `#define` variants
/// (1 = the sources as they are), for `api`.
pub fn load(dir: &Path, variants: usize, api: Api) -> Result<Vec<Program>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| {
            format!(
                "reading the corpus {} (run scripts/fetch-corpus)",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".frag.glsl"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!(
            "no *.frag.glsl in {} (run scripts/fetch-corpus)",
            dir.display()
        );
    }
    let mut programs = Vec::with_capacity(files.len() * variants);
    for variant in 0..variants.max(1) {
        for file in &files {
            let body = std::fs::read_to_string(file)
                .with_context(|| format!("reading {}", file.display()))?;
            let stem = file
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .trim_end_matches(".frag.glsl")
                .to_string();
            let (name, define) = if variants <= 1 {
                (stem, String::new())
            } else {
                (
                    format!("{stem}#v{variant}"),
                    format!("#define GPUCACHE_VARIANT {variant}\n"),
                )
            };
            programs.push(Program {
                name,
                fragment: format!("{}{define}{HEADER}{body}{MAIN}", version_line(api)),
            });
        }
    }
    Ok(programs)
}
