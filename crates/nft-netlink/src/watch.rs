//! Watching nftables for changes made by other programs: a socket subscribed to
//! `NFNLGRP_NFTABLES` (the shared core's socket), parsed by [`nft_wire::events`]: the
//! transactions that touched our tables. One whose generation is not one our own
//! commits produced is foreign (the engine tells, and repairs its tables).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nft_model::TableRef;
pub use nft_wire::events::{
    EventParser, Heard, Poll, Touch, NFNLGRP_NFTABLES, NFTA_GEN_PROC_NAME, NFTA_GEN_PROC_PID,
};
use nl_core::{NlSocket, SockConfig, NETLINK_NETFILTER};

/// A socket subscribed to nftables notifications, in the calling thread's namespace.
pub struct Watcher {
    sock: NlSocket,
    parser: EventParser,
}

impl Watcher {
    pub fn open(tables: Vec<TableRef>) -> std::io::Result<Watcher> {
        let sock = NlSocket::open(
            NETLINK_NETFILTER,
            &SockConfig {
                groups: vec![NFNLGRP_NFTABLES],
                nonblocking: true,
                connect: false,
                rcvbuf: Some(4 << 20),
                // Best effort: a smaller buffer only means an overflow (a repair) sooner.
                strict_buffers: false,
                recv_buf_len: 1 << 20,
                ..SockConfig::default()
            },
        )
        .map_err(|e| e.source)?;
        Ok(Watcher {
            sock,
            parser: EventParser::new(tables),
        })
    }

    /// A handle on this socket's subscription, usable from another thread (the socket
    /// duplicated): see [`Membership`].
    pub fn membership(&self) -> std::io::Result<Membership> {
        // SAFETY: the descriptor is this watcher's socket, open while `self` lives.
        let fd = unsafe { BorrowedFd::borrow_raw(self.sock.as_raw_fd()) };
        Ok(Membership {
            fd: fd.try_clone_to_owned()?,
        })
    }

    /// Block until a notification arrives (then read every pending one, as
    /// [`Watcher::poll`]) or `stop` becomes readable (None). An interrupted wait is
    /// resumed; another error of the wait is returned.
    pub fn wait(&mut self, stop: BorrowedFd) -> std::io::Result<Option<Poll>> {
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfd entries, the length given is theirs.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if fds[1].revents != 0 {
                return Ok(None);
            }
            if fds[0].revents != 0 {
                return Ok(Some(self.poll()));
            }
        }
    }

    /// Read every pending notification (never blocks, bounded per call). Returns every
    /// transaction heard, those that touched our tables, and whether notifications were
    /// lost (then anything may have happened).
    pub fn poll(&mut self) -> Poll {
        let mut out = Poll::default();
        for _ in 0..1024 {
            match self.sock.recv() {
                Ok(0) => break,
                Ok(_) => self.parser.feed(self.sock.data(), &mut out),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if nl_core::is_enobufs(&e) => {
                    out.overflow = true;
                    self.parser.lost();
                }
                Err(e) => {
                    tracing::warn!(error = %e, "nftables event socket");
                    break;
                }
            }
        }
        out
    }
}

/// A watcher's subscription to `NFNLGRP_NFTABLES`, dropped and taken again around the
/// engine's own commits. While any socket on the machine is subscribed, the kernel builds
/// a notification for every object and element a commit touches (the listener mask it
/// asks, `nfnetlink_has_listeners`, is per protocol, not per network namespace); our own
/// commits need none, since the engine knows what it committed and the generation it
/// produced. A commit by another program while the subscription is dropped shows in the
/// generation the engine reads once it is taken again.
pub struct Membership {
    fd: OwnedFd,
}

impl Membership {
    /// Subscribe (`true`) or unsubscribe (`false`).
    pub fn set(&self, on: bool) -> std::io::Result<()> {
        let op = if on {
            libc::NETLINK_ADD_MEMBERSHIP
        } else {
            libc::NETLINK_DROP_MEMBERSHIP
        };
        let group: u32 = NFNLGRP_NFTABLES;
        // SAFETY: a valid socket descriptor; the option value is a u32 that outlives
        // the call, its size given.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_fd().as_raw_fd(),
                libc::SOL_NETLINK,
                op,
                (&group as *const u32).cast(),
                std::mem::size_of::<u32>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}
