//! Netlink message framing: `nlmsghdr` (+ `nfgenmsg` for netfilter), writing and
//! bounds-checked reading. Nothing here can panic on input.

use crate::consts::*;

/// Start a message: `nlmsghdr` with a zero length, patched by [`end`]. The port id is
/// zero (the kernel fills it in). Returns the message's start offset.
pub fn begin(buf: &mut Vec<u8>, kind: u16, flags: u16, seq: u32) -> usize {
    let start = buf.len();
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    start
}

/// Finish the message started at `start`: write its length and pad it to 4 bytes.
pub fn end(buf: &mut Vec<u8>, start: usize) {
    let len = (buf.len() - start) as u32;
    buf[start..start + 4].copy_from_slice(&len.to_ne_bytes());
    buf.resize(align4(buf.len()), 0);
}

/// Append a `nfgenmsg` (family, version 0, resource id big-endian).
pub fn push_nfgenmsg(buf: &mut Vec<u8>, family: u8, res_id: u16) {
    buf.push(family);
    buf.push(0);
    buf.extend_from_slice(&res_id.to_be_bytes());
}

/// The bytes a netfilter message with `attrs` bytes of attributes takes: `nlmsghdr`,
/// `nfgenmsg`, the attributes and the padding [`end`] adds (what [`push_nfnl`] writes).
/// For sizing a buffer before writing into it.
pub const fn nfnl_len(attrs: usize) -> usize {
    align4(NLMSG_HDRLEN + NFGENMSG_LEN + attrs)
}

/// Append one netfilter message (`nlmsghdr`, `nfgenmsg`, attributes) to `buf`.
pub fn push_nfnl(
    buf: &mut Vec<u8>,
    kind: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) {
    let s = begin(buf, kind, flags, seq);
    push_nfgenmsg(buf, family, res_id);
    buf.extend_from_slice(attrs);
    end(buf, s);
}

/// The acknowledgement sentinel: an `NLMSG_NOOP` asking for an ACK. The kernel answers
/// requests of one socket in order, so its ACK marks the end of everything it will
/// answer for the requests sent before it (their answers may have been lost to
/// `ENOBUFS`). Carries an empty `nfgenmsg` so that netfilter sockets see a well-formed
/// message too.
pub fn push_sentinel(buf: &mut Vec<u8>, seq: u32) {
    let s = begin(buf, NLMSG_NOOP, NLM_F_REQUEST | NLM_F_ACK, seq);
    push_nfgenmsg(buf, 0, 0);
    end(buf, s);
}

/// One message read from a receive buffer.
#[derive(Debug, Clone, Copy)]
pub struct NlMsg<'a> {
    pub kind: u16,
    pub flags: u16,
    pub seq: u32,
    pub pid: u32,
    /// Everything after `nlmsghdr`.
    pub payload: &'a [u8],
    /// The whole message, header included (for parsers that want it, e.g.
    /// `netlink-packet-route`).
    pub bytes: &'a [u8],
}

impl<'a> NlMsg<'a> {
    /// For `NLMSG_ERROR`: the error code as the kernel sends it (0 = ACK, else a
    /// negative errno) and the sequence number of the message it answers.
    pub fn error(&self) -> Option<(i32, u32)> {
        if self.kind != NLMSG_ERROR || self.payload.len() < 4 + NLMSG_HDRLEN {
            return None;
        }
        let code = i32::from_ne_bytes(self.payload[0..4].try_into().ok()?);
        let seq = u32::from_ne_bytes(self.payload[12..16].try_into().ok()?);
        Some((code, seq))
    }

    /// For `NLMSG_ERROR` with extended acknowledgement TLVs: the offset of the attribute
    /// the kernel blames, from the start of the original message's `nlmsghdr` (e.g. the
    /// one element of a set element list nf_tables refused). `None` without TLVs or
    /// without that TLV; malformed TLVs end the search.
    pub fn error_offset(&self) -> Option<u32> {
        if self.kind != NLMSG_ERROR || self.flags & NLM_F_ACK_TLVS == 0 {
            return None;
        }
        // error code, then the original header, then (unless capped) its payload
        let orig_len = u32::from_ne_bytes(self.payload.get(4..8)?.try_into().ok()?) as usize;
        let echoed = if self.flags & NLM_F_CAPPED != 0 {
            NLMSG_HDRLEN
        } else {
            orig_len.max(NLMSG_HDRLEN)
        };
        let mut tlvs = self.payload.get(align4(4 + echoed)..)?;
        while tlvs.len() >= NLA_HDRLEN {
            let len = usize::from(u16::from_ne_bytes([tlvs[0], tlvs[1]]));
            let kind = u16::from_ne_bytes([tlvs[2], tlvs[3]]) & NLA_TYPE_MASK;
            if len < NLA_HDRLEN || len > tlvs.len() {
                return None;
            }
            if kind == NLMSGERR_ATTR_OFFS && len >= NLA_HDRLEN + 4 {
                return Some(u32::from_ne_bytes(tlvs[4..8].try_into().ok()?));
            }
            tlvs = tlvs.get(align4(len)..).unwrap_or_default();
        }
        None
    }

