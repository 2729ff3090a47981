//! Expression sequences of the rules the compiler emits (nft's own encodings, so that the
//! rendering lists and reloads identically).

use std::net::IpAddr;

use kube_model::Cidr;
use nft_model::build::{self, KeyField};
use nft_model::*;

pub fn fam_value(ip: &IpAddr) -> Value {
    match ip {
        IpAddr::V4(a) => Value::Ipv4(*a),
        IpAddr::V6(a) => Value::Ipv6(*a),
    }
}

pub fn addr_type(family: Family) -> DataType {
    if family == Family::Ip6 {
        DataType::Ipv6Addr
    } else {
        DataType::Ipv4Addr
    }
}

pub fn verdict(v: Verdict) -> Expr {
    Expr::Verdict(v)
}

pub fn jump(chain: &str) -> Expr {
    Expr::Verdict(Verdict::Jump(chain.into()))
}

pub fn goto(chain: &str) -> Expr {
    Expr::Verdict(Verdict::Goto(chain.into()))
}

/// `ct state new`
pub fn ct_new() -> Vec<Expr> {
    build::ct_state_any(ct_state::NEW)
}

/// `ip saddr 198.18.0.0/15` (`neq`: `!=`), as nft encodes it: only the prefix bytes are
/// loaded when the prefix is byte aligned, else the address is masked.
pub fn prefix_match(family: Family, src: bool, cidr: &Cidr, neq: bool) -> Vec<Expr> {
    let op = if neq { CmpOp::Neq } else { CmpOp::Eq };
    let full_len: u32 = if family == Family::Ip6 { 16 } else { 4 };
    let bytes = fam_value(&cidr.addr).to_bytes();
    let plen = u32::from(cidr.prefix);
    if plen == full_len * 8 {
        return build::addr_cmp(family, src, op, &fam_value(&cidr.addr));
    }
    let Expr::Payload { base, offset, .. } = build::load_addr(family, src, Reg::R1) else {
        unreachable!()
    };
    if plen % 8 == 0 {
        let n = plen / 8;
        vec![
            Expr::Payload {
                base,
                offset,
                len: n,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op,
                data: bytes[..n as usize].to_vec(),
            },
        ]
    } else {
        vec![
            Expr::Payload {
                base,
                offset,
                len: full_len,
                dreg: Reg::R1,
            },
            Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                len: full_len,
                mask: cidr.mask_bytes(),
                xor: vec![0; full_len as usize],
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op,
                data: bytes,
            },
        ]
    }
}

/// `iifname "name"` / `iifname "prefix*"` (`neq`: `!=`).
pub fn iifname_match(name: &str, prefix: bool, neq: bool) -> Vec<Expr> {
    let mut e = build::iifname_eq(name, prefix);
    if let Some(Expr::Cmp { op, .. }) = e.last_mut() {
        *op = if neq { CmpOp::Neq } else { CmpOp::Eq };
    }
    e
}

/// `fib saddr type local`
pub fn fib_saddr_local() -> Vec<Expr> {
    vec![
        Expr::Fib {
            flags: fib_flags::SADDR,
            result: FibResult::AddrType,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: rtn::LOCAL.to_ne_bytes().to_vec(),
        },
    ]
}

/// `meta mark set meta mark | <mark>`
pub fn mark_masq(mark: u32) -> Vec<Expr> {
    build::mark_or(mark)
}

/// `meta mark set meta mark ^ <mark>`
pub fn mark_clear(mark: u32) -> Vec<Expr> {
    build::mark_xor(mark)
}

/// `ip daddr . meta l4proto . th dport`
pub const DST_KEY: [KeyField; 3] = [KeyField::Daddr, KeyField::L4proto, KeyField::Dport];
/// `meta l4proto . th dport`
pub const PORT_KEY: [KeyField; 2] = [KeyField::L4proto, KeyField::Dport];

fn numgen(modulus: u32, offset: u32) -> Expr {
    Expr::Numgen {
        kind: NumgenKind::Random,
        modulus,
        offset,
        dreg: Reg::R1,
    }
}

/// `meta l4proto <p> dnat ip to numgen random mod N offset O map @m`
pub fn dnat_numgen_map(family: Family, proto: u8, n: u32, offset: u32, map: &str) -> Vec<Expr> {
    let mut e = build::l4proto_eq(proto);
    e.push(numgen(n, offset));
    e.push(Expr::Lookup {
        set: map.into(),
        sreg: Reg::R1,
        dreg: Some(Reg::R1),
        invert: false,
    });
    e.push(Expr::Nat {
        kind: NatKind::Dnat,
        family,
        addr: Some(Reg::R1),
        port: Some(if family == Family::Ip6 {
            Reg::R2
        } else {
            Reg::r32(1)
        }),
        flags: nat_flags::MAP_IPS | nat_flags::PROTO_SPECIFIED,
    });
    e
}

/// `numgen random mod N offset O vmap @m`
pub fn numgen_vmap(n: u32, offset: u32, map: &str) -> Vec<Expr> {
    vec![
        numgen(n, offset),
        Expr::Lookup {
            set: map.into(),
            sreg: Reg::R1,
            dreg: Some(Reg::VERDICT),
            invert: false,
        },
    ]
}

/// `meta l4proto <p> dnat ip to <addr>:<port>`
pub fn dnat_to(family: Family, proto: u8, addr: &IpAddr, port: u16) -> Vec<Expr> {
    let mut e = build::l4proto_eq(proto);
    e.extend(build::dnat_to(family, &fam_value(addr), port));
    e
}

/// `reject` (ICMP / ICMPv6 port unreachable)
pub fn reject(family: Family) -> Expr {
    Expr::Reject(Reject::IcmpUnreach(if family == Family::Ip6 {
        4
    } else {
        3
    }))
}

pub fn masquerade() -> Expr {
    Expr::Masquerade {
        flags: nat_flags::PROTO_RANDOM_FULLY,
    }
}

pub fn rule(parts: Vec<Vec<Expr>>) -> Rule {
    Rule::new(parts.into_iter().flatten().collect())
}
