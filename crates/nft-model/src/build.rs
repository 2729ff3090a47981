//! Constructors for the expression patterns a proxier uses, register allocation included.
//! Each returns the exact expression sequence `nft` itself generates for the same
//! statement, so rendering and `nft -f` round trips agree.

use crate::expr::*;
use crate::object::Rule;
use crate::value::{concat_bytes, DataType, Value};

/// Offsets in the IPv4 and IPv6 headers.
fn addr_offset(family: Family, src: bool) -> (u32, u32) {
    match (family, src) {
        (Family::Ip6, true) => (8, 16),
        (Family::Ip6, false) => (24, 16),
        (_, true) => (12, 4),
        (_, false) => (16, 4),
    }
}

/// Load `ip saddr`/`ip daddr` (or the ip6 ones) into `dreg`.
pub fn load_addr(family: Family, src: bool, dreg: Reg) -> Expr {
    let (offset, len) = addr_offset(family, src);
    Expr::Payload {
        base: PayloadBase::Network,
        offset,
        len,
        dreg,
    }
}

/// Load `th sport`/`th dport` into `dreg`.
pub fn load_port(src: bool, dreg: Reg) -> Expr {
    Expr::Payload {
        base: PayloadBase::Transport,
        offset: if src { 0 } else { 2 },
        len: 2,
        dreg,
    }
}

/// `meta l4proto <proto>`
pub fn l4proto_eq(proto: u8) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: MetaKey::L4proto,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: vec![proto],
        },
    ]
}

/// A verdict statement.
pub fn verdict(v: Verdict) -> Expr {
    Expr::Verdict(v)
}

/// `jump <chain>`
pub fn jump(chain: &str) -> Expr {
    Expr::Verdict(Verdict::Jump(chain.into()))
}

/// `goto <chain>`
pub fn goto(chain: &str) -> Expr {
    Expr::Verdict(Verdict::Goto(chain.into()))
}

/// A rule made of expression fragments, in order.
pub fn rule(parts: Vec<Vec<Expr>>) -> Rule {
    Rule::new(parts.into_iter().flatten().collect())
}

/// `ip daddr <op> <addr>` (`src` for saddr)
pub fn addr_cmp(family: Family, src: bool, op: CmpOp, addr: &Value) -> Vec<Expr> {
    vec![
        load_addr(family, src, Reg::R1),
        Expr::Cmp {
            sreg: Reg::R1,
            op,
            data: addr.to_bytes(),
        },
    ]
}

/// `ip saddr 198.18.0.0/15` (`neq`: `!=`) for the prefix `addr/prefix_len`, as nft
/// encodes it: the whole address compared when the prefix covers it, only the prefix
/// bytes loaded when it is byte aligned, else the address masked.
pub fn prefix_match(
    family: Family,
    src: bool,
    addr: &Value,
    prefix_len: u32,
    neq: bool,
) -> Vec<Expr> {
    let op = if neq { CmpOp::Neq } else { CmpOp::Eq };
    let (offset, full_len) = addr_offset(family, src);
    let bytes = addr.to_bytes();
    if prefix_len >= full_len * 8 {
        return addr_cmp(family, src, op, addr);
    }
    if prefix_len.is_multiple_of(8) {
        let n = prefix_len / 8;
        return vec![
            Expr::Payload {
                base: PayloadBase::Network,
                offset,
                len: n,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op,
                data: bytes.get(..n as usize).unwrap_or(&bytes).to_vec(),
            },
        ];
    }
    let mask: Vec<u8> = (0..full_len)
        .map(|i| {
            let bits = prefix_len.saturating_sub(i * 8).min(8);
            (0xff00u16 >> bits) as u8
        })
        .collect();
    vec![
        load_addr(family, src, Reg::R1),
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: full_len,
            mask,
            xor: vec![0; full_len as usize],
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op,
            data: bytes,
        },
    ]
}

/// `ip daddr @set` (or `!= @set` with `invert`)
pub fn addr_in_set(family: Family, src: bool, set: &str, invert: bool) -> Vec<Expr> {
    vec![
        load_addr(family, src, Reg::R1),
        Expr::Lookup {
            set: set.into(),
            sreg: Reg::R1,
            dreg: None,
            invert,
        },
    ]
}

/// One field of a concatenated key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyField {
    Saddr,
    Daddr,
    L4proto,
    Sport,
    Dport,
    /// `numgen random mod N`
    NumgenRandom(u32),
    /// A constant identifier, written `numgen random mod 1 offset <id>` (always `<id>`):
    /// nft 1.0.6 reads no constant inside a lookup's concatenation, but this it reads
    /// (session affinity's pins, keyed by client and identifiers).
    Id(u32),
    /// `meta mark`
    Mark,
}

