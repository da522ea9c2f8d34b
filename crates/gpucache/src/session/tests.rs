use std::sync::Arc;

use super::*;
use crate::ENTRY_OVERHEAD;

/// Hashes every key to its first byte, so `b"apple"` and `b"avocado"` collide.
#[derive(Debug)]
struct FirstByteHasher;

impl KeyHasher for FirstByteHasher {
    fn hash_key(&self, key: &[u8]) -> u64 {
        u64::from(key.first().copied().unwrap_or(0))
    }
}

fn id(n: u8) -> [u8; 16] {
    [n; 16]
}

fn roomy(n: u8) -> SessionDesc {
    SessionDesc::new(id(n))
        .max_in_memory_bytes(1 << 20)
        .max_in_memory_entries(1000)
}

#[test]
fn store_then_find_three_ways() {
    let reg = SessionRegistry::new();
    let s = reg.open(roomy(1)).unwrap();
    s.store(b"key", b"value".to_vec()).unwrap();
    assert_eq!(s.find(b"key").unwrap(), &b"value"[..]);
    assert_eq!(s.find_size(b"key").unwrap(), 5);
    let mut buf = [0u8; 8];
    assert_eq!(s.find_into(b"key", &mut buf).unwrap(), 5);
    assert_eq!(&buf[..5], b"value");
}

#[test]
fn find_of_a_missing_key_is_not_found() {
    let reg = SessionRegistry::new();
    let s = reg.open(roomy(1)).unwrap();
    assert!(matches!(s.find(b"nope"), Err(Error::NotFound)));
    assert!(matches!(s.find_size(b"nope"), Err(Error::NotFound)));
}

#[test]
fn find_into_a_small_buffer_writes_nothing() {
    let reg = SessionRegistry::new();
    let s = reg.open(roomy(1)).unwrap();
    s.store(b"k", vec![9u8; 10]).unwrap();
    let mut buf = [0u8; 9];
    let err = s.find_into(b"k", &mut buf).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BufferTooSmall {
                needed: 10,
                given: 9
            }
        ),
        "{err}"
    );
    assert_eq!(buf, [0u8; 9]);
}

#[test]
fn store_of_an_existing_key_is_already_exists_and_keeps_the_value() {
    let reg = SessionRegistry::new();
    let s = reg.open(roomy(1)).unwrap();
    s.store(b"k", b"first".to_vec()).unwrap();
    assert!(matches!(
        s.store(b"k", b"second".to_vec()),
        Err(Error::AlreadyExists(_))
    ));
    assert_eq!(s.find(b"k").unwrap(), &b"first"[..]);
}

#[test]
fn same_hash_different_key_is_a_hash_collision() {
    let reg = SessionRegistry::with_hasher(Arc::new(FirstByteHasher));
    let s = reg.open(roomy(1)).unwrap();
    s.store(b"apple", b"A".to_vec()).unwrap();
    assert!(matches!(
        s.store(b"avocado", b"V".to_vec()),
        Err(Error::HashCollision)
    ));
    assert!(matches!(s.find(b"avocado"), Err(Error::HashCollision)));
    assert_eq!(s.find(b"apple").unwrap(), &b"A"[..]);
    assert!(matches!(s.find(b"banana"), Err(Error::NotFound)));
}

#[test]
fn a_memory_cache_refuses_instead_of_evicting() {
    let reg = SessionRegistry::new();
    // Room for exactly two entries of a 1-byte key and 100-byte value.
    let budget = 2 * (1 + 100 + ENTRY_OVERHEAD as u32);
    let s = reg
        .open(SessionDesc::new(id(1)).max_in_memory_bytes(budget))
        .unwrap();
    s.store(b"a", vec![0u8; 100]).unwrap();
    s.store(b"b", vec![0u8; 100]).unwrap();
    let err = s.store(b"c", vec![0u8; 100]).unwrap_err();
    assert!(matches!(err, Error::CacheFull { .. }), "{err}");
    assert!(
        s.find(b"a").is_ok() && s.find(b"b").is_ok(),
        "nothing evicted"
    );
    // A value larger than the whole budget is "full" too.
    assert!(matches!(
        s.store(b"d", vec![0u8; budget as usize]),
        Err(Error::CacheFull { .. })
    ));
}

#[test]
fn the_entry_limit_also_makes_the_cache_full() {
    let reg = SessionRegistry::new();
    let s = reg
        .open(
            SessionDesc::new(id(1))
                .max_in_memory_bytes(1 << 20)
                .max_in_memory_entries(2),
        )
        .unwrap();
    s.store(b"a", b"1".to_vec()).unwrap();
    s.store(b"b", b"2".to_vec()).unwrap();
    assert!(matches!(
        s.store(b"c", b"3".to_vec()),
        Err(Error::CacheFull { available: 0, .. })
    ));
}

