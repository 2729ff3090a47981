//! Tables, chains, rules, sets and elements.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::expr::{Expr, Family, Verdict};
use crate::value::{DataType, Value};
use crate::ModelError;

/// Base chain types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChainType {
    Filter,
    Nat,
    Route,
}

impl ChainType {
    pub fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
            ChainType::Route => "route",
        }
    }
    pub fn from_name(s: &str) -> Option<ChainType> {
        Some(match s {
            "filter" => ChainType::Filter,
            "nat" => ChainType::Nat,
            "route" => ChainType::Route,
            _ => return None,
        })
    }
}

/// Netfilter hooks (`NF_INET_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Hook {
    Prerouting = 0,
    Input = 1,
    Forward = 2,
    Output = 3,
    Postrouting = 4,
}

impl Hook {
    pub fn name(self) -> &'static str {
        match self {
            Hook::Prerouting => "prerouting",
            Hook::Input => "input",
            Hook::Forward => "forward",
            Hook::Output => "output",
            Hook::Postrouting => "postrouting",
        }
    }
    pub fn from_u32(v: u32) -> Option<Hook> {
        Some(match v {
            0 => Hook::Prerouting,
            1 => Hook::Input,
            2 => Hook::Forward,
            3 => Hook::Output,
            4 => Hook::Postrouting,
            _ => return None,
        })
    }
}

/// Base chain policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    Drop = 0,
    Accept = 1,
}

/// What makes a chain a base chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BaseHook {
    pub chain_type: ChainType,
    pub hook: Hook,
    pub priority: i32,
    pub policy: Policy,
}

/// A rule: expressions in order, and an optional comment. The expressions are shared,
/// not copied, by the rule's clones: a rule compiled once is held by its service's
/// fragment, by the mirror of the table and by the operations that create it (at 50,000
/// production-shaped services each copy was 63 MB).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Rule {
    pub exprs: Arc<[Expr]>,
    pub comment: Option<String>,
}

impl Rule {
    pub fn new(exprs: Vec<Expr>) -> Rule {
        Rule {
            exprs: exprs.into(),
            comment: None,
        }
    }
    pub fn with_comment(mut self, c: impl Into<String>) -> Rule {
        self.comment = Some(c.into());
        self
    }
    /// Chains this rule jumps or goes to directly.
    pub fn verdict_targets(&self) -> impl Iterator<Item = &str> {
        self.exprs.iter().filter_map(|e| match e {
            Expr::Verdict(v) => v.chain(),
            _ => None,
        })
    }
    /// Named sets this rule refers to.
    pub fn set_refs(&self) -> impl Iterator<Item = &str> {
        self.exprs.iter().filter_map(|e| match e {
            Expr::Lookup { set, .. } | Expr::Dynset { set, .. } => Some(set.as_str()),
            _ => None,
        })
    }
    /// Named counters this rule refers to (`counter name "x"`).
    pub fn counter_refs(&self) -> impl Iterator<Item = &str> {
        self.exprs.iter().filter_map(|e| match e {
            Expr::CounterRef(name) => Some(name.as_str()),
            _ => None,
        })
    }
}

/// A chain with its rules.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Chain {
    pub name: String,
    pub base: Option<BaseHook>,
    pub comment: Option<String>,
    pub rules: Vec<Rule>,
}

impl Chain {
    pub fn regular(name: impl Into<String>) -> Chain {
        Chain {
            name: name.into(),
            base: None,
            comment: None,
            rules: Vec::new(),
        }
    }
    pub fn base(name: impl Into<String>, base: BaseHook) -> Chain {
        Chain {
            name: name.into(),
            base: Some(base),
            comment: None,
            rules: Vec::new(),
        }
    }
    pub fn with_comment(mut self, c: impl Into<String>) -> Chain {
        self.comment = Some(c.into());
        self
    }
    pub fn with_rules(mut self, rules: Vec<Rule>) -> Chain {
        self.rules = rules;
        self
    }
}

/// Set flags we use (`NFT_SET_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SetFlags {
    pub constant: bool,
    pub interval: bool,
    pub timeout: bool,
    /// Updated from the packet path (`dynset`); elements are runtime state.
    pub dynamic: bool,
}

