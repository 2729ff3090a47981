//! The classic BPF socket filter of the event socket: drop conntrack event messages
//! whose original tuple's L4 protocol is not UDP, so that TCP events (usually most of
//! a node's) never take space in the receive buffer nor a `recvmsg`. Pure: the
//! program is data, unit-tested with a small interpreter (`events_tests.rs`).
//!
//! A ctnetlink event is `nlmsghdr` (16 bytes) + `nfgenmsg` (4) and then, first,
//! CTA_TUPLE_ORIG { CTA_TUPLE_IP { src, dst }, CTA_TUPLE_PROTO { CTA_PROTO_NUM, .. } }
//! (`ctnetlink_conntrack_event` -> `ctnetlink_dump_tuples`). With 4-byte attribute
//! headers the protocol number is at a fixed offset: 52 for IPv4, 76 for IPv6. The
//! program checks every length and type on the way (types without the NESTED and
//! BYTEORDER flags) and the packet's length, and drops a message only when all of it
//! is confirmed and the protocol is not UDP; anything else (another message type,
//! family or layout, a short message) is accepted: user space parses it and drops
//! non-UDP entries anyway, so a kernel with another layout costs buffer space, never
//! an event.
//!
//! BPF loads are big-endian, while netlink headers are host-endian: every 16-bit
//! constant is compared as the bytes the host writes, read big-endian ([`ne16`]).

use crate::wire::{
    AF_INET, AF_INET6, CTA_IP_V4_DST, CTA_IP_V4_SRC, CTA_IP_V6_DST, CTA_IP_V6_SRC, CTA_PROTO_NUM,
    CTA_TUPLE_IP, CTA_TUPLE_ORIG, CTA_TUPLE_PROTO, MSG_CT_DELETE, MSG_CT_NEW,
};
use crate::IPPROTO_UDP;
use libc::sock_filter;
use nl_core::{NLA_HDRLEN, NLA_TYPE_MASK};

/// A host-endian u16 as a big-endian BPF half-word load sees it.
pub(crate) const fn ne16(v: u16) -> u32 {
    u16::from_be_bytes(v.to_ne_bytes()) as u32
}

pub(crate) const LD_H_ABS: u16 = (libc::BPF_LD | libc::BPF_H | libc::BPF_ABS) as u16;
pub(crate) const LD_B_ABS: u16 = (libc::BPF_LD | libc::BPF_B | libc::BPF_ABS) as u16;
pub(crate) const LD_W_LEN: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_LEN) as u16;
pub(crate) const ALU_AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
pub(crate) const JMP_JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
pub(crate) const JMP_JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
pub(crate) const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

/// Keep the whole message / drop it.
pub(crate) const ACCEPT: u32 = u32::MAX;
pub(crate) const DROP: u32 = 0;

/// Offsets in an event message.
const NLMSG_TYPE: u32 = 4;
const NFGEN_FAMILY: u32 = 16;
const ORIG: u32 = 20; // CTA_TUPLE_ORIG's header
const IP: u32 = ORIG + NLA_HDRLEN as u32; // CTA_TUPLE_IP's header

/// Where a jump goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Next,
    Label(Lbl),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lbl {
    Family,
    V4,
    V6,
    Accept,
    Drop,
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Stmt(u16, u32),
    Jump(u16, u32, To, To),
    Here(Lbl),
}

/// Append "A == k, else accept".
fn expect(p: &mut Vec<Op>, k: u32) {
    p.push(Op::Jump(JMP_JEQ_K, k, To::Next, To::Label(Lbl::Accept)));
}

/// Append the checks of one attribute header at `at`: its length (when given) and its
/// type without flags.
fn attr(p: &mut Vec<Op>, at: u32, len: Option<u16>, kind: u16) {
    if let Some(len) = len {
        p.push(Op::Stmt(LD_H_ABS, at));
        expect(p, ne16(len));
    }
    p.push(Op::Stmt(LD_H_ABS, at + 2));
    p.push(Op::Stmt(ALU_AND_K, ne16(NLA_TYPE_MASK)));
    expect(p, ne16(kind));
}

