//! The channel's wire format (version 1), written out in docs/discardable.md.
//!
//! A frame is a little-endian `u32` length (of what follows it, at most [`MAX_FRAME`]), a
//! version byte ([`VERSION`]), a kind byte and the kind's fields, little-endian, with nothing
//! after them. [`decode_client`] never panics: any byte string is either a message, "more
//! bytes needed", or a [`ProtocolError`].

use crate::{PoolId, ResourceId};

/// The protocol version in every frame.
pub const VERSION: u8 = 1;
/// The largest frame (after the length field) either side accepts.
pub const MAX_FRAME: u32 = 64;
/// Bytes of the length field.
pub const LEN_BYTES: usize = 4;
/// The widest or tallest texture accepted.
pub const MAX_TEXTURE_DIM: u32 = 16384;
/// The largest buffer accepted.
pub const MAX_BUFFER_BYTES: u64 = 1 << 30;

/// Why a frame was refused. The service drops the connection on any of these: the byte
/// stream cannot be trusted after one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The length field is over [`MAX_FRAME`].
    #[error("frame of {0} bytes over the limit")]
    Oversized(u32),
    /// The frame ends before the kind's fields do (or has no version and kind).
    #[error("frame of kind {kind} truncated: {len} bytes")]
    Truncated { kind: u8, len: u32 },
    /// Bytes after the kind's fields.
    #[error("frame of kind {kind} has {extra} bytes too many")]
    Trailing { kind: u8, extra: usize },
    /// A version this side does not speak.
    #[error("protocol version {0} not supported")]
    Version(u8),
    /// A kind this side does not know.
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    /// An unknown resource kind or texture format.
    #[error("unknown resource kind {0}")]
    UnknownResourceKind(u8),
}

/// A texel format (bytes per texel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
#[non_exhaustive]
pub enum TexelFormat {
    /// `GL_RGBA8`: 4 bytes.
    Rgba8 = 0,
    /// `GL_R8`: 1 byte.
    R8 = 1,
    /// `GL_RG8`: 2 bytes.
    Rg8 = 2,
    /// `GL_RGBA16F`: 8 bytes.
    Rgba16f = 3,
}

impl TexelFormat {
    /// Bytes per texel.
    pub fn bytes(self) -> u64 {
        match self {
            TexelFormat::Rgba8 => 4,
            TexelFormat::R8 => 1,
            TexelFormat::Rg8 => 2,
            TexelFormat::Rgba16f => 8,
        }
    }

    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0 => TexelFormat::Rgba8,
            1 => TexelFormat::R8,
            2 => TexelFormat::Rg8,
            3 => TexelFormat::Rgba16f,
            _ => return None,
        })
    }
}

/// What the service creates for a resource: its kind and shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ResourceDesc {
    /// A 2D texture with `levels` mip levels (immutable storage).
    Texture {
        /// Width of level 0.
        width: u32,
        /// Height of level 0.
        height: u32,
        /// Mip levels, 1 up to a full chain.
        levels: u8,
        /// Texel format.
        format: TexelFormat,
    },
    /// A buffer of `bytes` bytes.
    Buffer {
        /// Its size.
        bytes: u64,
    },
}

/// Why a description was refused (a typed per-client error, not a protocol error).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DescError {
    /// A zero or too large dimension.
    #[error("texture {0}x{1} outside 1..={MAX_TEXTURE_DIM}")]
    Dimensions(u32, u32),
    /// Zero levels, or more than the full chain.
    #[error("{levels} levels for a {width}x{height} texture")]
    Levels { width: u32, height: u32, levels: u8 },
    /// A zero or too large buffer.
    #[error("buffer of {0} bytes outside 1..={MAX_BUFFER_BYTES}")]
    BufferSize(u64),
}

/// Mip levels in a full chain for `width` x `height`.
pub fn full_chain(width: u32, height: u32) -> u8 {
    (32 - width.max(height).max(1).leading_zeros()) as u8
}

impl ResourceDesc {
    /// A texture with a full mip chain.
    pub fn texture(width: u32, height: u32, format: TexelFormat) -> Self {
        ResourceDesc::Texture {
            width,
            height,
            levels: full_chain(width, height),
            format,
        }
    }

    /// Checks the shape.
    pub fn validate(&self) -> Result<(), DescError> {
        match *self {
            ResourceDesc::Texture {
                width,
                height,
                levels,
                ..
            } => {
                if !(1..=MAX_TEXTURE_DIM).contains(&width)
                    || !(1..=MAX_TEXTURE_DIM).contains(&height)
                {
                    return Err(DescError::Dimensions(width, height));
                }
                if levels == 0 || levels > full_chain(width, height) {
                    return Err(DescError::Levels {
                        width,
                        height,
                        levels,
                    });
                }
                Ok(())
            }
            ResourceDesc::Buffer { bytes } => {
                if bytes == 0 || bytes > MAX_BUFFER_BYTES {
                    return Err(DescError::BufferSize(bytes));
                }
                Ok(())
            }
        }
    }

