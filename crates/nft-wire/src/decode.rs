//! Decoding of the kernel's object messages (dump replies) back into the model.

use crate::consts::*;
use crate::expr::{decode_expr, get_data, Data};
use crate::nla::{udata, Nla, NlaIter};
use crate::WireError;
use nft_model::*;

/// An object from a dump, with the kernel handles the model does not carry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Object {
    Table {
        table: TableRef,
        comment: Option<String>,
    },
    Chain {
        table: TableRef,
        chain: Chain,
    },
    Rule {
        table: TableRef,
        chain: String,
        handle: u64,
        rule: Rule,
    },
    Set {
        table: TableRef,
        set: Set,
    },
    /// Elements of one set, still raw: decode them with [`decode_elements`] and the
    /// set's declaration.
    Elements {
        table: TableRef,
        set: String,
        raw: Vec<Vec<u8>>,
    },
    /// A named counter with its values (objects of other types are not modelled).
    Counter {
        table: TableRef,
        name: String,
        packets: u64,
        bytes: u64,
    },
}

fn attrs(buf: &[u8]) -> Vec<Nla<'_>> {
    NlaIter::new(buf).collect()
}

fn find<'a>(list: &'a [Nla<'a>], kind: u16) -> Option<&'a Nla<'a>> {
    list.iter().find(|n| n.kind == kind)
}

fn string(
    list: &[Nla],
    kind: u16,
    what: &'static str,
    attr: &'static str,
) -> Result<String, WireError> {
    list.iter()
        .find(|n| n.kind == kind)
        .and_then(Nla::str)
        .map(str::to_string)
        .ok_or(WireError::Missing { what, attr })
}

fn comment(list: &[Nla], kind: u16, tlv: u8) -> Option<String> {
    find(list, kind).and_then(|u| udata::get_str(u.data, tlv))
}

/// Decode one nftables object message given its `NFT_MSG_*` type, family and attributes.
pub fn decode_object(msg: u16, family: u8, buf: &[u8]) -> Result<Object, WireError> {
    let family = Family::from_u8(family).ok_or(WireError::Invalid {
        what: "message",
        detail: format!("family {family}"),
    })?;
    let a = attrs(buf);
    match msg {
        NFT_MSG_NEWTABLE => Ok(Object::Table {
            table: TableRef::new(family, string(&a, NFTA_TABLE_NAME, "table", "name")?),
            comment: comment(&a, NFTA_TABLE_USERDATA, UDATA_TABLE_COMMENT),
        }),
        NFT_MSG_NEWCHAIN => {
            let table = TableRef::new(family, string(&a, NFTA_CHAIN_TABLE, "chain", "table")?);
            let name = string(&a, NFTA_CHAIN_NAME, "chain", "name")?;
            let base = match find(&a, NFTA_CHAIN_HOOK) {
                None => None,
                Some(h) => {
                    let h = attrs(h.data);
                    let num = find(&h, NFTA_HOOK_HOOKNUM).and_then(Nla::be32);
                    let prio = find(&h, NFTA_HOOK_PRIORITY).and_then(Nla::be32);
                    let ty = string(&a, NFTA_CHAIN_TYPE, "chain", "type")?;
                    let policy = find(&a, NFTA_CHAIN_POLICY).and_then(Nla::be32).unwrap_or(1);
                    let bad = |d: String| WireError::Invalid {
                        what: "chain",
                        detail: format!("{name}: {d}"),
                    };
                    Some(BaseHook {
                        chain_type: ChainType::from_name(&ty)
                            .ok_or_else(|| bad(format!("type {ty}")))?,
                        hook: num
                            .and_then(Hook::from_u32)
                            .ok_or_else(|| bad(format!("hook {num:?}")))?,
                        priority: prio.ok_or_else(|| bad("no priority".into()))? as i32,
                        policy: if policy == 0 {
                            Policy::Drop
                        } else {
                            Policy::Accept
                        },
                    })
                }
            };
            let mut chain = Chain::regular(name);
            chain.base = base;
            chain.comment = comment(&a, NFTA_CHAIN_USERDATA, UDATA_CHAIN_COMMENT);
            Ok(Object::Chain { table, chain })
        }
        NFT_MSG_NEWRULE => {
            let table = TableRef::new(family, string(&a, NFTA_RULE_TABLE, "rule", "table")?);
            let chain = string(&a, NFTA_RULE_CHAIN, "rule", "chain")?;
            let handle = find(&a, NFTA_RULE_HANDLE).and_then(Nla::be64).unwrap_or(0);
            let mut exprs = Vec::new();
            if let Some(list) = find(&a, NFTA_RULE_EXPRESSIONS) {
                for e in list.nested().filter(|n| n.kind == NFTA_LIST_ELEM) {
                    exprs.push(decode_expr(&e).map_err(|err| WireError::InRule {
                        chain: chain.clone(),
                        handle,
                        source: Box::new(err),
                    })?);
                }
            }
            let comment = comment(&a, NFTA_RULE_USERDATA, UDATA_RULE_COMMENT);
            Ok(Object::Rule {
                table,
                chain,
                handle,
                rule: Rule {
                    exprs: exprs.into(),
                    comment,
                },
            })
        }
        NFT_MSG_NEWSET => decode_set(family, &a),
        NFT_MSG_NEWSETELEM => {
            let table = TableRef::new(
                family,
                string(&a, NFTA_SET_ELEM_LIST_TABLE, "elements", "table")?,
            );
            let set = string(&a, NFTA_SET_ELEM_LIST_SET, "elements", "set")?;
            let raw = find(&a, NFTA_SET_ELEM_LIST_ELEMENTS)
                .map(|l| {
                    l.nested()
                        .filter(|n| n.kind == NFTA_LIST_ELEM)
                        .map(|n| n.data.to_vec())
                        .collect()
                })
                .unwrap_or_default();
            Ok(Object::Elements { table, set, raw })
        }
        NFT_MSG_NEWOBJ => {
            let table = TableRef::new(family, string(&a, NFTA_OBJ_TABLE, "object", "table")?);
            let name = string(&a, NFTA_OBJ_NAME, "object", "name")?;
            let kind = find(&a, NFTA_OBJ_TYPE).and_then(Nla::be32);
            if kind != Some(NFT_OBJECT_COUNTER) {
                return Err(WireError::Invalid {
                    what: "object",
                    detail: format!("{name}: object type {kind:?} is not modelled"),
                });
            }
            let data: Vec<Nla> = find(&a, NFTA_OBJ_DATA)
                .map(|d| d.nested().collect())
                .unwrap_or_default();
            let value = |kind| find(&data, kind).and_then(Nla::be64).unwrap_or(0);
            Ok(Object::Counter {
                table,
                packets: value(NFTA_COUNTER_PACKETS),
                bytes: value(NFTA_COUNTER_BYTES),
                name,
            })
        }
        other => Err(WireError::Invalid {
            what: "message",
            detail: format!("unexpected type {other}"),
        }),
    }
}

