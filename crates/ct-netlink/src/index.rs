//! [`FlowIndex`]: the node's UDP conntrack entries in memory, fed by a seeding dump
//! ([`crate::Conntrack::list_proto`]) and NEW/DESTROY events ([`crate::EventSocket`]),
//! so that the entries to a destination (address and port, or a port on any address)
//! are a range lookup instead of a kernel table walk. Pure.
//!
//! One ordered map per family, keyed (original destination port, original destination
//! address, original source address, source port, zone): a range over the first two
//! fields gives "every entry to dst:dport", over the first one "every entry to port
//! dport, any address". IPv4 addresses are stored as `u32`, IPv6 ones as `[u8; 16]`
//! (no `IpAddr` tag and padding): 28 bytes of key and value per IPv4 entry, 47 bytes
//! per entry with the map's nodes at 1M entries inserted in hash order, 55 inserted in
//! ascending order (measured: `tests/index_memory.rs`).

use crate::{Family, Flow, IPPROTO_UDP};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::ops::RangeInclusive;

/// An address as stored in a key: `u32` for IPv4, `[u8; 16]` for IPv6; both order as
/// the addresses do.
trait Addr: Copy + Ord {
    const MIN: Self;
    const MAX: Self;
    fn from_ip(a: IpAddr) -> Option<Self>;
    fn to_ip(self) -> IpAddr;
}

impl Addr for u32 {
    const MIN: u32 = 0;
    const MAX: u32 = u32::MAX;
    fn from_ip(a: IpAddr) -> Option<u32> {
        match a {
            IpAddr::V4(v4) => Some(u32::from(v4)),
            IpAddr::V6(_) => None,
        }
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(self))
    }
}

impl Addr for [u8; 16] {
    const MIN: [u8; 16] = [0; 16];
    const MAX: [u8; 16] = [0xff; 16];
    fn from_ip(a: IpAddr) -> Option<[u8; 16]> {
        match a {
            IpAddr::V6(v6) => Some(v6.octets()),
            IpAddr::V4(_) => None,
        }
    }
    fn to_ip(self) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from(self))
    }
}

/// The key: field order is the sort order (destination port first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Key<A> {
    dport: u16,
    dst: A,
    src: A,
    sport: u16,
    zone: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Val<A> {
    reply_src: A,
    id: u32,
    reply_sport: u16,
    has_id: bool,
}

impl<A: Addr> Key<A> {
    fn of(f: &Flow) -> Option<Key<A>> {
        Some(Key {
            dport: f.dport,
            dst: A::from_ip(f.dst)?,
            src: A::from_ip(f.src)?,
            sport: f.sport,
            zone: f.zone,
        })
    }

    /// Every key to `dst` (when given) and `dport`.
    fn range(dport: u16, dst: Option<A>) -> RangeInclusive<Key<A>> {
        let (lo, hi) = dst.map_or((A::MIN, A::MAX), |d| (d, d));
        Key {
            dport,
            dst: lo,
            src: A::MIN,
            sport: 0,
            zone: 0,
        }..=Key {
            dport,
            dst: hi,
            src: A::MAX,
            sport: u16::MAX,
            zone: u16::MAX,
        }
    }
}

impl<A: Addr> Val<A> {
    fn of(f: &Flow) -> Option<Val<A>> {
        Some(Val {
            reply_src: A::from_ip(f.reply_src)?,
            id: f.id.unwrap_or(0),
            reply_sport: f.reply_sport,
            has_id: f.id.is_some(),
        })
    }

    fn id(&self) -> Option<u32> {
        self.has_id.then_some(self.id)
    }
}

fn flow<A: Addr>(k: &Key<A>, v: &Val<A>) -> Flow {
    Flow {
        proto: IPPROTO_UDP,
        src: k.src.to_ip(),
        dst: k.dst.to_ip(),
        sport: k.sport,
        dport: k.dport,
        reply_src: v.reply_src.to_ip(),
        reply_sport: v.reply_sport,
        zone: k.zone,
        id: v.id(),
    }
}

/// Two ids that are both known and differ: two different entries with one tuple.
fn ids_conflict(stored: Option<u32>, given: Option<u32>) -> bool {
    matches!((stored, given), (Some(a), Some(b)) if a != b)
}

/// One family's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Table<A: Addr> {
    map: BTreeMap<Key<A>, Val<A>>,
}

impl<A: Addr> Table<A> {
    fn insert(&mut self, f: &Flow) -> bool {
        match (Key::of(f), Val::of(f)) {
            (Some(k), Some(v)) => {
                self.map.insert(k, v);
                true
            }
            _ => false,
        }
    }

    /// The stored entry with `f`'s tuple and zone, unless the ids conflict.
    fn get(&self, f: &Flow) -> Option<(Key<A>, Val<A>)> {
        let k = Key::of(f)?;
        let v = *self.map.get(&k)?;
        (!ids_conflict(v.id(), f.id)).then_some((k, v))
    }

    fn remove(&mut self, f: &Flow) -> Option<Flow> {
        let (k, v) = self.get(f)?;
        self.map.remove(&k);
        Some(flow(&k, &v))
    }

