//! The wire format of a fleet entry (the value of an entry's Redis key), `docs/fleet.md`.
//!
//! ```text
//! offset size
//!  0      4   magic "GPCF"
//!  4      1   format version (1)
//!  5      1   flags: bit 0 = payload is an LZ4 block
//!  6      2   reserved, 0
//!  8      4   key id of the fleet key that signed it
//! 12      4   identity length I
//! 16      4   key length K
//! 20      4   value length V (after decompression)
//! 24      4   payload length P
//! 28      I   identity: cache version u64, driver-versioned u8, identity bytes
//!  .      K   the cache key
//!  .      P   the value, LZ4-compressed when flag 0 is set
//!  .     32   MAC: BLAKE3 keyed hash, under the fleet key, of every byte before it
//! ```
//!
//! All integers little-endian. A reader checks, in order: length and magic and version
//! (`Format`), the key id and MAC (`Mac`), the identity (`Identity`), the key (`Key`), then
//! decompresses to exactly `V` bytes, refusing `V` above its limit before allocating.

use gpucache::codec::{LeReader, LeWriter};
use gpucache::Identity;

use crate::key::{FleetKey, KeyRing};

/// The first bytes of every entry.
pub const MAGIC: [u8; 4] = *b"GPCF";
/// The format version written.
pub const VERSION: u8 = 1;
const FLAG_LZ4: u8 = 1;
const HEADER: usize = 28;
const MAC_LEN: usize = 32;

/// Why an entry read from the fleet was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Too short, wrong magic or version, lengths that do not add up, a value over the limit
    /// or a payload that does not decompress to its stated length.
    Format,
    /// Signed with a key this reader does not hold, or the MAC does not match.
    Mac,
    /// Written for another identity.
    Identity,
    /// Written for another key.
    Key,
}

/// The identity as entries carry it.
pub fn identity_bytes(identity: &Identity) -> Vec<u8> {
    let mut out = Vec::with_capacity(9 + identity.bytes().len());
    LeWriter::new(&mut out)
        .u64(identity.version())
        .u8(u8::from(identity.driver_versioned()))
        .bytes(identity.bytes());
    out
}

/// Encodes an entry signed by `key`; compresses the value when that makes it smaller.
pub fn encode(key: &FleetKey, identity: &[u8], cache_key: &[u8], value: &[u8]) -> Vec<u8> {
    let compressed = lz4_flex::block::compress(value);
    let (flags, payload): (u8, &[u8]) = if compressed.len() < value.len() {
        (FLAG_LZ4, &compressed)
    } else {
        (0, value)
    };
    let mut out =
        Vec::with_capacity(HEADER + identity.len() + cache_key.len() + payload.len() + MAC_LEN);
    let len32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    LeWriter::new(&mut out)
        .bytes(&MAGIC)
        .u8(VERSION)
        .u8(flags)
        .u16(0)
        .u32(key.id())
        .u32(len32(identity.len()))
        .u32(len32(cache_key.len()))
        .u32(len32(value.len()))
        .u32(len32(payload.len()))
        .bytes(identity)
        .bytes(cache_key)
        .bytes(payload);
    let mac = key.mac(&out);
    out.extend_from_slice(mac.as_bytes());
    out
}

/// Checks an entry read for `cache_key` under `identity` and returns its value.
pub fn decode(
    keys: &KeyRing,
    identity: &[u8],
    cache_key: &[u8],
    max_value: usize,
    bytes: &[u8],
) -> Result<Vec<u8>, Reject> {
    let (_, value) = decode_any(keys, bytes, max_value, |id, key| {
        if id != identity {
            Err(Reject::Identity)
        } else if key != cache_key {
            Err(Reject::Key)
        } else {
            Ok(())
        }
    })?;
    Ok(value)
}

