//! Redis key names, `docs/fleet.md`.
//!
//! - `gpucache:v1:<ns>:e:<h>`: one entry. `<ns>` is the identity's namespace
//!   ([`Identity::namespace`](gpucache::Identity::namespace), 32 hex digits) and `<h>` the
//!   first 16 bytes of BLAKE3 of the cache key (32 hex digits). No hash tag: an identity's
//!   entries spread over every master of a cluster.
//! - `gpucache:v1:{<ns>}:idx`: the identity's index, a set of the 16-byte `<h>` of the
//!   entries pushed. The bulk pull reads it (`SMEMBERS`) and then the entries. Hash-tagged,
//!   so that it and `info` live in one slot.
//! - `gpucache:v1:{<ns>}:info`: a hash: `identity` (the identity, escaped, for people),
//!   `entries` and `bytes` (entries and encoded bytes pushed, counting re-pushes).
//! - `gpucache:v1:identities`: the set of every `<ns>` pushed to (for `gpucache fleet stats`).

/// The set of every identity namespace the fleet holds.
pub const IDENTITIES: &str = "gpucache:v1:identities";

/// The hash that names an entry: BLAKE3 of the cache key, first 16 bytes.
pub fn key_hash(key: &[u8]) -> [u8; 16] {
    let h = blake3::hash(key);
    let mut out = [0; 16];
    out.copy_from_slice(&h.as_bytes()[..16]);
    out
}

/// The Redis names of one identity.
#[derive(Clone, Debug)]
pub struct Names {
    ns: String,
}

impl Names {
    /// The names of the identity whose namespace is `ns`.
    pub fn new(ns: u128) -> Self {
        Self {
            ns: format!("{ns:032x}"),
        }
    }

    /// The namespace in hex.
    pub fn ns(&self) -> &str {
        &self.ns
    }

    /// The Redis key of the entry whose key hash is `h`.
    pub fn entry(&self, h: &[u8; 16]) -> Vec<u8> {
        let mut k = format!("gpucache:v1:{}:e:", self.ns).into_bytes();
        for b in h {
            k.extend_from_slice(format!("{b:02x}").as_bytes());
        }
        k
    }

    /// The identity's index set.
    pub fn index(&self) -> String {
        format!("gpucache:v1:{{{}}}:idx", self.ns)
    }

    /// The identity's info hash.
    pub fn info(&self) -> String {
        format!("gpucache:v1:{{{}}}:info", self.ns)
    }
}
