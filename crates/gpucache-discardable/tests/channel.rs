//! The channel over a real Unix-domain socket with real memfd pools: an honest client's
//! messages in order, and every kind of hostile client: each gets a typed error (counted; the
//! connection dropped where the stream cannot be trusted), and an honest bystander keeps all
//! its resources and its service.

mod common;

use std::io::{IoSlice, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

use common::Rig;
use gpucache::PolicyKind;
use gpucache_discardable::proto::{encode_client, MAX_FRAME};
use gpucache_discardable::{
    ChannelClient, ClientId, ClientMessage, ResourceDesc, SharedMemory, TexelFormat,
};
use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

const MIB: u64 = 1 << 20;

fn tex(side: u32) -> ResourceDesc {
    ResourceDesc::texture(side, side, TexelFormat::Rgba8)
}

/// Connects a client and returns it with its id on the service.
fn connect(rig: &Rig) -> (ChannelClient, ClientId) {
    let before = rig.s().clients();
    let mut c = ChannelClient::connect(&rig.path).unwrap();
    c.sync().unwrap();
    let after = rig.s().clients();
    let id = *after.iter().find(|id| !before.contains(id)).unwrap();
    (c, id)
}

/// An honest client with 8 textures, 4 of them unlocked.
fn bystander(rig: &Rig) -> (ChannelClient, ClientId) {
    let (mut c, id) = connect(rig);
    for r in 0..8 {
        c.create(r, tex(64)).unwrap();
        if r % 2 == 0 {
            c.unlock(r).unwrap();
        }
    }
    c.sync().unwrap();
    (c, id)
}

/// The bystander still has all 8 resources, can lock, use and unlock them.
fn check_bystander(rig: &Rig, c: &mut ChannelClient, id: ClientId) {
    assert_eq!(rig.s().manager().resource_count(id), 8);
    for r in 0..8 {
        assert!(c.lock(r).unwrap(), "bystander's {r} deleted");
        c.use_resource(r).unwrap();
        c.unlock(r).unwrap();
    }
    let reply = c.sync().unwrap();
    assert_eq!(reply.errors, 0);
    assert_eq!(rig.s().client_errors(id), Some(0));
}

fn raw(rig: &Rig, m: &ClientMessage) -> UnixStream {
    let mut s = UnixStream::connect(&rig.path).unwrap();
    let mut b = Vec::new();
    encode_client(m, &mut b);
    s.write_all(&b).unwrap();
    s
}

fn errors_of(rig: &Rig, id: ClientId) -> Vec<String> {
    rig.s()
        .take_errors()
        .into_iter()
        .filter(|(c, _)| *c == id)
        .map(|(_, e)| format!("{e:?}"))
        .collect()
}

#[test]
fn honest_client_in_order_textures_and_buffers() {
    let rig = Rig::new(64 * MIB, PolicyKind::Lru);
    let (mut c, id) = connect(&rig);
    c.create(1, tex(256)).unwrap();
    c.create(2, ResourceDesc::Buffer { bytes: 4096 }).unwrap();
    c.use_resource(1).unwrap();
    c.use_resource(2).unwrap();
    c.unlock(1).unwrap();
    c.unlock(2).unwrap();
    let reply = c.sync().unwrap();
    let tex_bytes = tex(256).byte_size().unwrap();
    assert_eq!(reply.total_bytes, tex_bytes + 4096);
    assert_eq!(reply.locked_bytes, 0);
    assert_eq!(reply.errors, 0);
    {
        let s = rig.s();
        assert_eq!(s.manager().size_of(id, 1), Some(tex_bytes));
        assert_eq!(s.manager().is_unlocked(id, 2), Some(true));
        assert_eq!(s.manager().pool_count(id), 1);
        assert_eq!(s.backend().uses, 2);
        assert_eq!(s.backend().live.len(), 2);
    }
    // Delete, then a new resource reuses the slot once the service has deleted the word.
    c.delete(1).unwrap();
    c.create(3, tex(16)).unwrap();
    c.sync().unwrap();
    assert!(!rig.s().manager().contains(id, 1));
    assert!(!rig.s().backend().live.contains_key(&(id, 1)));
    // Goodbye frees everything and the pool.
    c.goodbye().unwrap();
    rig.wait("goodbye", |s| s.manager().pool_count(id) == 0);
    let s = rig.s();
    assert_eq!(s.manager().resource_count(id), 0);
    assert!(s.backend().live.is_empty());
    assert_eq!(s.stats().errors, 0);
    assert_eq!(s.stats().budget_violations, 0);
}

#[test]
fn eviction_over_the_socket_fails_the_lock_and_recreates() {
    let rig = Rig::new(3 * tex(64).byte_size().unwrap(), PolicyKind::Lru);
    let (mut c, id) = connect(&rig);
    for r in 0..3 {
        c.create(r, tex(64)).unwrap();
        c.unlock(r).unwrap();
    }
    c.create(3, tex(64)).unwrap();
    c.sync().unwrap();
    // The least recently unlocked (0) went; its lock fails, the others' succeed.
    assert!(!c.lock(0).unwrap());
    assert!(c.lock(1).unwrap());
    assert!(!rig.s().backend().live.contains_key(&(id, 0)));
    c.create(0, tex(64)).unwrap();
    let reply = c.sync().unwrap();
    assert_eq!(reply.errors, 0);
    assert!(reply.total_bytes <= reply.budget + reply.locked_bytes);
    assert!(rig.s().manager().contains(id, 0));
}

#[test]
fn unknown_pool_bad_offsets_double_init_bad_unlocks_are_typed_and_counted() {
    let rig = Rig::new(64 * MIB, PolicyKind::default());
    let (mut b, bid) = bystander(&rig);
    let (mut c, id) = connect(&rig);
    c.create(1, tex(8)).unwrap();
    c.sync().unwrap();
    let loc = c.location(1).unwrap();
    let bad = |resource, pool, offset| ClientMessage::Initialize {
        resource,
        pool,
        offset,
        desc: tex(8),
    };
    let page = 4096;
    // Sent by hand over the same stream as the honest messages.
    let mut frames = Vec::new();
    for m in [
        bad(10, 99, 0),                   // unknown shared-memory id
        bad(11, loc.pool, 2),             // unaligned
        bad(12, loc.pool, page * 64),     // out of bounds
        bad(13, loc.pool, u32::MAX - 3),  // out of bounds, at the end of u32
        bad(1, loc.pool, loc.offset + 4), // double initialise
        bad(14, loc.pool, loc.offset),    // a word already holding a live handle
        ClientMessage::Unlock { resource: 77 },
        ClientMessage::Unlock { resource: 1 },
        ClientMessage::Unlock { resource: 1 }, // already unlocked
        ClientMessage::Use { resource: 1 },    // use while unlocked
        ClientMessage::Delete { resource: 78 },
        ClientMessage::ReleasePool { pool: loc.pool }, // still in use
        ClientMessage::Initialize {
            resource: 15,
            pool: loc.pool,
            offset: 8,
            desc: ResourceDesc::Texture {
                width: 8,
                height: 8,
                levels: 9,
                format: TexelFormat::R8,
            },
        },
    ] {
        encode_client(&m, &mut frames);
    }
    let stream = rig_stream(&c);
    (&stream).write_all(&frames).unwrap();
    let reply = c.sync().unwrap();
    assert_eq!(reply.errors, 12);
    let errs = errors_of(&rig, id);
    let expect = [
        "UnknownPool",
        "BadOffset",
        "BadOffset",
        "BadOffset",
        "AlreadyInitialized",
        "HandleInUse",
        "UnknownResource",
        "NotLocked",
        "NotLocked",
        "UnknownResource",
        "PoolInUse",
        "Desc(Levels",
    ];
    assert_eq!(errs.len(), expect.len(), "{errs:#?}");
    for (e, x) in errs.iter().zip(expect) {
        assert!(e.starts_with(x), "{e} is not {x}");
    }
    // The client is still served (its errors under the limit), and resource 1 is intact;
    // no object was made for a refused initialise (the bystander's 8 and resource 1 only).
    assert_eq!(rig.s().backend().created, 9);
    assert_eq!(rig.s().stats().dropped, 0);
    assert_eq!(rig.s().manager().resource_count(id), 1);
    assert!(rig.s().backend().live.contains_key(&(id, 1)));
    check_bystander(&rig, &mut b, bid);
}

/// The stream under a channel client, for writing frames by hand.
fn rig_stream(c: &ChannelClient) -> UnixStream {
    // A second handle on the same connection: the service sees one ordered byte stream.
    let fd = c.stream_fd().try_clone_to_owned().unwrap();
    UnixStream::from(fd)
}

#[test]
fn truncated_oversized_and_unknown_frames_drop_only_that_client() {
    let rig = Rig::new(64 * MIB, PolicyKind::default());
    let (mut b, bid) = bystander(&rig);
    let cases: Vec<(Vec<u8>, &str)> = vec![
        // Length 3: version, kind 4 (unlock) and one byte of its four.
        (vec![3, 0, 0, 0, 1, 4, 9], "Truncated"),
        ((MAX_FRAME + 1).to_le_bytes().to_vec(), "Oversized"),
        (u32::MAX.to_le_bytes().to_vec(), "Oversized"),
        (vec![2, 0, 0, 0, 9, 4], "Version"),
        (vec![2, 0, 0, 0, 1, 99], "UnknownKind"),
        (vec![3, 0, 0, 0, 1, 8, 0], "Trailing"),
    ];
    for (bytes, what) in cases {
        let (c, id) = connect(&rig);
        let mut s = rig_stream(&c);
        s.write_all(&bytes).unwrap();
        rig.wait(what, |s| !s.clients().contains(&id));
        let errs = errors_of(&rig, id);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with(&format!("Protocol({what}")), "{errs:?}");
        drop(c);
    }
    assert_eq!(rig.s().stats().dropped, 6);
    check_bystander(&rig, &mut b, bid);
}

