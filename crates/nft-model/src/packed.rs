//! Set elements packed into one shared byte string each, and tables holding them.
//!
//! A large table holds a few elements per endpoint (its slot in an endpoint map, its
//! hairpin pair) and the compiler keeps every one of them for as long as it runs. As an
//! [`Element`] (a struct of vectors of [`Value`]s) one costs ~300 bytes in several
//! allocations; packed, ~50 bytes in one, shared (`Arc`) between whoever holds it. A
//! batch can carry packed elements ([`crate::Op::AddPackedElements`]) and the wire
//! layer encodes them straight from their bytes ([`PackedElement::key_into`] and the
//! others give the kernel's layout), so a table created from scratch never needs its
//! elements unpacked (docs/decisions/0012-packed-elements-in-batches.md).
//!
//! Layout: the key's values, the key end's values, the data (values, or a verdict), the
//! timeout (8 bytes), the comment, then a trailer: the lengths of the key, key end and
//! data sections, one byte each, and the flags byte, last (4 bytes); when a section is
//! longer than 255 bytes, two bytes each (7 bytes, flag `WIDE`).
//! Each value is a tag byte and its bytes in network order (an interface name ends with
//! a NUL: names never hold one), so comparing two keys' bytes orders them exactly as
//! comparing their `Vec<Value>`s does: [`PackedElement::identity`] orders elements by
//! (key, key end).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use crate::expr::Verdict;
use crate::object::{ElemData, Element, Table};
use crate::value::Value;

/// One element, packed (see the module docs). Cheap to clone (shared).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PackedElement(Arc<[u8]>);

impl std::fmt::Debug for PackedElement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.element())
    }
}

const TRAILER: usize = 4;
const WIDE_TRAILER: usize = 7;
const HAS_END: u8 = 1;
const DATA_VALUES: u8 = 2;
const DATA_VERDICT: u8 = 4;
const HAS_TIMEOUT: u8 = 8;
const HAS_COMMENT: u8 = 16;
/// The section lengths take two bytes each.
const WIDE: u8 = 32;

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

/// The values of a section as (tag, bytes), in order; a byte the packer did not write
/// ends the list.
fn walk(mut b: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&tag, rest) = b.split_first()?;
        let n = width(tag, rest)?;
        let (x, tail) = rest.split_at(n);
        b = tail;
        Some((tag, x))
    })
}

/// The values of a section, in a vector of exactly their number (tables built from
/// these hold millions).
fn values(b: &[u8]) -> Vec<Value> {
    let mut out = Vec::with_capacity(walk(b).count());
    out.extend(walk(b).map(|(tag, x)| value(tag, x)));
    out
}

/// One value from its tag and bytes (of the length [`width`] gave).
fn value(tag: u8, x: &[u8]) -> Value {
    match tag {
        T_IPV4 => Value::Ipv4(Ipv4Addr::from(u32_of(x))),
        T_IPV6 => Value::Ipv6(Ipv6Addr::from(<[u8; 16]>::try_from(x).unwrap_or_default())),
        T_PROTO => Value::Proto(x.first().copied().unwrap_or_default()),
        T_PORT => Value::Port(u16::from_be_bytes(
            <[u8; 2]>::try_from(x).unwrap_or_default(),
        )),
        T_MARK => Value::Mark(u32_of(x)),
        T_INT => Value::Int(u32_of(x)),
        _ => Value::Ifname(String::from_utf8_lossy(name_of(x)).into()),
    }
}

fn u32_of(x: &[u8]) -> u32 {
    u32::from_be_bytes(<[u8; 4]>::try_from(x).unwrap_or_default())
}

/// An interface name's bytes without the packer's terminating NUL.
fn name_of(x: &[u8]) -> &[u8] {
    x.strip_suffix(&[0]).unwrap_or(x)
}

/// Append the value with this tag and packed bytes as the kernel holds it in a
/// register: what [`Value::put_bytes`] appends for the value it stands for.
fn put_kernel(tag: u8, x: &[u8], out: &mut Vec<u8>) {
    match tag {
        // host byte order in the kernel, big-endian when packed (to order)
        T_MARK | T_INT => out.extend_from_slice(&u32_of(x).to_ne_bytes()),
        T_IFNAME => {
            let start = out.len();
            let n = name_of(x);
            out.extend_from_slice(&n[..n.len().min(16)]);
            out.resize(start + 16, 0);
        }
        _ => out.extend_from_slice(x),
    }
}

