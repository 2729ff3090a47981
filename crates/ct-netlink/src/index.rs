//! In-memory index of UDP conntrack entries (stub until the events branch lands).

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::{Family, Flow};

type Key = (u16, IpAddr, IpAddr, u16, u16);
type Val = (IpAddr, u16, Option<u32>);

/// The node's UDP conntrack entries, by original destination port and address.
#[derive(Debug, Default, Clone)]
pub struct FlowIndex {
    map: BTreeMap<Key, Val>,
}

fn key(f: &Flow) -> Key {
    (f.dport, f.dst, f.src, f.sport, f.zone)
}

fn flow(k: &Key, v: &Val) -> Flow {
    Flow {
        proto: 17,
        dport: k.0,
        dst: k.1,
        src: k.2,
        sport: k.3,
        zone: k.4,
        reply_src: v.0,
        reply_sport: v.1,
        id: v.2,
    }
}

impl FlowIndex {
    pub fn new() -> FlowIndex {
        FlowIndex::default()
    }
    pub fn insert(&mut self, f: Flow) -> bool {
        if f.proto != 17 {
            return false;
        }
        self.map.insert(key(&f), (f.reply_src, f.reply_sport, f.id));
        true
    }
    pub fn remove(&mut self, f: &Flow) -> Option<Flow> {
        let k = key(f);
        let v = *self.map.get(&k)?;
        if let (Some(a), Some(b)) = (v.2, f.id) {
            if a != b {
                return None;
            }
        }
        self.map.remove(&k);
        Some(flow(&k, &v))
    }
    pub fn contains(&self, f: &Flow) -> bool {
        self.map.contains_key(&key(f))
    }
    pub fn to_dst(&self, dst: IpAddr, dport: u16) -> impl Iterator<Item = Flow> + '_ {
        self.map
            .iter()
            .filter(move |(k, _)| k.0 == dport && k.1 == dst)
            .map(|(k, v)| flow(k, v))
    }
    pub fn to_port(&self, family: Family, dport: u16) -> impl Iterator<Item = Flow> + '_ {
        self.map
            .iter()
            .filter(move |(k, _)| k.0 == dport && (k.1.is_ipv4() == (family == Family::V4)))
            .map(|(k, v)| flow(k, v))
    }
    pub fn iter(&self) -> impl Iterator<Item = Flow> + '_ {
        self.map.iter().map(|(k, v)| flow(k, v))
    }
    pub fn len(&self) -> usize {
        self.map.len()
    }
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
    pub fn clear(&mut self) {
        self.map.clear()
    }
}