fn decode_set(family: Family, a: &[Nla]) -> Result<Object, WireError> {
    let table = TableRef::new(family, string(a, NFTA_SET_TABLE, "set", "table")?);
    let name = string(a, NFTA_SET_NAME, "set", "name")?;
    let bad = |d: String| WireError::Invalid {
        what: "set",
        detail: format!("{name}: {d}"),
    };
    let flags = find(a, NFTA_SET_FLAGS).and_then(Nla::be32).unwrap_or(0);
    let key_type = find(a, NFTA_SET_KEY_TYPE).and_then(Nla::be32).unwrap_or(0);
    let key_len = find(a, NFTA_SET_KEY_LEN).and_then(Nla::be32).unwrap_or(0) as usize;
    let key = split_type_id(key_type, key_len)
        .ok_or_else(|| bad(format!("key type {key_type:#x} of length {key_len}")))?;
    let data = if flags & SetFlags::MAP != 0 {
        let t = find(a, NFTA_SET_DATA_TYPE).and_then(Nla::be32).unwrap_or(0);
        if t == NFT_DATA_VERDICT {
            Some(SetData::Verdict)
        } else {
            let l = find(a, NFTA_SET_DATA_LEN).and_then(Nla::be32).unwrap_or(0) as usize;
            Some(SetData::Values(split_type_id(t, l).ok_or_else(|| {
                bad(format!("data type {t:#x} of length {l}"))
            })?))
        }
    } else {
        None
    };
    let udata = find(a, NFTA_SET_USERDATA).map(|u| u.data).unwrap_or(&[]);
    Ok(Object::Set {
        table,
        set: Set {
            name,
            key,
            data,
            flags: SetFlags {
                constant: flags & SetFlags::CONSTANT != 0,
                interval: flags & SetFlags::INTERVAL != 0,
                timeout: flags & SetFlags::TIMEOUT != 0,
                dynamic: flags & SetFlags::EVAL != 0,
            },
            timeout_ms: find(a, NFTA_SET_TIMEOUT)
                .and_then(Nla::be64)
                .filter(|&t| t != 0),
            size: set_size(a, flags),
            saddr_key: udata::get(udata, UDATA_SET_KEY_TYPEOF)
                .is_some_and(crate::set_udata::typeof_saddr),
            comment: udata::get_str(udata, UDATA_SET_COMMENT),
            elements: Vec::new(),
        },
    })
}

