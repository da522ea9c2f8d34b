//! Self-verifying values for the crash harnesses: a value names its key and version, its
//! body comes from splitmix64 and an FNV-1a-64 closes it, so a reader tells a torn, foreign
//! or stale value from the right one. `bench/c/crash_egl_child.c` computes the same bytes
//! (keep the two in step); crates/gpucache/tests/common uses the same scheme.

/// splitmix64: the generator of the op stream and of value bodies (also in C).
pub struct Rng(u64);

impl Rng {
    pub fn new(state: u64) -> Rng {
        Rng(state)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

pub fn key(id: u32) -> Vec<u8> {
    let mut k = format!("key/{id:08}/").into_bytes();
    let pad = (id.wrapping_mul(2_654_435_761) >> 27) as usize;
    k.extend((0..pad).map(|i| b'a' + ((id as usize + i) % 26) as u8));
    k
}

const MAGIC: [u8; 4] = *b"GPCV";
const HEADER_LEN: usize = 20;
const TRAILER_LEN: usize = 8;

/// magic, key id, version, length, a body drawn from splitmix64, an FNV-1a-64 of all before.
pub fn value_for(id: u32, version: u64, len: usize) -> Vec<u8> {
    let len = len.max(HEADER_LEN + TRAILER_LEN);
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&MAGIC);
    v.extend_from_slice(&id.to_le_bytes());
    v.extend_from_slice(&version.to_le_bytes());
    v.extend_from_slice(&(len as u32).to_le_bytes());
    let mut rng =
        Rng::new((u64::from(id) << 40) ^ version.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ len as u64);
    while v.len() < len - TRAILER_LEN {
        let word = rng.next_u64().to_le_bytes();
        let take = (len - TRAILER_LEN - v.len()).min(8);
        v.extend_from_slice(&word[..take]);
    }
    let h = fnv1a(&v);
    v.extend_from_slice(&h.to_le_bytes());
    v
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The version of a value that is exactly `value_for(id, version, its length)`.
pub fn verify(id: u32, bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN || bytes[..4] != MAGIC {
        return Err(format!("key {id}: not a value ({} bytes)", bytes.len()));
    }
    let owner = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
    let version = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    if owner != id {
        return Err(format!("key {id}: value of key {owner}"));
    }
    if value_for(id, version, bytes.len()) != bytes {
        return Err(format!("key {id} v{version:#x}: bytes differ"));
    }
    Ok(version)
}