impl KeyField {
    pub fn data_type(self, family: Family) -> DataType {
        match self {
            KeyField::Saddr | KeyField::Daddr => {
                if family == Family::Ip6 {
                    DataType::Ipv6Addr
                } else {
                    DataType::Ipv4Addr
                }
            }
            KeyField::L4proto => DataType::InetProto,
            KeyField::Sport | KeyField::Dport => DataType::InetService,
            KeyField::NumgenRandom(_) | KeyField::Id(_) => DataType::HostInt32,
            KeyField::Mark => DataType::Mark,
        }
    }

    fn load(self, family: Family, dreg: Reg) -> Expr {
        match self {
            KeyField::Saddr => load_addr(family, true, dreg),
            KeyField::Daddr => load_addr(family, false, dreg),
            KeyField::L4proto => Expr::Meta {
                key: MetaKey::L4proto,
                dreg,
            },
            KeyField::Sport => load_port(true, dreg),
            KeyField::Dport => load_port(false, dreg),
            KeyField::NumgenRandom(m) => Expr::Numgen {
                kind: NumgenKind::Random,
                modulus: m,
                offset: 0,
                dreg,
            },
            KeyField::Id(id) => Expr::Numgen {
                kind: NumgenKind::Random,
                modulus: 1,
                offset: id,
                dreg,
            },
            KeyField::Mark => Expr::Meta {
                key: MetaKey::Mark,
                dreg,
            },
        }
    }
}

/// The register nft names for the 4-byte word `word` of the register file: the 16-byte
/// register (`NFT_REG_1..4`) when the word starts one, the 32-bit register otherwise
/// (`ip6 daddr . th dport` loads into reg 1 and reg 2, `ip daddr . th dport` into reg 1
/// and reg 9). The kernel maps both names to the same storage.
fn reg_at_word(word: u32) -> Reg {
    if word & 3 == 0 {
        Reg(word / 4 + 1)
    } else {
        Reg::r32(word)
    }
}

/// Load a (possibly concatenated) key the way nft does: the first field into `NFT_REG_1`,
/// the following ones into the next registers (see [`reg_at_word`]).
/// Returns the expressions and the first register.
pub fn load_key(family: Family, fields: &[KeyField]) -> (Vec<Expr>, Reg) {
    let mut exprs = Vec::with_capacity(fields.len());
    let mut word = 0u32;
    for f in fields {
        exprs.push(f.load(family, reg_at_word(word)));
        word += (f.data_type(family).padded_len() / 4) as u32;
    }
    (exprs, Reg::R1)
}

/// `<key> vmap @map`
pub fn vmap_lookup(family: Family, fields: &[KeyField], map: &str) -> Vec<Expr> {
    let (mut e, sreg) = load_key(family, fields);
    e.push(Expr::Lookup {
        set: map.into(),
        sreg,
        dreg: Some(Reg::VERDICT),
        invert: false,
    });
    e
}

/// `<key> @set` (or `!= @set`)
pub fn set_lookup(family: Family, fields: &[KeyField], set: &str, invert: bool) -> Vec<Expr> {
    let (mut e, sreg) = load_key(family, fields);
    e.push(Expr::Lookup {
        set: set.into(),
        sreg,
        dreg: None,
        invert,
    });
    e
}

/// `dnat ip to <key> map @map` where the map yields `addr . port`.
pub fn dnat_map(family: Family, fields: &[KeyField], map: &str) -> Vec<Expr> {
    let (mut e, sreg) = load_key(family, fields);
    e.push(Expr::Lookup {
        set: map.into(),
        sreg,
        dreg: Some(Reg::R1),
        invert: false,
    });
    e.push(dnat_from_regs(family));
    e
}

/// `dnat` to the address in `NFT_REG_1` and the port right after it (where a map
/// lookup of `addr . port` data leaves them).
fn dnat_from_regs(family: Family) -> Expr {
    let addr_words = if family == Family::Ip6 { 4 } else { 1 };
    Expr::Nat {
        kind: NatKind::Dnat,
        family: if family == Family::Ip6 {
            Family::Ip6
        } else {
            Family::Ip
        },
        addr: Some(Reg::R1),
        port: Some(reg_at_word(addr_words)),
        flags: nat_flags::MAP_IPS | nat_flags::PROTO_SPECIFIED,
    }
}