#[test]
fn garbage_then_disconnect_frees_the_client() {
    let rig = Rig::new(64 * MIB, PolicyKind::default());
    let (mut b, bid) = bystander(&rig);
    let (mut c, id) = connect(&rig);
    for r in 0..4 {
        c.create(r, tex(32)).unwrap();
    }
    c.sync().unwrap();
    assert_eq!(rig.s().manager().resource_count(id), 4);
    let mut s = rig_stream(&c);
    // A frame cut short, then the client vanishes.
    s.write_all(&[12, 0, 0, 0, 1, 3, 1, 2]).unwrap();
    drop(s);
    drop(c);
    rig.wait("disconnect", |s| !s.clients().contains(&id));
    let s = rig.s();
    assert_eq!(s.manager().resource_count(id), 0);
    assert_eq!(s.manager().pool_count(id), 0);
    assert!(s.backend().live.keys().all(|&(c, _)| c != id));
    drop(s);
    // Pure garbage from a raw connection: dropped at the first frame.
    let mut g = raw(&rig, &ClientMessage::Sync { token: 1 });
    let _ = g.write_all(&[0xff; 64]);
    rig.wait("garbage dropped", |s| s.stats().dropped >= 1);
    check_bystander(&rig, &mut b, bid);
}

fn send_with_fd(s: &UnixStream, frame: &[u8], fd: std::os::fd::BorrowedFd<'_>) {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
    let n = sendmsg(s, &[IoSlice::new(frame)], &mut control, SendFlags::empty()).unwrap();
    assert_eq!(n, frame.len());
}

