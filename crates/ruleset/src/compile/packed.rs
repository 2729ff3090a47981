//! Set elements as the compiler keeps them: packed into one shared byte string each.
//!
//! A large table holds a few elements per endpoint (its slot in an endpoint map, its
//! hairpin pair) and the compiler keeps every one of them for as long as it runs. As an
//! [`nft_model::Element`] (a struct of vectors of [`Value`]s behind an `Arc`) one costs
//! ~300 bytes in four allocations; packed, ~50 bytes in one. Elements are unpacked only
//! to build a batch or a table.
//!
//! Layout: the key's values, the key end's values, the data (values, or a verdict), the
//! timeout (8 bytes), the comment, then a 7-byte trailer (section lengths and flags).
//! Each value is a tag byte and its bytes in network order (an interface name ends with
//! a NUL: names never hold one), so comparing two keys' bytes orders them exactly as comparing their
//! `Vec<Value>`s does: [`Packed::identity`] is what the mirror orders elements by.

use std::cmp::Ordering;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use nft_model::{ElemData, Element, Value, Verdict};

/// A set's name as fragments hold it (shared, not copied per element).
pub type SetName = Arc<str>;

/// One element, packed (see the module docs). Cheap to clone (shared).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Packed(Arc<[u8]>);

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.element())
    }
}

const TRAILER: usize = 7;
const HAS_END: u8 = 1;
const DATA_VALUES: u8 = 2;
const DATA_VERDICT: u8 = 4;
const HAS_TIMEOUT: u8 = 8;
const HAS_COMMENT: u8 = 16;

// Value tags, in the order of `Value`'s variants (so that bytes order like values).
const T_IPV4: u8 = 0;
const T_IPV6: u8 = 1;
const T_PROTO: u8 = 2;
const T_PORT: u8 = 3;
const T_MARK: u8 = 4;
const T_INT: u8 = 5;
const T_IFNAME: u8 = 6;

fn put_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Ipv4(a) => {
            out.push(T_IPV4);
            out.extend_from_slice(&a.octets());
        }
        Value::Ipv6(a) => {
            out.push(T_IPV6);
            out.extend_from_slice(&a.octets());
        }
        Value::Proto(p) => out.extend_from_slice(&[T_PROTO, *p]),
        Value::Port(p) => {
            out.push(T_PORT);
            out.extend_from_slice(&p.to_be_bytes());
        }
        Value::Mark(m) => {
            out.push(T_MARK);
            out.extend_from_slice(&m.to_be_bytes());
        }
        Value::Int(i) => {
            out.push(T_INT);
            out.extend_from_slice(&i.to_be_bytes());
        }
        Value::Ifname(n) => {
            out.push(T_IFNAME);
            out.extend(n.bytes().filter(|b| *b != 0));
            out.push(0);
        }
    }
}

fn packed_len(v: &Value) -> usize {
    match v {
        Value::Ipv4(_) | Value::Mark(_) | Value::Int(_) => 5,
        Value::Ipv6(_) => 17,
        Value::Proto(_) => 2,
        Value::Port(_) => 3,
        Value::Ifname(n) => 2 + n.len(),
    }
}

/// The length of the value with this tag at the start of `rest` (None: not a value the
/// packer wrote).
fn width(tag: u8, rest: &[u8]) -> Option<usize> {
    let n = match tag {
        T_IPV4 | T_MARK | T_INT => 4,
        T_IPV6 => 16,
        T_PROTO => 1,
        T_PORT => 2,
        T_IFNAME => rest
            .iter()
            .position(|c| *c == 0)
            .map_or(rest.len(), |e| e + 1),
        _ => return None,
    };
    (n <= rest.len()).then_some(n)
}

