//! Shader hashes and program keys.
//!
//! BLAKE3 rather than the 2012 design's SHA-1: a cache key must be collision resistant, since
//! a collision loads another program's binary, and SHA-1 collisions have been computed since
//! 2017; BLAKE3 is a 256-bit cryptographic hash and hashes a shader several times faster
//! than SHA-1. Every hash starts with a domain string and the identity's digest, and every
//! variable-length field is length-prefixed, so that no two inputs share an encoding.

use std::fmt;

use crate::gl::ShaderKind;
use crate::identity::GlIdentity;

/// The hash of a shader's source, stage and identity: the key of its compile status.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShaderHash(pub [u8; 32]);

/// The hash of a program's two shader hashes and everything bound before linking: the key of
/// its link status and of its binary.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProgramKey(pub [u8; 32]);

macro_rules! hex_debug {
    ($t:ty) => {
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                for b in &self.0[..8] {
                    write!(f, "{b:02x}")?;
                }
                f.write_str("…")
            }
        }
    };
}
hex_debug!(ShaderHash);
hex_debug!(ProgramKey);

/// What is bound to a program before it is linked; each part changes the linked result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bindings {
    /// `glBindAttribLocation` calls: attribute name and location.
    pub attributes: Vec<(String, u32)>,
    /// `glBindFragDataLocation` calls: output name and color number (desktop GL).
    pub frag_data: Vec<(String, u32)>,
    /// `glTransformFeedbackVaryings`: the varyings, in order.
    pub transform_feedback: Vec<String>,
    /// The buffer mode of the varyings ([`INTERLEAVED_ATTRIBS`](crate::gl::INTERLEAVED_ATTRIBS)
    /// or [`SEPARATE_ATTRIBS`](crate::gl::SEPARATE_ATTRIBS)); ignored without varyings.
    pub transform_feedback_mode: u32,
}

impl Bindings {
    /// No bindings.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an attribute binding.
    pub fn attribute(mut self, name: impl Into<String>, location: u32) -> Self {
        self.attributes.push((name.into(), location));
        self
    }

    /// Adds a fragment output binding.
    pub fn frag_data(mut self, name: impl Into<String>, color: u32) -> Self {
        self.frag_data.push((name.into(), color));
        self
    }

    /// Sets the transform-feedback varyings and their buffer mode.
    pub fn transform_feedback(
        mut self,
        varyings: impl IntoIterator<Item = impl Into<String>>,
        mode: u32,
    ) -> Self {
        self.transform_feedback = varyings.into_iter().map(Into::into).collect();
        self.transform_feedback_mode = mode;
        self
    }
}

