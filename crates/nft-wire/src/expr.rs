//! Encoding and decoding of rule expressions (`NFTA_EXPR_DATA` contents).

use crate::consts::*;
use crate::nla::{Nla, NlaWriter};
use crate::WireError;
use nft_model::*;

// Per-expression attribute numbers (nf_tables.h).
mod a {
    pub const PAYLOAD_DREG: u16 = 1;
    pub const PAYLOAD_BASE: u16 = 2;
    pub const PAYLOAD_OFFSET: u16 = 3;
    pub const PAYLOAD_LEN: u16 = 4;
    pub const META_DREG: u16 = 1;
    pub const META_KEY: u16 = 2;
    pub const META_SREG: u16 = 3;
    pub const CMP_SREG: u16 = 1;
    pub const CMP_OP: u16 = 2;
    pub const CMP_DATA: u16 = 3;
    pub const BITWISE_SREG: u16 = 1;
    pub const BITWISE_DREG: u16 = 2;
    pub const BITWISE_LEN: u16 = 3;
    pub const BITWISE_MASK: u16 = 4;
    pub const BITWISE_XOR: u16 = 5;
    pub const BITWISE_OP: u16 = 6;
    pub const LOOKUP_SET: u16 = 1;
    pub const LOOKUP_SREG: u16 = 2;
    pub const LOOKUP_DREG: u16 = 3;
    pub const LOOKUP_FLAGS: u16 = 5;
    pub const LOOKUP_F_INV: u32 = 1;
    pub const IMMEDIATE_DREG: u16 = 1;
    pub const IMMEDIATE_DATA: u16 = 2;
    pub const NG_DREG: u16 = 1;
    pub const NG_MODULUS: u16 = 2;
    pub const NG_TYPE: u16 = 3;
    pub const NG_OFFSET: u16 = 4;
    pub const NAT_TYPE: u16 = 1;
    pub const NAT_FAMILY: u16 = 2;
    pub const NAT_REG_ADDR_MIN: u16 = 3;
    pub const NAT_REG_ADDR_MAX: u16 = 4;
    pub const NAT_REG_PROTO_MIN: u16 = 5;
    pub const NAT_REG_PROTO_MAX: u16 = 6;
    pub const NAT_FLAGS: u16 = 7;
    pub const MASQ_FLAGS: u16 = 1;
    pub const CT_DREG: u16 = 1;
    pub const CT_KEY: u16 = 2;
    pub const CT_DIRECTION: u16 = 3;
    pub const CT_SREG: u16 = 4;
    pub const FIB_DREG: u16 = 1;
    pub const FIB_RESULT: u16 = 2;
    pub const FIB_FLAGS: u16 = 3;
    pub const REJECT_TYPE: u16 = 1;
    pub const REJECT_ICMP_CODE: u16 = 2;
    pub const DYNSET_SET_NAME: u16 = 1;
    pub const DYNSET_OP: u16 = 3;
    pub const DYNSET_SREG_KEY: u16 = 4;
    pub const DYNSET_SREG_DATA: u16 = 5;
    pub const DYNSET_TIMEOUT: u16 = 6;
    pub const MATCH_NAME: u16 = 1;
    pub const MATCH_REV: u16 = 2;
    pub const MATCH_INFO: u16 = 3;
    pub const OBJREF_IMM_TYPE: u16 = 1;
    pub const OBJREF_IMM_NAME: u16 = 2;
}

/// Write `NFTA_DATA_VALUE` inside a nest of type `kind`.
pub(crate) fn put_value(w: &mut NlaWriter, kind: u16, data: &[u8]) {
    let n = w.begin(kind);
    w.bytes(NFTA_DATA_VALUE, data);
    w.end(n);
}