/// The values of a section (which the packer wrote: anything else ends the list), in a
/// vector of exactly their number (tables built from these hold millions).
fn values(b: &[u8]) -> Vec<Value> {
    let walk = |mut b: &[u8], mut f: Option<&mut Vec<Value>>| -> usize {
        let mut count = 0;
        while let Some((&tag, rest)) = b.split_first() {
            let Some(n) = width(tag, rest) else { break };
            if let Some(out) = f.as_deref_mut() {
                out.push(value(tag, &rest[..n]));
            }
            count += 1;
            b = &rest[n..];
        }
        count
    };
    let mut out = Vec::with_capacity(walk(b, None));
    walk(b, Some(&mut out));
    out
}

/// One value from its tag and bytes (of the length [`width`] gave).
fn value(tag: u8, x: &[u8]) -> Value {
    let u32_of = |x: &[u8]| u32::from_be_bytes(<[u8; 4]>::try_from(x).unwrap_or_default());
    match tag {
        T_IPV4 => Value::Ipv4(Ipv4Addr::from(u32_of(x))),
        T_IPV6 => Value::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(x).unwrap_or_default())),
        T_PROTO => Value::Proto(x.first().copied().unwrap_or_default()),
        T_PORT => Value::Port(u16::from_be_bytes(
            <[u8; 2]>::try_from(x).unwrap_or_default(),
        )),
        T_MARK => Value::Mark(u32_of(x)),
        T_INT => Value::Int(u32_of(x)),
        _ => Value::Ifname(String::from_utf8_lossy(x.strip_suffix(&[0]).unwrap_or(x)).into()),
    }
}

fn put_verdict(out: &mut Vec<u8>, v: &Verdict) {
    let (kind, chain) = match v {
        Verdict::Accept => (0, ""),
        Verdict::Drop => (1, ""),
        Verdict::Continue => (2, ""),
        Verdict::Return => (3, ""),
        Verdict::Jump(c) => (4, c.as_str()),
        Verdict::Goto(c) => (5, c.as_str()),
    };
    out.push(kind);
    out.extend_from_slice(chain.as_bytes());
}

fn verdict(b: &[u8]) -> Verdict {
    let chain = || String::from_utf8_lossy(b.get(1..).unwrap_or_default()).into_owned();
    match b.first() {
        Some(0) => Verdict::Accept,
        Some(1) => Verdict::Drop,
        Some(2) => Verdict::Continue,
        Some(3) => Verdict::Return,
        Some(4) => Verdict::Jump(chain()),
        _ => Verdict::Goto(chain()),
    }
}

fn len16(n: usize) -> [u8; 2] {
    u16::try_from(n).unwrap_or(u16::MAX).to_ne_bytes()
}

impl Packed {
    /// An element with only a key and, for a map, data values: built without an
    /// intermediate [`Element`] (the endpoint and hairpin elements of every list).
    pub fn values(key: &[&Value], data: Option<&[&Value]>) -> Packed {
        let klen: usize = key.iter().map(|v| packed_len(v)).sum();
        let dlen: usize = data.map_or(0, |d| d.iter().map(|v| packed_len(v)).sum());
        let mut out = Vec::with_capacity(klen + dlen + TRAILER);
        for v in key {
            put_value(&mut out, v);
        }
        for v in data.into_iter().flatten() {
            put_value(&mut out, v);
        }
        let flags = if data.is_some() { DATA_VALUES } else { 0 };
        Packed::finish(out, klen, 0, dlen, flags)
    }

    /// Pack any element.
    pub fn new(e: &Element) -> Packed {
        let mut out = Vec::new();
        for v in &e.key {
            put_value(&mut out, v);
        }
        let klen = out.len();
        let mut flags = 0;
        if let Some(end) = e.key_end() {
            flags |= HAS_END;
            for v in end {
                put_value(&mut out, v);
            }
        }
        let elen = out.len() - klen;
        match &e.data {
            None => {}
            Some(ElemData::Values(vs)) => {
                flags |= DATA_VALUES;
                for v in vs {
                    put_value(&mut out, v);
                }
            }
            Some(ElemData::Verdict(v)) => {
                flags |= DATA_VERDICT;
                put_verdict(&mut out, v);
            }
        }
        let dlen = out.len() - klen - elen;
        if let Some(t) = e.timeout_ms() {
            flags |= HAS_TIMEOUT;
            out.extend_from_slice(&t.to_be_bytes());
        }
        if let Some(c) = e.comment() {
            flags |= HAS_COMMENT;
            out.extend_from_slice(c.as_bytes());
        }
        Packed::finish(out, klen, elen, dlen, flags)
    }

