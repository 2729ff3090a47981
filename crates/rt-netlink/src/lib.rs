//! The host's interface addresses over rtnetlink, without running a program:
//! [`local_addresses`] (one RTM_GETADDR dump) and [`AddrMonitor`] (the IPv4 and IPv6
//! address groups: an event for every address added or removed).
//!
//! Also links by name ([`link`]): find one, delete one of a given kind (kube-proxy IPVS
//! mode's `kube-ipvs0` dummy link).
//!
//! Messages are built and parsed with `netlink-packet-route` ([`parse_addr_message`] is
//! pure and byte-tested); the socket is `nl-core`'s.

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::RouteNetlinkMessage;
use nl_core::{
    Control, NlMsgIter, NlSocket, OnLoss, ReadError, ReadOpts, SockConfig, NETLINK_ROUTE,
    NLM_F_DUMP, NLM_F_REQUEST,
};
use std::net::IpAddr;
use std::time::Duration;

/// `RTNLGRP_IPV4_IFADDR` and `RTNLGRP_IPV6_IFADDR` (linux/rtnetlink.h).
pub const RTNLGRP_IPV4_IFADDR: u32 = 5;
pub const RTNLGRP_IPV6_IFADDR: u32 = 9;

/// Errors, naming the operation.
#[derive(Debug, thiserror::Error)]
pub enum RtError {
    #[error("rtnetlink socket: {0}")]
    Socket(#[from] nl_core::SockError),
    #[error("rtnetlink {op}: {source}")]
    Read { op: &'static str, source: ReadError },
}

/// An address configured on an interface, as rtnetlink reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IfAddr {
    /// The interface's index.
    pub index: u32,
    /// The local address (IFA_LOCAL, else IFA_ADDRESS: on point-to-point links
    /// IFA_ADDRESS is the peer's).
    pub addr: IpAddr,
    pub prefix_len: u8,
}

/// One change of the host's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddrEvent {
    Added(IfAddr),
    Removed(IfAddr),
}

/// Parse one whole netlink message (header included): RTM_NEWADDR and RTM_DELADDR
/// give an event; anything else, or anything malformed, gives `None`. Never panics.
pub fn parse_addr_message(bytes: &[u8]) -> Option<AddrEvent> {
    let msg = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes).ok()?;
    match msg.payload {
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewAddress(a)) => {
            if_addr(&a).map(AddrEvent::Added)
        }
        NetlinkPayload::InnerMessage(RouteNetlinkMessage::DelAddress(a)) => {
            if_addr(&a).map(AddrEvent::Removed)
        }
        _ => None,
    }
}

fn if_addr(a: &AddressMessage) -> Option<IfAddr> {
    let mut local = None;
    let mut address = None;
    for attr in &a.attributes {
        match attr {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            _ => {}
        }
    }
    Some(IfAddr {
        index: a.header.index,
        addr: local.or(address)?,
        prefix_len: a.header.prefix_len,
    })
}

/// The RTM_GETADDR dump request for every family.
pub fn dump_request(seq: u32) -> Vec<u8> {
    let mut hdr = NetlinkHeader::default();
    hdr.flags = NLM_F_REQUEST | NLM_F_DUMP;
    hdr.sequence_number = seq;
    let mut msg = NetlinkMessage::new(
        hdr,
        NetlinkPayload::from(RouteNetlinkMessage::GetAddress(AddressMessage::default())),
    );
    msg.finalize();
    let mut buf = vec![0; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

pub(crate) fn socket(groups: Vec<u32>, nonblocking: bool) -> Result<NlSocket, RtError> {
    Ok(NlSocket::open(
        NETLINK_ROUTE,
        &SockConfig {
            rcvbuf: Some(1 << 20),
            recv_timeout: Some(Duration::from_secs(5)),
            groups,
            nonblocking,
            connect: !nonblocking,
            strict_buffers: false,
            recv_buf_len: 64 << 10,
            ..SockConfig::default()
        },
    )?)
}

/// Every address on the host's interfaces (both families, each once), in the calling
/// thread's network namespace.
pub fn local_addresses() -> Result<Vec<IpAddr>, RtError> {
    let mut sock = socket(Vec::new(), false)?;
    let mut out: Vec<IpAddr> = Vec::new();
    let opts = ReadOpts {
        on_loss: OnLoss::Fail,
        limit: Some(Duration::from_secs(10)),
    };
    sock.request(
        &opts,
        |w, seq| w.buf.extend_from_slice(&dump_request(seq)),
        |m| {
            if let Some(AddrEvent::Added(a)) = parse_addr_message(m.bytes) {
                if !out.contains(&a.addr) {
                    out.push(a.addr);
                }
            }
            Control::Continue
        },
    )
    .map_err(|source| RtError::Read {
        op: "address dump",
        source,
    })?;
    Ok(out)
}

/// What a poll of the monitor found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddrChanges {
    pub events: Vec<AddrEvent>,
    /// Notifications were lost (socket overflow): re-read the addresses with a dump.
    pub overflow: bool,
}

/// A socket subscribed to the IPv4 and IPv6 address groups, in the calling thread's
/// network namespace. Read without blocking ([`AddrMonitor::poll`]), or waited on
/// ([`AddrMonitor::wait`]).
pub struct AddrMonitor {
    sock: NlSocket,
}

impl AddrMonitor {
    pub fn open() -> Result<AddrMonitor, RtError> {
        Ok(AddrMonitor {
            sock: socket(vec![RTNLGRP_IPV4_IFADDR, RTNLGRP_IPV6_IFADDR], true)?,
        })
    }

    /// Wait until a notification arrives (or notifications were lost), at most
    /// `timeout` (`None`: without limit), then read every pending one as
    /// [`AddrMonitor::poll`] does. Empty when the time ran out.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<AddrChanges, RtError> {
        let ready = self
            .sock
            .wait_readable(timeout)
            .map_err(|e| RtError::Read {
                op: "address monitor",
                source: ReadError::Io(e),
            })?;
        if ready {
            self.poll()
        } else {
            Ok(AddrChanges::default())
        }
    }

    /// Read every pending notification (never blocks; at most 1,024 datagrams).
    pub fn poll(&mut self) -> Result<AddrChanges, RtError> {
        let mut out = AddrChanges::default();
        for _ in 0..1024 {
            match self.sock.recv() {
                Ok(0) => break,
                Ok(_) => {
                    for m in NlMsgIter::new(self.sock.data()) {
                        out.events.extend(parse_addr_message(m.bytes));
                    }
                }
                Err(e) if nl_core::is_timeout(&e) => break,
                Err(e) if nl_core::is_enobufs(&e) => out.overflow = true,
                Err(e) => {
                    return Err(RtError::Read {
                        op: "address monitor",
                        source: ReadError::Io(e),
                    })
                }
            }
        }
        Ok(out)
    }
}

pub mod link;
pub use link::{delete_link_of_kind, link_by_name, Link, LinkRemoval};

#[cfg(test)]
mod tests;
