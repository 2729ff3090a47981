//! Rule expressions, one variant per kernel expression, registers explicit.

/// A kernel register. `0` is the verdict register, `1..=4` the 16-byte registers,
/// `8..=23` the 4-byte registers (`NFT_REG32_00..15`) used for concatenations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u32);

impl Reg {
    pub const VERDICT: Reg = Reg(0);
    pub const R1: Reg = Reg(1);
    pub const R2: Reg = Reg(2);
    pub const R3: Reg = Reg(3);
    pub const R4: Reg = Reg(4);
    /// `NFT_REG32_00 + n`
    pub const fn r32(n: u32) -> Reg {
        Reg(8 + n)
    }
    /// The 4-byte register index this register starts at (for concatenation layout).
    pub fn word_index(self) -> Option<u32> {
        match self.0 {
            1..=4 => Some((self.0 - 1) * 4),
            8..=23 => Some(self.0 - 8),
            _ => None,
        }
    }
    /// The register that starts `words` 4-byte words after this one.
    pub fn advance(self, words: u32) -> Reg {
        let w = self.word_index().unwrap_or(0) + words;
        Reg(8 + w)
    }
}

/// A verdict: in an `immediate` to the verdict register, or as map data.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    Accept,
    Drop,
    Continue,
    Return,
    Jump(String),
    Goto(String),
}

impl Verdict {
    pub const NF_DROP: i32 = 0;
    pub const NF_ACCEPT: i32 = 1;
    pub const NFT_CONTINUE: i32 = -1;
    pub const NFT_BREAK: i32 = -2;
    pub const NFT_JUMP: i32 = -3;
    pub const NFT_GOTO: i32 = -4;
    pub const NFT_RETURN: i32 = -5;

    pub fn code(&self) -> i32 {
        match self {
            Verdict::Accept => Self::NF_ACCEPT,
            Verdict::Drop => Self::NF_DROP,
            Verdict::Continue => Self::NFT_CONTINUE,
            Verdict::Return => Self::NFT_RETURN,
            Verdict::Jump(_) => Self::NFT_JUMP,
            Verdict::Goto(_) => Self::NFT_GOTO,
        }
    }

    pub fn chain(&self) -> Option<&str> {
        match self {
            Verdict::Jump(c) | Verdict::Goto(c) => Some(c),
            _ => None,
        }
    }

    pub fn from_code(code: i32, chain: Option<String>) -> Option<Verdict> {
        Some(match (code, chain) {
            (Self::NF_ACCEPT, None) => Verdict::Accept,
            (Self::NF_DROP, None) => Verdict::Drop,
            (Self::NFT_CONTINUE, None) => Verdict::Continue,
            (Self::NFT_RETURN, None) => Verdict::Return,
            (Self::NFT_JUMP, Some(c)) => Verdict::Jump(c),
            (Self::NFT_GOTO, Some(c)) => Verdict::Goto(c),
            _ => return None,
        })
    }
}

/// Payload header base (`NFT_PAYLOAD_*_HEADER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadBase {
    LinkLayer = 0,
    Network = 1,
    Transport = 2,
}

/// Meta keys we use (`NFT_META_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaKey {
    Len = 0,
    Protocol = 1,
    Mark = 3,
    Iif = 4,
    Oif = 5,
    Iifname = 6,
    Oifname = 7,
    Nfproto = 15,
    L4proto = 16,
    Pkttype = 19,
}

impl MetaKey {
    pub fn from_u32(v: u32) -> Option<MetaKey> {
        Some(match v {
            0 => MetaKey::Len,
            1 => MetaKey::Protocol,
            3 => MetaKey::Mark,
            4 => MetaKey::Iif,
            5 => MetaKey::Oif,
            6 => MetaKey::Iifname,
            7 => MetaKey::Oifname,
            15 => MetaKey::Nfproto,
            16 => MetaKey::L4proto,
            19 => MetaKey::Pkttype,
            _ => return None,
        })
    }
}

