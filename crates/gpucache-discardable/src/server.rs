//! The service end of the channel: one thread polls a Unix-domain listener and every client
//! connection (rustix `poll`, no async runtime), decodes each client's frames in order, takes
//! the memfds that arrive with SCM_RIGHTS into [`ServiceDiscardableManager::register_pool_fd`],
//! and hands creation, use and (batched per context) deletion of the real objects to a
//! [`Backend`]. The thread that calls [`Server::turn`] is the only one touching the back end,
//! so a GL back end keeps its context current there.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpucache::PolicyKind;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags};

use crate::proto::{self, ClientMessage, ResourceDesc, SyncReply};
use crate::{ClientId, ContextId, Deleted, Error, ResourceId, ServiceDiscardableManager};

/// Creates, uses and deletes the real objects behind the resources (GL textures and buffers,
/// or plain accounting without GL). Called only from the thread running [`Server::turn`].
pub trait Backend {
    /// Creates the object; returns its size in bytes (what the budget counts).
    fn create(
        &mut self,
        client: ClientId,
        resource: ResourceId,
        desc: &ResourceDesc,
    ) -> Result<u64, Error>;
    /// Draws with (or otherwise uses) the object; the service has checked that it is locked.
    fn use_resource(&mut self, client: ClientId, resource: ResourceId) -> Result<(), Error>;
    /// Deletes the objects of one context (one call per context per batch).
    fn delete(&mut self, context: ContextId, batch: &[Deleted]);
}

/// A back end without GL: it keeps the live objects' sizes, so that a test can check what
/// exists, and counts uses and delete batches.
#[derive(Debug, Default)]
pub struct CountingBackend {
    /// Live objects: (client, resource) → size.
    pub live: BTreeMap<(ClientId, ResourceId), u64>,
    /// Objects created.
    pub created: u64,
    /// Uses served.
    pub uses: u64,
    /// Calls of `delete`.
    pub delete_batches: u64,
}

impl Backend for CountingBackend {
    fn create(&mut self, c: ClientId, r: ResourceId, desc: &ResourceDesc) -> Result<u64, Error> {
        let size = desc.byte_size()?;
        self.live.insert((c, r), size);
        self.created += 1;
        Ok(size)
    }
    fn use_resource(&mut self, c: ClientId, r: ResourceId) -> Result<(), Error> {
        if !self.live.contains_key(&(c, r)) {
            return Err(Error::Backend(format!("no object for {c}/{r}")));
        }
        self.uses += 1;
        Ok(())
    }
    fn delete(&mut self, _: ContextId, batch: &[Deleted]) {
        self.delete_batches += 1;
        for d in batch {
            self.live.remove(&(d.client, d.resource));
        }
    }
}

/// How the service runs.
#[derive(Clone, Copy, Debug)]
pub struct ServerConfig {
    /// The byte budget over all clients.
    pub budget: u64,
    /// The eviction order.
    pub policy: PolicyKind,
    /// Refused messages after which a client is dropped.
    pub max_errors: u32,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            budget: 64 << 20,
            policy: PolicyKind::default(),
            max_errors: 64,
        }
    }
}

/// The service's channel counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// Clients connected now.
    pub connected: usize,
    /// Connections accepted (clients are numbered 1, 2, ... in this order).
    pub accepted: u64,
    /// Messages decoded.
    pub messages: u64,
    /// Messages refused (each a typed error for its client).
    pub errors: u64,
    /// Clients dropped for a protocol error or too many refused messages.
    pub dropped: u64,
    /// Clients gone (goodbye, end of stream, or dropped).
    pub disconnected: u64,
    /// Times the total was found over budget + locked after a message (must stay 0).
    pub budget_violations: u64,
}

/// Fds a connection may hold ahead of their pool registrations.
const MAX_PENDING_FDS: usize = 8;
/// Bytes of one `recvmsg`.
const RECV_BYTES: usize = 16 * 1024;
/// Bytes read from one connection per turn (the others get their turn).
const READ_PER_TURN: usize = 64 * 1024;
/// Reply bytes a client may leave unread before it is dropped.
const MAX_UNSENT: usize = 64 * 1024;
/// Errors (and syncs) kept for [`Server::take_errors`] (and [`Server::take_syncs`]).
const ERROR_LOG: usize = 1024;