impl SetFlags {
    pub const CONSTANT: u32 = 0x2;
    pub const INTERVAL: u32 = 0x4;
    pub const MAP: u32 = 0x8;
    pub const TIMEOUT: u32 = 0x10;
    pub const EVAL: u32 = 0x20;
    pub const CONCAT: u32 = 0x80;
}

/// Map data type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SetData {
    /// A verdict map (`vmap`).
    Verdict,
    /// A map to values (e.g. `ipv4_addr . inet_service` for dnat targets).
    Values(Vec<DataType>),
}

/// Data of one map element.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemData {
    Verdict(Verdict),
    Values(Vec<Value>),
}

/// One set or map element.
///
/// The rare parts (range end, timeout, comment) live in one boxed [`ElemExtra`] so that the
/// common element (a key and maybe data) stays small: a cold start unpacks over a million of
/// them. `extra` is normalized: `None` whenever all three are absent, so derived equality and
/// hashing see one representation; `Ord` compares key, key end, data, timeout, comment in order.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Element {
    pub key: Vec<Value>,
    pub data: Option<ElemData>,
    extra: Option<Box<ElemExtra>>,
}

/// The rarely present parts of an [`Element`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
struct ElemExtra {
    /// Inclusive end of the key range for interval sets (`NFTA_SET_ELEM_KEY_END`).
    key_end: Option<Vec<Value>>,
    timeout_ms: Option<u64>,
    comment: Option<String>,
}

impl ElemExtra {
    fn is_empty(&self) -> bool {
        self.key_end.is_none() && self.timeout_ms.is_none() && self.comment.is_none()
    }
}

impl Element {
    pub fn key(key: Vec<Value>) -> Element {
        Element {
            key,
            data: None,
            extra: None,
        }
    }
    pub fn map(key: Vec<Value>, data: ElemData) -> Element {
        Element {
            key,
            data: Some(data),
            extra: None,
        }
    }
    /// Inclusive end of the key range for interval sets (`NFTA_SET_ELEM_KEY_END`).
    pub fn key_end(&self) -> Option<&[Value]> {
        self.extra.as_ref()?.key_end.as_deref()
    }
    pub fn timeout_ms(&self) -> Option<u64> {
        self.extra.as_ref()?.timeout_ms
    }
    pub fn comment(&self) -> Option<&str> {
        self.extra.as_ref()?.comment.as_deref()
    }
    pub fn with_key_end(mut self, end: Vec<Value>) -> Element {
        self.set_key_end(Some(end));
        self
    }
    pub fn with_timeout_ms(mut self, t: u64) -> Element {
        self.set_timeout_ms(Some(t));
        self
    }
    pub fn with_comment(mut self, c: impl Into<String>) -> Element {
        self.set_comment(Some(c.into()));
        self
    }
    pub fn set_key_end(&mut self, end: Option<Vec<Value>>) {
        self.edit_extra(|x| x.key_end = end);
    }
    pub fn set_timeout_ms(&mut self, t: Option<u64>) {
        self.edit_extra(|x| x.timeout_ms = t);
    }
    pub fn set_comment(&mut self, c: Option<String>) {
        self.edit_extra(|x| x.comment = c);
    }
    /// Change the extra parts, keeping `extra` normalized (`None` when all are absent).
    fn edit_extra(&mut self, f: impl FnOnce(&mut ElemExtra)) {
        let mut x = self.extra.take().unwrap_or_default();
        f(&mut x);
        if !x.is_empty() {
            self.extra = Some(x);
        }
    }
}

