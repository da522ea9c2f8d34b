//! The value stored for a program key: what `glGetProgramBinary` gave, the two shader hashes
//! (so that evicting the program can find their compile status) and the program's attribute
//! and uniform maps (so that a hit answers locations without querying GL).
//!
//! Encoding (little-endian, written down in `docs/program-cache.md`):
//! `"GPGL" version:u16=1 flags:u16=0 vertex:[32] fragment:[32] format:u32
//!  attributes:u32 (len:u16 name loc:i32)* uniforms:u32 (len:u16 name loc:i32)*
//!  binary_len:u32 binary crc32c:u32` — the CRC covers everything before it.

use gpucache::codec::{strip_crc32c, FormatError, LeReader, LeWriter};

use crate::gl::ProgramBinary;
use crate::keys::ShaderHash;

const MAGIC: [u8; 4] = *b"GPGL";
/// The entry format's version; entries of another version are misses.
pub const ENTRY_VERSION: u16 = 1;
/// Names longer than this are not stored (GL implementations limit them to 256 or 1024).
const MAX_NAME_LEN: usize = u16::MAX as usize;

/// One cached program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramEntry {
    /// Hash of the vertex shader.
    pub vertex: ShaderHash,
    /// Hash of the fragment shader.
    pub fragment: ShaderHash,
    /// The binary.
    pub binary: ProgramBinary,
    /// Active attributes and their locations.
    pub attributes: Vec<(String, i32)>,
    /// Active uniforms and their locations.
    pub uniforms: Vec<(String, i32)>,
}

impl ProgramEntry {
    /// The stored bytes.
    pub fn encode(&self) -> Vec<u8> {
        let names: usize = self
            .attributes
            .iter()
            .chain(&self.uniforms)
            .map(|(n, _)| n.len() + 6)
            .sum();
        let mut out = Vec::with_capacity(88 + names + self.binary.data.len());
        let mut w = LeWriter::new(&mut out);
        w.bytes(&MAGIC)
            .u16(ENTRY_VERSION)
            .u16(0)
            .bytes(&self.vertex.0)
            .bytes(&self.fragment.0)
            .u32(self.binary.format);
        for map in [&self.attributes, &self.uniforms] {
            let kept: Vec<_> = map
                .iter()
                .filter(|(n, _)| n.len() <= MAX_NAME_LEN)
                .collect();
            w.u32(kept.len() as u32);
            for (name, location) in kept {
                w.u16(name.len() as u16)
                    .bytes(name.as_bytes())
                    .u32(*location as u32);
            }
        }
        w.u32(self.binary.data.len() as u32)
            .bytes(&self.binary.data)
            .crc32c_from(0);
        out
    }

    /// Reads what [`encode`](Self::encode) wrote, checking the magic, the version, every
    /// length and the CRC: any damage is an error, never a wrong entry.
    pub fn decode(bytes: &[u8]) -> Result<Self, FormatError> {
        let body = strip_crc32c(bytes)?;
        let mut r = LeReader::new(body);
        if r.array::<4>()? != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = r.u16()?;
        if version != ENTRY_VERSION {
            return Err(FormatError::Version(u32::from(version)));
        }
        if r.u16()? != 0 {
            return Err(FormatError::Invalid("program entry flags"));
        }
        let vertex = ShaderHash(r.array()?);
        let fragment = ShaderHash(r.array()?);
        let format = r.u32()?;
        let mut maps = [Vec::new(), Vec::new()];
        for map in &mut maps {
            let n = r.u32()? as usize;
            // Each name takes at least 6 bytes: a count beyond the rest is damage.
            if n > r.remaining() / 6 {
                return Err(FormatError::Invalid("program entry name count"));
            }
            map.reserve(n);
            for _ in 0..n {
                let len = usize::from(r.u16()?);
                let name = std::str::from_utf8(r.bytes(len)?)
                    .map_err(|_| FormatError::Invalid("program entry name"))?;
                map.push((name.to_string(), r.u32()? as i32));
            }
        }
        let len = r.u32()? as usize;
        let data = r.bytes(len)?.to_vec();
        if r.remaining() != 0 {
            return Err(FormatError::Invalid("program entry length"));
        }
        let [attributes, uniforms] = maps;
        Ok(Self {
            vertex,
            fragment,
            binary: ProgramBinary { format, data },
            attributes,
            uniforms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> ProgramEntry {
        ProgramEntry {
            vertex: ShaderHash([1; 32]),
            fragment: ShaderHash([2; 32]),
            binary: ProgramBinary {
                format: 0x875F,
                data: vec![9, 8, 7, 6, 5],
            },
            attributes: vec![("position".into(), 0), ("uv".into(), 1)],
            uniforms: vec![("iTime".into(), 3), ("blocked".into(), -1)],
        }
    }

    #[test]
    fn round_trips() {
        let e = entry();
        assert_eq!(ProgramEntry::decode(&e.encode()).unwrap(), e);
    }

    /// Golden bytes: fails when the format changes by accident (then bump ENTRY_VERSION).
    #[test]
    fn encoding_is_stable() {
        let bytes = entry().encode();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        // header 8, hashes 64, format 4, attributes 4+14+8, uniforms 4+11+13, binary 4+5, CRC 4.
        assert_eq!(bytes.len(), 143);
        assert!(hex.starts_with("4750474c01000000"), "{hex}");
        let crc = crc32c_of(&bytes[..bytes.len() - 4]);
        assert_eq!(&bytes[bytes.len() - 4..], &crc.to_le_bytes());
        assert_eq!(&hex[8 * 2..(8 + 32) * 2], "01".repeat(32));
        assert_eq!(
            &hex[(8 + 64) * 2..],
            "5f870000\
             02000000\
             0800706f736974696f6e00000000\
             0200757601000000\
             02000000\
             05006954696d6503000000\
             0700626c6f636b6564ffffffff\
             05000000\
             0908070605"
                .to_string()
                + &hex[hex.len() - 8..]
        );
    }

    fn crc32c_of(bytes: &[u8]) -> u32 {
        let mut with = bytes.to_vec();
        LeWriter::new(&mut with).crc32c_from(0);
        u32::from_le_bytes(with[with.len() - 4..].try_into().unwrap())
    }

    #[test]
    fn any_damage_is_an_error() {
        let bytes = entry().encode();
        for cut in 0..bytes.len() {
            assert!(ProgramEntry::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(ProgramEntry::decode(&bad).is_err(), "flip at {i}");
        }
    }
}