    /// For `NLMSG_ERROR`: the positive errno, 0 for an ACK; `None` when the message is
    /// not an error or is too short to say.
    pub fn errno(&self) -> Option<i32> {
        if self.kind != NLMSG_ERROR {
            return None;
        }
        let b = self.payload.get(0..4)?;
        Some(i32::from_ne_bytes([b[0], b[1], b[2], b[3]]).wrapping_neg())
    }

    /// For netfilter messages: the family and resource id from `nfgenmsg` and the
    /// attributes after it.
    pub fn nfgen(&self) -> Option<(u8, u16, &'a [u8])> {
        split_nfgen(self.payload)
    }
}

/// A netfilter message's payload (after the netlink header) split at its `nfgenmsg`:
/// the family, the resource id and the attributes after it (None: too short).
pub fn split_nfgen(payload: &[u8]) -> Option<(u8, u16, &[u8])> {
    if payload.len() < NFGENMSG_LEN {
        return None;
    }
    let res_id = u16::from_be_bytes([payload[2], payload[3]]);
    Some((payload[0], res_id, &payload[NFGENMSG_LEN..]))
}

/// Iterates over the messages of one datagram; a malformed header ends the iteration
/// and sets `malformed`.
#[derive(Debug)]
pub struct NlMsgIter<'a> {
    rest: &'a [u8],
    pub malformed: bool,
}