    fn finish(mut out: Vec<u8>, klen: usize, elen: usize, dlen: usize, flags: u8) -> Packed {
        out.extend_from_slice(&len16(klen));
        out.extend_from_slice(&len16(elen));
        out.extend_from_slice(&len16(dlen));
        out.push(flags);
        Packed(Arc::from(out))
    }

    fn trailer(&self) -> (usize, usize, usize, u8) {
        let b = &self.0;
        // read at once (identities are read on every comparison); a packer-written
        // element always has its trailer
        match b.get(b.len().saturating_sub(TRAILER)..) {
            Some(&[k0, k1, e0, e1, d0, d1, flags]) => (
                usize::from(u16::from_ne_bytes([k0, k1])),
                usize::from(u16::from_ne_bytes([e0, e1])),
                usize::from(u16::from_ne_bytes([d0, d1])),
                flags,
            ),
            _ => (0, 0, 0, 0),
        }
    }

    fn section(&self, from: usize, len: usize) -> &[u8] {
        let body = &self.0[..self.0.len().saturating_sub(TRAILER)];
        body.get(from..from + len).unwrap_or_default()
    }

    /// What identifies the element in its set: the key and the key end (interval sets).
    pub fn identity(&self) -> (&[u8], Option<&[u8]>) {
        let (k, e, _, flags) = self.trailer();
        (
            self.section(0, k),
            (flags & HAS_END != 0).then(|| self.section(k, e)),
        )
    }

    /// The element.
    pub fn element(&self) -> Element {
        let (k, e, d, flags) = self.trailer();
        let body_len = self.0.len().saturating_sub(TRAILER);
        let data = self.section(k + e, d);
        let rest = self.section(k + e + d, body_len.saturating_sub(k + e + d));
        let (timeout_ms, comment) = if flags & HAS_TIMEOUT != 0 {
            let t = rest
                .get(..8)
                .and_then(|x| <[u8; 8]>::try_from(x).ok())
                .map(u64::from_be_bytes);
            (t, rest.get(8..).unwrap_or_default())
        } else {
            (None, rest)
        };
        let key = values(self.section(0, k));
        let mut el = if flags & DATA_VALUES != 0 {
            Element::map(key, ElemData::Values(values(data)))
        } else if flags & DATA_VERDICT != 0 {
            Element::map(key, ElemData::Verdict(verdict(data)))
        } else {
            Element::key(key)
        };
        if flags & (HAS_END | HAS_TIMEOUT | HAS_COMMENT) != 0 {
            el.set_key_end((flags & HAS_END != 0).then(|| values(self.section(k, e))));
            el.set_timeout_ms(timeout_ms);
            el.set_comment(
                (flags & HAS_COMMENT != 0).then(|| String::from_utf8_lossy(comment).into_owned()),
            );
        }
        el
    }
}

/// A packed element ordered and compared by its identity in its set (key and key end),
/// not its data.
#[derive(Debug, Clone)]
pub struct ByKey(pub Packed);

