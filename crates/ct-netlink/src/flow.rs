//! [`Flow`]: one conntrack entry as the cleanup needs it (its original tuple, the
//! source of its reply, zone and id), read from a dump or an event, and written back
//! as a delete by tuple. Pure.

use crate::filter::{proto_name, sockaddr};
use crate::wire::*;
use crate::Family;
use nl_core::{NlaWriter, NLM_F_ACK, NLM_F_REQUEST};
use std::fmt;
use std::net::IpAddr;

/// One conntrack entry of a protocol with ports (UDP, TCP, SCTP, ...): the original
/// direction, the source of the reply direction (which tells whether and where it was
/// DNAT'ed), its zone and its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Flow {
    /// L4 protocol number (17 = UDP).
    pub proto: u8,
    /// Original direction.
    pub src: IpAddr,
    pub dst: IpAddr,
    pub sport: u16,
    pub dport: u16,
    /// The reply direction's source: the original destination unless DNAT'ed.
    pub reply_src: IpAddr,
    pub reply_sport: u16,
    /// CTA_ZONE (or the original direction's CTA_TUPLE_ZONE), 0 when absent.
    pub zone: u16,
    /// CTA_ID, when the kernel sent it (it always does on Linux >= 2.6.x dumps and
    /// events); a delete carrying it never hits a newer entry with the same tuple.
    pub id: Option<u32>,
}

impl Flow {
    pub fn family(&self) -> Family {
        if self.src.is_ipv4() {
            Family::V4
        } else {
            Family::V6
        }
    }

    /// Not DNAT'ed: the reply comes from the original destination, address and port
    /// (or the entry was never answered).
    pub fn is_unnated(&self) -> bool {
        self.reply_src == self.dst && self.reply_sport == self.dport
    }

    /// The flow of a parsed entry: `None` unless both tuples carry what a flow needs
    /// (protocol, addresses and ports of the original direction, the reply's source)
    /// and every address is of the message's family.
    pub(crate) fn from_entry(e: &EntryView<'_>) -> Option<Flow> {
        let o = &e.orig;
        let f = Flow {
            proto: o.proto?,
            src: o.src?,
            dst: o.dst?,
            sport: o.sport?,
            dport: o.dport?,
            reply_src: e.reply.src?,
            reply_sport: e.reply.sport?,
            zone: e.zone.or(o.zone).unwrap_or(0),
            id: e.id,
        };
        let af = e.family;
        (family_of(&f.src) == af && family_of(&f.dst) == af && family_of(&f.reply_src) == af)
            .then_some(f)
    }

    /// Append IPCTNL_MSG_CT_DELETE for this entry, asking for an ACK: its original
    /// tuple, CTA_ZONE when not 0, CTA_ID when known (a different id is ENOENT).
    pub(crate) fn put_delete(&self, m: &mut NlaWriter, seq: u32) {
        let s = m.begin_nfnl(
            MSG_CT_DELETE,
            NLM_F_REQUEST | NLM_F_ACK,
            seq,
            family_of(&self.src),
        );
        put_partial_tuple(
            m,
            CTA_TUPLE_ORIG,
            Some(self.src),
            Some(self.dst),
            self.proto,
            Some(self.sport),
            Some(self.dport),
        );
        if self.zone != 0 {
            m.be16(CTA_ZONE, self.zone);
        }
        if let Some(id) = self.id {
            m.be32(CTA_ID, id);
        }
        m.end_msg(s);
    }
}

impl fmt::Display for Flow {
    /// `udp 198.18.0.5:40000 -> 198.18.0.10:53 reply from 198.18.1.7:5353` (then
    /// ` zone 5` when not 0, ` id 1234` when known).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} -> {} reply from {}",
            proto_name(self.proto),
            sockaddr(self.src, self.sport),
            sockaddr(self.dst, self.dport),
            sockaddr(self.reply_src, self.reply_sport)
        )?;
        if self.zone != 0 {
            write!(f, " zone {}", self.zone)?;
        }
        if let Some(id) = self.id {
            write!(f, " id {id}")?;
        }
        Ok(())
    }
}

/// What happened to one flow given to [`crate::Conntrack::delete_flows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlowOutcome {
    /// The kernel deleted it.
    Deleted,
    /// No such entry (ENOENT): already gone, or an entry with this tuple and zone but
    /// another id (a newer one, which is kept).
    AlreadyGone,
    /// The kernel or the socket refused the delete: the errno.
    Failed(i32),
    /// No answer, even after resending.
    Unacked,
}

impl FlowOutcome {
    /// The entry is gone (deleted now or before).
    pub fn is_gone(self) -> bool {
        matches!(self, FlowOutcome::Deleted | FlowOutcome::AlreadyGone)
    }
}
