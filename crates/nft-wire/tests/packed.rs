//! Packed elements on the wire: a table created from packed elements
//! (`Op::AddPackedElements`) is the same batch, byte for byte, as the same table created
//! from unpacked ones, with the same refused-element mapping; and a batch is one buffer
//! of exactly its size.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

use nft_model::*;
use nft_wire::msg::NlMsgIter;
use nft_wire::nla::NlaIter;
use nft_wire::{encode_batch, encode_check_batch, EncodedBatch};

fn v4(s: &str) -> Value {
    Value::Ipv4(s.parse::<Ipv4Addr>().unwrap())
}

fn v6(s: &str) -> Value {
    Value::Ipv6(s.parse::<Ipv6Addr>().unwrap())
}

/// A table with every kind of element: interval concatenations with key ends, verdict
/// data (accept, drop, jump, goto), data values, timeouts, comments, IPv6, marks and
/// interface names, a constant set, a dynamic set, and a list long enough to be split.
fn table() -> Table {
    use DataType::*;
    let mut t = Table::new(Family::Ip6, "kube-nlproxy").with_comment("rules");
    t.chains.push(Chain::regular("svc-a"));

    let mut allow = Set::set(
        "firewall-allow",
        vec![Ipv4Addr, InetProto, InetService, Ipv4Addr],
    );
    allow.flags.interval = true;
    allow.elements = (0..3u8)
        .map(|i| {
            let lb = v4(&format!("198.18.0.{i}"));
            Element::key(vec![
                lb.clone(),
                Value::Proto(6),
                Value::Port(443),
                v4("198.19.0.0"),
            ])
            .with_key_end(vec![
                lb,
                Value::Proto(6),
                Value::Port(443),
                v4("198.19.0.255"),
            ])
        })
        .collect();

    let mut vmap = Set::map(
        "service-ips",
        vec![Ipv6Addr, InetProto, InetService],
        SetData::Verdict,
    )
    .with_comment("dispatch");
    let verdicts = [
        Verdict::Accept,
        Verdict::Drop,
        Verdict::Jump("svc-a".into()),
        Verdict::Goto("svc-a".into()),
    ];
    vmap.elements = verdicts
        .iter()
        .enumerate()
        .map(|(i, v)| {
            Element::map(
                vec![
                    v6(&format!("2001:db8::{i}")),
                    Value::Proto(17),
                    Value::Port(53),
                ],
                ElemData::Verdict(v.clone()),
            )
            .with_comment(format!("default/svc-{i}:dns"))
        })
        .collect();

    let mut endpoints = Set::map(
        "endpoints-cluster-16",
        vec![Ipv6Addr, InetProto, InetService, HostInt32],
        SetData::Values(vec![Ipv6Addr, InetService]),
    );
    endpoints.elements = (0..6000u32)
        .map(|i| {
            Element::map(
                vec![
                    v6(&format!("2001:db8::1:{:x}", i / 16)),
                    Value::Proto(6),
                    Value::Port(80),
                    Value::Int(i % 16),
                ],
                ElemData::Values(vec![v6(&format!("2001:db8:1::{:x}", i)), Value::Port(8080)]),
            )
        })
        .collect();

    let mut timeouts = Set::set("affinity-a", vec![Ipv4Addr]);
    timeouts.flags.timeout = true;
    timeouts.timeout_ms = Some(10_800_000);
    timeouts.elements = vec![
        Element::key(vec![v4("198.18.1.1")]).with_timeout_ms(5000),
        Element::key(vec![v4("198.18.1.2")])
            .with_timeout_ms(7000)
            .with_comment("a client"),
    ];

    let mut constant = Set::set("marks", vec![Mark]);
    constant.flags.constant = true;
    constant.elements = vec![Element::key(vec![Value::Mark(0x4000)])];

    let mut names = Set::map("ifaces", vec![Ifname], SetData::Values(vec![Mark]));
    names.elements = ["eth0", "a-name-longer-than-sixteen-bytes"]
        .iter()
        .map(|n| {
            Element::map(
                vec![Value::Ifname((*n).into())],
                ElemData::Values(vec![Value::Mark(1)]),
            )
        })
        .collect();

    let mut hairpin = Set::set("hairpin", vec![Ipv6Addr, Ipv6Addr]);
    hairpin.elements = vec![Element::key(vec![v6("2001:db8:1::1"), v6("2001:db8:1::1")])];

    let mut dynamic = Set::set("aff-dyn", vec![Ipv4Addr]);
    dynamic.flags.dynamic = true;
    dynamic.flags.timeout = true;

    t.sets = vec![
        allow, vmap, endpoints, timeouts, constant, names, hairpin, dynamic,
    ];
    t
}