impl PartialEq for ByKey {
    fn eq(&self, other: &ByKey) -> bool {
        self.0.identity() == other.0.identity()
    }
}
impl Eq for ByKey {}
impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &ByKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByKey {
    fn cmp(&self, other: &ByKey) -> Ordering {
        self.0.identity().cmp(&other.0.identity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<[u8; 4]>().prop_map(|o| Value::Ipv4(o.into())),
            any::<[u8; 16]>().prop_map(|o| Value::Ipv6(o.into())),
            any::<u8>().prop_map(Value::Proto),
            any::<u16>().prop_map(Value::Port),
            any::<u32>().prop_map(Value::Mark),
            any::<u32>().prop_map(Value::Int),
            "[a-z0-9]{0,15}".prop_map(|s| Value::Ifname(s.into())),
        ]
    }

    fn verdict() -> impl Strategy<Value = Verdict> {
        prop_oneof![
            Just(Verdict::Accept),
            Just(Verdict::Drop),
            Just(Verdict::Continue),
            Just(Verdict::Return),
            "[a-z/-]{0,20}".prop_map(Verdict::Jump),
            "[a-z/-]{0,20}".prop_map(Verdict::Goto),
        ]
    }

    fn element() -> impl Strategy<Value = Element> {
        (
            prop::collection::vec(value(), 0..5),
            prop::option::of(prop::collection::vec(value(), 0..5)),
            prop::option::of(prop_oneof![
                prop::collection::vec(value(), 0..3).prop_map(ElemData::Values),
                verdict().prop_map(ElemData::Verdict),
            ]),
            prop::option::of(any::<u64>()),
            prop::option::of("[ -~]{0,20}"),
        )
            .prop_map(|(key, key_end, data, timeout_ms, comment)| {
                let mut e = match data {
                    Some(d) => Element::map(key, d),
                    None => Element::key(key),
                };
                e.set_key_end(key_end);
                e.set_timeout_ms(timeout_ms);
                e.set_comment(comment);
                e
            })
    }

    proptest! {
        /// Packing keeps everything, and packed identities order exactly as the
        /// elements' (key, key end) do.
        #[test]
        fn packing_round_trips_and_keeps_the_order(a in element(), b in element()) {
            let (pa, pb) = (Packed::new(&a), Packed::new(&b));
            prop_assert_eq!(pa.element(), a.clone());
            // unpacked at their size (tables hold millions of these vectors)
            prop_assert_eq!(pa.element().key.capacity(), a.key.len());
            prop_assert_eq!(pb.element(), b.clone());
            let want = (&a.key, a.key_end()).cmp(&(&b.key, b.key_end()));
            prop_assert_eq!(ByKey(pa.clone()).cmp(&ByKey(pb.clone())), want);
            prop_assert_eq!(pa == pb, a == b);
        }

        #[test]
        fn values_without_an_element_pack_the_same(
            key in prop::collection::vec(value(), 1..5),
            data in prop::option::of(prop::collection::vec(value(), 1..3)),
        ) {
            let e = match &data {
                Some(d) => Element::map(key.clone(), ElemData::Values(d.clone())),
                None => Element::key(key.clone()),
            };
            let k: Vec<&Value> = key.iter().collect();
            let d: Option<Vec<&Value>> = data.as_ref().map(|d| d.iter().collect());
            prop_assert_eq!(Packed::values(&k, d.as_deref()), Packed::new(&e));
        }
    }

    proptest! {
        /// Elements sorted by their packed identity are sorted by (key, key end).
        #[test]
        fn sorting_packed_sorts_the_elements(es in prop::collection::vec(element(), 0..20)) {
            let mut packed: Vec<ByKey> = es.iter().map(|e| ByKey(Packed::new(e))).collect();
            packed.sort();
            let got: Vec<Element> = packed.iter().map(|p| p.0.element()).collect();
            let mut want = es.clone();
            want.sort_by(|a, b| (&a.key, a.key_end()).cmp(&(&b.key, b.key_end())));
            let ids = |v: &[Element]| -> Vec<(Vec<Value>, Option<Vec<Value>>)> {
                v.iter().map(|e| (e.key.clone(), e.key_end().map(<[Value]>::to_vec))).collect()
            };
            prop_assert_eq!(ids(&got), ids(&want));
        }
    }

    #[test]
    fn an_endpoint_element_is_small() {
        let e = Element::map(
            vec![
                Value::Ipv4([198, 18, 0, 1].into()),
                Value::Proto(6),
                Value::Port(80),
                Value::Int(3),
            ],
            ElemData::Values(vec![
                Value::Ipv4([198, 18, 128, 1].into()),
                Value::Port(8080),
            ]),
        );
        assert_eq!(Packed::new(&e).0.len(), 30);
    }
}
