//! The GNU build-id note of an ELF file (64-bit little-endian: x86_64, aarch64), read from
//! the file with plain reads: no mapping, no unsafe code.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

const PT_NOTE: u32 = 4;
const NT_GNU_BUILD_ID: u32 = 3;

/// The build id of the ELF file at `path`, or `None` (not ELF64 LE, no note, unreadable).
pub fn build_id(path: &Path) -> Option<Vec<u8>> {
    let file = File::open(path).ok()?;
    let mut header = [0u8; 64];
    file.read_exact_at(&mut header, 0).ok()?;
    // ELF magic, ELFCLASS64, ELFDATA2LSB.
    if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
        return None;
    }
    let phoff = u64::from_le_bytes(header[32..40].try_into().ok()?);
    let phentsize = u64::from(u16::from_le_bytes(header[54..56].try_into().ok()?));
    let phnum = u64::from(u16::from_le_bytes(header[56..58].try_into().ok()?));
    if phentsize < 56 || phnum > 256 {
        return None;
    }
    for i in 0..phnum {
        let mut ph = [0u8; 56];
        file.read_exact_at(&mut ph, phoff.checked_add(i * phentsize)?)
            .ok()?;
        if u32::from_le_bytes(ph[0..4].try_into().ok()?) != PT_NOTE {
            continue;
        }
        let offset = u64::from_le_bytes(ph[8..16].try_into().ok()?);
        let size = u64::from_le_bytes(ph[32..40].try_into().ok()?);
        if size > 1 << 16 {
            continue;
        }
        let mut notes = vec![0u8; usize::try_from(size).ok()?];
        file.read_exact_at(&mut notes, offset).ok()?;
        if let Some(id) = find_build_id(&notes) {
            return Some(id);
        }
    }
    None
}

/// The build id in a PT_NOTE segment's bytes.
pub(crate) fn find_build_id(mut notes: &[u8]) -> Option<Vec<u8>> {
    let word = |b: &[u8], at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
    };
    while notes.len() >= 12 {
        let namesz = usize::try_from(word(notes, 0)?).ok()?;
        let descsz = usize::try_from(word(notes, 4)?).ok()?;
        let kind = word(notes, 8)?;
        let name_end = 12usize.checked_add(namesz)?;
        let desc_at = 12usize.checked_add(namesz.next_multiple_of(4))?;
        let desc_end = desc_at.checked_add(descsz)?;
        let next = desc_at.checked_add(descsz.next_multiple_of(4))?;
        if kind == NT_GNU_BUILD_ID && notes.get(12..name_end)? == b"GNU\0" {
            return notes.get(desc_at..desc_end).map(<[u8]>::to_vec);
        }
        notes = notes.get(next..)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_binary_has_a_build_id_or_none_and_garbage_has_none() {
        // Rust binaries are linked with a build id on Debian's toolchain; either way the
        // function must answer without failing.
        let exe = std::env::current_exe().unwrap();
        if let Some(id) = build_id(&exe) {
            assert!((8..=64).contains(&id.len()));
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("x");
        std::fs::write(&f, b"\x7fELF\x02\x01 garbage").unwrap();
        assert_eq!(build_id(&f), None);
        assert_eq!(build_id(&dir.path().join("missing")), None);
    }

    #[test]
    fn notes_are_walked() {
        let mut n = Vec::new();
        // An unrelated note, then the build id.
        for (name, kind, desc) in [(&b"XY\0"[..], 1u32, &[9u8; 5][..]), (b"GNU\0", 3, &[7; 20])] {
            n.extend((name.len() as u32).to_le_bytes());
            n.extend((desc.len() as u32).to_le_bytes());
            n.extend(kind.to_le_bytes());
            n.extend(name);
            n.resize(n.len().next_multiple_of(4), 0);
            n.extend(desc);
            n.resize(n.len().next_multiple_of(4), 0);
        }
        assert_eq!(find_build_id(&n), Some(vec![7; 20]));
        assert_eq!(find_build_id(&n[..20]), None);
    }
}