/// The checks of one family: the original tuple's layout up to the protocol number,
/// then UDP -> accept, anything else -> drop.
fn family(p: &mut Vec<Op>, addr_len: u16, src: u16, dst: u16) {
    let a = u32::from(addr_len);
    let addr_attr = NLA_HDRLEN as u16 + addr_len;
    let ip_len = NLA_HDRLEN as u16 + 2 * addr_attr;
    let proto = IP + u32::from(ip_len); // CTA_TUPLE_PROTO's header
    let num = proto + NLA_HDRLEN as u32; // CTA_PROTO_NUM's header
    let byte = num + NLA_HDRLEN as u32; // the protocol number
    p.push(Op::Stmt(LD_W_LEN, 0));
    p.push(Op::Jump(
        JMP_JGE_K,
        byte + 1,
        To::Next,
        To::Label(Lbl::Accept),
    ));
    attr(p, ORIG, None, CTA_TUPLE_ORIG);
    attr(p, IP, Some(ip_len), CTA_TUPLE_IP);
    attr(p, IP + 4, Some(addr_attr), src);
    attr(p, IP + 4 + 4 + a, Some(addr_attr), dst);
    attr(p, proto, None, CTA_TUPLE_PROTO);
    attr(p, num, Some(NLA_HDRLEN as u16 + 1), CTA_PROTO_NUM);
    p.push(Op::Stmt(LD_B_ABS, byte));
    p.push(Op::Jump(
        JMP_JEQ_K,
        u32::from(IPPROTO_UDP),
        To::Label(Lbl::Accept),
        To::Label(Lbl::Drop),
    ));
}

/// The program: see the module documentation.
pub(crate) fn udp_only() -> Vec<sock_filter> {
    let mut p = Vec::with_capacity(64);
    // Headers there (a load past the end would drop the message), else accept.
    p.push(Op::Stmt(LD_W_LEN, 0));
    p.push(Op::Jump(JMP_JGE_K, ORIG, To::Next, To::Label(Lbl::Accept)));
    // A conntrack event (NEW or DELETE), else accept.
    p.push(Op::Stmt(LD_H_ABS, NLMSG_TYPE));
    p.push(Op::Jump(
        JMP_JEQ_K,
        ne16(MSG_CT_NEW),
        To::Label(Lbl::Family),
        To::Next,
    ));
    p.push(Op::Jump(
        JMP_JEQ_K,
        ne16(MSG_CT_DELETE),
        To::Label(Lbl::Family),
        To::Label(Lbl::Accept),
    ));
    p.push(Op::Here(Lbl::Family));
    p.push(Op::Stmt(LD_B_ABS, NFGEN_FAMILY));
    p.push(Op::Jump(
        JMP_JEQ_K,
        u32::from(AF_INET),
        To::Label(Lbl::V4),
        To::Next,
    ));
    p.push(Op::Jump(
        JMP_JEQ_K,
        u32::from(AF_INET6),
        To::Label(Lbl::V6),
        To::Label(Lbl::Accept),
    ));
    p.push(Op::Here(Lbl::V4));
    family(&mut p, 4, CTA_IP_V4_SRC, CTA_IP_V4_DST);
    p.push(Op::Here(Lbl::V6));
    family(&mut p, 16, CTA_IP_V6_SRC, CTA_IP_V6_DST);
    p.push(Op::Here(Lbl::Accept));
    p.push(Op::Stmt(RET_K, ACCEPT));
    p.push(Op::Here(Lbl::Drop));
    p.push(Op::Stmt(RET_K, DROP));
    assemble(&p)
}

/// Resolve labels into relative forward jumps.
fn assemble(ops: &[Op]) -> Vec<sock_filter> {
    let mut at = Vec::new();
    let mut n = 0usize;
    for op in ops {
        match op {
            Op::Here(l) => at.push((*l, n)),
            _ => n += 1,
        }
    }
    let target = |l: Lbl| at.iter().find(|(x, _)| *x == l).map(|&(_, i)| i);
    let mut out = Vec::with_capacity(n);
    for op in ops {
        match *op {
            Op::Here(_) => {}
            Op::Stmt(code, k) => out.push(sock_filter {
                code,
                jt: 0,
                jf: 0,
                k,
            }),
            Op::Jump(code, k, t, f) => {
                let here = out.len() + 1;
                let off = |to: To| -> u8 {
                    match to {
                        To::Next => 0,
                        To::Label(l) => {
                            let dest = target(l).expect("label placed in the program");
                            u8::try_from(dest - here).expect("jump within 255 instructions")
                        }
                    }
                };
                out.push(sock_filter {
                    code,
                    jt: off(t),
                    jf: off(f),
                    k,
                });
            }
        }
    }
    out
}