/// Append a section's values as the kernel lays out their concatenation: what
/// [`crate::concat_into`] appends for the values it holds (one value unpadded,
/// several each padded to 4 bytes). One pass: a value is padded once another follows.
fn put_concat(section: &[u8], out: &mut Vec<u8>) {
    let pad =
        |out: &mut Vec<u8>, from: usize| out.resize(from + (out.len() - from).div_ceil(4) * 4, 0);
    let (mut n, mut last) = (0usize, out.len());
    for (tag, x) in walk(section) {
        if n > 0 {
            pad(out, last);
        }
        last = out.len();
        put_kernel(tag, x, out);
        n += 1;
    }
    if n > 1 {
        pad(out, last);
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

/// A packed element's data, as the wire layer encodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PackedData<'a> {
    /// Data values: append their kernel layout with [`PackedValues::put_concat`].
    Values(PackedValues<'a>),
    Verdict(Verdict),
}

/// The packed values of one section of an element (key, key end or data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackedValues<'a>(&'a [u8]);

impl PackedValues<'_> {
    /// Append the values as the kernel lays out their concatenation (the bytes
    /// [`crate::concat_into`] appends for the same values).
    pub fn put_concat(&self, out: &mut Vec<u8>) {
        put_concat(self.0, out);
    }

    /// The number of bytes [`PackedValues::put_concat`] appends.
    pub fn concat_len(&self) -> usize {
        let width = |tag| match tag {
            T_IPV6 | T_IFNAME => 16,
            T_PROTO => 1,
            T_PORT => 2,
            _ => 4,
        };
        let (mut n, mut last, mut sum) = (0usize, 0usize, 0usize);
        for (tag, _) in walk(self.0) {
            last = width(tag);
            sum += last.div_ceil(4) * 4;
            n += 1;
        }
        if n == 1 {
            last
        } else {
            sum
        }
    }
}

/// Every part of a packed element as the wire layer encodes it, read at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedParts<'a> {
    pub key: PackedValues<'a>,
    pub key_end: Option<PackedValues<'a>>,
    pub data: Option<PackedData<'a>>,
    pub timeout_ms: Option<u64>,
    pub comment: Option<std::borrow::Cow<'a, str>>,
}

impl PackedElement {
    /// An element with only a key and, for a map, data values: built without an
    /// intermediate [`Element`] (the endpoint and hairpin elements of every list).
    pub fn values(key: &[&Value], data: Option<&[&Value]>) -> PackedElement {
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
        PackedElement::finish(out, klen, 0, dlen, flags)
    }

    /// Pack any element.
    pub fn new(e: &Element) -> PackedElement {
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
        PackedElement::finish(out, klen, elen, dlen, flags)
    }

    fn finish(mut out: Vec<u8>, klen: usize, elen: usize, dlen: usize, flags: u8) -> PackedElement {
        match (u8::try_from(klen), u8::try_from(elen), u8::try_from(dlen)) {
            (Ok(k), Ok(e), Ok(d)) => out.extend_from_slice(&[k, e, d, flags]),
            _ => {
                out.extend_from_slice(&len16(klen));
                out.extend_from_slice(&len16(elen));
                out.extend_from_slice(&len16(dlen));
                out.push(flags | WIDE);
            }
        }
        PackedElement(Arc::from(out))
    }

    /// The trailer's length.
    fn trailer_len(&self) -> usize {
        match self.0.last() {
            Some(flags) if flags & WIDE != 0 => WIDE_TRAILER,
            _ => TRAILER,
        }
    }

    fn trailer(&self) -> (usize, usize, usize, u8) {
        let b = &self.0;
        // read at once (identities are read on every comparison); a packer-written
        // element always has its trailer
        match b.get(b.len().saturating_sub(self.trailer_len())..) {
            Some(&[k, e, d, flags]) => (usize::from(k), usize::from(e), usize::from(d), flags),
            Some(&[k0, k1, e0, e1, d0, d1, flags]) => (
                usize::from(u16::from_ne_bytes([k0, k1])),
                usize::from(u16::from_ne_bytes([e0, e1])),
                usize::from(u16::from_ne_bytes([d0, d1])),
                flags,
            ),
            _ => (0, 0, 0, 0),
        }
    }

    /// The bytes before the trailer.
    fn body(&self) -> &[u8] {
        &self.0[..self.0.len().saturating_sub(self.trailer_len())]
    }

    fn section(&self, from: usize, len: usize) -> &[u8] {
        self.body().get(from..from + len).unwrap_or_default()
    }

    /// What identifies the element in its set: the key and the key end (interval sets).
    pub fn identity(&self) -> (&[u8], Option<&[u8]>) {
        let (k, e, _, flags) = self.trailer();
        (
            self.section(0, k),
            (flags & HAS_END != 0).then(|| self.section(k, e)),
        )
    }

    /// The bytes the element takes (its packed form), for measuring.
    pub fn packed_len(&self) -> usize {
        self.0.len()
    }