/// `dnat ip to <addr>:<port>`
pub fn dnat_to(family: Family, addr: &Value, port: u16) -> Vec<Expr> {
    vec![
        Expr::Immediate {
            dreg: Reg::R1,
            data: addr.to_bytes(),
        },
        Expr::Immediate {
            dreg: Reg::R2,
            data: port.to_be_bytes().to_vec(),
        },
        Expr::Nat {
            kind: NatKind::Dnat,
            family: if family == Family::Ip6 {
                Family::Ip6
            } else {
                Family::Ip
            },
            addr: Some(Reg::R1),
            port: Some(Reg::R2),
            flags: nat_flags::MAP_IPS | nat_flags::PROTO_SPECIFIED,
        },
    ]
}

/// `meta mark set meta mark | <bits>`
pub fn mark_or(bits: u32) -> Vec<Expr> {
    mark_rewrite(!bits, bits)
}

/// `meta mark set meta mark ^ <bits>` (clears bits known to be set)
pub fn mark_xor(bits: u32) -> Vec<Expr> {
    mark_rewrite(u32::MAX, bits)
}

/// `meta mark set (meta mark & mask) ^ xor`, the one bitwise form nft uses for marks.
fn mark_rewrite(mask: u32, xor: u32) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: MetaKey::Mark,
            dreg: Reg::R1,
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: mask.to_ne_bytes().to_vec(),
            xor: xor.to_ne_bytes().to_vec(),
        },
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R1,
        },
    ]
}

/// `meta mark & <bits> == 0` (`invert`: `!= 0`)
pub fn mark_test(bits: u32, set: bool) -> Vec<Expr> {
    mark_cmp(bits, if set { CmpOp::Neq } else { CmpOp::Eq }, 0)
}

/// `meta mark & <mask> <op> <value>` (iptables-nft's `-m mark --mark v/m` is `Eq`).
pub fn mark_cmp(mask: u32, op: CmpOp, value: u32) -> Vec<Expr> {
    vec![
        Expr::Meta {
            key: MetaKey::Mark,
            dreg: Reg::R1,
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: mask.to_ne_bytes().to_vec(),
            xor: 0u32.to_ne_bytes().to_vec(),
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op,
            data: value.to_ne_bytes().to_vec(),
        },
    ]
}

/// `ct state <states>` (any of the bits)
pub fn ct_state_any(states: u32) -> Vec<Expr> {
    ct_bits(CtKey::State, states, CmpOp::Neq)
}

/// `ct state ! <states>` (none of the bits; a packet without conntrack has the
/// `invalid` or `untracked` bit)
pub fn ct_state_none(states: u32) -> Vec<Expr> {
    ct_bits(CtKey::State, states, CmpOp::Eq)
}

/// `ct status ! <bits>` (none of the bits; a packet without conntrack does not match)
pub fn ct_status_none(bits: u32) -> Vec<Expr> {
    ct_bits(CtKey::Status, bits, CmpOp::Eq)
}

/// `ct <key> & bits <op> 0`: `Neq` for any of the bits, `Eq` for none of them.
fn ct_bits(key: CtKey, bits: u32, op: CmpOp) -> Vec<Expr> {
    vec![
        Expr::Ct { key, dreg: Reg::R1 },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: bits.to_ne_bytes().to_vec(),
            xor: 0u32.to_ne_bytes().to_vec(),
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op,
            data: 0u32.to_ne_bytes().to_vec(),
        },
    ]
}

/// `fib daddr type local`
pub fn fib_daddr_local() -> Vec<Expr> {
    fib_local(fib_flags::DADDR)
}

/// `fib saddr type local`
pub fn fib_saddr_local() -> Vec<Expr> {
    fib_local(fib_flags::SADDR)
}