impl PartialOrd for Element {
    fn partial_cmp(&self, other: &Element) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Element {
    /// Key first, then key end, data, timeout and comment (the order of the fields before
    /// the rare ones were boxed).
    fn cmp(&self, other: &Element) -> std::cmp::Ordering {
        self.key
            .cmp(&other.key)
            .then_with(|| self.key_end().cmp(&other.key_end()))
            .then_with(|| self.data.cmp(&other.data))
            .then_with(|| self.timeout_ms().cmp(&other.timeout_ms()))
            .then_with(|| self.comment().cmp(&other.comment()))
    }
}

/// A named set or map with its elements.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Set {
    pub name: String,
    pub key: Vec<DataType>,
    pub data: Option<SetData>,
    pub flags: SetFlags,
    pub timeout_ms: Option<u64>,
    /// `NFTA_SET_DESC_SIZE`: the most elements the set may hold (the kernel refuses one
    /// more with `ENFILE`, and a dynamic set's `update` stops adding), and how the kernel
    /// sizes a hash set: with a size it picks the fixed-bucket hash (no rehash) where it
    /// can. `None`: no size given (a dynamic set bound by a `dynset` gets 65,535).
    pub size: Option<u32>,
    /// The key's address fields are source addresses: declared `typeof ip saddr` rather
    /// than `ip daddr` (what nft prints; the kernel does not know it). Only for sets
    /// declared with `typeof` (see `render`).
    pub saddr_key: bool,
    pub comment: Option<String>,
    pub elements: Vec<Element>,
}

impl Set {
    #[allow(clippy::self_named_constructors)] // `Set::set` and `Set::map` read as nft does
    pub fn set(name: impl Into<String>, key: Vec<DataType>) -> Set {
        Set {
            name: name.into(),
            key,
            data: None,
            flags: SetFlags::default(),
            timeout_ms: None,
            size: None,
            saddr_key: false,
            comment: None,
            elements: Vec::new(),
        }
    }
    pub fn map(name: impl Into<String>, key: Vec<DataType>, data: SetData) -> Set {
        Set {
            data: Some(data),
            ..Set::set(name, key)
        }
    }
    pub fn with_comment(mut self, c: impl Into<String>) -> Set {
        self.comment = Some(c.into());
        self
    }
    pub fn is_map(&self) -> bool {
        self.data.is_some()
    }
    /// Whether the kernel needs per-field lengths (`NFTA_SET_DESC_CONCAT`): concatenated
    /// interval sets, where the pipapo backend is used.
    pub fn needs_concat_desc(&self) -> bool {
        self.key.len() > 1 && self.flags.interval
    }

    /// Check that every element matches the set's declared types.
    pub fn validate(&self) -> Result<(), ModelError> {
        validate_name("set", &self.name)?;
        for (i, e) in self.elements.iter().enumerate() {
            let bad = |reason: String| ModelError::BadElement {
                set: self.name.clone(),
                index: i,
                reason,
            };
            let types: Vec<DataType> = e.key.iter().map(Value::data_type).collect();
            if types != self.key {
                return Err(bad(format!(
                    "key types {types:?} differ from {:?}",
                    self.key
                )));
            }
            if let Some(end) = e.key_end() {
                if !self.flags.interval {
                    return Err(bad("range end in a set without the interval flag".into()));
                }
                let t: Vec<DataType> = end.iter().map(Value::data_type).collect();
                if t != self.key {
                    return Err(bad(format!(
                        "range end types {t:?} differ from {:?}",
                        self.key
                    )));
                }
            }
            match (&self.data, &e.data) {
                (None, None) | (Some(SetData::Verdict), Some(ElemData::Verdict(_))) => {}
                (Some(SetData::Values(want)), Some(ElemData::Values(v))) => {
                    let t: Vec<DataType> = v.iter().map(Value::data_type).collect();
                    if &t != want {
                        return Err(bad(format!("data types {t:?} differ from {want:?}")));
                    }
                }
                _ => return Err(bad("element data does not match the set's kind".into())),
            }
            if e.timeout_ms().is_some() && !self.flags.timeout {
                return Err(bad(
                    "element timeout in a set without the timeout flag".into()
                ));
            }
            if let Some(c) = e.comment() {
                check_comment(&format!("element {i} of set {}", self.name), c)?;
            }
        }
        if let Some((i, j)) = self.overlap() {
            return Err(ModelError::BadElement {
                set: self.name.clone(),
                index: j,
                reason: format!(
                    "overlaps element {i} (an interval set refuses overlapping elements)"
                ),
            });
        }
        Ok(())
    }