/// Write `NFTA_DATA_VERDICT` inside a nest of type `kind`.
pub(crate) fn put_verdict(w: &mut NlaWriter, kind: u16, v: &Verdict) {
    let n = w.begin(kind);
    let vn = w.begin(NFTA_DATA_VERDICT);
    w.be32(NFTA_VERDICT_CODE, v.code() as u32);
    if let Some(c) = v.chain() {
        w.str(NFTA_VERDICT_CHAIN, c);
    }
    w.end(vn);
    w.end(n);
}

/// Read an `NFTA_DATA_*` nest: a value or a verdict.
pub(crate) enum Data {
    Value(Vec<u8>),
    Verdict(Verdict),
}

pub(crate) fn get_data(nla: &Nla, what: &'static str) -> Result<Data, WireError> {
    for inner in nla.nested() {
        match inner.kind {
            NFTA_DATA_VALUE => return Ok(Data::Value(inner.data.to_vec())),
            NFTA_DATA_VERDICT => {
                let mut code = None;
                let mut chain = None;
                for v in inner.nested() {
                    match v.kind {
                        NFTA_VERDICT_CODE => code = v.be32().map(|c| c as i32),
                        NFTA_VERDICT_CHAIN => chain = v.str().map(str::to_string),
                        _ => {}
                    }
                }
                let code = code.ok_or(WireError::Missing {
                    what,
                    attr: "verdict code",
                })?;
                return Verdict::from_code(code, chain).map(Data::Verdict).ok_or(
                    WireError::Invalid {
                        what,
                        detail: format!("verdict code {code}"),
                    },
                );
            }
            _ => {}
        }
    }
    Err(WireError::Missing { what, attr: "data" })
}

