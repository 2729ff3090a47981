//! A tiny netlink message builder and a tolerant parser.
//!
//! The builder writes netlink headers, the nfgenmsg header (through
//! `netlink-packet-netfilter`'s [`NetfilterHeader`]) and attributes, nested ones with
//! `NLA_F_NESTED` always set. The parser never panics and never fails on a malformed
//! attribute: it stops at a truncated one and hands the rest of the message to the
//! caller, which skips what it does not understand.

use netlink_packet_core::Emitable;
use netlink_packet_netfilter::{NetfilterHeader, NetfilterProtoFamily};

pub(crate) const NLMSG_HDRLEN: usize = 16;
pub(crate) const NFGENMSG_LEN: usize = 4;
pub(crate) const NLA_HDRLEN: usize = 4;
pub(crate) const NLA_F_NESTED: u16 = 1 << 15;
pub(crate) const NLA_F_NET_BYTEORDER: u16 = 1 << 14;
pub(crate) const NLA_TYPE_MASK: u16 = !(NLA_F_NESTED | NLA_F_NET_BYTEORDER);

pub(crate) const NLMSG_ERROR: u16 = 2;
pub(crate) const NLMSG_DONE: u16 = 3;
pub(crate) const NLMSG_OVERRUN: u16 = 4;

pub(crate) const NLM_F_REQUEST: u16 = 0x1;
pub(crate) const NLM_F_ACK: u16 = 0x4;
pub(crate) const NLM_F_DUMP_INTR: u16 = 0x10;
pub(crate) const NLM_F_DUMP_FILTERED: u16 = 0x20;
pub(crate) const NLM_F_DUMP: u16 = 0x300;
pub(crate) const NLM_F_CREATE: u16 = 0x400;
pub(crate) const NLM_F_EXCL: u16 = 0x200;

#[inline]
pub(crate) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// Builds one or many netlink messages back to back in one buffer (one `sendmsg`).
#[derive(Default)]
pub(crate) struct MsgBuf {
    pub(crate) buf: Vec<u8>,
}

impl MsgBuf {
    pub(crate) fn with_capacity(n: usize) -> Self {
        MsgBuf {
            buf: Vec::with_capacity(n),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.buf.clear();
    }

    /// Start a message: netlink header + nfgenmsg. Returns its start offset for
    /// [`MsgBuf::end_msg`].
    pub(crate) fn begin_msg(&mut self, ty: u16, flags: u16, seq: u32, family: u8) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, patched by end_msg
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
        let hdr = NetfilterHeader::new(NetfilterProtoFamily::from(family), 0, 0);
        let mut nfg = [0u8; NFGENMSG_LEN];
        hdr.emit(&mut nfg);
        self.buf.extend_from_slice(&nfg);
        start
    }

    pub(crate) fn end_msg(&mut self, start: usize) {
        let len = (self.buf.len() - start) as u32;
        self.buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    }

    pub(crate) fn put(&mut self, ty: u16, data: &[u8]) {
        let len = (NLA_HDRLEN + data.len()) as u16;
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        let pad = align4(data.len()) - data.len();
        self.buf.extend_from_slice(&[0u8; 3][..pad]);
    }

    pub(crate) fn put_u8(&mut self, ty: u16, v: u8) {
        self.put(ty, &[v]);
    }

    pub(crate) fn put_be16(&mut self, ty: u16, v: u16) {
        self.put(ty, &v.to_be_bytes());
    }

    pub(crate) fn put_be32(&mut self, ty: u16, v: u32) {
        self.put(ty, &v.to_be_bytes());
    }

    /// A host-endian u32 (NLA_U32 in kernel policies that are not big-endian).
    pub(crate) fn put_ne32(&mut self, ty: u16, v: u32) {
        self.put(ty, &v.to_ne_bytes());
    }

    /// Open a nested attribute; `NLA_F_NESTED` is always set.
    pub(crate) fn nest(&mut self, ty: u16) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        start
    }

    pub(crate) fn nest_end(&mut self, start: usize) {
        let len = (self.buf.len() - start) as u16;
        self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
    }

    /// A nested attribute whose payload is given raw (already a list of attributes).
    pub(crate) fn put_nested_raw(&mut self, ty: u16, payload: &[u8]) {
        let start = self.nest(ty);
        self.buf.extend_from_slice(payload);
        let pad = align4(payload.len()) - payload.len();
        self.buf.extend_from_slice(&[0u8; 3][..pad]);
        self.nest_end(start);
    }
}

/// A netlink message seen in a receive buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Msg<'a> {
    pub(crate) ty: u16,
    pub(crate) flags: u16,
    pub(crate) seq: u32,
    /// Everything after the netlink header.
    pub(crate) payload: &'a [u8],
}

impl<'a> Msg<'a> {
    /// For NLMSG_ERROR: the (positive) errno, 0 for an ACK; None if truncated.
    pub(crate) fn error_code(&self) -> Option<i32> {
        let b = self.payload.get(0..4)?;
        let v = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        Some(-v)
    }
}

/// Iterates over the netlink messages of one datagram. Stops at the first
/// malformed header and records that in `malformed`.
pub(crate) struct Msgs<'a> {
    buf: &'a [u8],
    pub(crate) malformed: bool,
}

impl<'a> Msgs<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Msgs {
            buf,
            malformed: false,
        }
    }
}

impl<'a> Iterator for Msgs<'a> {
    type Item = Msg<'a>;
    fn next(&mut self) -> Option<Msg<'a>> {
        if self.buf.len() < NLMSG_HDRLEN {
            if !self.buf.is_empty() {
                self.malformed = true;
            }
            return None;
        }
        let b = self.buf;
        let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            self.malformed = true;
            self.buf = &[];
            return None;
        }
        let msg = Msg {
            ty: u16::from_ne_bytes([b[4], b[5]]),
            flags: u16::from_ne_bytes([b[6], b[7]]),
            seq: u32::from_ne_bytes([b[8], b[9], b[10], b[11]]),
            payload: &b[NLMSG_HDRLEN..len],
        };
        let next = align4(len).min(b.len());
        self.buf = &b[next..];
        Some(msg)
    }
}

/// Iterates over the attributes in a buffer, yielding (type without flags, payload).
/// A truncated or impossible attribute ends the iteration (its bytes are skipped);
/// nothing here can panic.
#[derive(Clone)]
pub(crate) struct Attrs<'a> {
    buf: &'a [u8],
}

impl<'a> Attrs<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Attrs { buf }
    }
}

impl<'a> Iterator for Attrs<'a> {
    type Item = (u16, &'a [u8]);
    fn next(&mut self) -> Option<(u16, &'a [u8])> {
        let b = self.buf;
        if b.len() < NLA_HDRLEN {
            return None;
        }
        let len = u16::from_ne_bytes([b[0], b[1]]) as usize;
        let ty = u16::from_ne_bytes([b[2], b[3]]) & NLA_TYPE_MASK;
        if len < NLA_HDRLEN || len > b.len() {
            self.buf = &[];
            return None;
        }
        let payload = &b[NLA_HDRLEN..len];
        let next = align4(len).min(b.len());
        self.buf = &b[next..];
        Some((ty, payload))
    }
}

pub(crate) fn be16(p: &[u8]) -> Option<u16> {
    match p {
        [a, b] => Some(u16::from_be_bytes([*a, *b])),
        _ => None,
    }
}

pub(crate) fn be32(p: &[u8]) -> Option<u32> {
    match p {
        [a, b, c, d] => Some(u32::from_be_bytes([*a, *b, *c, *d])),
        _ => None,
    }
}