fn field(h: &mut blake3::Hasher, bytes: &[u8]) {
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

/// The hash of one shader under `identity`.
pub fn shader_hash(identity_digest: &[u8; 32], kind: ShaderKind, source: &str) -> ShaderHash {
    let mut h = blake3::Hasher::new();
    h.update(b"gpucache-gl shader v1\0");
    h.update(identity_digest);
    h.update(&kind.gl_enum().to_le_bytes());
    field(&mut h, source.as_bytes());
    ShaderHash(*h.finalize().as_bytes())
}

/// The key of the program linked from `vertex` and `fragment` with `bindings`. Attribute and
/// fragment-data bindings are sorted by name first (the order of the bind calls does not
/// change the result; for a name bound twice the last call wins, as in GL); the varyings keep
/// their order, which does.
pub fn program_key(
    identity_digest: &[u8; 32],
    vertex: &ShaderHash,
    fragment: &ShaderHash,
    bindings: &Bindings,
) -> ProgramKey {
    let mut h = blake3::Hasher::new();
    h.update(b"gpucache-gl program v1\0");
    h.update(identity_digest);
    h.update(&vertex.0);
    h.update(&fragment.0);
    for map in [&bindings.attributes, &bindings.frag_data] {
        let sorted = last_binding_wins(map);
        h.update(&(sorted.len() as u64).to_le_bytes());
        for (name, location) in sorted {
            field(&mut h, name.as_bytes());
            h.update(&location.to_le_bytes());
        }
    }
    h.update(&(bindings.transform_feedback.len() as u64).to_le_bytes());
    for varying in &bindings.transform_feedback {
        field(&mut h, varying.as_bytes());
    }
    let mode = if bindings.transform_feedback.is_empty() {
        0
    } else {
        bindings.transform_feedback_mode
    };
    h.update(&mode.to_le_bytes());
    ProgramKey(*h.finalize().as_bytes())
}

/// The bindings sorted by name, keeping the last location given for a name.
fn last_binding_wins(map: &[(String, u32)]) -> Vec<(&str, u32)> {
    let mut sorted: Vec<(&str, u32)> = Vec::with_capacity(map.len());
    for (name, location) in map {
        match sorted.iter_mut().find(|(n, _)| *n == name.as_str()) {
            Some(entry) => entry.1 = *location,
            None => sorted.push((name.as_str(), *location)),
        }
    }
    sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
    sorted
}

/// A human name for an identity, for logs.
pub(crate) fn describe(identity: &GlIdentity) -> String {
    format!(
        "{} / {} / {} ({}, build {:?}, {})",
        identity.vendor,
        identity.renderer,
        identity.version,
        identity.api.name(),
        identity.build_id,
        identity.arch
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: [u8; 32] = [7; 32];

    #[test]
    fn shader_hash_changes_with_source_kind_and_identity() {
        let a = shader_hash(&ID, ShaderKind::Vertex, "void main(){}");
        assert_eq!(a, shader_hash(&ID, ShaderKind::Vertex, "void main(){}"));
        assert_ne!(a, shader_hash(&ID, ShaderKind::Vertex, "void main(){ }"));
        assert_ne!(a, shader_hash(&ID, ShaderKind::Fragment, "void main(){}"));
        assert_ne!(
            a,
            shader_hash(&[8; 32], ShaderKind::Vertex, "void main(){}")
        );
    }

    #[test]
    fn program_key_covers_every_binding() {
        let v = shader_hash(&ID, ShaderKind::Vertex, "v");
        let f = shader_hash(&ID, ShaderKind::Fragment, "f");
        let base = program_key(&ID, &v, &f, &Bindings::new());
        let keys = [
            program_key(&ID, &f, &v, &Bindings::new()),
            program_key(&ID, &v, &f, &Bindings::new().attribute("pos", 0)),
            program_key(&ID, &v, &f, &Bindings::new().attribute("pos", 1)),
            program_key(&ID, &v, &f, &Bindings::new().frag_data("pos", 0)),
            program_key(
                &ID,
                &v,
                &f,
                &Bindings::new().transform_feedback(["pos"], crate::gl::INTERLEAVED_ATTRIBS),
            ),
            program_key(
                &ID,
                &v,
                &f,
                &Bindings::new().transform_feedback(["pos"], crate::gl::SEPARATE_ATTRIBS),
            ),
            program_key(&[1; 32], &v, &f, &Bindings::new()),
        ];
        for (i, k) in keys.iter().enumerate() {
            assert_ne!(*k, base, "case {i}");
            for other in &keys[i + 1..] {
                assert_ne!(k, other);
            }
        }
    }

    #[test]
    fn attribute_order_does_not_matter_and_the_last_bind_wins() {
        let v = shader_hash(&ID, ShaderKind::Vertex, "v");
        let f = shader_hash(&ID, ShaderKind::Fragment, "f");
        let a = Bindings::new().attribute("a", 0).attribute("b", 1);
        let b = Bindings::new().attribute("b", 1).attribute("a", 0);
        let c = Bindings::new()
            .attribute("a", 5)
            .attribute("b", 1)
            .attribute("a", 0);
        let k = program_key(&ID, &v, &f, &a);
        assert_eq!(k, program_key(&ID, &v, &f, &b));
        assert_eq!(k, program_key(&ID, &v, &f, &c));
        // Names and locations cannot be shifted into each other.
        let d = Bindings::new().attribute("ab", 0);
        let e = Bindings::new().attribute("a", 0).attribute("b", 0);
        assert_ne!(program_key(&ID, &v, &f, &d), program_key(&ID, &v, &f, &e));
    }

    #[test]
    fn varyings_keep_their_order() {
        let v = shader_hash(&ID, ShaderKind::Vertex, "v");
        let f = shader_hash(&ID, ShaderKind::Fragment, "f");
        let mode = crate::gl::INTERLEAVED_ATTRIBS;
        assert_ne!(
            program_key(
                &ID,
                &v,
                &f,
                &Bindings::new().transform_feedback(["a", "b"], mode)
            ),
            program_key(
                &ID,
                &v,
                &f,
                &Bindings::new().transform_feedback(["b", "a"], mode)
            ),
        );
    }
}