#[test]
fn pool_registrations_without_fd_unsealed_or_twice() {
    let rig = Rig::new(64 * MIB, PolicyKind::default());
    let (mut b, bid) = bystander(&rig);
    // A file that can shrink (a regular file) is refused, the client kept.
    let (c, id) = connect(&rig);
    let s = rig_stream(&c);
    let file = tempfile::tempfile().unwrap();
    file.set_len(4096).unwrap();
    let mut frame = Vec::new();
    encode_client(&ClientMessage::RegisterPool { pool: 5 }, &mut frame);
    send_with_fd(&s, &frame, file.as_fd());
    // The same pool id twice: the second refused.
    let mem = SharedMemory::create(4096, false).unwrap();
    let mut frame = Vec::new();
    encode_client(&ClientMessage::RegisterPool { pool: 6 }, &mut frame);
    send_with_fd(&s, &frame, mem.fd());
    send_with_fd(&s, &frame, mem.fd());
    rig.wait("two errors", |s| s.client_errors(id) == Some(2));
    let errs = errors_of(&rig, id);
    assert!(errs[0].starts_with("NotSealed"), "{errs:?}");
    assert!(errs[1].starts_with("PoolExists"), "{errs:?}");
    assert_eq!(rig.s().manager().pool_count(id), 1);
    // A registration without its fd cannot be trusted: dropped, its pool unmapped.
    let mut frame = Vec::new();
    encode_client(&ClientMessage::RegisterPool { pool: 7 }, &mut frame);
    (&s).write_all(&frame).unwrap();
    rig.wait("dropped", |s| !s.clients().contains(&id));
    assert!(errors_of(&rig, id)[0].starts_with("MissingFd"));
    assert_eq!(rig.s().manager().pool_count(id), 0);
    // Fds without registrations: dropped once more arrive than a client may hold.
    let (c2, id2) = connect(&rig);
    let s2 = rig_stream(&c2);
    for _ in 0..12 {
        let mut frame = Vec::new();
        encode_client(&ClientMessage::Sync { token: 1 }, &mut frame);
        if sendmsg_fd(&s2, &frame, mem.fd()).is_err() {
            break;
        }
    }
    rig.wait("fd flood dropped", |s| !s.clients().contains(&id2));
    assert!(errors_of(&rig, id2)[0].starts_with("TooManyFds"));
    drop((c, c2));
    check_bystander(&rig, &mut b, bid);
}