/// Comparison operators (`NFT_CMP_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmpOp {
    Eq = 0,
    Neq = 1,
    Lt = 2,
    Lte = 3,
    Gt = 4,
    Gte = 5,
}

impl CmpOp {
    pub fn from_u32(v: u32) -> Option<CmpOp> {
        Some(match v {
            0 => CmpOp::Eq,
            1 => CmpOp::Neq,
            2 => CmpOp::Lt,
            3 => CmpOp::Lte,
            4 => CmpOp::Gt,
            5 => CmpOp::Gte,
            _ => return None,
        })
    }
}

/// Conntrack keys we use (`NFT_CT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CtKey {
    State = 0,
    Direction = 1,
    Status = 2,
    Mark = 3,
}

impl CtKey {
    pub fn from_u32(v: u32) -> Option<CtKey> {
        Some(match v {
            0 => CtKey::State,
            1 => CtKey::Direction,
            2 => CtKey::Status,
            3 => CtKey::Mark,
            _ => return None,
        })
    }
}

/// Conntrack state bits as `ct state` holds them.
pub mod ct_state {
    pub const INVALID: u32 = 1;
    pub const ESTABLISHED: u32 = 1 << 1;
    pub const RELATED: u32 = 1 << 2;
    pub const NEW: u32 = 1 << 3;
    pub const UNTRACKED: u32 = 1 << 6;
}

/// Conntrack status bits (`IPS_*`) as `ct status` holds them.
pub mod ct_status {
    pub const EXPECTED: u32 = 1;
    pub const SEEN_REPLY: u32 = 1 << 1;
    pub const ASSURED: u32 = 1 << 2;
    pub const CONFIRMED: u32 = 1 << 3;
    pub const SNAT: u32 = 1 << 4;
    pub const DNAT: u32 = 1 << 5;
    pub const DYING: u32 = 1 << 9;
}

/// `fib` result kinds (`NFT_FIB_RESULT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FibResult {
    Oif = 1,
    Oifname = 2,
    AddrType = 3,
}

/// `fib` flags (`NFTA_FIB_F_*`).
pub mod fib_flags {
    pub const SADDR: u32 = 1;
    pub const DADDR: u32 = 2;
    pub const MARK: u32 = 4;
    pub const IIF: u32 = 8;
    pub const OIF: u32 = 16;
}

/// Route address types (`RTN_*`) as `fib ... type` yields them.
pub mod rtn {
    pub const UNICAST: u32 = 1;
    pub const LOCAL: u32 = 2;
    pub const BROADCAST: u32 = 3;
    pub const ANYCAST: u32 = 4;
    pub const MULTICAST: u32 = 5;
}

/// NAT kind (`NFT_NAT_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NatKind {
    Snat = 0,
    Dnat = 1,
}

/// NAT range flags (`NF_NAT_RANGE_*`).
pub mod nat_flags {
    pub const MAP_IPS: u32 = 1;
    pub const PROTO_SPECIFIED: u32 = 2;
    pub const PROTO_RANDOM: u32 = 4;
    pub const PERSISTENT: u32 = 8;
    pub const PROTO_RANDOM_FULLY: u32 = 16;
}

/// Layer 3 family numbers (`NFPROTO_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    Inet = 1,
    Ip = 2,
    Ip6 = 10,
}

impl Family {
    pub fn from_u8(v: u8) -> Option<Family> {
        Some(match v {
            1 => Family::Inet,
            2 => Family::Ip,
            10 => Family::Ip6,
            _ => return None,
        })
    }
    pub fn nft_name(self) -> &'static str {
        match self {
            Family::Inet => "inet",
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
        }
    }
}

/// `reject` kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// ICMP (v4) or ICMPv6 destination unreachable with this code, per table family.
    IcmpUnreach(u8),
    /// TCP reset.
    TcpRst,
    /// Family-independent ICMPX code (`NFT_REJECT_ICMPX_*`, 1 = port unreachable).
    IcmpxUnreach(u8),
}