impl<'a> NlMsgIter<'a> {
    pub fn new(buf: &'a [u8]) -> NlMsgIter<'a> {
        NlMsgIter {
            rest: buf,
            malformed: false,
        }
    }
}

impl<'a> Iterator for NlMsgIter<'a> {
    type Item = NlMsg<'a>;
    fn next(&mut self) -> Option<NlMsg<'a>> {
        if self.rest.len() < NLMSG_HDRLEN {
            if !self.rest.is_empty() {
                self.malformed = true;
                self.rest = &[];
            }
            return None;
        }
        let r = self.rest;
        let len = u32::from_ne_bytes([r[0], r[1], r[2], r[3]]) as usize;
        if len < NLMSG_HDRLEN || len > r.len() {
            self.malformed = true;
            self.rest = &[];
            return None;
        }
        let msg = NlMsg {
            kind: u16::from_ne_bytes([r[4], r[5]]),
            flags: u16::from_ne_bytes([r[6], r[7]]),
            seq: u32::from_ne_bytes([r[8], r[9], r[10], r[11]]),
            pid: u32::from_ne_bytes([r[12], r[13], r[14], r[15]]),
            payload: &r[NLMSG_HDRLEN..len],
            bytes: &r[..len],
        };
        self.rest = &r[align4(len).min(r.len())..];
        Some(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_netfilter_message() {
        let mut b = Vec::new();
        push_nfnl(
            &mut b,
            0x0a01,
            NLM_F_REQUEST,
            7,
            2,
            10,
            &[5, 0, 1, 0, 9, 0, 0, 0],
        );
        let mut want = Vec::new();
        want.extend_from_slice(&28u32.to_ne_bytes());
        want.extend_from_slice(&0x0a01u16.to_ne_bytes());
        want.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
        want.extend_from_slice(&7u32.to_ne_bytes());
        want.extend_from_slice(&0u32.to_ne_bytes());
        want.extend_from_slice(&[2, 0, 0, 10]); // nfgenmsg, res_id big-endian
        want.extend_from_slice(&[5, 0, 1, 0, 9, 0, 0, 0]);
        assert_eq!(b, want);
        let m = NlMsgIter::new(&b).next().unwrap();
        assert_eq!((m.kind, m.seq, m.bytes.len()), (0x0a01, 7, 28));
        assert_eq!(m.nfgen().map(|n| (n.0, n.1)), Some((2, 10)));
    }

    /// The size agrees with the writer, padding included.
    #[test]
    fn nfnl_len_is_what_push_nfnl_writes() {
        let attrs = [1u8; 9];
        for n in 0..=attrs.len() {
            let mut b = Vec::new();
            push_nfnl(&mut b, 0x0a01, NLM_F_REQUEST, 7, 2, 0, &attrs[..n]);
            assert_eq!(b.len(), nfnl_len(n), "{n} bytes of attributes");
        }
        assert_eq!((nfnl_len(0), nfnl_len(1), nfnl_len(8)), (20, 24, 28));
    }

    #[test]
    fn sentinel_is_a_noop_asking_for_an_ack() {
        let mut b = Vec::new();
        push_sentinel(&mut b, 42);
        let m = NlMsgIter::new(&b).next().unwrap();
        assert_eq!(
            (m.kind, m.flags, m.seq),
            (NLMSG_NOOP, NLM_F_REQUEST | NLM_F_ACK, 42)
        );
        assert_eq!(b.len(), 20);
    }

    #[test]
    fn error_and_errno() {
        let mut b = Vec::new();
        let s = begin(&mut b, NLMSG_ERROR, 0, 3);
        b.extend_from_slice(&(-2i32).to_ne_bytes());
        let inner = begin(&mut b, 0, 0, 9);
        end(&mut b, inner);
        end(&mut b, s);
        let m = NlMsgIter::new(&b).next().unwrap();
        assert_eq!(m.error(), Some((-2, 9)));
        assert_eq!(m.errno(), Some(2));
        let short = NlMsg {
            payload: &[1, 2],
            ..m
        };
        assert_eq!((short.error(), short.errno()), (None, None));
    }

    /// An error with extended-ack TLVs, as the kernel lays it out: error code, the
    /// original header (capped: no payload), then the TLVs; and uncapped, with the
    /// original payload echoed before them.
    fn ext_error(capped: bool, tlvs: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        let flags = NLM_F_ACK_TLVS | if capped { NLM_F_CAPPED } else { 0 };
        let s = begin(&mut b, NLMSG_ERROR, flags, 3);
        b.extend_from_slice(&(-17i32).to_ne_bytes());
        // the original message: 16 bytes of header, 10 of payload (len 26)
        b.extend_from_slice(&26u32.to_ne_bytes());
        b.extend_from_slice(&[0; 4]);
        b.extend_from_slice(&9u32.to_ne_bytes());
        b.extend_from_slice(&[0; 4]);
        if !capped {
            b.extend_from_slice(&[7; 10]);
            b.extend_from_slice(&[0; 2]); // padding to 4
        }
        for (kind, v) in tlvs {
            b.extend_from_slice(&((4 + v.len()) as u16).to_ne_bytes());
            b.extend_from_slice(&kind.to_ne_bytes());
            b.extend_from_slice(v);
            b.resize(align4(b.len()), 0);
        }
        end(&mut b, s);
        b
    }

    #[test]
    fn extended_ack_names_the_refused_attribute() {
        let msg = (NLMSGERR_ATTR_MSG, b"Could not process\0".to_vec());
        let offs = (NLMSGERR_ATTR_OFFS, 1234u32.to_ne_bytes().to_vec());
        for capped in [true, false] {
            let b = ext_error(capped, &[msg.clone(), offs.clone()]);
            let m = NlMsgIter::new(&b).next().unwrap();
            assert_eq!(m.error(), Some((-17, 9)));
            assert_eq!(m.error_offset(), Some(1234), "capped: {capped}");
        }
        // no offset TLV, no TLVs at all, a TLV longer than the message
        let b = ext_error(true, std::slice::from_ref(&msg));
        assert_eq!(NlMsgIter::new(&b).next().unwrap().error_offset(), None);
        let mut b = ext_error(true, &[]);
        b[6..8].copy_from_slice(&0u16.to_ne_bytes());
        assert_eq!(NlMsgIter::new(&b).next().unwrap().error_offset(), None);
        let mut b = ext_error(true, &[offs]);
        let at = b.len() - 8;
        b[at..at + 2].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(NlMsgIter::new(&b).next().unwrap().error_offset(), None);
    }

    #[test]
    fn malformed_headers_end_iteration() {
        let mut b = Vec::new();
        push_sentinel(&mut b, 1);
        push_sentinel(&mut b, 2);
        for cut in 0..b.len() {
            let mut it = NlMsgIter::new(&b[..cut]);
            let n = it.by_ref().count();
            assert_eq!(n, cut / 20, "cut {cut}");
            assert_eq!(it.malformed, cut % 20 != 0, "cut {cut}");
        }
        // A length below the header size, or beyond the buffer.
        for bad in [3u32, 1000] {
            let mut c = b.clone();
            c[0..4].copy_from_slice(&bad.to_ne_bytes());
            let mut it = NlMsgIter::new(&c);
            assert_eq!(it.by_ref().count(), 0);
            assert!(it.malformed);
        }
    }
}