/// Encode one expression as an `NFTA_LIST_ELEM` nest.
pub fn encode_expr(w: &mut NlaWriter, e: &Expr) {
    let elem = w.begin(NFTA_LIST_ELEM);
    w.str(NFTA_EXPR_NAME, e.kernel_name());
    let d = w.begin(NFTA_EXPR_DATA);
    match e {
        Expr::Payload {
            base,
            offset,
            len,
            dreg,
        } => {
            w.be32(a::PAYLOAD_DREG, dreg.0);
            w.be32(a::PAYLOAD_BASE, *base as u32);
            w.be32(a::PAYLOAD_OFFSET, *offset);
            w.be32(a::PAYLOAD_LEN, *len);
        }
        Expr::Meta { key, dreg } => {
            w.be32(a::META_DREG, dreg.0);
            w.be32(a::META_KEY, *key as u32);
        }
        Expr::MetaSet { key, sreg } => {
            w.be32(a::META_KEY, *key as u32);
            w.be32(a::META_SREG, sreg.0);
        }
        Expr::Cmp { sreg, op, data } => {
            w.be32(a::CMP_SREG, sreg.0);
            w.be32(a::CMP_OP, *op as u32);
            put_value(w, a::CMP_DATA, data);
        }
        Expr::Bitwise {
            sreg,
            dreg,
            len,
            mask,
            xor,
        } => {
            w.be32(a::BITWISE_SREG, sreg.0);
            w.be32(a::BITWISE_DREG, dreg.0);
            w.be32(a::BITWISE_LEN, *len);
            put_value(w, a::BITWISE_MASK, mask);
            put_value(w, a::BITWISE_XOR, xor);
        }
        Expr::Lookup {
            set,
            sreg,
            dreg,
            invert,
        } => {
            w.str(a::LOOKUP_SET, set);
            w.be32(a::LOOKUP_SREG, sreg.0);
            if let Some(d) = dreg {
                w.be32(a::LOOKUP_DREG, d.0);
            }
            if *invert {
                w.be32(a::LOOKUP_FLAGS, a::LOOKUP_F_INV);
            }
        }
        Expr::Immediate { dreg, data } => {
            w.be32(a::IMMEDIATE_DREG, dreg.0);
            put_value(w, a::IMMEDIATE_DATA, data);
        }
        Expr::Verdict(v) => {
            w.be32(a::IMMEDIATE_DREG, Reg::VERDICT.0);
            put_verdict(w, a::IMMEDIATE_DATA, v);
        }
        Expr::Numgen {
            kind,
            modulus,
            offset,
            dreg,
        } => {
            w.be32(a::NG_DREG, dreg.0);
            w.be32(a::NG_MODULUS, *modulus);
            w.be32(a::NG_TYPE, *kind as u32);
            if *offset != 0 {
                w.be32(a::NG_OFFSET, *offset);
            }
        }
        Expr::Nat {
            kind,
            family,
            addr,
            port,
            flags,
        } => {
            w.be32(a::NAT_TYPE, *kind as u32);
            w.be32(a::NAT_FAMILY, *family as u32);
            if let Some(r) = addr {
                w.be32(a::NAT_REG_ADDR_MIN, r.0);
            }
            if let Some(r) = port {
                w.be32(a::NAT_REG_PROTO_MIN, r.0);
            }
            if *flags != 0 {
                w.be32(a::NAT_FLAGS, *flags);
            }
        }
        Expr::Masquerade { flags } => {
            if *flags != 0 {
                w.be32(a::MASQ_FLAGS, *flags);
            }
        }
        Expr::Ct { key, dreg } => {
            w.be32(a::CT_DREG, dreg.0);
            w.be32(a::CT_KEY, *key as u32);
        }
        Expr::CtSet { key, sreg } => {
            w.be32(a::CT_KEY, *key as u32);
            w.be32(a::CT_SREG, sreg.0);
        }
        Expr::Fib {
            flags,
            result,
            dreg,
        } => {
            w.be32(a::FIB_DREG, dreg.0);
            w.be32(a::FIB_RESULT, *result as u32);
            w.be32(a::FIB_FLAGS, *flags);
        }
        Expr::Reject(r) => match r {
            Reject::IcmpUnreach(code) => {
                w.be32(a::REJECT_TYPE, 0);
                w.u8(a::REJECT_ICMP_CODE, *code);
            }
            Reject::TcpRst => w.be32(a::REJECT_TYPE, 1),
            Reject::IcmpxUnreach(code) => {
                w.be32(a::REJECT_TYPE, 2);
                w.u8(a::REJECT_ICMP_CODE, *code);
            }
        },
        Expr::Counter => {}
        Expr::CounterRef(name) => {
            w.be32(a::OBJREF_IMM_TYPE, NFT_OBJECT_COUNTER);
            // as libnftnl writes it: the name without its NUL (the kernel takes both)
            w.bytes(a::OBJREF_IMM_NAME, name.as_bytes());
        }
        Expr::XtMatch { name, rev, info } => {
            w.str(a::MATCH_NAME, name);
            w.be32(a::MATCH_REV, *rev);
            w.bytes(a::MATCH_INFO, info);
        }
        Expr::Dynset {
            op,
            set,
            key,
            data,
            timeout_ms,
        } => {
            w.str(a::DYNSET_SET_NAME, set);
            w.be32(a::DYNSET_OP, *op as u32);
            w.be32(a::DYNSET_SREG_KEY, key.0);
            if let Some(d) = data {
                w.be32(a::DYNSET_SREG_DATA, d.0);
            }
            if let Some(t) = timeout_ms {
                w.be64(a::DYNSET_TIMEOUT, *t);
            }
        }
    }
    w.end(d);
    w.end(elem);
}

/// Attribute lookup helper over one expression's data.
struct Attrs<'a> {
    name: &'static str,
    list: Vec<Nla<'a>>,
}

