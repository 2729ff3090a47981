//! Helpers for tests and benchmarks: insert synthetic conntrack entries quickly with
//! IPCTNL_MSG_CT_NEW, many per `sendmsg`. Messages are built with
//! `netlink-packet-netfilter`'s typed conntrack attributes. Not used by the proxy.

use crate::nl::{Msgs, NLMSG_ERROR, NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST};
use crate::sock::{is_enobufs, is_timeout};
use crate::wire::NLMSG_NOOP;
use crate::{Conntrack, Error};
use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
use netlink_packet_netfilter::conntrack::{
    ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol, Tuple,
};
use netlink_packet_netfilter::{NetfilterHeader, NetfilterMessage, NetfilterProtoFamily};
use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// One synthetic flow: the reply tuple is the inverse of the original one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyntheticFlow {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub proto: u8,
    pub sport: u16,
    pub dport: u16,
}

/// Result of [`Conntrack::insert`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InsertReport {
    /// Requests sent.
    pub sent: u64,
    /// Errors by errno (EEXIST = already there, ENOMEM = table full, ...).
    pub errors: HashMap<i32, u64>,
    /// Batches whose sentinel ACK never came (errors may be undercounted).
    pub lost_batches: u64,
}

impl InsertReport {
    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }
}

fn tuple(src: IpAddr, dst: IpAddr, proto: u8, sport: u16, dport: u16) -> Vec<Tuple> {
    vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(src),
            IPTuple::DestinationAddress(dst),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(Protocol::from(proto)),
            ProtoTuple::SourcePort(sport),
            ProtoTuple::DestinationPort(dport),
        ]),
    ]
}

fn new_message(
    f: &SyntheticFlow,
    timeout_secs: u32,
    seq: u32,
    flags: u16,
) -> NetlinkMessage<NetfilterMessage> {
    let family = if f.src.is_ipv4() {
        NetfilterProtoFamily::IPv4
    } else {
        NetfilterProtoFamily::IPv6
    };
    let attrs = vec![
        ConntrackAttribute::CtaTupleOrig(tuple(f.src, f.dst, f.proto, f.sport, f.dport)),
        ConntrackAttribute::CtaTupleReply(tuple(f.dst, f.src, f.proto, f.dport, f.sport)),
        ConntrackAttribute::CtaTimeout(timeout_secs),
        // No CTA_STATUS: asking for SEEN_REPLY|ASSURED on creation is refused with
        // EBUSY on Linux 6.18. Benchmarks size nf_conntrack_max so nothing is dropped.
    ];
    let mut hdr = NetlinkHeader::default();
    hdr.flags = flags;
    hdr.sequence_number = seq;
    let mut msg = NetlinkMessage::new(
        hdr,
        NetlinkPayload::from(NetfilterMessage::new(
            NetfilterHeader::new(family, 0, 0),
            ConntrackMessage::New(attrs),
        )),
    );
    msg.finalize();
    msg
}

/// Append an IPCTNL_MSG_CT_NEW for `f` to `buf` (built with netlink-packet-netfilter).
pub(crate) fn emit_new(
    buf: &mut Vec<u8>,
    f: &SyntheticFlow,
    timeout_secs: u32,
    seq: u32,
    flags: u16,
) {
    let msg = new_message(f, timeout_secs, seq, flags);
    let start = buf.len();
    buf.resize(start + msg.buffer_len(), 0);
    msg.serialize(&mut buf[start..]);
}

impl Conntrack {
    /// Insert `flows` (for tests and benchmarks): `batch` requests per `sendmsg`, no
    /// ACK asked for (errors are still reported), then a sentinel ACK per batch.
    pub fn insert(
        &mut self,
        flows: &[SyntheticFlow],
        timeout_secs: u32,
        batch: usize,
    ) -> Result<InsertReport, Error> {
        let mut rep = InsertReport::default();
        let mut buf: Vec<u8> = Vec::with_capacity(batch.max(1) * 160);
        let timeout = self.cfg.recv_timeout;
        for chunk in flows.chunks(batch.max(1)) {
            buf.clear();
            let base = self.sock().reserve_seqs(chunk.len() as u32 + 1);
            for (k, f) in chunk.iter().enumerate() {
                emit_new(
                    &mut buf,
                    f,
                    timeout_secs,
                    base + k as u32,
                    NLM_F_REQUEST | NLM_F_CREATE | NLM_F_EXCL,
                );
            }
            let sentinel = base + chunk.len() as u32;
            let mut m = crate::nl::MsgBuf {
                buf: std::mem::take(&mut buf),
            };
            let st = m.begin_msg(NLMSG_NOOP, NLM_F_REQUEST | NLM_F_ACK, sentinel, 0);
            m.end_msg(st);
            buf = m.buf;
            self.sock().send(&buf).map_err(|source| Error::Send {
                op: "insert",
                filter: "synthetic flows".into(),
                source,
            })?;
            rep.sent += chunk.len() as u64;
            let deadline = Instant::now() + timeout;
            let mut got_sentinel = false;
            while !got_sentinel && Instant::now() < deadline {
                match self.sock().recv() {
                    Ok(_) => {}
                    Err(e) if is_enobufs(&e) => continue,
                    Err(e) if is_timeout(&e) => break,
                    Err(source) => {
                        return Err(Error::Recv {
                            op: "insert",
                            filter: "synthetic flows".into(),
                            source,
                        })
                    }
                }
                for msg in Msgs::new(&self.sock().rbuf) {
                    if msg.ty != NLMSG_ERROR {
                        continue;
                    }
                    if msg.seq == sentinel {
                        got_sentinel = true;
                    } else if msg.seq >= base && msg.seq < sentinel {
                        if let Some(e) = msg.error_code().filter(|&e| e != 0) {
                            *rep.errors.entry(e).or_default() += 1;
                        }
                    }
                }
            }
            if !got_sentinel {
                rep.lost_batches += 1;
            }
        }
        Ok(rep)
    }

