//! An independent oracle for what a table holds: a summary read from `nft -j list table`
//! (nft's JSON, not its text) and the same summary computed from the model.
//!
//! The summary keeps what both sides know for certain: chains with their hook, rule
//! counts and rule comments; sets with key and data types, flags and elements. nft 1.0.6's
//! JSON leaves out table and chain comments and the `dynamic` set flag, so the summary
//! does too. Element timeouts are left out (the kernel reports only those that differ
//! from the set's default), element comments are kept.

use std::collections::BTreeMap;
use std::net::IpAddr;

use nft_model::{DataType, ElemData, Element, SetData, Table, Value, Verdict};
use serde_json::Value as Json;

use crate::Netns;

/// What a table holds, as far as this oracle checks it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Summary {
    pub chains: BTreeMap<String, ChainSummary>,
    pub sets: BTreeMap<String, SetSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ChainSummary {
    /// `(type, hook, priority, policy)` of a base chain.
    pub base: Option<(String, String, i64, String)>,
    /// One entry per rule: its comment.
    pub rule_comments: Vec<Option<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SetSummary {
    pub map: bool,
    /// Key type names (`ipv4_addr`, `inet_proto`, ...; `integer` for host integers).
    pub key: Vec<String>,
    /// Data type (`verdict`, `ipv4_addr . inet_service`) of a map.
    pub data: Option<String>,
    /// Sorted among `constant`, `interval`, `timeout`.
    pub flags: Vec<String>,
    /// Sorted elements: `key [comment "c"] [: data]`, concatenations joined with ` . `,
    /// intervals as `a-b` or `addr/len`, protocols by name for tcp/udp/sctp.
    pub elements: Vec<String>,
}

/// The summary of `<family> <table>` in `ns`, read from `nft -j list table`.
pub fn nft_json_summary(ns: &Netns, family: &str, table: &str) -> Summary {
    let out = ns.exec_ok("nft", &["-j", "list", "table", family, table]);
    Summary::from_json(&out).unwrap_or_else(|e| panic!("nft -j list table {family} {table}: {e}"))
}

impl Summary {
    /// Parse nft's JSON listing of one table.
    pub fn from_json(text: &str) -> Result<Summary, String> {
        let doc: Json = serde_json::from_str(text).map_err(|e| format!("bad json: {e}"))?;
        let items = doc
            .get("nftables")
            .and_then(Json::as_array)
            .ok_or_else(|| "no nftables array".to_string())?;
        let mut s = Summary::default();
        for item in items {
            if let Some(c) = item.get("chain") {
                let name = str_field(c, "name")?;
                let base = match c.get("type") {
                    Some(t) => Some((
                        t.as_str().unwrap_or_default().to_string(),
                        str_field(c, "hook")?,
                        c.get("prio")
                            .and_then(Json::as_i64)
                            .ok_or("chain without prio")?,
                        str_field(c, "policy")?,
                    )),
                    None => None,
                };
                s.chains.entry(name).or_default().base = base;
            } else if let Some(r) = item.get("rule") {
                let chain = str_field(r, "chain")?;
                let comment = r.get("comment").and_then(Json::as_str).map(str::to_string);
                s.chains
                    .entry(chain)
                    .or_default()
                    .rule_comments
                    .push(comment);
            } else if let Some((set, map)) = item
                .get("set")
                .map(|x| (x, false))
                .or_else(|| item.get("map").map(|x| (x, true)))
            {
                let name = str_field(set, "name")?;
                let key = match set.get("type") {
                    Some(Json::String(t)) => vec![t.clone()],
                    Some(Json::Array(a)) => a
                        .iter()
                        .filter_map(Json::as_str)
                        .map(str::to_string)
                        .collect(),
                    _ => return Err(format!("set {name} without a type")),
                };
                let data = set.get("map").and_then(Json::as_str).map(str::to_string);
                let mut flags: Vec<String> = set
                    .get("flags")
                    .and_then(Json::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Json::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default();
                flags.retain(|f| matches!(f.as_str(), "constant" | "interval" | "timeout"));
                flags.sort();
                let mut elements = Vec::new();
                for e in set
                    .get("elem")
                    .and_then(Json::as_array)
                    .into_iter()
                    .flatten()
                {
                    elements.push(json_element(e, map)?);
                }
                elements.sort();
                s.sets.insert(
                    name,
                    SetSummary {
                        map,
                        key,
                        data,
                        flags,
                        elements,
                    },
                );
            }
        }
        Ok(s)
    }

    /// The summary the model says the table has.
    pub fn of_model(t: &Table) -> Summary {
        let mut s = Summary::default();
        for c in &t.chains {
            let base = c.base.map(|b| {
                let policy = match b.policy {
                    nft_model::Policy::Accept => "accept",
                    nft_model::Policy::Drop => "drop",
                };
                (
                    b.chain_type.name().to_string(),
                    b.hook.name().to_string(),
                    i64::from(b.priority),
                    policy.to_string(),
                )
            });
            let rule_comments = c.rules.iter().map(|r| r.comment.clone()).collect();
            s.chains.insert(
                c.name.clone(),
                ChainSummary {
                    base,
                    rule_comments,
                },
            );
        }
        for set in &t.sets {
            let key = set.key.iter().map(|k| k.nft_name().to_string()).collect();
            let data = set.data.as_ref().map(|d| match d {
                SetData::Verdict => "verdict".to_string(),
                SetData::Values(v) => v
                    .iter()
                    .map(|t| t.nft_name())
                    .collect::<Vec<_>>()
                    .join(" . "),
            });
            let mut flags = Vec::new();
            if set.flags.constant {
                flags.push("constant".to_string());
            }
            if set.flags.interval {
                flags.push("interval".to_string());
            }
            if set.flags.timeout {
                flags.push("timeout".to_string());
            }
            flags.sort();
            let mut elements: Vec<String> = set.elements.iter().map(model_element).collect();
            elements.sort();
            s.sets.insert(
                set.name.clone(),
                SetSummary {
                    map: set.is_map(),
                    key,
                    data,
                    flags,
                    elements,
                },
            );
        }
        s
    }
}

fn str_field(o: &Json, k: &str) -> Result<String, String> {
    o.get(k)
        .and_then(Json::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("missing {k} in {o}"))
}

/// One element of nft's JSON: `"v"`, `{"elem": {"val": v, "comment": c}}`, `[key, data]`.
fn json_element(e: &Json, map: bool) -> Result<String, String> {
    if map {
        if let Some([k, d]) = e.as_array().map(Vec::as_slice) {
            return Ok(format!("{} : {}", json_key(k)?, json_data(d)?));
        }
        return Err(format!("bad map element {e}"));
    }
    json_key(e)
}

fn json_key(e: &Json) -> Result<String, String> {
    if let Some(inner) = e.get("elem") {
        let val = inner
            .get("val")
            .ok_or_else(|| format!("elem without val: {e}"))?;
        let mut s = json_value(val)?;
        if let Some(c) = inner.get("comment").and_then(Json::as_str) {
            s.push_str(&format!(" comment \"{c}\""));
        }
        return Ok(s);
    }
    json_value(e)
}

fn json_value(v: &Json) -> Result<String, String> {
    Ok(match v {
        Json::String(s) => s.clone(),
        Json::Number(n) => n.to_string(),
        Json::Object(o) => {
            if let Some(parts) = o.get("concat").and_then(Json::as_array) {
                parts
                    .iter()
                    .map(json_value)
                    .collect::<Result<Vec<_>, _>>()?
                    .join(" . ")
            } else if let Some(p) = o.get("prefix") {
                let addr = p
                    .get("addr")
                    .map(json_value)
                    .transpose()?
                    .unwrap_or_default();
                let len = p.get("len").and_then(Json::as_u64).unwrap_or_default();
                format!("{addr}/{len}")
            } else if let Some([a, b]) = o.get("range").and_then(Json::as_array).map(Vec::as_slice)
            {
                format!("{}-{}", json_value(a)?, json_value(b)?)
            } else {
                return Err(format!("unknown value {v}"));
            }
        }
        other => return Err(format!("unknown value {other}")),
    })
}

fn json_data(d: &Json) -> Result<String, String> {
    if let Json::Object(o) = d {
        for verdict in ["accept", "drop", "continue", "return"] {
            if o.contains_key(verdict) {
                return Ok(verdict.to_string());
            }
        }
        for kind in ["jump", "goto"] {
            if let Some(t) = o
                .get(kind)
                .and_then(|j| j.get("target"))
                .and_then(Json::as_str)
            {
                return Ok(format!("{kind} {t}"));
            }
        }
    }
    json_value(d)
}

fn model_element(e: &Element) -> String {
    let mut s = match e.key_end() {
        None => e
            .key
            .iter()
            .map(model_value)
            .collect::<Vec<_>>()
            .join(" . "),
        Some(end) => e
            .key
            .iter()
            .zip(end)
            .map(|(a, b)| model_interval(a, b))
            .collect::<Vec<_>>()
            .join(" . "),
    };
    if let Some(c) = e.comment() {
        s.push_str(&format!(" comment \"{c}\""));
    }
    match &e.data {
        None => {}
        Some(ElemData::Verdict(v)) => {
            let d = match v {
                Verdict::Accept => "accept".to_string(),
                Verdict::Drop => "drop".into(),
                Verdict::Continue => "continue".into(),
                Verdict::Return => "return".into(),
                Verdict::Jump(c) => format!("jump {c}"),
                Verdict::Goto(c) => format!("goto {c}"),
            };
            s.push_str(&format!(" : {d}"));
        }
        Some(ElemData::Values(v)) => {
            s.push_str(" : ");
            s.push_str(&v.iter().map(model_value).collect::<Vec<_>>().join(" . "));
        }
    }
    s
}

fn model_value(v: &Value) -> String {
    match v {
        Value::Ipv4(a) => a.to_string(),
        Value::Ipv6(a) => a.to_string(),
        Value::Proto(6) => "tcp".into(),
        Value::Proto(17) => "udp".into(),
        Value::Proto(132) => "sctp".into(),
        Value::Proto(p) => p.to_string(),
        Value::Port(p) => p.to_string(),
        Value::Mark(m) => m.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Ifname(n) => n.to_string(),
    }
}

/// `a`, `addr/len` or `a-b`.
fn model_interval(a: &Value, b: &Value) -> String {
    if a == b {
        return model_value(a);
    }
    let ips = match (a, b) {
        (Value::Ipv4(x), Value::Ipv4(y)) => Some((
            IpAddr::V4(*x),
            u128::from(u32::from(*x)),
            u128::from(u32::from(*y)),
            32,
        )),
        (Value::Ipv6(x), Value::Ipv6(y)) => {
            Some((IpAddr::V6(*x), u128::from(*x), u128::from(*y), 128))
        }
        _ => None,
    };
    if let Some((addr, lo, hi, bits)) = ips {
        // a prefix when lo..=hi covers exactly the host bits of some length
        let span = hi.wrapping_sub(lo);
        let host = 128 - span.leading_zeros();
        if hi >= lo && span.count_ones() == host && lo & span == 0 && host <= bits {
            return format!("{addr}/{}", bits - host);
        }
    }
    format!("{}-{}", model_value(a), model_value(b))
}

/// Key type names of a model set, for callers building expectations by hand.
pub fn type_names(types: &[DataType]) -> Vec<String> {
    types.iter().map(|t| t.nft_name().to_string()).collect()
}