    /// Every part, the trailer read once (what the wire layer encodes).
    pub fn parts(&self) -> PackedParts<'_> {
        let (k, e, d, flags) = self.trailer();
        let body = self.body();
        let at = |from: usize, len: usize| body.get(from..from + len).unwrap_or_default();
        let data = at(k + e, d);
        let rest = body.get(k + e + d..).unwrap_or_default();
        let (timeout_ms, comment) = if flags & HAS_TIMEOUT != 0 {
            let t = rest
                .get(..8)
                .and_then(|x| <[u8; 8]>::try_from(x).ok())
                .map(u64::from_be_bytes);
            (t, rest.get(8..).unwrap_or_default())
        } else {
            (None, rest)
        };
        PackedParts {
            key: PackedValues(at(0, k)),
            key_end: (flags & HAS_END != 0).then(|| PackedValues(at(k, e))),
            data: if flags & DATA_VALUES != 0 {
                Some(PackedData::Values(PackedValues(data)))
            } else if flags & DATA_VERDICT != 0 {
                Some(PackedData::Verdict(verdict(data)))
            } else {
                None
            },
            timeout_ms,
            comment: (flags & HAS_COMMENT != 0).then(|| String::from_utf8_lossy(comment)),
        }
    }

    /// The key.
    pub fn key(&self) -> PackedValues<'_> {
        PackedValues(self.identity().0)
    }

    /// The key end (interval sets).
    pub fn key_end(&self) -> Option<PackedValues<'_>> {
        self.identity().1.map(PackedValues)
    }

    /// The data of a map element.
    pub fn data(&self) -> Option<PackedData<'_>> {
        self.parts().data
    }

    /// The element's timeout.
    pub fn timeout_ms(&self) -> Option<u64> {
        self.parts().timeout_ms
    }

    /// The element's comment.
    pub fn comment(&self) -> Option<String> {
        self.parts().comment.map(std::borrow::Cow::into_owned)
    }

    /// The element.
    pub fn element(&self) -> Element {
        let p = self.parts();
        let key = values(p.key.0);
        let mut el = match p.data {
            Some(PackedData::Values(v)) => Element::map(key, ElemData::Values(values(v.0))),
            Some(PackedData::Verdict(v)) => Element::map(key, ElemData::Verdict(v)),
            None => Element::key(key),
        };
        if p.key_end.is_some() || p.timeout_ms.is_some() || p.comment.is_some() {
            el.set_key_end(p.key_end.map(|e| values(e.0)));
            el.set_timeout_ms(p.timeout_ms);
            el.set_comment(p.comment.map(std::borrow::Cow::into_owned));
        }
        el
    }
}

/// A table some of whose sets hold their elements packed: what a batch creating the
/// table from scratch is made from without unpacking them
/// ([`crate::into_create_table_ops_packed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackedTable {
    /// Everything but the packed elements.
    pub table: Table,
    /// By set name: the elements of that set of `table`, packed (in order). Such a set
    /// holds its elements here only, not in `table`.
    pub packed: BTreeMap<String, Vec<PackedElement>>,
}

impl PackedTable {
    /// The table with every element unpacked.
    pub fn unpack(self) -> Table {
        let PackedTable { mut table, packed } = self;
        for s in &mut table.sets {
            if let Some(p) = packed.get(&s.name) {
                s.elements.reserve_exact(p.len());
                s.elements.extend(p.iter().map(PackedElement::element));
            }
        }
        table
    }

    /// Call `f` with every element of the set named `set` (one at a time: packed ones
    /// are unpacked one by one).
    pub fn each_element(&self, set: &str, mut f: impl FnMut(&Element)) {
        if let Some(s) = self.table.set(set) {
            s.elements.iter().for_each(&mut f);
        }
        for p in self.packed.get(set).into_iter().flatten() {
            f(&p.element());
        }
    }
}

/// A table whose elements are visited set by set, whether they are packed or not.
pub trait TableElements {
    /// The table: declarations, chains, and the elements that are not packed.
    fn table(&self) -> &Table;
    /// Call `f` with every element of the set named `set`, one at a time.
    fn each_element(&self, set: &str, f: impl FnMut(&Element));
}

impl TableElements for Table {
    fn table(&self) -> &Table {
        self
    }
    fn each_element(&self, set: &str, f: impl FnMut(&Element)) {
        if let Some(s) = self.set(set) {
            s.elements.iter().for_each(f);
        }
    }
}

impl TableElements for PackedTable {
    fn table(&self) -> &Table {
        &self.table
    }
    fn each_element(&self, set: &str, f: impl FnMut(&Element)) {
        PackedTable::each_element(self, set, f);
    }
}

impl From<Table> for PackedTable {
    fn from(table: Table) -> PackedTable {
        PackedTable {
            table,
            packed: BTreeMap::new(),
        }
    }
}

#[cfg(test)]
mod tests;