/// The set's size (`NFTA_SET_DESC_SIZE`). A dynamic set created without one reads back
/// none: the kernel gives it 65,535 when a `dynset` binds it (see `Set::size`).
fn set_size(a: &[Nla], flags: u32) -> Option<u32> {
    let desc = find(a, NFTA_SET_DESC)?;
    let size = find(&attrs(desc.data), NFTA_SET_DESC_SIZE).and_then(Nla::be32)?;
    let dynset_default = flags & SetFlags::EVAL != 0 && size == 65_535;
    (size != 0 && !dynset_default).then_some(size)
}

/// Decode raw elements of `set` using its declared key and data types. Runtime
/// details the model does not hold (expiration) are dropped.
pub fn decode_elements(set: &Set, raw: &[Vec<u8>]) -> Result<Vec<Element>, WireError> {
    let bad = |d: String| WireError::Invalid {
        what: "element",
        detail: format!("set {}: {d}", set.name),
    };
    let mut out = Vec::with_capacity(raw.len());
    for r in raw {
        let a = attrs(r);
        let value_of =
            |kind: u16, types: &[DataType], what: &str| -> Result<Option<Vec<Value>>, WireError> {
                match find(&a, kind) {
                    None => Ok(None),
                    Some(n) => match get_data(n, "element")? {
                        Data::Value(b) => split_concat(types, &b)
                            .map(Some)
                            .ok_or_else(|| bad(format!("{what} of {} bytes", b.len()))),
                        Data::Verdict(_) => Err(bad(format!("{what} holds a verdict"))),
                    },
                }
            };
        let key =
            value_of(NFTA_SET_ELEM_KEY, &set.key, "key")?.ok_or_else(|| bad("no key".into()))?;
        let key_end = value_of(NFTA_SET_ELEM_KEY_END, &set.key, "range end")?;
        let data = match (&set.data, find(&a, NFTA_SET_ELEM_DATA)) {
            (None, _) | (Some(_), None) => None,
            (Some(SetData::Verdict), Some(n)) => match get_data(n, "element")? {
                Data::Verdict(v) => Some(ElemData::Verdict(v)),
                Data::Value(_) => return Err(bad("verdict map element holds a value".into())),
            },
            (Some(SetData::Values(t)), Some(_)) => {
                value_of(NFTA_SET_ELEM_DATA, t, "data")?.map(ElemData::Values)
            }
        };
        let timeout_ms = find(&a, NFTA_SET_ELEM_TIMEOUT).and_then(Nla::be64);
        // An element without its own timeout reports the set's; keep the model's view.
        let timeout_ms = timeout_ms.filter(|t| Some(*t) != set.timeout_ms);
        let comment = comment(&a, NFTA_SET_ELEM_USERDATA, UDATA_SET_ELEM_COMMENT);
        let mut el = match data {
            Some(d) => Element::map(key, d),
            None => Element::key(key),
        };
        el.set_key_end(key_end);
        el.set_timeout_ms(timeout_ms);
        el.set_comment(comment);
        out.push(el);
    }
    Ok(out)
}

/// Decode a `NFT_MSG_NEWGEN` reply's generation id.
pub fn decode_genid(buf: &[u8]) -> Option<u32> {
    NlaIter::new(buf)
        .find(|n| n.kind == NFTA_GEN_ID)
        .and_then(|n| n.be32())
}

/// What is needed of a rule another program wrote (e.g. iptables-nft's, with compat
/// `match`/`target` expressions the model does not hold): where it is and which chains
/// it jumps or goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignRule {
    pub table: TableRef,
    pub chain: String,
    pub handle: u64,
    pub targets: Vec<String>,
}

/// Scan a `NFT_MSG_NEWRULE` message without interpreting anything but verdicts.
pub fn scan_rule(family: u8, buf: &[u8]) -> Result<ForeignRule, WireError> {
    let family = Family::from_u8(family).ok_or(WireError::Invalid {
        what: "rule",
        detail: format!("family {family}"),
    })?;
    let a = attrs(buf);
    let table = TableRef::new(family, string(&a, NFTA_RULE_TABLE, "rule", "table")?);
    let chain = string(&a, NFTA_RULE_CHAIN, "rule", "chain")?;
    let handle = find(&a, NFTA_RULE_HANDLE)
        .and_then(Nla::be64)
        .ok_or(WireError::Missing {
            what: "rule",
            attr: "handle",
        })?;
    let mut targets = Vec::new();
    if let Some(list) = find(&a, NFTA_RULE_EXPRESSIONS) {
        for e in list.nested().filter(|n| n.kind == NFTA_LIST_ELEM) {
            let inner = attrs(e.data);
            if find(&inner, NFTA_EXPR_NAME).and_then(Nla::str) != Some("immediate") {
                continue;
            }
            if let Ok(Expr::Verdict(v)) = decode_expr(&e) {
                if let Some(c) = v.chain() {
                    targets.push(c.to_string());
                }
            }
        }
    }
    Ok(ForeignRule {
        table,
        chain,
        handle,
        targets,
    })
}