impl<'a> Attrs<'a> {
    fn get(&self, kind: u16) -> Option<&Nla<'a>> {
        self.list.iter().find(|n| n.kind == kind)
    }
    fn be32(&self, kind: u16, attr: &'static str) -> Result<u32, WireError> {
        self.get(kind)
            .and_then(Nla::be32)
            .ok_or(WireError::Missing {
                what: self.name,
                attr,
            })
    }
    fn opt32(&self, kind: u16) -> Option<u32> {
        self.get(kind).and_then(Nla::be32)
    }
    fn reg(&self, kind: u16, attr: &'static str) -> Result<Reg, WireError> {
        self.be32(kind, attr).map(Reg)
    }
    fn value(&self, kind: u16, attr: &'static str) -> Result<Vec<u8>, WireError> {
        let n = self.get(kind).ok_or(WireError::Missing {
            what: self.name,
            attr,
        })?;
        match get_data(n, self.name)? {
            Data::Value(v) => Ok(v),
            Data::Verdict(_) => Err(self.invalid(format!("{attr} holds a verdict"))),
        }
    }
    fn invalid(&self, detail: String) -> WireError {
        WireError::Invalid {
            what: self.name,
            detail,
        }
    }
}

/// Decode one `NFTA_LIST_ELEM` expression.
pub fn decode_expr(elem: &Nla) -> Result<Expr, WireError> {
    let mut name = None;
    let mut data: &[u8] = &[];
    for n in elem.nested() {
        match n.kind {
            NFTA_EXPR_NAME => name = n.str(),
            NFTA_EXPR_DATA => data = n.data,
            _ => {}
        }
    }
    let name = name.ok_or(WireError::Missing {
        what: "expression",
        attr: "name",
    })?;
    let (known, decode) = DECODERS
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| WireError::UnknownExpr(name.to_string()))?;
    decode(&Attrs {
        name: known,
        list: crate::nla::NlaIter::new(data).collect(),
    })
}

/// Every expression the model knows, by kernel name, with its decoder: the one list.
/// A name not in it is an error naming it ([`WireError::UnknownExpr`]).
const DECODERS: &[(&str, Decoder)] = &[
    ("payload", decode_payload),
    ("meta", decode_meta),
    ("cmp", decode_cmp),
    ("bitwise", decode_bitwise),
    ("lookup", decode_lookup),
    ("immediate", decode_immediate),
    ("numgen", decode_numgen),
    ("nat", decode_nat),
    ("masq", decode_masq),
    ("ct", decode_ct),
    ("fib", decode_fib),
    ("reject", decode_reject),
    ("counter", decode_counter),
    ("objref", decode_objref),
    ("dynset", decode_dynset),
    ("match", decode_xt_match),
];

type Decoder = fn(&Attrs) -> Result<Expr, WireError>;

fn decode_payload(at: &Attrs) -> Result<Expr, WireError> {
    let base = match at.be32(a::PAYLOAD_BASE, "base")? {
        0 => PayloadBase::LinkLayer,
        1 => PayloadBase::Network,
        2 => PayloadBase::Transport,
        b => return Err(at.invalid(format!("payload base {b}"))),
    };
    Ok(Expr::Payload {
        base,
        offset: at.be32(a::PAYLOAD_OFFSET, "offset")?,
        len: at.be32(a::PAYLOAD_LEN, "len")?,
        dreg: at.reg(a::PAYLOAD_DREG, "dreg")?,
    })
}

fn decode_meta(at: &Attrs) -> Result<Expr, WireError> {
    let k = at.be32(a::META_KEY, "key")?;
    let key = MetaKey::from_u32(k).ok_or_else(|| at.invalid(format!("meta key {k}")))?;
    Ok(match at.opt32(a::META_DREG) {
        Some(d) => Expr::Meta { key, dreg: Reg(d) },
        None => Expr::MetaSet {
            key,
            sreg: at.reg(a::META_SREG, "sreg")?,
        },
    })
}

fn decode_cmp(at: &Attrs) -> Result<Expr, WireError> {
    let o = at.be32(a::CMP_OP, "op")?;
    Ok(Expr::Cmp {
        sreg: at.reg(a::CMP_SREG, "sreg")?,
        op: CmpOp::from_u32(o).ok_or_else(|| at.invalid(format!("cmp op {o}")))?,
        data: at.value(a::CMP_DATA, "data")?,
    })
}