    /// Bytes of GPU memory: for a texture, width × height × bytes per texel summed over its
    /// levels (each level halves both sides, down to 1); for a buffer, its size.
    pub fn byte_size(&self) -> Result<u64, DescError> {
        self.validate()?;
        Ok(match *self {
            ResourceDesc::Texture {
                width,
                height,
                levels,
                format,
            } => (0..u32::from(levels))
                .map(|l| {
                    u64::from((width >> l).max(1))
                        * u64::from((height >> l).max(1))
                        * format.bytes()
                })
                .sum(),
            ResourceDesc::Buffer { bytes } => bytes,
        })
    }
}

/// A message from a client to the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ClientMessage {
    /// Kind 1: a new pool; its memfd travels with this frame (SCM_RIGHTS).
    RegisterPool { pool: PoolId },
    /// Kind 2: the client unmapped the pool (all its handles deleted).
    ReleasePool { pool: PoolId },
    /// Kind 3: create the resource and track it; its handle (locked once) is the word at
    /// `offset` of `pool`.
    Initialize {
        resource: ResourceId,
        pool: PoolId,
        offset: u32,
        desc: ResourceDesc,
    },
    /// Kind 4: drop one lock (after the commands that used the resource).
    Unlock { resource: ResourceId },
    /// Kind 5: the client deleted its resource.
    Delete { resource: ResourceId },
    /// Kind 6: draw with the (locked) resource.
    Use { resource: ResourceId },
    /// Kind 7: answer with a [`SyncReply`] once everything before is done.
    Sync { token: u64 },
    /// Kind 8: the client is leaving; its resources and pools go.
    Goodbye,
}

/// The service's answer to [`ClientMessage::Sync`] (kind 129).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncReply {
    /// The sync's token.
    pub token: u64,
    /// The budget.
    pub budget: u64,
    /// Bytes tracked over all clients.
    pub total_bytes: u64,
    /// Bytes the service holds as locked.
    pub locked_bytes: u64,
    /// Evictions so far, all clients.
    pub evictions: u64,
    /// This client's refused messages so far.
    pub errors: u32,
}

const SYNC_REPLY: u8 = 129;

struct Reader<'a> {
    b: &'a [u8],
    kind: u8,
    len: u32,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], ProtocolError> {
        let Some((head, rest)) = self.b.split_first_chunk::<N>() else {
            return Err(ProtocolError::Truncated {
                kind: self.kind,
                len: self.len,
            });
        };
        self.b = rest;
        Ok(*head)
    }
    fn u8(&mut self) -> Result<u8, ProtocolError> {
        Ok(self.take::<1>()?[0])
    }
    fn u32(&mut self) -> Result<u32, ProtocolError> {
        Ok(u32::from_le_bytes(self.take()?))
    }
    fn u64(&mut self) -> Result<u64, ProtocolError> {
        Ok(u64::from_le_bytes(self.take()?))
    }
    fn end(&self) -> Result<(), ProtocolError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(ProtocolError::Trailing {
                kind: self.kind,
                extra: self.b.len(),
            })
        }
    }
}

/// Splits one frame off `buf`: `Ok(None)` when more bytes are needed, else the frame's kind,
/// its fields and the bytes it took.
fn frame(buf: &[u8]) -> Result<Option<(Reader<'_>, usize)>, ProtocolError> {
    let Some((len, rest)) = buf.split_first_chunk::<LEN_BYTES>() else {
        return Ok(None);
    };
    let len = u32::from_le_bytes(*len);
    if len > MAX_FRAME {
        return Err(ProtocolError::Oversized(len));
    }
    let Some(body) = rest.get(..len as usize) else {
        return Ok(None);
    };
    let [version, kind, fields @ ..] = body else {
        return Err(ProtocolError::Truncated {
            kind: body.get(1).copied().unwrap_or(0),
            len,
        });
    };
    if *version != VERSION {
        return Err(ProtocolError::Version(*version));
    }
    let r = Reader {
        b: fields,
        kind: *kind,
        len,
    };
    Ok(Some((r, LEN_BYTES + len as usize)))
}

