//! Little-endian reading and writing, shared by every binary format gpucache writes: the
//! disk tier's segments and meta file, the export bundle, and the metadata streams that
//! front ends keep beside a cache (the EGL blob cache's counters, the program cache's
//! histograms).
//!
//! A [`LeReader`] never panics and never allocates: every read checks the bytes left and
//! fails with [`FormatError::Truncated`]. A [`LeWriter`] appends to a `Vec<u8>`.

use std::fmt;

/// Why bytes failed to decode.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// Fewer bytes than the structure needs.
    Truncated,
    /// Not a gpucache structure of the expected kind.
    BadMagic,
    /// Written by another format version.
    Version(u32),
    /// The checksum does not match the bytes.
    Checksum,
    /// A length or field is out of its allowed range.
    Invalid(&'static str),
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::Truncated => f.write_str("truncated"),
            FormatError::BadMagic => f.write_str("bad magic"),
            FormatError::Version(v) => write!(f, "format version {v} is not this build's"),
            FormatError::Checksum => f.write_str("checksum mismatch"),
            FormatError::Invalid(what) => write!(f, "invalid {what}"),
        }
    }
}

impl std::error::Error for FormatError {}

/// Reads little-endian integers and byte strings from the front of a slice.
#[derive(Clone, Debug)]
pub struct LeReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> LeReader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, pos: 0 }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.pos.checked_add(n).ok_or(FormatError::Truncated)?;
        let out = self
            .bytes
            .get(self.pos..end)
            .ok_or(FormatError::Truncated)?;
        self.pos = end;
        Ok(out)
    }

    /// The next `N` bytes, as an array.
    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], FormatError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N)?);
        Ok(out)
    }

    /// The next byte.
    pub fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.array::<1>()?[0])
    }

    /// The next little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, FormatError> {
        self.array().map(u16::from_le_bytes)
    }

    /// The next little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, FormatError> {
        self.array().map(u32::from_le_bytes)
    }

    /// The next little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, FormatError> {
        self.array().map(u64::from_le_bytes)
    }

    /// Skips `n` bytes.
    pub fn skip(&mut self, n: usize) -> Result<(), FormatError> {
        self.bytes(n).map(|_| ())
    }

    /// Bytes read so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        &self.bytes[self.pos..]
    }
}

/// Appends little-endian integers and byte strings to a `Vec<u8>`.
#[derive(Debug)]
pub struct LeWriter<'a> {
    out: &'a mut Vec<u8>,
}

impl<'a> LeWriter<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        Self { out }
    }

    /// Appends `bytes`.
    pub fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.out.extend_from_slice(bytes);
        self
    }

    /// Appends a byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.bytes(&[v])
    }

    /// Appends a little-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends a little-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }

    /// Appends the CRC32C of the output's bytes from `start` on (as a little-endian `u32`):
    /// how every gpucache structure ends.
    pub fn crc32c_from(&mut self, start: usize) -> &mut Self {
        let crc = crc32c::crc32c(&self.out[start..]);
        self.u32(crc)
    }

    /// Bytes of the output so far (including what was there before this writer).
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether the output is empty.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

/// Checks that `bytes` ends with the CRC32C of everything before it, and returns that part.
pub fn strip_crc32c(bytes: &[u8]) -> Result<&[u8], FormatError> {
    let split = bytes.len().checked_sub(4).ok_or(FormatError::Truncated)?;
    let (body, crc) = bytes.split_at(split);
    let mut r = LeReader::new(crc);
    if r.u32()? != crc32c::crc32c(body) {
        return Err(FormatError::Checksum);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut out = vec![0xAA];
        LeWriter::new(&mut out)
            .u16(0x0102)
            .u32(0x0304_0506)
            .u64(7)
            .bytes(b"xy")
            .crc32c_from(1);
        let mut r = LeReader::new(&out);
        assert_eq!(r.u8(), Ok(0xAA));
        assert_eq!(r.u16(), Ok(0x0102));
        assert_eq!(r.u32(), Ok(0x0304_0506));
        assert_eq!(r.u64(), Ok(7));
        assert_eq!(r.bytes(2), Ok(&b"xy"[..]));
        assert_eq!(r.remaining(), 4);
        assert!(strip_crc32c(&out[1..]).is_ok());
        let mut bad = out.clone();
        bad[3] ^= 1;
        assert_eq!(strip_crc32c(&bad[1..]), Err(FormatError::Checksum));
        assert_eq!(r.u64(), Err(FormatError::Truncated));
        assert_eq!(
            r.position(),
            out.len() - 4,
            "a failed read consumes nothing"
        );
        assert_eq!(
            LeReader::new(&[]).bytes(usize::MAX),
            Err(FormatError::Truncated)
        );
        assert_eq!(strip_crc32c(&[1, 2]), Err(FormatError::Truncated));
    }
}