#[test]
fn defaults_are_d3d12s_and_zero_means_default() {
    let reg = SessionRegistry::new();
    let s = reg
        .open(
            SessionDesc::new(id(1))
                .max_in_memory_bytes(0)
                .max_in_memory_entries(0),
        )
        .unwrap();
    let d = s.desc();
    assert_eq!(d.max_in_memory_bytes, 1024);
    assert_eq!(d.max_in_memory_entries, 128);
    assert_eq!(d.max_value_file_bytes, 128 << 20);
    assert_eq!(
        (d.mode, d.flags, d.version),
        (CacheMode::Memory, SessionFlags::NONE, 0)
    );
    assert_eq!(s.stats().memory.max_bytes, 1024);
}

#[test]
fn sessions_with_one_identifier_share_one_cache() {
    let reg = SessionRegistry::new();
    let a = reg.open(roomy(1)).unwrap();
    let b = reg.open(roomy(1).max_in_memory_entries(7)).unwrap();
    let other = reg.open(roomy(2)).unwrap();
    a.store(b"k", b"v".to_vec()).unwrap();
    assert_eq!(b.find(b"k").unwrap(), &b"v"[..]);
    assert!(matches!(other.find(b"k"), Err(Error::NotFound)));
    assert_eq!(
        b.desc().max_in_memory_entries,
        7,
        "each session keeps its own desc"
    );
    assert_eq!(reg.open_caches(), 2);
}

#[test]
fn a_memory_cache_is_gone_after_its_last_session_closes() {
    let reg = SessionRegistry::new();
    let a = reg.open(roomy(1)).unwrap();
    let b = reg.open(roomy(1)).unwrap();
    a.store(b"k", b"v".to_vec()).unwrap();
    drop(a);
    assert!(b.find(b"k").is_ok(), "still open through b");
    drop(b);
    assert_eq!(reg.open_caches(), 0);
    let c = reg.open(roomy(1)).unwrap();
    assert!(matches!(c.find(b"k"), Err(Error::NotFound)));
}

#[test]
fn delete_on_destroy_waits_for_every_session() {
    let reg = SessionRegistry::new();
    let a = reg.open(roomy(1)).unwrap();
    let b = reg.open(roomy(1)).unwrap();
    a.store(b"k", b"v".to_vec()).unwrap();
    a.set_delete_on_destroy();
    drop(a);
    assert!(b.find(b"k").is_ok());
    drop(b);
    assert_eq!(reg.open_caches(), 0);
}

#[test]
fn another_version_fails_while_open_and_wipes_once_closed() {
    let reg = SessionRegistry::new();
    let v1 = reg.open(roomy(1).version(1)).unwrap();
    v1.store(b"k", b"v".to_vec()).unwrap();
    assert!(matches!(
        reg.open(roomy(1).version(2)),
        Err(Error::AlreadyExists(_))
    ));
    drop(v1);
    let v2 = reg.open(roomy(1).version(2)).unwrap();
    assert!(matches!(v2.find(b"k"), Err(Error::NotFound)));
    assert_eq!(v2.desc().version, 2);
}

fn disk(n: u8) -> SessionDesc {
    roomy(n).mode(CacheMode::Disk)
}

#[test]
fn a_disk_cache_persists_across_sessions() {
    let root = tempfile::tempdir().unwrap();
    let reg = SessionRegistry::with_root(root.path());
    {
        let s = reg.open(disk(1)).unwrap();
        s.store(b"k", b"persisted".to_vec()).unwrap();
        assert!(s.directory().unwrap().starts_with(root.path()));
    }
    assert_eq!(reg.open_caches(), 0, "closed, flushed");
    let s = reg.open(disk(1)).unwrap();
    assert_eq!(s.find(b"k").unwrap(), &b"persisted"[..]);
    // Already stored on disk, even though memory has not seen it yet.
    let fresh = SessionRegistry::with_root(root.path());
    drop(s);
    let s = fresh.open(disk(1).max_in_memory_entries(1)).unwrap();
    assert!(matches!(
        s.store(b"k", b"again".to_vec()),
        Err(Error::AlreadyExists(_))
    ));
}

#[test]
fn a_disk_cache_of_another_version_is_wiped() {
    let root = tempfile::tempdir().unwrap();
    let reg = SessionRegistry::with_root(root.path());
    reg.open(disk(1).version(1))
        .unwrap()
        .store(b"k", b"v".to_vec())
        .unwrap();
    let v2 = reg.open(disk(1).version(2)).unwrap();
    assert!(matches!(v2.find(b"k"), Err(Error::NotFound)));
    assert!(matches!(
        reg.open(disk(1).version(1)),
        Err(Error::AlreadyExists(_))
    ));
}