fn sendmsg_fd(
    s: &UnixStream,
    frame: &[u8],
    fd: std::os::fd::BorrowedFd<'_>,
) -> rustix::io::Result<usize> {
    let fds = [fd];
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    control.push(SendAncillaryMessage::ScmRights(&fds));
    sendmsg(s, &[IoSlice::new(frame)], &mut control, SendFlags::NOSIGNAL)
}

#[test]
fn scribbling_on_its_own_words_harms_only_itself() {
    let tex_bytes = tex(64).byte_size().unwrap();
    let rig = Rig::new(12 * tex_bytes, PolicyKind::Lru);
    let (mut b, bid) = bystander(&rig);
    let (mut c, id) = connect(&rig);
    for r in 0..8 {
        c.create(r, tex(64)).unwrap();
    }
    c.sync().unwrap();
    // Scribble: 0 (deleted), 1 (unlocked), a huge lock count, garbage.
    for (r, v) in [(0u32, 0u32), (1, 1), (2, u32::MAX), (3, 0xdead_beef)] {
        let h = c.handle(r).unwrap();
        h.memory()
            .word(h.offset())
            .unwrap()
            .store(v, std::sync::atomic::Ordering::Relaxed);
    }
    for r in 0..8 {
        c.unlock(r).unwrap();
    }
    for r in 0..8 {
        c.unlock(r).unwrap();
    }
    let reply = c.sync().unwrap();
    // Word 0 and 1: every unlock refused; others: the second unlock of each honest word.
    assert!(reply.errors >= 2, "{reply:?}");
    assert!(reply.errors <= 16);
    let errs = errors_of(&rig, id);
    assert!(errs.iter().all(|e| e.starts_with("NotLocked")), "{errs:?}");
    // Over budget now: memory pressure evicts what is unlocked; never the bystander's locked.
    rig.s().set_budget(0);
    {
        let s = rig.s();
        assert_eq!(s.stats().budget_violations, 0);
        for r in (1..8).step_by(2) {
            assert!(
                s.manager().contains(bid, r),
                "bystander's locked {r} deleted"
            );
        }
    }
    rig.s().set_budget(64 * MIB);
    // The bystander's unlocked ones may have gone under the zero budget: re-create them.
    for r in (0..8).step_by(2) {
        if !b.lock(r).unwrap() {
            b.create(r, tex(64)).unwrap();
        }
    }
    b.sync().unwrap();
    for r in (0..8).step_by(2) {
        b.unlock(r).unwrap();
    }
    check_bystander(&rig, &mut b, bid);
}

#[test]
fn too_many_errors_drop_the_client() {
    let rig = Rig::new(64 * MIB, PolicyKind::default());
    let (mut b, bid) = bystander(&rig);
    let (c, id) = connect(&rig);
    let mut frames = Vec::new();
    for r in 0..40 {
        encode_client(&ClientMessage::Unlock { resource: r }, &mut frames);
    }
    rig_stream(&c).write_all(&frames).unwrap();
    rig.wait("dropped", |s| !s.clients().contains(&id));
    let errs = errors_of(&rig, id);
    assert!(
        errs.last().unwrap().starts_with("TooManyErrors"),
        "{errs:?}"
    );
    assert_eq!(errs.len(), 17, "{errs:?}");
    check_bystander(&rig, &mut b, bid);
}