/// Decodes the first client message in `buf`: `Ok(None)` when `buf` holds no whole frame yet,
/// else the message and the bytes it took. Never panics.
pub fn decode_client(buf: &[u8]) -> Result<Option<(ClientMessage, usize)>, ProtocolError> {
    let Some((mut r, used)) = frame(buf)? else {
        return Ok(None);
    };
    let m = match r.kind {
        1 => ClientMessage::RegisterPool { pool: r.u32()? },
        2 => ClientMessage::ReleasePool { pool: r.u32()? },
        3 => {
            let (resource, pool, offset) = (r.u32()?, r.u32()?, r.u32()?);
            let desc = match r.u8()? {
                0 => {
                    let (width, height, levels, format) = (r.u32()?, r.u32()?, r.u8()?, r.u8()?);
                    let format = TexelFormat::from_u8(format)
                        .ok_or(ProtocolError::UnknownResourceKind(format))?;
                    ResourceDesc::Texture {
                        width,
                        height,
                        levels,
                        format,
                    }
                }
                1 => ResourceDesc::Buffer { bytes: r.u64()? },
                k => return Err(ProtocolError::UnknownResourceKind(k)),
            };
            ClientMessage::Initialize {
                resource,
                pool,
                offset,
                desc,
            }
        }
        4 => ClientMessage::Unlock { resource: r.u32()? },
        5 => ClientMessage::Delete { resource: r.u32()? },
        6 => ClientMessage::Use { resource: r.u32()? },
        7 => ClientMessage::Sync { token: r.u64()? },
        8 => ClientMessage::Goodbye,
        k => return Err(ProtocolError::UnknownKind(k)),
    };
    r.end()?;
    Ok(Some((m, used)))
}

/// Decodes the first service message (a [`SyncReply`]) in `buf`, as [`decode_client`].
pub fn decode_reply(buf: &[u8]) -> Result<Option<(SyncReply, usize)>, ProtocolError> {
    let Some((mut r, used)) = frame(buf)? else {
        return Ok(None);
    };
    if r.kind != SYNC_REPLY {
        return Err(ProtocolError::UnknownKind(r.kind));
    }
    let reply = SyncReply {
        token: r.u64()?,
        budget: r.u64()?,
        total_bytes: r.u64()?,
        locked_bytes: r.u64()?,
        evictions: r.u64()?,
        errors: r.u32()?,
    };
    r.end()?;
    Ok(Some((reply, used)))
}

struct Writer<'a> {
    out: &'a mut Vec<u8>,
    start: usize,
}