/// `dynset` operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DynsetOp {
    Add = 0,
    Update = 1,
}

/// `numgen` kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NumgenKind {
    Incremental = 0,
    Random = 1,
}

/// One kernel expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// Load `len` bytes at `offset` of header `base` into `dreg`.
    Payload {
        base: PayloadBase,
        offset: u32,
        len: u32,
        dreg: Reg,
    },
    /// Load a meta key into `dreg`.
    Meta { key: MetaKey, dreg: Reg },
    /// Set a meta key from `sreg` (`meta mark set ...`).
    MetaSet { key: MetaKey, sreg: Reg },
    /// Compare `sreg` with `data`; on mismatch the rule stops.
    Cmp { sreg: Reg, op: CmpOp, data: Vec<u8> },
    /// `dreg = (sreg & mask) ^ xor` over `len` bytes.
    Bitwise {
        sreg: Reg,
        dreg: Reg,
        len: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// Look `sreg` up in a named set; with `dreg`, load the map data there
    /// (`Reg::VERDICT` for verdict maps).
    Lookup {
        set: String,
        sreg: Reg,
        dreg: Option<Reg>,
        invert: bool,
    },
    /// Load a constant into `dreg`.
    Immediate { dreg: Reg, data: Vec<u8> },
    /// Set the verdict.
    Verdict(Verdict),
    /// `numgen random mod N [offset O]` into `dreg` (host-endian u32).
    Numgen {
        kind: NumgenKind,
        modulus: u32,
        offset: u32,
        dreg: Reg,
    },
    /// dnat/snat to the address in `addr` and optionally the port in `port`.
    Nat {
        kind: NatKind,
        family: Family,
        addr: Option<Reg>,
        port: Option<Reg>,
        flags: u32,
    },
    /// masquerade with these `NF_NAT_RANGE_*` flags.
    Masquerade { flags: u32 },
    /// Load a conntrack key into `dreg`.
    Ct { key: CtKey, dreg: Reg },
    /// Set a conntrack key from `sreg` (`ct mark set ...`).
    CtSet { key: CtKey, sreg: Reg },
    /// `fib` lookup with `flags` yielding `result` into `dreg`.
    Fib {
        flags: u32,
        result: FibResult,
        dreg: Reg,
    },
    /// Reject the packet.
    Reject(Reject),
    /// A counter; its values are kernel state and not part of the model.
    Counter,
    /// A reference to the table's named counter (`counter name "x"`: the kernel's
    /// `objref` expression of type counter).
    CounterRef(String),
    /// Add or update `key` (and `data`) in a named dynamic set, with an optional timeout.
    Dynset {
        op: DynsetOp,
        set: String,
        key: Reg,
        data: Option<Reg>,
        timeout_ms: Option<u64>,
    },
    /// An x_tables match run by the kernel's `nft_compat` (`match`): what iptables-nft
    /// writes for extensions it has no native form of (`-m comment`, `-m conntrack`).
    /// `info` is the extension's `struct xt_*_info`, host byte order, padded to 8 bytes.
    /// Only for the rules we write outside our tables with upstream's iptables form.
    XtMatch {
        name: String,
        rev: u32,
        info: Vec<u8>,
    },
}

impl Expr {
    /// The kernel's name of this expression (`NFTA_EXPR_NAME`).
    pub fn kernel_name(&self) -> &'static str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Immediate { .. } | Expr::Verdict(_) => "immediate",
            Expr::Numgen { .. } => "numgen",
            Expr::Nat { .. } => "nat",
            Expr::Masquerade { .. } => "masq",
            Expr::Ct { .. } | Expr::CtSet { .. } => "ct",
            Expr::Fib { .. } => "fib",
            Expr::Reject(_) => "reject",
            Expr::Counter => "counter",
            Expr::CounterRef(_) => "objref",
            Expr::Dynset { .. } => "dynset",
            Expr::XtMatch { .. } => "match",
        }
    }
}
