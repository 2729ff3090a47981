//! Conntrack events: a socket subscribed to NEW and DESTROY notifications
//! (`NFNLGRP_CONNTRACK_NEW`, `NFNLGRP_CONNTRACK_DESTROY`; never UPDATE) in the calling
//! thread's network namespace, with a BPF filter that keeps only UDP entries
//! ([`crate::bpf`]), a large forced receive buffer, and loss reported (ENOBUFS ->
//! [`Received::Lost`]: the caller re-seeds). The parser ([`parse_event`]) is pure.
//! See docs/conntrack.md, "Events".

use crate::flow::Flow;
use crate::wire::{parse_entry, MSG_CT_DELETE, MSG_CT_NEW};
use crate::{Error, IPPROTO_UDP};
use nl_core::{is_enobufs, is_timeout, NlMsgIter, NlSocket, SockConfig, NETLINK_NETFILTER};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

/// `enum nfnetlink_groups` (uapi `linux/netfilter/nfnetlink.h`).
pub const NFNLGRP_CONNTRACK_NEW: u32 = 1;
pub const NFNLGRP_CONNTRACK_UPDATE: u32 = 2;
pub const NFNLGRP_CONNTRACK_DESTROY: u32 = 3;

/// One conntrack event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowEvent {
    /// An entry was created (confirmed: its first packet passed, or a ctnetlink
    /// insert). Its reply tuple is the one the entry has then (DNAT applied).
    New(Flow),
    /// An entry was deleted or expired.
    Destroy(Flow),
}

impl FlowEvent {
    pub fn flow(&self) -> &Flow {
        match self {
            FlowEvent::New(f) | FlowEvent::Destroy(f) => f,
        }
    }
}

/// Parse one netlink message (header included) of a conntrack event: `New` for
/// IPCTNL_MSG_CT_NEW, `Destroy` for IPCTNL_MSG_CT_DELETE, of any protocol with ports.
/// `None` for anything else (another message type, a message too short, an entry
/// without the fields a [`Flow`] needs). Never panics; unknown and malformed
/// attributes are skipped.
pub fn parse_event(msg: &[u8]) -> Option<FlowEvent> {
    let m = NlMsgIter::new(msg).next()?;
    let new = match m.kind {
        MSG_CT_NEW => true,
        MSG_CT_DELETE => false,
        _ => return None,
    };
    let flow = Flow::from_entry(&parse_entry(m.payload)?)?;
    Some(if new {
        FlowEvent::New(flow)
    } else {
        FlowEvent::Destroy(flow)
    })
}

/// `net.netfilter.nf_conntrack_events` of the calling thread's namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventsSysctl {
    /// 0: no events (only for entries a rule asks events of).
    Off,
    /// 1: every entry carries the event extension: events for all.
    On,
    /// 2 (auto, the default on current kernels): the event extension is added to
    /// entries created while a listener exists; entries created before may never send
    /// their DESTROY.
    Auto,
    /// Not readable (no conntrack module, no /proc) or an unknown value.
    Unreadable,
}

const EVENTS_SYSCTL: &str = "/proc/sys/net/netfilter/nf_conntrack_events";

/// Read `nf_conntrack_events` (a file read of /proc/sys in the calling thread's
/// namespace; nothing is written).
pub fn events_sysctl() -> EventsSysctl {
    parse_events_sysctl(std::fs::read_to_string(EVENTS_SYSCTL).ok().as_deref())
}

pub(crate) fn parse_events_sysctl(text: Option<&str>) -> EventsSysctl {
    match text.map(str::trim) {
        Some("0") => EventsSysctl::Off,
        Some("1") => EventsSysctl::On,
        Some("2") => EventsSysctl::Auto,
        _ => EventsSysctl::Unreadable,
    }
}

/// Event socket settings.
#[derive(Debug, Clone)]
pub struct EventConfig {
    /// Receive buffer, forced with SO_RCVBUFFORCE (else SO_RCVBUF, capped by
    /// `net.core.rmem_max`). The kernel grants twice the size asked and charges an
    /// event ~1.25 KiB of it (the skb's true size, not its ~200 bytes): 32 MiB holds
    /// ~52,000 events between two reads (measured on Linux 6.18).
    pub rcvbuf: usize,
    /// At most this many datagrams (one event each) read per `recv` call; the rest
    /// stays for the next call.
    pub max_batch: usize,
}