/// `table()` with every set's elements packed (and one set holding both kinds).
fn packed(t: &Table) -> PackedTable {
    let mut table = t.clone();
    let mut packed = BTreeMap::new();
    for s in &mut table.sets {
        let keep = if s.name == "service-ips" { 2 } else { 0 };
        let moved: Vec<Element> = s.elements.drain(keep..).collect();
        packed.insert(
            s.name.clone(),
            moved.iter().map(PackedElement::new).collect(),
        );
    }
    PackedTable { table, packed }
}

/// Every element attribute of the batch (message sequence number, offset of the
/// attribute's header in its message).
fn element_offsets(b: &EncodedBatch) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for m in NlMsgIter::new(&b.bytes) {
        let Some((_, _, attrs)) = m.nfgen() else {
            continue;
        };
        let Some(list) =
            NlaIter::new(attrs).find(|a| a.kind == nft_wire::consts::NFTA_SET_ELEM_LIST_ELEMENTS)
        else {
            continue;
        };
        let base = m.bytes.as_ptr() as usize;
        for e in NlaIter::new(list.data) {
            out.push((m.seq, (e.data.as_ptr() as usize - base - 4) as u32));
        }
    }
    out
}

#[test]
fn a_table_created_from_packed_elements_is_the_same_batch() {
    let t = table();
    let pt = packed(&t);
    assert_eq!(pt.clone().unpack(), t, "the packed table is the table");
    let plain = into_create_table_ops(t.clone());
    let ops = into_create_table_ops_packed(pt);
    assert_eq!(ops.len(), plain.len());
    for (a, b) in ops.iter().zip(&plain) {
        assert_eq!(&*a.unpacked(), b, "the same op");
    }
    assert!(ops
        .iter()
        .any(|o| matches!(o, Op::AddPackedElements { .. })));
    for encode in [encode_batch, encode_check_batch] {
        for genid in [None, Some(7)] {
            let want = encode(&plain, 100, genid).unwrap();
            let got = encode(&ops, 100, genid).unwrap();
            assert_eq!(got.bytes, want.bytes, "the same bytes on the wire");
            assert_eq!(got.seqs, want.seqs);
            assert_eq!(got.ack_seq, want.ack_seq);
            assert_eq!(got.bytes.capacity(), got.bytes.len(), "exactly its size");
        }
    }
    // A refused element maps back to the same op and element of either batch.
    let want = encode_batch(&plain, 100, None).unwrap();
    let got = encode_batch(&ops, 100, None).unwrap();
    let offsets = element_offsets(&got);
    assert!(offsets.len() > 6000);
    for (seq, at) in offsets {
        let (i, k) = (
            got.op_of_seq(seq).unwrap(),
            got.element_at(seq, at).unwrap(),
        );
        assert_eq!(
            (i, k),
            (
                want.op_of_seq(seq).unwrap(),
                want.element_at(seq, at).unwrap()
            )
        );
        let Op::AddElements { elements, .. } = &plain[i] else {
            panic!("op {i} is no element list")
        };
        let one = ops[i].one_element(k).unwrap();
        assert!(matches!(&one, Op::AddElements { elements: e, .. } if e == &[elements[k].clone()]));
    }
}

/// Deleting and re-creating the table in one batch (a replacement), with packed
/// elements: the same bytes as unpacked.
#[test]
fn a_replacement_from_packed_elements_is_the_same_batch() {
    let t = table();
    let del = Op::DeleteTable {
        table: TableRef::new(t.family, t.name.clone()),
    };
    let mut plain = vec![del.clone()];
    plain.extend(into_create_table_ops(t.clone()));
    let mut ops = vec![del];
    ops.extend(into_create_table_ops_packed(packed(&t)));
    let want = encode_batch(&plain, 1, Some(3)).unwrap();
    let got = encode_batch(&ops, 1, Some(3)).unwrap();
    assert_eq!(got.bytes, want.bytes);
    assert_eq!(got.seqs, want.seqs);
}

/// An empty element list is one message without elements, packed or not.
#[test]
fn an_empty_packed_list_is_one_message() {
    let t = TableRef::new(Family::Ip, "t");
    let plain = vec![Op::AddElements {
        table: t.clone(),
        set: "s".into(),
        elements: vec![],
    }];
    let ops = vec![Op::AddPackedElements {
        table: t,
        set: "s".into(),
        elements: vec![],
    }];
    let want = encode_batch(&plain, 1, None).unwrap();
    let got = encode_batch(&ops, 1, None).unwrap();
    assert_eq!(got.bytes, want.bytes);
    assert_eq!(got.seqs.len(), 1);
}
