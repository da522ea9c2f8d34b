//! Compiles, links and draws programs into a small framebuffer, timing each step and
//! hashing the pixels read back.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use glow::HasContext;

use super::corpus::{Program, VERTEX_SHADER};

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

impl Drawn {
    fn failed(program: &Program) -> Self {
        Self {
            name: program.name.clone(),
            linked: false,
            pixels: 0,
        }
    }
}

/// Times of a whole run, summed over the programs.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// `glCompileShader` + status query.
    pub compile: Duration,
    /// `glLinkProgram` + status query.
    pub link: Duration,
    /// The first draw and the read-back (llvmpipe generates machine code here).
    pub draw: Duration,
}

/// Compiles, links and draws every program once, in order.
pub fn draw_all(gl: &glow::Context, programs: &[Program]) -> Result<(Vec<Drawn>, Timings)> {
    let mut timings = Timings::default();
    // SAFETY (whole body): the context is current on this thread and every object used was
    // created from it.
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

        let start = Instant::now();
        let vertex = gl
            .create_shader(glow::VERTEX_SHADER)
            .map_err(|e| anyhow!(e))?;
        gl.shader_source(vertex, VERTEX_SHADER);
        gl.compile_shader(vertex);
        if !gl.get_shader_compile_status(vertex) {
            return Err(anyhow!(
                "the vertex shader does not compile: {}",
                gl.get_shader_info_log(vertex)
            ));
        }
        timings.compile += start.elapsed();

        let mut pixels = vec![0u8; (SIZE * SIZE * 4) as usize];
        let mut drawn = Vec::with_capacity(programs.len());
        for program in programs {
            let t = Instant::now();
            let fragment = gl
                .create_shader(glow::FRAGMENT_SHADER)
                .map_err(|e| anyhow!(e))?;
            gl.shader_source(fragment, &program.fragment);
            gl.compile_shader(fragment);
            let compiled = gl.get_shader_compile_status(fragment);
            timings.compile += t.elapsed();
            if !compiled {
                gl.delete_shader(fragment);
                drawn.push(Drawn::failed(program));
                continue;
            }

            let t = Instant::now();
            let linked = gl.create_program().map_err(|e| anyhow!(e))?;
            gl.attach_shader(linked, vertex);
            gl.attach_shader(linked, fragment);
            gl.link_program(linked);
            let ok = gl.get_program_link_status(linked);
            timings.link += t.elapsed();
            gl.detach_shader(linked, fragment);
            gl.delete_shader(fragment);
            if !ok {
                gl.delete_program(linked);
                drawn.push(Drawn::failed(program));
                continue;
            }

            let t = Instant::now();
            gl.use_program(Some(linked));
            let size = SIZE as f32;
            if let Some(l) = gl.get_uniform_location(linked, "iResolution") {
                gl.uniform_3_f32(Some(&l), size, size, 1.0);
            }
            for name in ["iTime", "iGlobalTime"] {
                if let Some(l) = gl.get_uniform_location(linked, name) {
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
            timings.draw += t.elapsed();
            gl.use_program(None);
            gl.delete_program(linked);
            drawn.push(Drawn {
                name: program.name.clone(),
                linked: true,
                pixels: xxhash_rust::xxh3::xxh3_64(&pixels),
            });
        }
        gl.delete_shader(vertex);
        gl.delete_vertex_array(vao);
        gl.delete_framebuffer(fbo);
        gl.delete_renderbuffer(rbo);
        Ok((drawn, timings))
    }
}