impl Default for EventConfig {
    fn default() -> Self {
        EventConfig {
            rcvbuf: 32 << 20,
            max_batch: 65_536,
        }
    }
}

/// What one `recv` call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Received {
    /// This many events were appended (0: what was read was not a UDP event).
    Events(usize),
    /// The kernel dropped events (ENOBUFS: the receive buffer was full). The events
    /// appended before it are real; the socket's queue has been emptied since (the
    /// kernel delivers again only then), so a dump started now misses nothing: the
    /// caller must re-seed.
    Lost,
    /// Nothing arrived in time.
    Timeout,
    /// `recv_until`'s stop descriptor became readable.
    Stopped,
}

/// Counters since the socket was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventStats {
    /// Datagrams read (the BPF filter drops non-UDP events before they are queued).
    pub datagrams: u64,
    /// UDP events handed out.
    pub events: u64,
    /// Messages read that were not UDP events (another protocol, another message).
    pub skipped: u64,
    /// Datagrams or messages that could not be read (malformed).
    pub malformed: u64,
    /// ENOBUFS reports (each is one [`Received::Lost`]).
    pub losses: u64,
    /// Datagrams read and thrown away after a loss (emptying the queue).
    pub discarded: u64,
}

/// A NETLINK_NETFILTER socket subscribed to conntrack NEW and DESTROY events of the
/// network namespace of the thread that opened it, keeping UDP entries only.
pub struct EventSocket {
    sock: NlSocket,
    cfg: EventConfig,
    stats: EventStats,
    rcvbuf: usize,
}

impl AsRawFd for EventSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }
}

