//! FlowIndex: unit tests and a model test against a naive map.

use crate::*;
use proptest::prelude::*;
use proptest::strategy::Strategy;
use std::collections::HashMap;
use std::net::IpAddr;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> Flow {
    Flow {
        proto: IPPROTO_UDP,
        src: ip(src),
        dst: ip(dst),
        sport,
        dport,
        reply_src: ip(dst),
        reply_sport: dport,
        zone: 0,
        id: Some(u32::from(sport)),
    }
}

#[test]
fn lookups_by_destination_and_by_port() {
    let mut ix = FlowIndex::new();
    let a = udp("198.18.0.5", 40000, "198.18.0.10", 53);
    let b = udp("198.18.0.6", 40001, "198.18.0.10", 53);
    let c = udp("198.18.0.5", 40002, "198.18.0.11", 53);
    let d = udp("198.18.0.5", 40003, "198.18.0.10", 54);
    let e = udp("2001:db8::5", 40004, "2001:db8::10", 53);
    for f in [a, b, c, d, e] {
        assert!(ix.insert(f));
    }
    assert_eq!(ix.len(), 5);
    assert_eq!((ix.len_of(Family::V4), ix.len_of(Family::V6)), (4, 1));
    let to: Vec<Flow> = ix.to_dst(ip("198.18.0.10"), 53).collect();
    assert_eq!(to, vec![a, b]);
    let port: Vec<Flow> = ix.to_port(Family::V4, 53).collect();
    assert_eq!(port, vec![a, b, c]);
    assert_eq!(ix.to_port(Family::V6, 53).collect::<Vec<_>>(), vec![e]);
    assert_eq!(
        ix.to_dst(ip("2001:db8::10"), 53).collect::<Vec<_>>(),
        vec![e]
    );
    assert_eq!(ix.to_dst(ip("198.18.0.10"), 55).count(), 0);
    // extreme ports and addresses are inside the ranges
    let edge = udp("255.255.255.255", 65535, "198.18.0.10", 65535);
    let zero = udp("0.0.0.0", 0, "0.0.0.0", 0);
    ix.insert(edge);
    ix.insert(zero);
    assert_eq!(
        ix.to_port(Family::V4, 65535).collect::<Vec<_>>(),
        vec![edge]
    );
    assert_eq!(ix.to_dst(ip("0.0.0.0"), 0).collect::<Vec<_>>(), vec![zero]);
    assert_eq!(ix.iter().count(), 7);
    ix.clear();
    assert!(ix.is_empty());
}

#[test]
fn only_udp_flows_are_kept() {
    let mut ix = FlowIndex::new();
    let tcp = Flow {
        proto: IPPROTO_TCP,
        ..udp("198.18.0.5", 40000, "198.18.0.10", 53)
    };
    assert!(!ix.insert(tcp));
    assert!(ix.is_empty());
    assert_eq!(ix.remove(&tcp), None);
    // addresses of two families: not a flow the kernel can have
    let mixed = Flow {
        reply_src: ip("2001:db8::1"),
        ..udp("198.18.0.5", 40000, "198.18.0.10", 53)
    };
    assert!(!ix.insert(mixed));
    assert!(ix.is_empty());
}

#[test]
fn the_reply_zone_and_id_are_kept_and_zones_are_distinct_entries() {
    let mut ix = FlowIndex::new();
    let dnat = Flow {
        reply_src: ip("198.18.1.7"),
        reply_sport: 5353,
        ..udp("198.18.0.5", 40000, "198.18.0.10", 53)
    };
    let zoned = Flow { zone: 5, ..dnat };
    ix.insert(dnat);
    ix.insert(zoned);
    assert_eq!(ix.len(), 2);
    assert_eq!(ix.get(&dnat), Some(dnat));
    assert_eq!(ix.get(&zoned), Some(zoned));
    assert!(!ix.get(&dnat).unwrap().is_unnated());
    assert_eq!(ix.remove(&zoned), Some(zoned));
    assert_eq!(ix.iter().collect::<Vec<_>>(), vec![dnat]);
}

/// The id rule: a DESTROY of an older entry with the same tuple never removes the
/// newer one; an unknown id on either side matches by tuple and zone. (Negative
/// control, run by hand: with `ids_conflict` always false, this test fails with "late
/// DESTROY of the old entry, left: Some(Flow { .. id: Some(2) }), right: None", and the
/// model test below finds a minimal failing sequence as well.)
#[test]
fn a_destroy_of_an_older_entry_keeps_the_newer_one() {
    let mut ix = FlowIndex::new();
    let old = Flow {
        id: Some(1),
        ..udp("198.18.0.5", 40000, "198.18.0.10", 53)
    };
    let new = Flow { id: Some(2), ..old };
    ix.insert(old);
    assert!(ix.insert(new), "a NEW replaces the entry of the same tuple");
    assert_eq!(ix.len(), 1);
    assert_eq!(ix.remove(&old), None, "late DESTROY of the old entry");
    assert!(!ix.contains(&old));
    assert!(ix.contains(&new));
    assert_eq!(ix.len(), 1);
    let unknown = Flow { id: None, ..old };
    assert!(ix.contains(&unknown));
    assert_eq!(ix.remove(&unknown), Some(new));
    // a stored entry without id is removed by any id
    ix.insert(unknown);
    assert_eq!(ix.remove(&old), Some(unknown));
    assert!(ix.is_empty());
}