    /// In an interval set: two elements (indexes) that overlap without being the same
    /// element, which the kernel refuses (EEXIST on the second). Elements whose fields
    /// but the last are single values are compared within their group (sorted by the
    /// last field's range); those with a range in an earlier field with every other one.
    pub fn overlap(&self) -> Option<(usize, usize)> {
        if !self.flags.interval || self.elements.len() < 2 {
            return None;
        }
        let span = |e: &Element| -> Vec<(Value, Value)> {
            let end = e.key_end().unwrap_or(&e.key);
            e.key.iter().cloned().zip(end.iter().cloned()).collect()
        };
        let spans: Vec<Vec<(Value, Value)>> = self.elements.iter().map(span).collect();
        let meets = |a: &[(Value, Value)], b: &[(Value, Value)]| {
            a != b
                && a.iter()
                    .zip(b)
                    .all(|((a0, a1), (b0, b1))| a0 <= b1 && b0 <= a1)
        };
        let mut groups: BTreeMap<Vec<&Value>, Vec<usize>> = BTreeMap::new();
        let mut ranged = Vec::new();
        for (i, sp) in spans.iter().enumerate() {
            let Some((_, head)) = sp.split_last() else {
                continue;
            };
            if head.iter().all(|(a, z)| a == z) {
                groups
                    .entry(head.iter().map(|(a, _)| a).collect())
                    .or_default()
                    .push(i);
            } else {
                ranged.push(i);
            }
        }
        for idx in groups.values_mut() {
            idx.sort_by(|&a, &b| spans[a].last().cmp(&spans[b].last()));
            // the element reaching furthest so far
            let mut reach: Option<usize> = None;
            for &i in idx.iter() {
                if let Some(r) = reach {
                    if meets(&spans[r], &spans[i]) {
                        return Some((r.min(i), r.max(i)));
                    }
                    if spans[i].last().map(|x| &x.1) > spans[r].last().map(|x| &x.1) {
                        reach = Some(i);
                    }
                } else {
                    reach = Some(i);
                }
            }
        }
        for &r in &ranged {
            for j in 0..spans.len() {
                if j != r && meets(&spans[r], &spans[j]) {
                    return Some((r.min(j), r.max(j)));
                }
            }
        }
        None
    }
}

/// A table with everything in it. Named counters come before sets and sets before
/// chains, as `nft list` prints them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Table {
    pub family: Family,
    pub name: String,
    pub comment: Option<String>,
    /// Named counter objects (`counter NAME { }`), by name. Their values are kernel
    /// state, not part of the model: a counter is created once and kept across syncs.
    pub counters: Vec<String>,
    pub sets: Vec<Set>,
    pub chains: Vec<Chain>,
}

impl Table {
    pub fn new(family: Family, name: impl Into<String>) -> Table {
        Table {
            family,
            name: name.into(),
            comment: None,
            counters: Vec::new(),
            sets: Vec::new(),
            chains: Vec::new(),
        }
    }
    pub fn with_comment(mut self, c: impl Into<String>) -> Table {
        self.comment = Some(c.into());
        self
    }
    pub fn chain(&self, name: &str) -> Option<&Chain> {
        self.chains.iter().find(|c| c.name == name)
    }
    pub fn set(&self, name: &str) -> Option<&Set> {
        self.sets.iter().find(|s| s.name == name)
    }

    /// The same table with sets and chains ordered by name and elements sorted: the
    /// form to compare a model with a kernel dump, whose set, chain and element order
    /// depends on history and hashing. Rule order is kept (it matters).
    pub fn canonical(&self) -> Table {
        let mut t = self.clone();
        t.counters.sort();
        t.sets.sort_by(|a, b| a.name.cmp(&b.name));
        for s in &mut t.sets {
            if s.flags.dynamic {
                s.elements.clear();
            }
            s.elements.sort();
        }
        t.chains.sort_by(|a, b| a.name.cmp(&b.name));
        t
    }