fn sockopt<T>(fd: RawFd, level: i32, name: i32, value: &T) -> io::Result<()> {
    // SAFETY: a valid descriptor; the option value is a live T of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

impl EventSocket {
    /// Open the socket in the calling thread's network namespace: BPF filter first,
    /// then the NEW and DESTROY groups (so no unfiltered event is queued).
    pub fn open(cfg: EventConfig) -> Result<EventSocket, Error> {
        EventSocket::open_inner(cfg, true)
    }

    pub(crate) fn open_inner(cfg: EventConfig, udp_filter: bool) -> Result<EventSocket, Error> {
        let err = |op| move |source| Error::Events { op, source };
        let sock = NlSocket::open(
            NETLINK_NETFILTER,
            &SockConfig {
                rcvbuf: Some(cfg.rcvbuf),
                nonblocking: true,
                connect: false,
                // One event per datagram, ~200 bytes; room for anything larger.
                recv_buf_len: 64 << 10,
                ..SockConfig::default()
            },
        )
        .map_err(|e| Error::Events {
            op: e.op,
            source: e.source,
        })?;
        let fd = sock.as_raw_fd();
        if udp_filter {
            let mut prog = crate::bpf::udp_only();
            let fprog = libc::sock_fprog {
                len: prog.len() as libc::c_ushort,
                filter: prog.as_mut_ptr(),
            };
            sockopt(fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &fprog)
                .map_err(err("attach the UDP filter"))?;
        }
        for group in [NFNLGRP_CONNTRACK_NEW, NFNLGRP_CONNTRACK_DESTROY] {
            sockopt(fd, libc::SOL_NETLINK, libc::NETLINK_ADD_MEMBERSHIP, &group)
                .map_err(err("join a conntrack event group"))?;
        }
        let rcvbuf = rcvbuf_of(fd).unwrap_or(0);
        tracing::info!(
            rcvbuf,
            udp_filter,
            "subscribed to conntrack NEW and DESTROY events"
        );
        Ok(EventSocket {
            sock,
            cfg,
            stats: EventStats::default(),
            rcvbuf,
        })
    }

    /// The receive buffer the kernel granted (SO_RCVBUF: twice the size asked, for its
    /// bookkeeping).
    pub fn rcvbuf(&self) -> usize {
        self.rcvbuf
    }

    pub fn stats(&self) -> EventStats {
        self.stats
    }

    /// Append the UDP events of everything readable now (at most `max_batch`
    /// datagrams), waiting up to `timeout` (`None`: without limit) for the first one.
    pub fn recv(
        &mut self,
        out: &mut Vec<FlowEvent>,
        timeout: Option<Duration>,
    ) -> Result<Received, Error> {
        let ready = self
            .sock
            .wait_readable(timeout)
            .map_err(|source| Error::Events {
                op: "wait for events",
                source,
            })?;
        if !ready {
            return Ok(Received::Timeout);
        }
        self.drain(out)
    }

    /// [`EventSocket::recv`], also woken when `stop` becomes readable (e.g. an eventfd
    /// another thread writes for shutdown): then [`Received::Stopped`], nothing read.
    pub fn recv_until(
        &mut self,
        stop: BorrowedFd<'_>,
        out: &mut Vec<FlowEvent>,
        timeout: Option<Duration>,
    ) -> Result<Received, Error> {
        let ms = match timeout {
            None => -1,
            Some(t) if t.is_zero() => 0,
            Some(t) => i32::try_from(t.as_millis().max(1)).unwrap_or(i32::MAX),
        };
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
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(Error::Events {
                    op: "wait for events or stop",
                    source: e,
                });
            }
            if fds[1].revents != 0 {
                return Ok(Received::Stopped);
            }
            if fds[0].revents != 0 {
                return self.drain(out);
            }
            return Ok(Received::Timeout);
        }
    }

    /// Read what is queued now, without waiting.
    fn drain(&mut self, out: &mut Vec<FlowEvent>) -> Result<Received, Error> {
        let before = out.len();
        for _ in 0..self.cfg.max_batch.max(1) {
            match self.sock.recv() {
                Ok(_) => self.feed(out),
                Err(e) if is_enobufs(&e) => {
                    self.stats.losses += 1;
                    tracing::warn!(
                        read = out.len() - before,
                        "conntrack events lost (receive buffer full); the index must be re-seeded"
                    );
                    self.discard_queue()?;
                    return Ok(Received::Lost);
                }
                Err(e) if is_timeout(&e) => break,
                Err(source) => {
                    return Err(Error::Events {
                        op: "receive events",
                        source,
                    })
                }
            }
        }
        Ok(Received::Events(out.len() - before))
    }

    /// Empty the receive queue after a loss: the kernel delivers to a socket again only
    /// once its queue is empty (until then further events are dropped without another
    /// ENOBUFS), so a re-seeding dump must start after this. Bounded; a new ENOBUFS
    /// meanwhile changes nothing (the caller re-seeds anyway).
    fn discard_queue(&mut self) -> Result<(), Error> {
        let bound = self.cfg.max_batch.max(1).saturating_mul(64);
        for _ in 0..bound {
            match self.sock.recv() {
                Ok(_) => self.stats.discarded += 1,
                Err(e) if is_enobufs(&e) => self.stats.losses += 1,
                Err(e) if is_timeout(&e) => return Ok(()),
                Err(source) => {
                    return Err(Error::Events {
                        op: "empty the event queue",
                        source,
                    })
                }
            }
        }
        tracing::warn!(
            bound,
            "conntrack event queue still not empty after a loss; events keep arriving faster than they are read"
        );
        Ok(())
    }

    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn recv_raw_inner(&mut self, timeout: Duration) -> Option<Vec<u8>> {
        if !self.sock.wait_readable(Some(timeout)).ok()? {
            return None;
        }
        self.sock.recv().ok()?;
        Some(self.sock.data().to_vec())
    }

    /// Parse the datagram just read.
    fn feed(&mut self, out: &mut Vec<FlowEvent>) {
        self.stats.datagrams += 1;
        let mut it = NlMsgIter::new(self.sock.data());
        for m in it.by_ref() {
            match parse_event(m.bytes) {
                Some(ev) if ev.flow().proto == IPPROTO_UDP => {
                    self.stats.events += 1;
                    out.push(ev);
                }
                Some(_) => self.stats.skipped += 1,
                None if m.kind == MSG_CT_NEW || m.kind == MSG_CT_DELETE => {
                    self.stats.malformed += 1;
                    tracing::warn!(len = m.bytes.len(), "unreadable conntrack event skipped");
                }
                None => self.stats.skipped += 1,
            }
        }
        if it.malformed {
            self.stats.malformed += 1;
            tracing::warn!("malformed conntrack event datagram");
        }
    }
}

/// SO_RCVBUF as the kernel reports it.
fn rcvbuf_of(fd: RawFd) -> Option<usize> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid descriptor; `v` and `len` are live and sized as stated.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then(|| usize::try_from(v).unwrap_or(0))
}
