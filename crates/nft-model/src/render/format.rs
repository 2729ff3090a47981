//! Register contents formatted by kind, and the field tables behind them.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::text::{proto_name, quote};
use crate::expr::*;

/// How a value held in a register is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Ipv4,
    Ipv6,
    /// big-endian integer printed in decimal (ports, lengths)
    BeInt,
    Proto,
    /// host-endian 32 bits, `0x%08x`
    Mark,
    CtState,
    CtStatus,
    CtDir,
    FibType,
    Ifname,
    /// host-endian integer in decimal (numgen, meta length, interface index)
    HostInt,
    Ethertype,
    Nfproto,
    Pkttype,
    /// unknown: hexadecimal bytes
    Raw,
}

/// What a register holds.
#[derive(Debug, Clone)]
pub(super) enum Sym {
    /// A loaded field. `full` is the field's width when only its first `len` bytes were
    /// loaded (an address prefix).
    Field {
        text: String,
        kind: Kind,
        len: usize,
        full: Option<usize>,
    },
    /// `(base & mask) ^ xor`
    Bits {
        base: Box<Sym>,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// An immediate value.
    Const(Vec<u8>),
    /// The data of a map lookup: `<key> map @m`.
    MapData(String),
    /// Nothing known.
    Unknown(Reg),
}

pub(super) fn transport_name(p: u8) -> Option<&'static str> {
    Some(match p {
        6 => "tcp",
        17 => "udp",
        33 => "dccp",
        132 => "sctp",
        136 => "udplite",
        _ => return None,
    })
}

/// `random,fully-random,persistent` (the masquerade/nat flags nft prints).
pub(super) fn nat_flag_names(flags: u32) -> String {
    let mut f = Vec::new();
    if flags & nat_flags::PROTO_RANDOM != 0 {
        f.push("random");
    }
    if flags & nat_flags::PROTO_RANDOM_FULLY != 0 {
        f.push("fully-random");
    }
    if flags & nat_flags::PERSISTENT != 0 {
        f.push("persistent");
    }
    f.join(",")
}

pub(super) fn meta_field(key: MetaKey) -> (&'static str, Kind, usize) {
    match key {
        MetaKey::Len => ("meta length", Kind::HostInt, 4),
        MetaKey::Protocol => ("meta protocol", Kind::Ethertype, 2),
        MetaKey::Mark => ("meta mark", Kind::Mark, 4),
        MetaKey::Iif => ("iif", Kind::HostInt, 4),
        MetaKey::Oif => ("oif", Kind::HostInt, 4),
        MetaKey::Iifname => ("iifname", Kind::Ifname, 16),
        MetaKey::Oifname => ("oifname", Kind::Ifname, 16),
        MetaKey::Nfproto => ("meta nfproto", Kind::Nfproto, 1),
        MetaKey::L4proto => ("meta l4proto", Kind::Proto, 1),
        MetaKey::Pkttype => ("meta pkttype", Kind::Pkttype, 1),
    }
}

pub(super) fn ct_field(key: CtKey) -> (&'static str, Kind, usize) {
    match key {
        CtKey::State => ("ct state", Kind::CtState, 4),
        CtKey::Direction => ("ct direction", Kind::CtDir, 1),
        CtKey::Status => ("ct status", Kind::CtStatus, 4),
        CtKey::Mark => ("ct mark", Kind::Mark, 4),
    }
}

/// The number of leading one bits of a mask made of leading ones only.
pub(super) fn prefix_len(mask: &[u8]) -> Option<u32> {
    let mut n = 0u32;
    let mut seen_zero = false;
    for b in mask {
        for i in 0..8 {
            if b & (0x80 >> i) != 0 {
                if seen_zero {
                    return None;
                }
                n += 1;
            } else {
                seen_zero = true;
            }
        }
    }
    Some(n)
}

/// `base & mask`, `base | bits`, `base ^ bits` (the forms nft prints for bitwise).
pub(super) fn bits_text(base: &Sym, mask: &[u8], xor: &[u8]) -> String {
    let kind = base.kind();
    let b = base.text(kind);
    let zero = xor.iter().all(|&x| x == 0);
    let ones = mask.iter().all(|&x| x == 0xff);
    let complement = mask.len() == xor.len() && mask.iter().zip(xor).all(|(m, x)| m ^ x == 0xff);
    let v = |bytes: &[u8]| match kind {
        Kind::Ipv4 | Kind::Ipv6 | Kind::Mark | Kind::HostInt | Kind::Raw => fmt_value(kind, bytes),
        _ => fmt_value(Kind::Raw, bytes),
    };
    if zero {
        format!("{b} & {}", v(mask))
    } else if ones {
        format!("{b} ^ {}", v(xor))
    } else if complement {
        format!("{b} | {}", v(xor))
    } else {
        format!("{b} & {} ^ {}", v(mask), v(xor))
    }
}