#[test]
fn the_estimate_is_of_the_right_size() {
    let mut ix = FlowIndex::new();
    assert_eq!(ix.approx_bytes(), 0);
    for i in 0..10_000u32 {
        let src = IpAddr::from((0xc612_0000u32 + i).to_be_bytes());
        ix.insert(Flow {
            src,
            ..udp("198.18.0.5", 40000, "198.18.0.10", 53)
        });
    }
    let per = ix.approx_bytes() / ix.len();
    assert!((30..=64).contains(&per), "{per} bytes per entry");
    let (v4, v6) = FlowIndex::entry_bytes();
    assert!(v4 <= 28 && v6 <= 64, "{v4} {v6}");
}

// ---------------------------------------------------------------------------------
// Model test: the index against a HashMap keyed by tuple and zone.

#[derive(Debug, Clone)]
enum Op {
    Insert(Flow),
    Remove(Flow),
}

type ModelKey = (IpAddr, IpAddr, u16, u16, u16);

fn key(f: &Flow) -> ModelKey {
    (f.src, f.dst, f.sport, f.dport, f.zone)
}

/// A small universe so that operations collide.
fn arb_flow() -> impl Strategy<Value = Flow> {
    let addr4 = (0u8..3).prop_map(|i| IpAddr::from([198, 18, 0, i]));
    let addr6 = (0u8..3)
        .prop_map(|i| IpAddr::from([0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, i]));
    (
        any::<bool>(),
        (addr4.clone(), addr4.clone(), addr4),
        (addr6.clone(), addr6.clone(), addr6),
        (0u16..3, 0u16..3, 0u16..3),
        (0u16..2, proptest::option::of(0u32..3)),
        prop_oneof![9 => Just(IPPROTO_UDP), 1 => Just(IPPROTO_TCP)],
    )
        .prop_map(|(v6, a4, a6, (sport, dport, rport), (zone, id), proto)| {
            let (src, dst, reply_src) = if v6 { a6 } else { a4 };
            Flow {
                proto,
                src,
                dst,
                sport,
                dport: 53 + dport,
                reply_src,
                reply_sport: rport,
                zone,
                id,
            }
        })
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        arb_flow().prop_map(Op::Insert),
        arb_flow().prop_map(Op::Remove)
    ]
}

proptest! {
    #[test]
    fn the_index_behaves_like_a_map_by_tuple_and_zone(ops in proptest::collection::vec(arb_op(), 0..200)) {
        let mut ix = FlowIndex::new();
        let mut model: HashMap<ModelKey, Flow> = HashMap::new();
        for op in ops {
            match op {
                Op::Insert(f) => {
                    let kept = f.proto == IPPROTO_UDP;
                    prop_assert_eq!(ix.insert(f), kept);
                    if kept {
                        model.insert(key(&f), f);
                    }
                }
                Op::Remove(f) => {
                    let want = match model.get(&key(&f)) {
                        Some(s) if f.proto == IPPROTO_UDP
                            && !matches!((s.id, f.id), (Some(a), Some(b)) if a != b) =>
                        {
                            model.remove(&key(&f))
                        }
                        _ => None,
                    };
                    prop_assert_eq!(ix.contains(&f), want.is_some());
                    prop_assert_eq!(ix.remove(&f), want);
                }
            }
            prop_assert_eq!(ix.len(), model.len());
        }
        let mut all: Vec<Flow> = ix.iter().collect();
        let mut want: Vec<Flow> = model.values().copied().collect();
        let order = |f: &Flow| (f.family() == Family::V6, f.dport, f.dst, f.src, f.sport, f.zone);
        want.sort_by_key(order);
        prop_assert_eq!(&all, &want, "iter() is in key order");
        all.sort_by_key(order);
        for dport in 53..56u16 {
            for fam in [Family::V4, Family::V6] {
                let got: Vec<Flow> = ix.to_port(fam, dport).collect();
                let w: Vec<Flow> = want.iter().filter(|f| f.family() == fam && f.dport == dport).copied().collect();
                prop_assert_eq!(got, w);
            }
            for f in &want {
                let got: Vec<Flow> = ix.to_dst(f.dst, dport).collect();
                let w: Vec<Flow> = want.iter().filter(|g| g.dst == f.dst && g.dport == dport).copied().collect();
                prop_assert_eq!(got, w);
            }
        }
    }
}