    fn range(&self, dport: u16, dst: Option<A>) -> impl Iterator<Item = Flow> + '_ {
        self.map
            .range(Key::range(dport, dst))
            .map(|(k, v)| flow(k, v))
    }

    fn iter(&self) -> impl Iterator<Item = Flow> + '_ {
        self.map.iter().map(|(k, v)| flow(k, v))
    }

    /// The map's memory, estimated from its node layout: std's B-tree keeps up to 11
    /// entries per node (internal nodes too), about 7 on average after inserts in hash
    /// order (measured: `tests/index_memory.rs`); internal nodes add 12 edges.
    fn approx_bytes(&self) -> usize {
        const CAPACITY: usize = 11;
        let node = 16 + CAPACITY * (size_of::<Key<A>>() + size_of::<Val<A>>());
        let nodes = self.map.len().div_ceil(7);
        nodes * node + nodes.div_ceil(8) * (CAPACITY + 1) * size_of::<usize>()
    }
}

/// The UDP conntrack entries of one network namespace (both families), in memory.
/// Only UDP flows are kept. Entries are identified by their original tuple and zone;
/// the id decides only between two entries with one tuple (see
/// [`FlowIndex::remove`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlowIndex {
    v4: Table<u32>,
    v6: Table<[u8; 16]>,
}

impl FlowIndex {
    pub fn new() -> FlowIndex {
        FlowIndex::default()
    }

    /// Store `f` (a NEW event or a dumped entry), replacing an entry with the same
    /// tuple and zone (whatever its id: the newer entry wins). True when `f` is now in
    /// the index (new or replaced); false when it is not kept: not UDP, or addresses of
    /// two families.
    pub fn insert(&mut self, f: Flow) -> bool {
        if f.proto != IPPROTO_UDP {
            return false;
        }
        match f.family() {
            Family::V4 => self.v4.insert(&f),
            Family::V6 => self.v6.insert(&f),
        }
    }

    /// Remove the entry with `f`'s tuple and zone (a DESTROY event, or a delete that
    /// found it gone) and return it. When both the stored entry's id and `f`'s are
    /// known and differ, `f` is another (older) entry with the same tuple: the index
    /// keeps its entry and returns None (a late DESTROY of an old entry must not remove
    /// a newer one).
    pub fn remove(&mut self, f: &Flow) -> Option<Flow> {
        if f.proto != IPPROTO_UDP {
            return None;
        }
        match f.family() {
            Family::V4 => self.v4.remove(f),
            Family::V6 => self.v6.remove(f),
        }
    }

    /// The stored entry [`FlowIndex::remove`] would remove for `f`.
    pub fn get(&self, f: &Flow) -> Option<Flow> {
        if f.proto != IPPROTO_UDP {
            return None;
        }
        match f.family() {
            Family::V4 => self.v4.get(f).map(|(k, v)| flow(&k, &v)),
            Family::V6 => self.v6.get(f).map(|(k, v)| flow(&k, &v)),
        }
    }

    /// Whether [`FlowIndex::remove`] would remove an entry for `f`.
    pub fn contains(&self, f: &Flow) -> bool {
        self.get(f).is_some()
    }

    /// Every entry whose original destination is `dst:dport`, in key order.
    pub fn to_dst(&self, dst: IpAddr, dport: u16) -> impl Iterator<Item = Flow> + '_ {
        let v4 = u32::from_ip(dst).map(|a| self.v4.range(dport, Some(a)));
        let v6 = <[u8; 16]>::from_ip(dst).map(|a| self.v6.range(dport, Some(a)));
        v4.into_iter().flatten().chain(v6.into_iter().flatten())
    }

    /// Every entry of `family` whose original destination port is `dport`, whatever
    /// the address (a NodePort), in key order.
    pub fn to_port(&self, family: Family, dport: u16) -> impl Iterator<Item = Flow> + '_ {
        let v4 = (family == Family::V4).then(|| self.v4.range(dport, None));
        let v6 = (family == Family::V6).then(|| self.v6.range(dport, None));
        v4.into_iter().flatten().chain(v6.into_iter().flatten())
    }

    /// Every entry: IPv4 then IPv6, each in key order.
    pub fn iter(&self) -> impl Iterator<Item = Flow> + '_ {
        self.v4.iter().chain(self.v6.iter())
    }

    pub fn len(&self) -> usize {
        self.v4.map.len() + self.v6.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries of one family.
    pub fn len_of(&self, family: Family) -> usize {
        match family {
            Family::V4 => self.v4.map.len(),
            Family::V6 => self.v6.map.len(),
        }
    }

    pub fn clear(&mut self) {
        self.v4.map.clear();
        self.v6.map.clear();
    }

    /// Bytes of key and value stored per entry (IPv4, IPv6), without the map's nodes.
    pub fn entry_bytes() -> (usize, usize) {
        (
            size_of::<Key<u32>>() + size_of::<Val<u32>>(),
            size_of::<Key<[u8; 16]>>() + size_of::<Val<[u8; 16]>>(),
        )
    }

    /// Estimated heap bytes of the index (within ~25 % of what the allocator hands
    /// out, `tests/index_memory.rs`).
    pub fn approx_bytes(&self) -> usize {
        self.v4.approx_bytes() + self.v6.approx_bytes()
    }
}