struct Conn {
    stream: UnixStream,
    rbuf: Vec<u8>,
    fds: VecDeque<OwnedFd>,
    wbuf: Vec<u8>,
    errors: u32,
}

type DeleteQueue = Arc<Mutex<Vec<(ContextId, Vec<Deleted>)>>>;

/// The service: a listener, its clients, the manager and the back end.
pub struct Server<B: Backend> {
    listener: UnixListener,
    manager: ServiceDiscardableManager,
    deleted: DeleteQueue,
    backend: B,
    conns: BTreeMap<ClientId, Conn>,
    next_client: ClientId,
    max_errors: u32,
    stats: ServerStats,
    errors: Vec<(ClientId, Error)>,
    syncs: VecDeque<(ClientId, SyncReply)>,
    /// The receive buffer, reused.
    rx: Vec<u8>,
}

impl<B: Backend> std::fmt::Debug for Server<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("stats", &self.stats)
            .field("manager", &self.manager)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Server<B> {
    /// Listens on `path` (removed first if a stale socket is there).
    pub fn bind(path: &Path, config: ServerConfig, backend: B) -> Result<Self, Error> {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path)?;
        Self::from_listener(listener, config, backend)
    }

    /// Serves on a listener already bound.
    pub fn from_listener(
        listener: UnixListener,
        config: ServerConfig,
        backend: B,
    ) -> Result<Self, Error> {
        listener.set_nonblocking(true)?;
        let mut manager = ServiceDiscardableManager::new(config.budget, config.policy);
        let deleted: DeleteQueue = Arc::default();
        let queue = deleted.clone();
        manager.set_delete_callback(Box::new(move |ctx, batch: &[Deleted]| {
            if let Ok(mut q) = queue.lock() {
                q.push((ctx, batch.to_vec()));
            }
        }));
        Ok(Server {
            listener,
            manager,
            deleted,
            backend,
            conns: BTreeMap::new(),
            next_client: 1,
            max_errors: config.max_errors,
            stats: ServerStats::default(),
            errors: Vec::new(),
            syncs: VecDeque::new(),
            rx: Vec::new(),
        })
    }

    /// The manager (budget, counts, what is tracked).
    pub fn manager(&self) -> &ServiceDiscardableManager {
        &self.manager
    }

    /// The back end.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The channel's counts.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            connected: self.conns.len(),
            ..self.stats
        }
    }

    /// Refused messages since the last call: (client, error), the most recent 1,024 (`ERROR_LOG`).
    pub fn take_errors(&mut self) -> Vec<(ClientId, Error)> {
        std::mem::take(&mut self.errors)
    }

    /// The syncs served since the last call, in order: (client, the reply, with its token and
    /// the counts at that moment); the most recent 1,024 (`ERROR_LOG`). A demo reads frame
    /// boundaries (and what its clients put in the tokens) from them.
    pub fn take_syncs(&mut self) -> Vec<(ClientId, SyncReply)> {
        self.syncs.drain(..).collect()
    }

    /// Refused messages of `client` so far.
    pub fn client_errors(&self, client: ClientId) -> Option<u32> {
        self.conns.get(&client).map(|c| c.errors)
    }

    /// Ids of the clients connected now.
    pub fn clients(&self) -> Vec<ClientId> {
        self.conns.keys().copied().collect()
    }

    /// Changes the budget and enforces it.
    pub fn set_budget(&mut self, budget: u64) {
        self.manager.set_budget(budget);
        self.after_change();
    }

    /// Waits up to `timeout` for activity, then accepts new clients and serves every message
    /// that arrived. Returns the number of messages served.
    pub fn turn(&mut self, timeout: Duration) -> Result<u64, Error> {
        let before = self.stats.messages;
        let ready = {
            let ids: Vec<ClientId> = self.conns.keys().copied().collect();
            let mut fds = Vec::with_capacity(ids.len() + 1);
            fds.push(PollFd::new(&self.listener, PollFlags::IN));
            for c in self.conns.values() {
                let mut ev = PollFlags::IN;
                if !c.wbuf.is_empty() {
                    ev |= PollFlags::OUT;
                }
                fds.push(PollFd::new(&c.stream, ev));
            }
            let ts = Timespec::try_from(timeout).unwrap_or(Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            });
            match poll(&mut fds, Some(&ts)) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => return Ok(0),
                Err(e) => return Err(io::Error::from(e).into()),
            }
            let listen = !fds[0].revents().is_empty();
            let ready: Vec<(ClientId, PollFlags)> = ids
                .iter()
                .zip(&fds[1..])
                .filter(|(_, f)| !f.revents().is_empty())
                .map(|(&id, f)| (id, f.revents()))
                .collect();
            (listen, ready)
        };
        if ready.0 {
            self.accept_all()?;
        }
        for (id, ev) in ready.1 {
            if ev.contains(PollFlags::OUT) {
                self.flush_replies(id);
            }
            if ev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                self.read_client(id);
            }
        }
        Ok(self.stats.messages - before)
    }

    fn accept_all(&mut self) -> Result<(), Error> {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(true)?;
                    let id = self.next_client;
                    self.next_client = self.next_client.wrapping_add(1).max(1);
                    self.manager.add_client(id);
                    self.conns.insert(
                        id,
                        Conn {
                            stream,
                            rbuf: Vec::new(),
                            fds: VecDeque::new(),
                            wbuf: Vec::new(),
                            errors: 0,
                        },
                    );
                    self.stats.accepted += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A connection that failed before we took it (ECONNABORTED and the like).
                Err(_) => return Ok(()),
            }
        }
    }

    /// Reads what the client sent (bytes and fds) and serves each whole frame in order.
    fn read_client(&mut self, id: ClientId) {
        let mut read = 0;
        let mut buf = std::mem::take(&mut self.rx);
        buf.resize(RECV_BYTES, 0);
        self.read_into(id, &mut buf, &mut read);
        self.rx = buf;
    }

    fn read_into(&mut self, id: ClientId, buf: &mut [u8], read: &mut usize) {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_PENDING_FDS))];
        while *read < READ_PER_TURN {
            let Some(conn) = self.conns.get_mut(&id) else {
                return;
            };
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let r = recvmsg(
                &conn.stream,
                &mut [IoSliceMut::new(buf)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT,
            );
            let msg = match r {
                Ok(m) => m,
                Err(rustix::io::Errno::AGAIN) => return,
                Err(rustix::io::Errno::INTR) => continue,
                // Reset by a dying client: it is gone.
                Err(_) => return self.disconnect(id, None),
            };
            for m in control.drain() {
                if let RecvAncillaryMessage::ScmRights(fds) = m {
                    conn.fds.extend(fds);
                }
            }
            if msg.flags.contains(ReturnFlags::CTRUNC) || conn.fds.len() > MAX_PENDING_FDS {
                let n = conn.fds.len();
                return self.disconnect(id, Some(Error::TooManyFds(n)));
            }
            if msg.bytes == 0 {
                return self.disconnect(id, None);
            }
            *read += msg.bytes;
            conn.rbuf.extend_from_slice(&buf[..msg.bytes]);
            if !self.serve_frames(id) {
                return;
            }
        }
    }

    /// Serves every whole frame in the client's buffer; `false` once the client is gone.
    fn serve_frames(&mut self, id: ClientId) -> bool {
        let mut at = 0;
        loop {
            let Some(conn) = self.conns.get_mut(&id) else {
                return false;
            };
            let decoded = proto::decode_client(&conn.rbuf[at..]);
            let (msg, used) = match decoded {
                Ok(Some(x)) => x,
                Ok(None) => {
                    conn.rbuf.drain(..at);
                    return true;
                }
                Err(e) => {
                    self.disconnect(id, Some(e.into()));
                    return false;
                }
            };
            at += used;
            self.stats.messages += 1;
            if msg == ClientMessage::Goodbye {
                self.disconnect(id, None);
                return false;
            }
            let fd = match msg {
                ClientMessage::RegisterPool { .. } => conn.fds.pop_front(),
                _ => None,
            };
            let result = self.serve(id, msg, fd);
            self.after_change();
            if let Err(e) = result {
                let fatal = matches!(e, Error::MissingFd(_));
                self.stats.errors += 1;
                let Some(conn) = self.conns.get_mut(&id) else {
                    return false;
                };
                conn.errors += 1;
                let count = conn.errors;
                if fatal || count > self.max_errors {
                    let e = if fatal {
                        e
                    } else {
                        Error::TooManyErrors(count)
                    };
                    self.disconnect(id, Some(e));
                    return false;
                }
                self.log(id, e);
            }
        }
    }

    fn serve(
        &mut self,
        id: ClientId,
        msg: ClientMessage,
        fd: Option<OwnedFd>,
    ) -> Result<(), Error> {
        match msg {
            ClientMessage::RegisterPool { pool } => {
                let fd = fd.ok_or(Error::MissingFd(pool))?;
                self.manager.register_pool_fd(id, pool, fd)
            }
            ClientMessage::ReleasePool { pool } => self.manager.release_pool(id, pool),
            ClientMessage::Initialize {
                resource,
                pool,
                offset,
                desc,
            } => {
                desc.validate()?;
                // Every check before the object exists: a hostile client cannot make the
                // service create (and drop) objects with bad handles.
                self.manager.check_initialize(id, resource, pool, offset)?;
                let size = self.backend.create(id, resource, &desc)?;
                let r = self
                    .manager
                    .initialize(id, id, resource, pool, offset, size);
                if r.is_err() {
                    let gone = Deleted {
                        client: id,
                        resource,
                        size,
                    };
                    self.backend.delete(id, &[gone]);
                }
                r
            }
            ClientMessage::Unlock { resource } => self.manager.unlock(id, resource),
            ClientMessage::Delete { resource } => self.manager.delete(id, resource),
            ClientMessage::Use { resource } => match self.manager.word_of(id, resource) {
                None => Err(Error::UnknownResource {
                    client: id,
                    resource,
                }),
                Some(w) if w < crate::word::LOCKED_ONCE => Err(Error::NotLocked {
                    client: id,
                    resource,
                    word: w,
                }),
                Some(_) => self.backend.use_resource(id, resource),
            },
            ClientMessage::Sync { token } => {
                let s = self.manager.stats();
                let errors = self.conns.get(&id).map_or(0, |c| c.errors);
                let reply = SyncReply {
                    token,
                    budget: s.budget,
                    total_bytes: s.total_bytes,
                    locked_bytes: s.locked_bytes,
                    evictions: s.evictions,
                    errors,
                };
                if let Some(c) = self.conns.get_mut(&id) {
                    proto::encode_reply(&reply, &mut c.wbuf);
                }
                if self.syncs.len() >= ERROR_LOG {
                    self.syncs.pop_front();
                }
                self.syncs.push_back((id, reply));
                self.flush_replies(id);
                Ok(())
            }
            ClientMessage::Goodbye => Ok(()),
        }
    }

    /// Hands the manager's queued deletions to the back end and checks the budget.
    fn after_change(&mut self) {
        let batches = match self.deleted.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(_) => Vec::new(),
        };
        for (ctx, batch) in batches {
            self.backend.delete(ctx, &batch);
        }
        let s = self.manager.stats();
        if s.total_bytes > s.budget.saturating_add(s.locked_bytes) {
            self.stats.budget_violations += 1;
        }
    }

    fn flush_replies(&mut self, id: ClientId) {
        let Some(c) = self.conns.get_mut(&id) else {
            return;
        };
        while !c.wbuf.is_empty() {
            match c.stream.write(&c.wbuf) {
                Ok(0) => break,
                Ok(n) => {
                    c.wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                // The client went away; its end of stream comes through the read side.
                Err(_) => {
                    c.wbuf.clear();
                    break;
                }
            }
        }
        if c.wbuf.len() > MAX_UNSENT {
            let e = Error::TooManyErrors(c.errors);
            self.disconnect(id, Some(e));
        }
    }

    fn log(&mut self, id: ClientId, e: Error) {
        if self.errors.len() >= ERROR_LOG {
            self.errors.remove(0);
        }
        self.errors.push((id, e));
    }

    /// The client is gone (cleanly, by death, or dropped for `why`): its resources are
    /// deleted through the back end and its pools unmapped.
    fn disconnect(&mut self, id: ClientId, why: Option<Error>) {
        if self.conns.remove(&id).is_none() {
            return;
        }
        self.stats.disconnected += 1;
        if let Some(e) = why {
            self.stats.dropped += 1;
            self.stats.errors += 1;
            self.log(id, e);
        }
        let _ = self.manager.remove_client(id);
        self.after_change();
    }
}

impl<B: Backend> Drop for Server<B> {
    fn drop(&mut self) {
        // Every object goes through the back end while it (and its GL context) still lives.
        self.manager.shutdown();
        self.after_change();
    }
}