fn decode_bitwise(at: &Attrs) -> Result<Expr, WireError> {
    if let Some(op) = at.opt32(a::BITWISE_OP) {
        if op != 0 {
            return Err(at.invalid(format!("bitwise op {op} (only mask/xor is modelled)")));
        }
    }
    Ok(Expr::Bitwise {
        sreg: at.reg(a::BITWISE_SREG, "sreg")?,
        dreg: at.reg(a::BITWISE_DREG, "dreg")?,
        len: at.be32(a::BITWISE_LEN, "len")?,
        mask: at.value(a::BITWISE_MASK, "mask")?,
        xor: at.value(a::BITWISE_XOR, "xor")?,
    })
}

fn decode_lookup(at: &Attrs) -> Result<Expr, WireError> {
    Ok(Expr::Lookup {
        set: at
            .get(a::LOOKUP_SET)
            .and_then(Nla::str)
            .ok_or(WireError::Missing {
                what: "lookup",
                attr: "set",
            })?
            .to_string(),
        sreg: at.reg(a::LOOKUP_SREG, "sreg")?,
        dreg: at.opt32(a::LOOKUP_DREG).map(Reg),
        invert: at.opt32(a::LOOKUP_FLAGS).unwrap_or(0) & a::LOOKUP_F_INV != 0,
    })
}

fn decode_immediate(at: &Attrs) -> Result<Expr, WireError> {
    let dreg = at.reg(a::IMMEDIATE_DREG, "dreg")?;
    let n = at.get(a::IMMEDIATE_DATA).ok_or(WireError::Missing {
        what: "immediate",
        attr: "data",
    })?;
    Ok(match get_data(n, "immediate")? {
        Data::Verdict(v) if dreg == Reg::VERDICT => Expr::Verdict(v),
        Data::Value(data) if dreg != Reg::VERDICT => Expr::Immediate { dreg, data },
        _ => return Err(at.invalid("data kind does not match the register".into())),
    })
}

fn decode_numgen(at: &Attrs) -> Result<Expr, WireError> {
    Ok(Expr::Numgen {
        kind: match at.be32(a::NG_TYPE, "type")? {
            0 => NumgenKind::Incremental,
            1 => NumgenKind::Random,
            t => return Err(at.invalid(format!("numgen type {t}"))),
        },
        modulus: at.be32(a::NG_MODULUS, "modulus")?,
        offset: at.opt32(a::NG_OFFSET).unwrap_or(0),
        dreg: at.reg(a::NG_DREG, "dreg")?,
    })
}

fn decode_nat(at: &Attrs) -> Result<Expr, WireError> {
    let kind = match at.be32(a::NAT_TYPE, "type")? {
        0 => NatKind::Snat,
        1 => NatKind::Dnat,
        t => return Err(at.invalid(format!("nat type {t}"))),
    };
    let fam = at.be32(a::NAT_FAMILY, "family")?;
    let family = u8::try_from(fam)
        .ok()
        .and_then(Family::from_u8)
        .ok_or_else(|| at.invalid(format!("nat family {fam}")))?;
    let addr = at.opt32(a::NAT_REG_ADDR_MIN).map(Reg);
    let port = at.opt32(a::NAT_REG_PROTO_MIN).map(Reg);
    // The kernel reports max registers equal to min when only min was given.
    if at
        .opt32(a::NAT_REG_ADDR_MAX)
        .map(Reg)
        .is_some_and(|m| Some(m) != addr)
        || at
            .opt32(a::NAT_REG_PROTO_MAX)
            .map(Reg)
            .is_some_and(|m| Some(m) != port)
    {
        return Err(at.invalid("nat ranges are not modelled".into()));
    }
    Ok(Expr::Nat {
        kind,
        family,
        addr,
        port,
        flags: at.opt32(a::NAT_FLAGS).unwrap_or(0),
    })
}

