//! The client end of the channel: a [`ClientDiscardableManager`] whose new pools travel to the
//! service as memfds (SCM_RIGHTS) and whose initialise / use / unlock / delete go over one
//! Unix-domain stream in the order they were made. Locks never leave the process.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::os::unix::net::UnixStream;
use std::path::Path;

use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

use crate::proto::{self, ClientMessage, ResourceDesc, SyncReply};
use crate::{ClientDiscardableManager, ClientHandle, DiscardableHandle, Error, ResourceId};

/// Bytes of messages buffered before they are written.
const BATCH: usize = 8 * 1024;

/// A client of the service over a Unix-domain socket.
#[derive(Debug)]
pub struct ChannelClient {
    stream: UnixStream,
    manager: ClientDiscardableManager,
    out: Vec<u8>,
    rbuf: Vec<u8>,
    resources: HashMap<ResourceId, (ClientHandle, DiscardableHandle)>,
    next_token: u64,
}

impl ChannelClient {
    /// Connects to the service listening at `path`.
    pub fn connect(path: &Path) -> Result<Self, Error> {
        Ok(Self::from_stream(UnixStream::connect(path)?))
    }

    /// A client on a connected stream.
    pub fn from_stream(stream: UnixStream) -> Self {
        ChannelClient {
            stream,
            manager: ClientDiscardableManager::default(),
            out: Vec::new(),
            rbuf: Vec::new(),
            resources: HashMap::new(),
            next_token: 1,
        }
    }

    fn push(&mut self, m: ClientMessage) -> Result<(), Error> {
        proto::encode_client(&m, &mut self.out);
        if self.out.len() >= BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered messages.
    pub fn flush(&mut self) -> Result<(), Error> {
        if !self.out.is_empty() {
            self.stream.write_all(&self.out)?;
            self.out.clear();
        }
        Ok(())
    }

    /// Tells the service about pools made or released since the last call: a new pool's
    /// frame carries its memfd (after everything buffered before it).
    fn sync_pools(&mut self) -> Result<(), Error> {
        for pool in self.manager.take_released_pools() {
            self.push(ClientMessage::ReleasePool { pool })?;
        }
        for pool in self.manager.take_new_pools() {
            self.flush()?;
            let mut frame = Vec::new();
            proto::encode_client(&ClientMessage::RegisterPool { pool }, &mut frame);
            let fd = self
                .manager
                .pool_fd(pool)
                .ok_or(Error::UnknownPool { client: 0, pool })?;
            let fds = [fd];
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
            let mut control = SendAncillaryBuffer::new(&mut space);
            control.push(SendAncillaryMessage::ScmRights(&fds));
            let mut sent = 0;
            while sent < frame.len() {
                let r = if sent == 0 {
                    sendmsg(
                        &self.stream,
                        &[IoSlice::new(&frame)],
                        &mut control,
                        SendFlags::NOSIGNAL,
                    )
                } else {
                    sendmsg(
                        &self.stream,
                        &[IoSlice::new(&frame[sent..])],
                        &mut SendAncillaryBuffer::default(),
                        SendFlags::NOSIGNAL,
                    )
                };
                match r {
                    Ok(n) => sent += n,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(io::Error::from(e).into()),
                }
            }
        }
        Ok(())
    }

    /// Creates `resource` on the service, locked once. A resource whose earlier handle the
    /// service deleted (a failed lock) is created anew under the same id.
    pub fn create(&mut self, resource: ResourceId, desc: ResourceDesc) -> Result<(), Error> {
        if let Some((old, h)) = self.resources.get(&resource) {
            if !h.is_deleted() {
                return Err(Error::AlreadyInitialized {
                    client: 0,
                    resource,
                });
            }
            let id = old.id;
            self.resources.remove(&resource);
            self.manager.free(id)?;
        }
        let h = self.manager.initialize()?;
        let handle = self
            .manager
            .handle(h.id)
            .ok_or(Error::UnknownHandle(h.id))?;
        self.sync_pools()?;
        self.push(ClientMessage::Initialize {
            resource,
            pool: h.pool,
            offset: h.offset,
            desc,
        })?;
        self.resources.insert(resource, (h, handle));
        Ok(())
    }

    /// Locks through shared memory: `Ok(false)` when the service deleted the resource (then
    /// [`create`](Self::create) it again).
    pub fn lock(&self, resource: ResourceId) -> Result<bool, Error> {
        let (_, h) = self
            .resources
            .get(&resource)
            .ok_or(Error::UnknownResource {
                client: 0,
                resource,
            })?;
        Ok(h.lock())
    }

    /// Asks the service to draw with the (locked) resource.
    pub fn use_resource(&mut self, resource: ResourceId) -> Result<(), Error> {
        self.push(ClientMessage::Use { resource })
    }

    /// Drops one lock, after the uses sent before.
    pub fn unlock(&mut self, resource: ResourceId) -> Result<(), Error> {
        self.push(ClientMessage::Unlock { resource })
    }

    /// Deletes the resource; its slot is reused once the service has deleted the handle.
    /// It is locked first, so that the service cannot evict it while the delete travels; a
    /// resource the service already deleted is only forgotten here (no message).
    pub fn delete(&mut self, resource: ResourceId) -> Result<(), Error> {
        let (h, handle) = self
            .resources
            .remove(&resource)
            .ok_or(Error::UnknownResource {
                client: 0,
                resource,
            })?;
        if handle.lock() {
            self.push(ClientMessage::Delete { resource })?;
        }
        self.manager.free(h.id)?;
        self.sync_pools()
    }

    /// The resource's handle (its word in shared memory).
    pub fn handle(&self, resource: ResourceId) -> Option<&DiscardableHandle> {
        self.resources.get(&resource).map(|(_, h)| h)
    }

    /// The resource's (pool, offset) as sent to the service.
    pub fn location(&self, resource: ResourceId) -> Option<ClientHandle> {
        self.resources.get(&resource).map(|(h, _)| *h)
    }

    /// The socket (a test writes frames of its own on it).
    pub fn stream_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.stream)
    }

    /// The client manager (pools, free lists).
    pub fn manager(&self) -> &ClientDiscardableManager {
        &self.manager
    }

    /// Sends everything buffered and waits until the service has served it; its counts.
    pub fn sync(&mut self) -> Result<SyncReply, Error> {
        let token = self.next_token;
        self.next_token += 1;
        self.sync_with(token)
    }

    /// [`sync`](Self::sync) with a token of the caller's (the service keeps the tokens it
    /// served for its owner to read: a demo's frame numbers).
    pub fn sync_with(&mut self, token: u64) -> Result<SyncReply, Error> {
        self.push(ClientMessage::Sync { token })?;
        self.flush()?;
        let mut buf = [0u8; 256];
        loop {
            if let Some((reply, used)) = proto::decode_reply(&self.rbuf)? {
                self.rbuf.drain(..used);
                if reply.token == token {
                    return Ok(reply);
                }
                continue;
            }
            let n = match self.stream.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if n == 0 {
                return Err(Error::Closed);
            }
            self.rbuf.extend_from_slice(&buf[..n]);
        }
    }

    /// Says goodbye: the service deletes every resource of this client and its pools.
    pub fn goodbye(mut self) -> Result<(), Error> {
        self.push(ClientMessage::Goodbye)?;
        self.flush()
    }
}