/// Checks an entry whose key is not known beforehand (a bulk pull): `check(identity, key)`
/// decides whether identity and key are acceptable. Returns the key and value.
pub fn decode_any(
    keys: &KeyRing,
    bytes: &[u8],
    max_value: usize,
    check: impl FnOnce(&[u8], &[u8]) -> Result<(), Reject>,
) -> Result<(Vec<u8>, Vec<u8>), Reject> {
    let fmt = |_| Reject::Format;
    if bytes.len() < HEADER + MAC_LEN {
        return Err(Reject::Format);
    }
    let (body, mac) = bytes.split_at(bytes.len() - MAC_LEN);
    let mut r = LeReader::new(body);
    if r.array::<4>().map_err(fmt)? != MAGIC || r.u8().map_err(fmt)? != VERSION {
        return Err(Reject::Format);
    }
    let flags = r.u8().map_err(fmt)?;
    let _reserved = r.u16().map_err(fmt)?;
    let key_id = r.u32().map_err(fmt)?;
    let id_len = r.u32().map_err(fmt)? as usize;
    let key_len = r.u32().map_err(fmt)? as usize;
    let value_len = r.u32().map_err(fmt)? as usize;
    let payload_len = r.u32().map_err(fmt)? as usize;
    if flags & !FLAG_LZ4 != 0
        || id_len
            .checked_add(key_len)
            .and_then(|n| n.checked_add(payload_len))
            != Some(r.remaining())
    {
        return Err(Reject::Format);
    }
    // Authenticate before looking at anything the writer chose.
    let signer = keys.by_id(key_id).ok_or(Reject::Mac)?;
    if signer.mac(body) != blake3::Hash::from_bytes(mac.try_into().map_err(|_| Reject::Mac)?) {
        return Err(Reject::Mac);
    }
    let identity = r.bytes(id_len).map_err(fmt)?;
    let key = r.bytes(key_len).map_err(fmt)?;
    let payload = r.bytes(payload_len).map_err(fmt)?;
    check(identity, key)?;
    if value_len > max_value {
        return Err(Reject::Format);
    }
    let value = if flags & FLAG_LZ4 != 0 {
        let v = lz4_flex::block::decompress(payload, value_len).map_err(|_| Reject::Format)?;
        if v.len() != value_len {
            return Err(Reject::Format);
        }
        v
    } else if payload_len == value_len {
        payload.to_vec()
    } else {
        return Err(Reject::Format);
    };
    Ok((key.to_vec(), value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring() -> KeyRing {
        KeyRing {
            current: FleetKey::from_material(&[1; 32]).unwrap(),
            previous: Some(FleetKey::from_material(&[2; 32]).unwrap()),
        }
    }

    #[test]
    fn round_trip_and_every_rejection() {
        let keys = ring();
        let id = identity_bytes(&Identity::new(b"llvmpipe".to_vec()));
        let value: Vec<u8> = (0..10_000u32).map(|i| (i % 7) as u8).collect();
        let e = encode(&keys.current, &id, b"key", &value);
        assert!(e.len() < value.len() / 4, "compressed");
        assert_eq!(decode(&keys, &id, b"key", 1 << 20, &e).unwrap(), value);
        // Incompressible values are stored as they are.
        let raw = encode(&keys.current, &id, b"k", b"xyz");
        assert_eq!(decode(&keys, &id, b"k", 16, &raw).unwrap(), b"xyz");
        // Signed with the previous key: accepted during a rotation.
        let old = encode(keys.previous.as_ref().unwrap(), &id, b"key", &value);
        assert!(decode(&keys, &id, b"key", 1 << 20, &old).is_ok());
        // Another fleet's key.
        let foreign = encode(
            &FleetKey::from_material(&[3; 32]).unwrap(),
            &id,
            b"key",
            &value,
        );
        assert_eq!(
            decode(&keys, &id, b"key", 1 << 20, &foreign),
            Err(Reject::Mac)
        );
        // Another identity, another key.
        let other = identity_bytes(&Identity::new(b"radeonsi".to_vec()));
        assert_eq!(
            decode(&keys, &other, b"key", 1 << 20, &e),
            Err(Reject::Identity)
        );
        assert_eq!(decode(&keys, &id, b"kez", 1 << 20, &e), Err(Reject::Key));
        // Over the value limit.
        assert_eq!(decode(&keys, &id, b"key", 9_999, &e), Err(Reject::Format));
        // Every flipped byte and every truncation is rejected.
        for i in 0..e.len() {
            let mut bad = e.clone();
            bad[i] ^= 0x40;
            assert!(
                decode(&keys, &id, b"key", 1 << 20, &bad).is_err(),
                "byte {i}"
            );
        }
        for n in 0..e.len() {
            assert!(
                decode(&keys, &id, b"key", 1 << 20, &e[..n]).is_err(),
                "len {n}"
            );
        }
        let mut long = e.clone();
        long.push(0);
        assert!(decode(&keys, &id, b"key", 1 << 20, &long).is_err());
        assert_eq!(
            decode(&keys, &id, b"key", 1 << 20, b"garbage"),
            Err(Reject::Format)
        );
    }
}