    /// Validate names, comments and elements, and that every referenced chain and set exists.
    pub fn validate(&self) -> Result<(), ModelError> {
        validate_name("table", &self.name)?;
        if let Some(c) = &self.comment {
            check_comment(&format!("table {}", self.name), c)?;
        }
        for c in &self.counters {
            validate_name("counter", c)?;
        }
        for s in &self.sets {
            s.validate()?;
            if let Some(c) = &s.comment {
                check_comment(&format!("set {}", s.name), c)?;
            }
        }
        for c in &self.chains {
            validate_name("chain", &c.name)?;
            if let Some(cm) = &c.comment {
                check_comment(&format!("chain {}", c.name), cm)?;
            }
            for r in &c.rules {
                if let Some(cm) = &r.comment {
                    check_comment(&format!("rule in chain {}", c.name), cm)?;
                }
                for target in r.verdict_targets() {
                    if self.chain(target).is_none() {
                        return Err(ModelError::Dangling {
                            from: format!("chain {}", c.name),
                            to: format!("chain {target}"),
                        });
                    }
                }
                for set in r.set_refs() {
                    if self.set(set).is_none() {
                        return Err(ModelError::Dangling {
                            from: format!("chain {}", c.name),
                            to: format!("set {set}"),
                        });
                    }
                }
                for counter in r.counter_refs() {
                    if !self.counters.iter().any(|n| n == counter) {
                        return Err(ModelError::Dangling {
                            from: format!("chain {}", c.name),
                            to: format!("counter {counter}"),
                        });
                    }
                }
            }
        }
        for s in &self.sets {
            for e in &s.elements {
                if let Some(ElemData::Verdict(v)) = &e.data {
                    if let Some(target) = v.chain() {
                        if self.chain(target).is_none() {
                            return Err(ModelError::Dangling {
                                from: format!("map {}", s.name),
                                to: format!("chain {target}"),
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

/// nft limits names to 255 bytes (NFT_NAME_MAXLEN - 1) and its parser to identifiers.
fn validate_name(what: &'static str, name: &str) -> Result<(), ModelError> {
    let err = |reason| ModelError::InvalidName {
        what,
        name: name.to_string(),
        reason,
    };
    if name.is_empty() {
        return Err(err("empty"));
    }
    if name.len() > 255 {
        return Err(err("longer than 255 bytes"));
    }
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first_ok
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
    {
        return Err(err(
            "nft accepts letters, digits, '_', '-', '.', '/' and a leading letter",
        ));
    }
    Ok(())
}

/// nft refuses comments longer than 128 bytes (NFT_USERDATA_MAXLEN is larger, nft's parser is not).
fn check_comment(what: &str, c: &str) -> Result<(), ModelError> {
    let reason = if c.len() > 128 {
        "longer than the 128 bytes nft accepts"
    } else if c.contains('"') || c.contains('\n') || c.contains('\0') {
        "contains a quote, a newline or a NUL byte"
    } else {
        return Ok(());
    };
    Err(ModelError::BadComment {
        what: what.to_string(),
        reason,
    })
}

#[cfg(test)]
mod element_tests {
    use super::*;
    use std::hash::{BuildHasher, RandomState};

    fn port(p: u16) -> Vec<Value> {
        vec![Value::Port(p)]
    }

    /// A cold start unpacks over a million elements: keep the common one small.
    #[test]
    fn an_element_is_small() {
        assert!(
            std::mem::size_of::<Element>() <= 64,
            "Element is {} bytes",
            std::mem::size_of::<Element>()
        );
    }

    #[test]
    fn clearing_the_rare_parts_gives_the_plain_element() {
        let plain = Element::key(port(80));
        let mut e = Element::key(port(80))
            .with_key_end(port(90))
            .with_timeout_ms(5)
            .with_comment("c");
        assert_eq!(e.key_end(), Some(&port(90)[..]));
        assert_eq!((e.timeout_ms(), e.comment()), (Some(5), Some("c")));
        e.set_key_end(None);
        e.set_timeout_ms(None);
        assert_ne!(e, plain);
        e.set_comment(None);
        assert!(e.extra.is_none());
        assert_eq!(e, plain);
        let h = RandomState::new();
        assert_eq!(h.hash_one(&e), h.hash_one(&plain));
        assert_eq!(e.cmp(&plain), std::cmp::Ordering::Equal);
    }

    /// Order: key, key end, data, timeout, comment (as the fields once were declared).
    #[test]
    fn elements_order_by_key_then_key_end_then_data() {
        let v = |n| ElemData::Verdict(Verdict::Jump(format!("c{n}")));
        let by_key = [
            Element::key(port(1)).with_comment("z").with_timeout_ms(9),
            Element::map(port(2), v(0)),
        ];
        assert!(by_key[0] < by_key[1]);
        // the key end decides before the data does
        let a = Element::map(port(1), v(1));
        let b = Element::map(port(1), v(0)).with_key_end(port(2));
        assert!(a < b, "no key end sorts first whatever the data");
        // then data before timeout and comment
        let c = Element::map(port(1), v(0)).with_timeout_ms(9);
        let d = Element::map(port(1), v(1)).with_comment("a");
        assert!(c < d);
        // the timeout decides before the comment (no timeout sorts first)
        assert!(Element::key(port(1)).with_comment("a") < Element::key(port(1)).with_timeout_ms(1));
        assert!(Element::key(port(1)) < Element::key(port(1)).with_timeout_ms(1));
    }
}

#[cfg(test)]
mod overlap_tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn a(s: &str) -> Value {
        Value::Ipv4(s.parse::<Ipv4Addr>().unwrap())
    }

    /// `lb . port . [from, to]`, the shape of `firewall-allow`.
    fn e(lb: &str, port: u16, from: &str, to: &str) -> Element {
        Element::key(vec![a(lb), Value::Port(port), a(from)]).with_key_end(vec![
            a(lb),
            Value::Port(port),
            a(to),
        ])
    }

    fn set(elements: Vec<Element>) -> Set {
        let mut s = Set::set(
            "allow",
            vec![
                DataType::Ipv4Addr,
                DataType::InetService,
                DataType::Ipv4Addr,
            ],
        );
        s.flags.interval = true;
        s.elements = elements;
        s
    }

    #[test]
    fn overlapping_intervals_are_found_identical_ones_are_not() {
        let all = e("198.18.0.1", 80, "0.0.0.0", "255.255.255.255");
        let host = e("198.18.0.1", 80, "198.18.0.1", "198.18.0.1");
        let other_port = e("198.18.0.1", 81, "198.18.0.1", "198.18.0.1");
        let disjoint = e("198.18.0.1", 80, "198.19.0.0", "198.19.0.255");
        let touching = e("198.18.0.1", 80, "198.19.1.0", "198.19.1.255");
        assert_eq!(set(vec![all.clone(), host.clone()]).overlap(), Some((0, 1)));
        assert_eq!(set(vec![host.clone(), all.clone()]).overlap(), Some((0, 1)));
        assert!(set(vec![all.clone(), other_port.clone()])
            .overlap()
            .is_none());
        assert!(set(vec![disjoint.clone(), touching.clone(), host.clone()])
            .overlap()
            .is_none());
        // the same element twice is one element to the kernel
        assert!(set(vec![host.clone(), host.clone()]).overlap().is_none());
        // hidden behind a duplicate of the widest one
        assert_eq!(
            set(vec![all.clone(), all.clone(), host.clone()]).overlap(),
            Some((0, 2))
        );
        assert!(set(vec![all.clone(), host]).validate().is_err());
        // a range in an earlier field is compared with everything
        let ports = Element::key(vec![a("198.18.0.1"), Value::Port(70), a("198.19.0.5")])
            .with_key_end(vec![a("198.18.0.1"), Value::Port(90), a("198.19.0.5")]);
        assert_eq!(
            set(vec![disjoint.clone(), ports.clone()]).overlap(),
            Some((0, 1))
        );
        assert!(set(vec![touching, ports]).overlap().is_none());
        // a set without the interval flag has no intervals to overlap
        let mut plain = set(vec![all.clone(), all]);
        plain.flags.interval = false;
        assert!(plain.overlap().is_none());
    }
}