    /// How long [`Conntrack::insert`] waits for one batch.
    pub fn recv_timeout(&self) -> Duration {
        self.cfg.recv_timeout
    }
}

impl Conntrack {
    /// The raw netlink messages of an unfiltered dump of one family (`libc::AF_INET` or
    /// `libc::AF_INET6`), for capturing test vectors.
    pub fn raw_dump(&mut self, af: u8) -> Result<Vec<Vec<u8>>, Error> {
        let seq = self.sock().next_seq();
        let mut m = crate::nl::MsgBuf::with_capacity(32);
        let s = m.begin_msg(
            crate::wire::MSG_CT_GET,
            NLM_F_REQUEST | crate::nl::NLM_F_DUMP,
            seq,
            af,
        );
        m.end_msg(s);
        self.sock().send(&m.buf).map_err(|source| Error::Send {
            op: "raw dump",
            filter: "all entries".into(),
            source,
        })?;
        let mut out = Vec::new();
        for _ in 0..100_000 {
            self.sock().recv().map_err(|source| Error::Recv {
                op: "raw dump",
                filter: "all entries".into(),
                source,
            })?;
            let buf = &self.sock().rbuf;
            let mut done = false;
            let mut off = 0usize;
            for msg in Msgs::new(buf) {
                let len = crate::nl::NLMSG_HDRLEN + msg.payload.len();
                if msg.seq == seq && msg.ty == crate::wire::MSG_CT_NEW {
                    out.push(buf[off..off + len].to_vec());
                }
                if msg.seq == seq && (msg.ty == crate::nl::NLMSG_DONE || msg.ty == NLMSG_ERROR) {
                    done = true;
                }
                off += crate::nl::align4(len);
            }
            if done {
                break;
            }
        }
        Ok(out)
    }
}

impl Conntrack {
    /// Test hook: [`Conntrack::delete_with`], but `between(n)` runs after the `n`
    /// entries to delete by tuple were collected (by a dump) and before the deletes
    /// are sent, so a test can remove some of them out of band and make the kernel
    /// answer ENOENT. Filters that a filtered flush hands to the kernel have no such
    /// window (`between` is then called only for the filters routed through a dump,
    /// or not at all).
    #[doc(hidden)]
    pub fn delete_with_pause(
        &mut self,
        strategy: crate::Strategy,
        filters: &[crate::Filter],
        between: &mut dyn FnMut(usize),
    ) -> Result<crate::DeleteReport, Error> {
        self.delete_inner(strategy, filters, between)
    }
}

/// CTA_MARK and CTA_MARK_MASK (uapi `nfnetlink_conntrack.h`).
const CTA_MARK: u16 = 8;
const CTA_MARK_MASK: u16 = 21;

impl Conntrack {
    /// Benchmark hook (ct-bench's walk experiment): an IPCTNL_MSG_CT_DELETE carrying
    /// only CTA_MARK/CTA_MARK_MASK (no tuple, no CTA_FILTER), i.e. a flush restricted
    /// to entries with `ct->mark & mask == mark`, for family `af`. Returns the errno of
    /// the ACK. **Not safe in general**: a kernel that ignored the mark would flush the
    /// whole table of the namespace (Linux has honoured it since 2.6.x); ct-bench uses
    /// it only in its own namespace, with a mark no entry carries, to time the
    /// kernel's flush walk without any tuple comparison.
    #[doc(hidden)]
    pub fn mark_flush(&mut self, af: u8, mark: u32, mask: u32) -> Result<i32, Error> {
        self.request_ack(&crate::PROBE_FILTER, "mark flush", |m, _, seq| {
            let s = m.begin_msg(
                crate::wire::MSG_CT_DELETE,
                NLM_F_REQUEST | NLM_F_ACK,
                seq,
                af,
            );
            m.put_be32(CTA_MARK, mark);
            m.put_be32(CTA_MARK_MASK, mask);
            m.end_msg(s);
        })
    }
}