#[test]
fn delete_on_destroy_removes_a_disk_cache() {
    let root = tempfile::tempdir().unwrap();
    let reg = SessionRegistry::with_root(root.path());
    let s = reg.open(disk(1)).unwrap();
    s.store(b"k", b"v".to_vec()).unwrap();
    s.flush().unwrap();
    let dir = s.directory().unwrap().to_path_buf();
    assert!(dir.exists());
    s.set_delete_on_destroy();
    drop(s);
    assert!(!dir.exists());
    let s = reg.open(disk(1)).unwrap();
    assert!(matches!(s.find(b"k"), Err(Error::NotFound)));
}

#[test]
fn a_full_value_file_is_cache_full() {
    let root = tempfile::tempdir().unwrap();
    let reg = SessionRegistry::with_root(root.path());
    let s = reg
        .open(
            disk(1)
                .max_value_file_bytes(64 << 10)
                .max_in_memory_bytes(1 << 20),
        )
        .unwrap();
    let mut full = false;
    for i in 0..200u32 {
        // Incompressible: zeros would compress to a few bytes each and never fill it.
        let mut x = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) + 1;
        let value: Vec<u8> = (0..1000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        match s.store(&i.to_le_bytes(), value) {
            Ok(()) => s.flush().unwrap(),
            Err(Error::CacheFull { .. }) => {
                full = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(full);
    assert!(s.stats().disk.unwrap().file_bytes <= 64 << 10);
}

#[test]
fn stores_not_yet_written_count_against_the_value_file() {
    let root = tempfile::tempdir().unwrap();
    let reg = SessionRegistry::with_root(root.path());
    let desc = disk(2)
        .max_value_file_bytes(64 << 10)
        .max_in_memory_bytes(16 << 20);
    let s = reg.open(desc.clone()).unwrap();
    // Another holder of the directory lock keeps the writer from writing anything yet.
    let lock = std::fs::File::open(s.directory().unwrap().join("lock")).unwrap();
    lock.lock().unwrap();
    let mut stored = Vec::new();
    let mut full = 0;
    for i in 0..1000u32 {
        match s.store(&i.to_le_bytes(), vec![i as u8; 1000]) {
            Ok(()) => stored.push(i),
            Err(Error::CacheFull { .. }) => full += 1,
            Err(e) => panic!("{e}"),
        }
    }
    lock.unlock().unwrap();
    drop(s);
    assert!(full > 0, "a 64 KiB value file cannot take 1 MB");
    let s = reg.open(desc).unwrap();
    let lost: Vec<u32> = stored
        .iter()
        .copied()
        .filter(|i| s.find(&i.to_le_bytes()).is_err())
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} stores reported success and were lost",
        lost.len(),
        stored.len()
    );
    assert_eq!(s.stats().disk.unwrap().evicted_segments, 0);
}

#[test]
fn a_value_over_the_limit_is_cache_full_in_both_modes() {
    let root = tempfile::tempdir().unwrap();
    let reg = SessionRegistry::with_root(root.path());
    for desc in [disk(3).max_value_file_bytes(1 << 20), roomy(4)] {
        let s = reg.open(desc).unwrap();
        let limit = s.max_value_size();
        assert!(limit > 0 && limit < 1 << 20, "{limit}");
        let over = usize::try_from(limit).unwrap() + 1;
        assert!(matches!(
            s.store(b"big", vec![1u8; over]),
            Err(Error::CacheFull { .. })
        ));
        s.store(b"fits", vec![1u8; usize::try_from(limit).unwrap() - 8])
            .unwrap();
        assert_eq!(s.find_size(b"fits").unwrap() as u64, limit - 8);
    }
}

#[test]
fn driver_versioned_disk_caches_are_kept_per_driver() {
    let root = tempfile::tempdir().unwrap();
    let desc = disk(1).flags(SessionFlags::DRIVER_VERSIONED);
    {
        let a = SessionRegistry::with_root(root.path()).driver_identity("driver A");
        a.open(desc.clone())
            .unwrap()
            .store(b"k", b"A".to_vec())
            .unwrap();
    }
    {
        let b = SessionRegistry::with_root(root.path()).driver_identity("driver B");
        let s = b.open(desc.clone()).unwrap();
        assert!(matches!(s.find(b"k"), Err(Error::NotFound)));
        s.store(b"k", b"B".to_vec()).unwrap();
    }
    let a = SessionRegistry::with_root(root.path()).driver_identity("driver A");
    assert_eq!(a.open(desc).unwrap().find(b"k").unwrap(), &b"A"[..]);
}

#[test]
fn application_clear_removes_closed_disk_caches_too() {
    crate::control::tests::developer_mode_on();
    let root = tempfile::tempdir().unwrap();
    let reg = SessionRegistry::with_root(root.path());
    reg.open(disk(1))
        .unwrap()
        .store(b"k", b"v".to_vec())
        .unwrap();
    let open = reg.open(disk(2)).unwrap();
    open.store(b"k", b"v".to_vec()).unwrap();
    reg.control(CacheKinds::APPLICATION_MANAGED, CacheControl::CLEAR)
        .unwrap();
    assert!(matches!(open.find(b"k"), Err(Error::NotFound)));
    assert!(matches!(
        reg.open(disk(1)).unwrap().find(b"k"),
        Err(Error::NotFound)
    ));
}

#[test]
fn control_disable_enable_and_clear() {
    crate::control::tests::developer_mode_on();
    let reg = SessionRegistry::new();
    let s = reg.open(roomy(1)).unwrap();
    s.store(b"k", b"v".to_vec()).unwrap();
    let app = CacheKinds::APPLICATION_MANAGED;

    reg.control(app, CacheControl::DISABLE).unwrap();
    assert!(matches!(s.find(b"k"), Err(Error::NotCurrentlyAvailable)));
    assert!(matches!(
        s.store(b"x", b"y".to_vec()),
        Err(Error::NotCurrentlyAvailable)
    ));
    assert!(matches!(
        reg.open(roomy(2)),
        Err(Error::NotCurrentlyAvailable)
    ));

    reg.control(app, CacheControl::ENABLE).unwrap();
    assert_eq!(
        s.find(b"k").unwrap(),
        &b"v"[..],
        "disable keeps the contents"
    );

    reg.control(app, CacheControl::CLEAR).unwrap();
    assert!(matches!(s.find(b"k"), Err(Error::NotFound)));

    // Kinds gpucache does not have are accepted and change nothing.
    s.store(b"k", b"v".to_vec()).unwrap();
    reg.control(
        CacheKinds::IMPLICIT_D3D_CONVERSIONS,
        CacheControl::CLEAR | CacheControl::DISABLE,
    )
    .unwrap();
    assert!(s.find(b"k").is_ok());
}

#[test]
fn control_outside_developer_mode_is_refused_and_changes_nothing() {
    crate::control::tests::FORCED_DEVELOPER_MODE.with(|f| f.set(Some(false)));
    let reg = SessionRegistry::new();
    let s = reg.open(roomy(1)).unwrap();
    s.store(b"k", b"v".to_vec()).unwrap();
    for control in [CacheControl::CLEAR, CacheControl::DISABLE] {
        assert!(matches!(
            reg.control(CacheKinds::APPLICATION_MANAGED, control),
            Err(Error::DeveloperModeRequired)
        ));
    }
    assert_eq!(
        s.find(b"k").unwrap(),
        &b"v"[..],
        "neither cleared nor disabled"
    );
}

#[test]
fn control_requests_are_validated() {
    let reg = SessionRegistry::new();
    let app = CacheKinds::APPLICATION_MANAGED;
    for (kinds, control) in [
        (app, CacheControl::DISABLE | CacheControl::ENABLE),
        (app, CacheControl::default()),
        (CacheKinds::default(), CacheControl::CLEAR),
    ] {
        assert!(matches!(
            reg.control(kinds, control),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert_eq!(CacheKinds::from_bits(0x10), None);
    assert_eq!(CacheControl::from_bits(0x8), None);
    assert_eq!(SessionFlags::from_bits(0x4), None);
    assert_eq!(CacheKinds::from_bits(0xF).map(|k| k.bits()), Some(0xF));
    assert!(SessionFlags::from_bits(3)
        .unwrap()
        .contains(SessionFlags::DRIVER_VERSIONED | SessionFlags::USE_WORKING_DIR));
}

#[test]
fn sessions_are_usable_from_many_threads() {
    let reg = SessionRegistry::new();
    let desc = SessionDesc::new(id(1))
        .max_in_memory_bytes(64 << 20)
        .max_in_memory_entries(100_000);
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let reg = &reg;
            let desc = desc.clone();
            scope.spawn(move || {
                let s = reg.open(desc).unwrap();
                for i in 0..500u32 {
                    let key = [&[t][..], &i.to_le_bytes()].concat();
                    s.store(&key, key.clone()).unwrap();
                    assert_eq!(s.find(&key).unwrap(), key);
                }
            });
        }
    });
    // Every session closed, so the memory cache is gone.
    assert_eq!(reg.open_caches(), 0);
}