fn decode_masq(at: &Attrs) -> Result<Expr, WireError> {
    Ok(Expr::Masquerade {
        flags: at.opt32(a::MASQ_FLAGS).unwrap_or(0),
    })
}

fn decode_ct(at: &Attrs) -> Result<Expr, WireError> {
    let k = at.be32(a::CT_KEY, "key")?;
    let key = CtKey::from_u32(k).ok_or_else(|| at.invalid(format!("ct key {k}")))?;
    if at.get(a::CT_DIRECTION).is_some() {
        return Err(at.invalid("ct direction is not modelled".into()));
    }
    Ok(match at.opt32(a::CT_DREG) {
        Some(d) => Expr::Ct { key, dreg: Reg(d) },
        None => Expr::CtSet {
            key,
            sreg: at.reg(a::CT_SREG, "sreg")?,
        },
    })
}

fn decode_fib(at: &Attrs) -> Result<Expr, WireError> {
    Ok(Expr::Fib {
        flags: at.be32(a::FIB_FLAGS, "flags")?,
        result: match at.be32(a::FIB_RESULT, "result")? {
            1 => FibResult::Oif,
            2 => FibResult::Oifname,
            3 => FibResult::AddrType,
            r => return Err(at.invalid(format!("fib result {r}"))),
        },
        dreg: at.reg(a::FIB_DREG, "dreg")?,
    })
}

fn decode_reject(at: &Attrs) -> Result<Expr, WireError> {
    let code = at.get(a::REJECT_ICMP_CODE).and_then(Nla::u8).unwrap_or(0);
    Ok(Expr::Reject(match at.be32(a::REJECT_TYPE, "type")? {
        0 => Reject::IcmpUnreach(code),
        1 => Reject::TcpRst,
        2 => Reject::IcmpxUnreach(code),
        t => return Err(at.invalid(format!("reject type {t}"))),
    }))
}

fn decode_counter(_: &Attrs) -> Result<Expr, WireError> {
    Ok(Expr::Counter)
}

fn decode_objref(at: &Attrs) -> Result<Expr, WireError> {
    let t = at.be32(a::OBJREF_IMM_TYPE, "type")?;
    if t != NFT_OBJECT_COUNTER {
        return Err(at.invalid(format!("objref of object type {t}")));
    }
    let name = at
        .get(a::OBJREF_IMM_NAME)
        .and_then(Nla::str)
        .ok_or(WireError::Missing {
            what: "objref",
            attr: "name",
        })?;
    Ok(Expr::CounterRef(name.to_string()))
}

fn decode_xt_match(at: &Attrs) -> Result<Expr, WireError> {
    let name = at
        .get(a::MATCH_NAME)
        .and_then(Nla::str)
        .ok_or(WireError::Missing {
            what: at.name,
            attr: "name",
        })?;
    Ok(Expr::XtMatch {
        name: name.to_string(),
        rev: at.be32(a::MATCH_REV, "rev")?,
        info: at
            .get(a::MATCH_INFO)
            .map(|n| n.data.to_vec())
            .unwrap_or_default(),
    })
}

fn decode_dynset(at: &Attrs) -> Result<Expr, WireError> {
    let op = match at.be32(a::DYNSET_OP, "op")? {
        0 => DynsetOp::Add,
        1 => DynsetOp::Update,
        o => return Err(at.invalid(format!("dynset op {o}"))),
    };
    Ok(Expr::Dynset {
        op,
        set: at
            .get(a::DYNSET_SET_NAME)
            .and_then(Nla::str)
            .ok_or(WireError::Missing {
                what: "dynset",
                attr: "set",
            })?
            .to_string(),
        key: at.reg(a::DYNSET_SREG_KEY, "sreg key")?,
        data: at.opt32(a::DYNSET_SREG_DATA).map(Reg),
        // The kernel reports a zero timeout when none was given.
        timeout_ms: at
            .get(a::DYNSET_TIMEOUT)
            .and_then(Nla::be64)
            .filter(|&t| t != 0),
    })
}