fn fib_local(flags: u32) -> Vec<Expr> {
    vec![
        Expr::Fib {
            flags,
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

/// `update @set { <key> }` with the set's own timeout.
pub fn set_update(family: Family, fields: &[KeyField], set: &str) -> Vec<Expr> {
    set_update_timeout(family, fields, set, None)
}

/// `update @set { <key> timeout <t> }`: the element's own timeout (`None`: the set's).
pub fn set_update_timeout(
    family: Family,
    fields: &[KeyField],
    set: &str,
    timeout_ms: Option<u64>,
) -> Vec<Expr> {
    let (mut e, key) = load_key(family, fields);
    e.push(update(set, key, timeout_ms));
    e
}

/// `update @set { <the key in registers from key> }`, the element's own timeout or the set's.
fn update(set: &str, key: Reg, timeout_ms: Option<u64>) -> Expr {
    Expr::Dynset {
        op: DynsetOp::Update,
        set: set.into(),
        key,
        data: None,
        timeout_ms,
    }
}

/// `<key> @set update @set { <key> timeout <t> }` with the key loaded once: the update
/// reads the registers the lookup read (nft lists, and reads, the same text as when each
/// statement loads its own copy; 3 fewer expressions for a key of three fields).
pub fn set_lookup_update(
    family: Family,
    fields: &[KeyField],
    set: &str,
    timeout_ms: Option<u64>,
) -> Vec<Expr> {
    let mut e = set_lookup(family, fields, set, false);
    // the lookup, last, names the registers its key was loaded into
    if let Some(&Expr::Lookup { sreg, .. }) = e.last() {
        e.push(update(set, sreg, timeout_ms));
    }
    e
}

/// `numgen random mod <n> 0 <then>`: matches with probability 1/n.
pub fn one_in(n: u32) -> Vec<Expr> {
    vec![
        numgen_random(n, 0, Reg::R1),
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: 0u32.to_ne_bytes().to_vec(),
        },
    ]
}

/// `iifname <name>` / `iifname <prefix>*`
pub fn iifname_eq(name: &str, prefix: bool) -> Vec<Expr> {
    iifname_cmp(name, prefix, false)
}

/// `iifname [!=] <name>` / `iifname [!=] <prefix>*` (`neq`: `!=`)
pub fn iifname_cmp(name: &str, prefix: bool, neq: bool) -> Vec<Expr> {
    let mut data = name.as_bytes().to_vec();
    if !prefix {
        // nft compares the whole IFNAMSIZ (16 bytes), NUL padded
        data.resize(data.len().max(15) + 1, 0);
    }
    vec![
        Expr::Meta {
            key: MetaKey::Iifname,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: if neq { CmpOp::Neq } else { CmpOp::Eq },
            data,
        },
    ]
}

/// `ct state new`
pub fn ct_new() -> Vec<Expr> {
    ct_state_any(ct_state::NEW)
}

/// `numgen random mod <modulus> [offset <offset>]` into `dreg`.
pub fn numgen_random(modulus: u32, offset: u32, dreg: Reg) -> Expr {
    Expr::Numgen {
        kind: NumgenKind::Random,
        modulus,
        offset,
        dreg,
    }
}

/// `meta l4proto <p> dnat ip to numgen random mod N offset O map @m`
pub fn dnat_numgen_map(family: Family, proto: u8, n: u32, offset: u32, map: &str) -> Vec<Expr> {
    let mut e = l4proto_eq(proto);
    e.push(numgen_random(n, offset, Reg::R1));
    e.push(Expr::Lookup {
        set: map.into(),
        sreg: Reg::R1,
        dreg: Some(Reg::R1),
        invert: false,
    });
    e.push(dnat_from_regs(family));
    e
}

/// `numgen random mod N offset O vmap @m`
pub fn numgen_vmap(n: u32, offset: u32, map: &str) -> Vec<Expr> {
    vec![
        numgen_random(n, offset, Reg::R1),
        Expr::Lookup {
            set: map.into(),
            sreg: Reg::R1,
            dreg: Some(Reg::VERDICT),
            invert: false,
        },
    ]
}

/// `meta l4proto <p> dnat ip to <addr>:<port>`
pub fn dnat_to_proto(family: Family, proto: u8, addr: &Value, port: u16) -> Vec<Expr> {
    let mut e = l4proto_eq(proto);
    e.extend(dnat_to(family, addr, port));
    e
}

/// `reject` (ICMP / ICMPv6 port unreachable, per table family)
pub fn reject(family: Family) -> Expr {
    Expr::Reject(Reject::IcmpUnreach(if family == Family::Ip6 {
        4
    } else {
        3
    }))
}

/// `counter name "NAME"`: count in the table's named counter.
pub fn counter_ref(name: &str) -> Expr {
    Expr::CounterRef(name.to_string())
}

/// `masquerade fully-random`
pub fn masquerade_fully_random() -> Expr {
    Expr::Masquerade {
        flags: nat_flags::PROTO_RANDOM_FULLY,
    }
}

/// Concatenated key bytes for an element (re-exported for convenience).
pub fn key_bytes(values: &[Value]) -> Vec<u8> {
    concat_bytes(values)
}
