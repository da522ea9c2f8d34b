//! Status storage (the seed's "Status Storage"): which shaders are known to compile and which
//! programs are known to link, so that a cached program needs neither.
//!
//! A shader's status is `Success` once it compiled, and counts the cached programs that use
//! it. A program's link status is `Success` while its binary is cached. Evicting a program
//! forgets its link status and decrements the counts of both its shaders; a shader whose
//! count reaches zero is forgotten. Only successes are stored: anything else is unknown, and
//! an unknown shader is compiled, so a failure is always reported by GL itself.
//!
//! The programs are persisted next to the binaries (the `gl-programs` metadata stream,
//! merged on every flush), so that a new process knows every cached program's shaders
//! before the preload has read a single binary.

use std::collections::{HashMap, HashSet};

use gpucache::codec::{FormatError, LeReader, LeWriter};

use crate::keys::{ProgramKey, ShaderHash};

/// What is known of a shader or a program.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Nothing: compile (or link) it.
    Unknown,
    /// It compiled (or linked) under this identity.
    Success,
}

/// Shaders that compiled but belong to no cached program are kept up to this many; past it
/// they are dropped (an application compiling endless shaders that never link would
/// otherwise grow the table without bound).
const MAX_UNREFERENCED_SHADERS: usize = 1 << 16;

#[derive(Clone, Copy, Debug, Default)]
struct ShaderStatus {
    /// Cached programs that use the shader.
    programs: u32,
}

/// The status tables. Not synchronized: [`ProgramCache`](crate::ProgramCache) holds it under
/// a lock.
#[derive(Debug, Default)]
pub struct StatusStorage {
    shaders: HashMap<ShaderHash, ShaderStatus>,
    unreferenced: usize,
    programs: HashMap<ProgramKey, (ShaderHash, ShaderHash)>,
    /// Programs linked or evicted since the last [`take_changes`](Self::take_changes).
    added: HashSet<ProgramKey>,
    removed: HashSet<ProgramKey>,
}

impl StatusStorage {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }

    /// The compile status of a shader.
    pub fn shader(&self, hash: &ShaderHash) -> Status {
        if self.shaders.contains_key(hash) {
            Status::Success
        } else {
            Status::Unknown
        }
    }

    /// How many cached programs use a shader (0 for unknown shaders).
    pub fn shader_programs(&self, hash: &ShaderHash) -> u32 {
        self.shaders.get(hash).map_or(0, |s| s.programs)
    }

    /// The link status of a program.
    pub fn program(&self, key: &ProgramKey) -> Status {
        if self.programs.contains_key(key) {
            Status::Success
        } else {
            Status::Unknown
        }
    }

    /// Records that a shader compiled.
    pub fn shader_compiled(&mut self, hash: ShaderHash) {
        if self.shaders.contains_key(&hash) {
            return;
        }
        if self.unreferenced >= MAX_UNREFERENCED_SHADERS {
            self.shaders.retain(|_, s| s.programs > 0);
            self.unreferenced = 0;
        }
        self.shaders.insert(hash, ShaderStatus::default());
        self.unreferenced += 1;
    }

    /// Records that a program linked from `vertex` and `fragment` is cached under `key`:
    /// both shaders count it. Recording a cached program again changes nothing.
    pub fn program_linked(&mut self, key: ProgramKey, vertex: ShaderHash, fragment: ShaderHash) {
        if self.programs.contains_key(&key) {
            return;
        }
        self.programs.insert(key, (vertex, fragment));
        for hash in [vertex, fragment] {
            let status = self.shaders.entry(hash).or_insert_with(|| {
                self.unreferenced += 1;
                ShaderStatus::default()
            });
            if status.programs == 0 {
                self.unreferenced -= 1;
            }
            status.programs += 1;
        }
        self.removed.remove(&key);
        self.added.insert(key);
    }

    /// Forgets a cached program: its link status, and each shader's count (and the shader
    /// when no other cached program uses it). Returns whether the program was known.
    pub fn evict(&mut self, key: &ProgramKey) -> bool {
        let Some((vertex, fragment)) = self.programs.remove(key) else {
            return false;
        };
        for hash in [vertex, fragment] {
            if let Some(status) = self.shaders.get_mut(&hash) {
                status.programs -= 1;
                if status.programs == 0 {
                    self.shaders.remove(&hash);
                }
            }
        }
        self.added.remove(key);
        self.removed.insert(*key);
        true
    }

    /// Forgets everything.
    pub fn clear(&mut self) {
        self.removed.extend(self.programs.keys().copied());
        self.added.clear();
        self.shaders.clear();
        self.programs.clear();
        self.unreferenced = 0;
    }

    /// Cached programs.
    pub fn programs(&self) -> usize {
        self.programs.len()
    }

    /// Known shaders.
    pub fn shaders(&self) -> usize {
        self.shaders.len()
    }

    /// Adds the programs of a persisted table (another process's, or an earlier run's).
    pub fn load(&mut self, persisted: &[(ProgramKey, ShaderHash, ShaderHash)]) {
        for &(key, vertex, fragment) in persisted {
            if !self.removed.contains(&key) {
                self.program_linked(key, vertex, fragment);
                self.added.remove(&key);
            }
        }
    }

    /// The programs linked and evicted since the last call, for merging into the persisted
    /// table.
    pub fn take_changes(&mut self) -> Changes {
        let added = std::mem::take(&mut self.added)
            .into_iter()
            .filter_map(|k| self.programs.get(&k).map(|&(v, f)| (k, v, f)))
            .collect();
        Changes {
            added,
            removed: std::mem::take(&mut self.removed),
        }
    }

    /// Puts back changes whose persisting failed, so that the next flush retries them.
    pub fn restore_changes(&mut self, changes: Changes) {
        for (key, ..) in changes.added {
            if self.programs.contains_key(&key) {
                self.added.insert(key);
            }
        }
        for key in changes.removed {
            if !self.programs.contains_key(&key) {
                self.removed.insert(key);
            }
        }
    }
}

