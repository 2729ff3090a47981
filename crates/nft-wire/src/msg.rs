//! Netlink message framing: `nlmsghdr` + `nfgenmsg`, writing and bounds-checked parsing.

use crate::consts::*;

pub const NLMSG_HDRLEN: usize = 16;
pub const NFGENMSG_LEN: usize = 4;

/// Append one netfilter message (`nlmsghdr`, `nfgenmsg`, attributes) to `buf`.
pub fn push_message(
    buf: &mut Vec<u8>,
    kind: u16,
    flags: u16,
    seq: u32,
    family: u8,
    res_id: u16,
    attrs: &[u8],
) {
    let len = NLMSG_HDRLEN + NFGENMSG_LEN + attrs.len();
    buf.extend_from_slice(&(len as u32).to_ne_bytes());
    buf.extend_from_slice(&kind.to_ne_bytes());
    buf.extend_from_slice(&flags.to_ne_bytes());
    buf.extend_from_slice(&seq.to_ne_bytes());
    buf.extend_from_slice(&0u32.to_ne_bytes());
    buf.push(family);
    buf.push(0);
    buf.extend_from_slice(&res_id.to_be_bytes());
    buf.extend_from_slice(attrs);
}

/// The message type of an nftables object message.
pub fn nft_type(msg: u16) -> u16 {
    (NFNL_SUBSYS_NFTABLES << 8) | msg
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
}

impl<'a> NlMsg<'a> {
    /// For `NLMSG_ERROR`: the error code (0 = ACK) and the sequence number of the
    /// message it answers.
    pub fn error(&self) -> Option<(i32, u32)> {
        if self.kind != NLMSG_ERROR || self.payload.len() < 4 + NLMSG_HDRLEN {
            return None;
        }
        let code = i32::from_ne_bytes(self.payload[0..4].try_into().ok()?);
        let seq = u32::from_ne_bytes(self.payload[12..16].try_into().ok()?);
        Some((code, seq))
    }

    /// For netfilter messages: the family from `nfgenmsg` and the attributes after it.
    pub fn nfgen(&self) -> Option<(u8, u16, &'a [u8])> {
        if self.payload.len() < NFGENMSG_LEN {
            return None;
        }
        let res_id = u16::from_be_bytes([self.payload[2], self.payload[3]]);
        Some((self.payload[0], res_id, &self.payload[NFGENMSG_LEN..]))
    }
}

/// Iterate over the messages in `buf`; a malformed message ends the iteration and
/// sets `malformed`.
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
        };
        let next = ((len + 3) & !3).min(r.len());
        self.rest = &r[next..];
        Some(msg)
    }
}