pub(super) fn host_u32(d: &[u8]) -> Option<u32> {
    <[u8; 4]>::try_from(d).ok().map(u32::from_ne_bytes)
}

pub(super) fn be_uint(d: &[u8]) -> Option<u64> {
    (!d.is_empty() && d.len() <= 8).then(|| d.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b)))
}

/// Format register bytes as a value of `kind`; bytes of an unexpected width as hex.
pub(super) fn fmt_value(kind: Kind, d: &[u8]) -> String {
    let raw = || {
        let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    };
    let names = |v: u32, table: &[(u32, &str)]| -> String {
        let mut out: Vec<String> = Vec::new();
        let mut rest = v;
        for (bit, name) in table {
            if v & bit != 0 {
                out.push((*name).into());
                rest &= !bit;
            }
        }
        if rest != 0 || out.is_empty() {
            out.push(format!("0x{rest:x}"));
        }
        out.join(",")
    };
    match kind {
        Kind::Ipv4 => match <[u8; 4]>::try_from(d) {
            Ok(a) => Ipv4Addr::from(a).to_string(),
            Err(_) => raw(),
        },
        Kind::Ipv6 => match <[u8; 16]>::try_from(d) {
            Ok(a) => Ipv6Addr::from(a).to_string(),
            Err(_) => raw(),
        },
        Kind::BeInt => be_uint(d).map(|v| v.to_string()).unwrap_or_else(raw),
        Kind::Proto => match d {
            [p] => proto_name(*p),
            _ => raw(),
        },
        Kind::Mark => host_u32(d)
            .map(|v| format!("0x{v:08x}"))
            .unwrap_or_else(raw),
        Kind::HostInt => host_u32(d).map(|v| v.to_string()).unwrap_or_else(raw),
        Kind::CtState => host_u32(d)
            .map(|v| {
                names(
                    v,
                    &[
                        (ct_state::INVALID, "invalid"),
                        (ct_state::ESTABLISHED, "established"),
                        (ct_state::RELATED, "related"),
                        (ct_state::NEW, "new"),
                        (ct_state::UNTRACKED, "untracked"),
                    ],
                )
            })
            .unwrap_or_else(raw),
        Kind::CtStatus => host_u32(d)
            .map(|v| {
                names(
                    v,
                    &[
                        (ct_status::EXPECTED, "expected"),
                        (ct_status::SEEN_REPLY, "seen-reply"),
                        (ct_status::ASSURED, "assured"),
                        (ct_status::CONFIRMED, "confirmed"),
                        (ct_status::SNAT, "snat"),
                        (ct_status::DNAT, "dnat"),
                        (ct_status::DYING, "dying"),
                    ],
                )
            })
            .unwrap_or_else(raw),
        Kind::CtDir => match d {
            [0] => "original".into(),
            [1] => "reply".into(),
            _ => raw(),
        },
        Kind::FibType => host_u32(d)
            .map(|v| match v {
                0 => "unspec".to_string(),
                rtn::UNICAST => "unicast".into(),
                rtn::LOCAL => "local".into(),
                rtn::BROADCAST => "broadcast".into(),
                rtn::ANYCAST => "anycast".into(),
                rtn::MULTICAST => "multicast".into(),
                6 => "blackhole".into(),
                7 => "unreachable".into(),
                8 => "prohibit".into(),
                other => other.to_string(),
            })
            .unwrap_or_else(raw),
        Kind::Ifname => {
            let (name, full) = match d.iter().position(|&c| c == 0) {
                Some(end) => (&d[..end], true),
                None => (d, false),
            };
            let s = String::from_utf8_lossy(name);
            if full {
                quote(&s)
            } else {
                quote(&format!("{s}*"))
            }
        }
        Kind::Ethertype => match be_uint(d) {
            Some(0x0800) => "ip".into(),
            Some(0x86dd) => "ip6".into(),
            Some(0x0806) => "arp".into(),
            Some(v) if d.len() == 2 => format!("0x{v:04x}"),
            _ => raw(),
        },
        Kind::Nfproto => match d {
            [2] => "ipv4".into(),
            [10] => "ipv6".into(),
            [v] => v.to_string(),
            _ => raw(),
        },
        Kind::Pkttype => match d {
            [0] => "host".into(),
            [1] => "broadcast".into(),
            [2] => "multicast".into(),
            [3] => "other".into(),
            [v] => v.to_string(),
            _ => raw(),
        },
        Kind::Raw => raw(),
    }
}