impl<'a> Writer<'a> {
    fn new(out: &'a mut Vec<u8>, kind: u8) -> Self {
        let start = out.len();
        out.extend_from_slice(&[0; LEN_BYTES]);
        out.extend_from_slice(&[VERSION, kind]);
        Writer { out, start }
    }
    fn u8(self, v: u8) -> Self {
        self.out.push(v);
        self
    }
    fn u32(self, v: u32) -> Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(self, v: u64) -> Self {
        self.out.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn finish(self) {
        let len = (self.out.len() - self.start - LEN_BYTES) as u32;
        self.out[self.start..self.start + LEN_BYTES].copy_from_slice(&len.to_le_bytes());
    }
}

/// Appends the frame of `m` to `out`.
pub fn encode_client(m: &ClientMessage, out: &mut Vec<u8>) {
    match *m {
        ClientMessage::RegisterPool { pool } => Writer::new(out, 1).u32(pool).finish(),
        ClientMessage::ReleasePool { pool } => Writer::new(out, 2).u32(pool).finish(),
        ClientMessage::Initialize {
            resource,
            pool,
            offset,
            desc,
        } => {
            let w = Writer::new(out, 3).u32(resource).u32(pool).u32(offset);
            match desc {
                ResourceDesc::Texture {
                    width,
                    height,
                    levels,
                    format,
                } => w
                    .u8(0)
                    .u32(width)
                    .u32(height)
                    .u8(levels)
                    .u8(format as u8)
                    .finish(),
                ResourceDesc::Buffer { bytes } => w.u8(1).u64(bytes).finish(),
            }
        }
        ClientMessage::Unlock { resource } => Writer::new(out, 4).u32(resource).finish(),
        ClientMessage::Delete { resource } => Writer::new(out, 5).u32(resource).finish(),
        ClientMessage::Use { resource } => Writer::new(out, 6).u32(resource).finish(),
        ClientMessage::Sync { token } => Writer::new(out, 7).u64(token).finish(),
        ClientMessage::Goodbye => Writer::new(out, 8).finish(),
    }
}

/// Appends the frame of `r` to `out`.
pub fn encode_reply(r: &SyncReply, out: &mut Vec<u8>) {
    Writer::new(out, SYNC_REPLY)
        .u64(r.token)
        .u64(r.budget)
        .u64(r.total_bytes)
        .u64(r.locked_bytes)
        .u64(r.evictions)
        .u32(r.errors)
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<ClientMessage> {
        vec![
            ClientMessage::RegisterPool { pool: 7 },
            ClientMessage::ReleasePool { pool: u32::MAX },
            ClientMessage::Initialize {
                resource: 3,
                pool: 1,
                offset: 40,
                desc: ResourceDesc::texture(256, 64, TexelFormat::Rgba16f),
            },
            ClientMessage::Initialize {
                resource: 4,
                pool: 2,
                offset: 0,
                desc: ResourceDesc::Buffer { bytes: 1 << 20 },
            },
            ClientMessage::Unlock { resource: 9 },
            ClientMessage::Delete { resource: 10 },
            ClientMessage::Use { resource: 11 },
            ClientMessage::Sync { token: 1 << 40 },
            ClientMessage::Goodbye,
        ]
    }

    #[test]
    fn round_trip_and_every_prefix_wants_more() {
        for m in all() {
            let mut b = Vec::new();
            encode_client(&m, &mut b);
            assert_eq!(decode_client(&b), Ok(Some((m, b.len()))));
            for cut in 0..b.len() {
                assert_eq!(decode_client(&b[..cut]), Ok(None), "{m:?} cut at {cut}");
            }
        }
        let r = SyncReply {
            token: 5,
            budget: 6,
            total_bytes: 7,
            locked_bytes: 8,
            evictions: 9,
            errors: 10,
        };
        let mut b = Vec::new();
        encode_reply(&r, &mut b);
        assert_eq!(decode_reply(&b), Ok(Some((r, b.len()))));
    }

    #[test]
    fn bad_frames_are_typed_errors() {
        let mut b = Vec::new();
        encode_client(&ClientMessage::Unlock { resource: 1 }, &mut b);
        // Shorter length than the fields: truncated; longer: trailing bytes.
        let mut t = b.clone();
        t[0] -= 1;
        t.pop();
        assert!(matches!(
            decode_client(&t),
            Err(ProtocolError::Truncated { kind: 4, .. })
        ));
        let mut t = b.clone();
        t[0] += 1;
        t.push(0);
        assert!(matches!(
            decode_client(&t),
            Err(ProtocolError::Trailing { kind: 4, extra: 1 })
        ));
        let mut t = b.clone();
        t[4] = 2;
        assert_eq!(decode_client(&t), Err(ProtocolError::Version(2)));
        let mut t = b.clone();
        t[5] = 200;
        assert_eq!(decode_client(&t), Err(ProtocolError::UnknownKind(200)));
        assert_eq!(
            decode_client(&u32::MAX.to_le_bytes()),
            Err(ProtocolError::Oversized(u32::MAX))
        );
        assert!(matches!(
            decode_client(&[1, 0, 0, 0, 1]),
            Err(ProtocolError::Truncated { .. })
        ));
        assert!(matches!(
            decode_client(&[0, 0, 0, 0]),
            Err(ProtocolError::Truncated { .. })
        ));
    }

    #[test]
    fn sizes_from_levels() {
        let t = ResourceDesc::texture(256, 64, TexelFormat::Rgba8);
        // 256x64, 128x32, 64x16, 32x8, 16x4, 8x2, 4x1, 2x1, 1x1.
        let texels = 256 * 64 + 128 * 32 + 64 * 16 + 32 * 8 + 16 * 4 + 8 * 2 + 4 + 2 + 1;
        assert_eq!(t.byte_size(), Ok(texels * 4));
        assert_eq!(full_chain(1, 1), 1);
        assert_eq!(full_chain(256, 64), 9);
        let bad = ResourceDesc::Texture {
            width: 4,
            height: 4,
            levels: 4,
            format: TexelFormat::R8,
        };
        assert!(matches!(bad.byte_size(), Err(DescError::Levels { .. })));
        assert!(ResourceDesc::texture(0, 4, TexelFormat::R8)
            .byte_size()
            .is_err());
        assert!(ResourceDesc::Buffer { bytes: 0 }.byte_size().is_err());
    }

    /// A cheap deterministic sweep over random byte strings (the fuzz target goes further).
    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let n = (x % 40) as usize;
            let mut b: Vec<u8> = (0..n).map(|i| (x >> (i % 8 * 8)) as u8).collect();
            if b.len() >= 6 {
                b[0] = (x % 48) as u8;
                b[1..4].fill(0);
                b[4] = VERSION;
                b[5] = (x >> 40) as u8 % 10;
            }
            let _ = decode_client(&b);
            let _ = decode_reply(&b);
        }
    }
}
