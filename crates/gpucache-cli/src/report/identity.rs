//! The identity of a program cache directory: the bytes of `gpucache_gl::GlIdentity::to_bytes`
//! (a tag, then each field as a u32 length and its bytes), read back for display.

use gpucache::codec::LeReader;
use gpucache_gl::{Api, GlIdentity};

const TAG: &[u8] = b"gpucache-gl identity\0";

/// The GL identity that `bytes` hold; `None` for bytes of another layout (not a program
/// cache, or one written by another version of gpucache-gl).
pub fn decode(bytes: &[u8]) -> Option<GlIdentity> {
    let mut r = LeReader::new(bytes.strip_prefix(TAG)?);
    let mut field = || -> Option<String> {
        let len = usize::try_from(r.u32().ok()?).ok()?;
        String::from_utf8(r.bytes(len).ok()?.to_vec()).ok()
    };
    // Fields are evaluated in the order written, which is the order stored.
    let identity = GlIdentity {
        vendor: field()?,
        renderer: field()?,
        version: field()?,
        shading_language_version: field()?,
        api: api(&field()?)?,
        build_id: field()?,
        arch: field()?,
    };
    // Encoding it again gives the same bytes only if the layout is the one read (no bytes
    // left over, no field of another meaning).
    (identity.to_bytes() == bytes).then_some(identity)
}

fn api(name: &str) -> Option<Api> {
    [Api::Gl, Api::Gles].into_iter().find(|a| a.name() == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(api: Api) -> GlIdentity {
        GlIdentity {
            vendor: "Mesa".into(),
            renderer: "llvmpipe (LLVM 15.0.6, 256 bits)".into(),
            version: "4.5 (Compatibility Profile) Mesa 25.0.7".into(),
            shading_language_version: "4.50".into(),
            api,
            build_id: "app 1.0".into(),
            arch: "x86_64".into(),
        }
    }

    #[test]
    fn reads_back_what_gpucache_gl_writes() {
        for api in [Api::Gl, Api::Gles] {
            let id = identity(api);
            assert_eq!(decode(&id.to_bytes()), Some(id));
        }
    }

    #[test]
    fn other_bytes_are_not_a_gl_identity() {
        let bytes = identity(Api::Gl).to_bytes();
        assert_eq!(decode(b"mesa 24.0 radeonsi"), None);
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None);
        let mut longer = bytes.clone();
        longer.push(0);
        assert_eq!(decode(&longer), None);
        for cut in 0..bytes.len() {
            assert_eq!(decode(&bytes[..cut]), None, "cut at {cut}");
        }
        // The API field: its length, 2, then "gl".
        let api_at = bytes.windows(6).position(|w| w == b"\x02\0\0\0gl").unwrap() + 4;
        let mut other_api = bytes.clone();
        other_api[api_at] = b'x';
        assert_eq!(decode(&other_api), None);
    }
}