/// Programs linked and evicted since the last flush.
#[derive(Debug, Default)]
pub struct Changes {
    added: Vec<(ProgramKey, ShaderHash, ShaderHash)>,
    removed: HashSet<ProgramKey>,
}

impl Changes {
    /// Whether there is nothing to persist.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }

    /// The persisted table `current` with these changes applied, encoded.
    pub fn apply(&self, current: Option<&[u8]>) -> Vec<u8> {
        let mut table = current
            .and_then(|b| decode_programs(b).ok())
            .unwrap_or_default();
        table.retain(|(k, ..)| !self.removed.contains(k));
        let present: HashSet<ProgramKey> = table.iter().map(|(k, ..)| *k).collect();
        table.extend(self.added.iter().filter(|(k, ..)| !present.contains(k)));
        encode_programs(&table)
    }
}

/// `count:u32 (key:[32] vertex:[32] fragment:[32])*`.
pub fn encode_programs(table: &[(ProgramKey, ShaderHash, ShaderHash)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + table.len() * 96);
    let mut w = LeWriter::new(&mut out);
    w.u32(table.len() as u32);
    for (k, v, f) in table {
        w.bytes(&k.0).bytes(&v.0).bytes(&f.0);
    }
    out
}

/// Reads a program table as `Changes::apply` writes it: `count:u32 (key:[32] vertex:[32]
/// fragment:[32])*`, little-endian, nothing after.
pub fn decode_programs(
    bytes: &[u8],
) -> Result<Vec<(ProgramKey, ShaderHash, ShaderHash)>, FormatError> {
    let mut r = LeReader::new(bytes);
    let n = r.u32()? as usize;
    if r.remaining() != n.saturating_mul(96) {
        return Err(FormatError::Invalid("program table length"));
    }
    (0..n)
        .map(|_| {
            Ok((
                ProgramKey(r.array()?),
                ShaderHash(r.array()?),
                ShaderHash(r.array()?),
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(n: u8) -> ShaderHash {
        ShaderHash([n; 32])
    }
    fn p(n: u8) -> ProgramKey {
        ProgramKey([n; 32])
    }

    // The seed's ProgramCache tests, on the status tables.

    #[test]
    fn compilation_status_is_stored_by_hash() {
        let mut t = StatusStorage::new();
        assert_eq!(t.shader(&s(1)), Status::Unknown);
        t.shader_compiled(s(1));
        assert_eq!(t.shader(&s(1)), Status::Success);
        // Another source is another hash: unknown.
        assert_eq!(t.shader(&s(2)), Status::Unknown);
    }

    #[test]
    fn link_status_is_stored_by_key() {
        let mut t = StatusStorage::new();
        t.shader_compiled(s(1));
        t.shader_compiled(s(2));
        assert_eq!(t.program(&p(9)), Status::Unknown);
        t.program_linked(p(9), s(1), s(2));
        assert_eq!(t.program(&p(9)), Status::Success);
        assert_eq!(t.program(&p(8)), Status::Unknown);
    }

    #[test]
    fn eviction_without_shared_shaders_forgets_both() {
        let mut t = StatusStorage::new();
        t.program_linked(p(9), s(1), s(2));
        assert!(t.evict(&p(9)));
        assert_eq!(t.program(&p(9)), Status::Unknown);
        assert_eq!(t.shader(&s(1)), Status::Unknown);
        assert_eq!(t.shader(&s(2)), Status::Unknown);
        assert!(!t.evict(&p(9)));
    }

    #[test]
    fn eviction_with_shared_shaders_keeps_the_shared_one() {
        let mut t = StatusStorage::new();
        t.program_linked(p(9), s(1), s(2));
        t.program_linked(p(8), s(1), s(3));
        assert_eq!(t.shader_programs(&s(1)), 2);
        t.evict(&p(9));
        assert_eq!(t.shader(&s(1)), Status::Success);
        assert_eq!(t.shader_programs(&s(1)), 1);
        assert_eq!(t.shader(&s(2)), Status::Unknown);
        assert_eq!(t.shader(&s(3)), Status::Success);
        t.evict(&p(8));
        assert_eq!(t.shaders(), 0);
    }

    #[test]
    fn linking_a_cached_program_again_counts_once() {
        let mut t = StatusStorage::new();
        t.program_linked(p(9), s(1), s(1));
        t.program_linked(p(9), s(1), s(1));
        assert_eq!(t.shader_programs(&s(1)), 2, "one program, the shader twice");
        t.evict(&p(9));
        assert_eq!(t.shader(&s(1)), Status::Unknown);
    }

    #[test]
    fn clear_forgets_everything() {
        let mut t = StatusStorage::new();
        t.shader_compiled(s(5));
        t.program_linked(p(9), s(1), s(2));
        t.clear();
        assert_eq!(t.shader(&s(5)), Status::Unknown);
        assert_eq!(t.shader(&s(1)), Status::Unknown);
        assert_eq!(t.program(&p(9)), Status::Unknown);
        let changes = t.take_changes();
        assert_eq!(changes.removed.len(), 1);
    }

    #[test]
    fn unreferenced_shaders_are_bounded() {
        let mut t = StatusStorage::new();
        t.program_linked(p(1), ShaderHash([0xff; 32]), ShaderHash([0xfe; 32]));
        for i in 0..(MAX_UNREFERENCED_SHADERS as u32 + 10) {
            let mut h = [0u8; 32];
            h[..4].copy_from_slice(&i.to_le_bytes());
            t.shader_compiled(ShaderHash(h));
        }
        assert!(t.shaders() <= MAX_UNREFERENCED_SHADERS + 2);
        assert_eq!(t.shader(&ShaderHash([0xff; 32])), Status::Success);
    }

    #[test]
    fn changes_merge_into_the_persisted_table() {
        let mut a = StatusStorage::new();
        a.program_linked(p(1), s(1), s(2));
        a.program_linked(p(2), s(1), s(3));
        let file = a.take_changes().apply(None);
        assert_eq!(decode_programs(&file).unwrap().len(), 2);

        // Another process evicts one and adds one; the first's entries stay.
        let mut b = StatusStorage::new();
        b.load(&decode_programs(&file).unwrap());
        assert!(b.take_changes().is_empty(), "loading is not a change");
        b.evict(&p(1));
        b.program_linked(p(3), s(4), s(5));
        let file = b.take_changes().apply(Some(&file));
        let mut keys: Vec<_> = decode_programs(&file)
            .unwrap()
            .iter()
            .map(|e| e.0)
            .collect();
        keys.sort();
        assert_eq!(keys, vec![p(2), p(3)]);
        assert!(decode_programs(&file[..file.len() - 1]).is_err());
    }
}
