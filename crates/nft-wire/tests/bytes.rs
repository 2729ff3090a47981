//! Byte-level tests: every expression and object kind encodes to the bytes the kernel
//! expects and decodes back to the same model; an independent parser
//! (`netlink-packet-netfilter`) reads our messages the same way.

use nft_model::build::{self, KeyField};
use nft_model::*;
use nft_wire::consts::*;
use nft_wire::expr::{decode_expr, encode_expr};
use nft_wire::msg::NlMsgIter;
use nft_wire::nla::{NlaIter, NlaWriter};
use nft_wire::{decode_elements, decode_object, encode_batch, Object};
use std::net::{Ipv4Addr, Ipv6Addr};

fn roundtrip_expr(e: &Expr) -> Vec<u8> {
    let mut w = NlaWriter::new();
    encode_expr(&mut w, e);
    let elem = NlaIter::new(&w.buf).next().expect("one list element");
    assert_eq!(
        decode_expr(&elem).expect("decodes"),
        *e,
        "round trip of {e:?}"
    );
    w.buf
}

/// Every expression kind survives encode -> decode.
#[test]
fn every_expression_round_trips() {
    let all = vec![
        Expr::Payload {
            base: PayloadBase::Network,
            offset: 16,
            len: 4,
            dreg: Reg::R1,
        },
        Expr::Payload {
            base: PayloadBase::Transport,
            offset: 2,
            len: 2,
            dreg: Reg::r32(2),
        },
        Expr::Meta {
            key: MetaKey::L4proto,
            dreg: Reg::r32(1),
        },
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Neq,
            data: vec![198, 18, 0, 1],
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: vec![0xff; 4],
            xor: vec![0, 0x40, 0, 0],
        },
        Expr::Lookup {
            set: "cluster-ips".into(),
            sreg: Reg::R1,
            dreg: None,
            invert: true,
        },
        Expr::Lookup {
            set: "service-ips".into(),
            sreg: Reg::r32(0),
            dreg: Some(Reg::VERDICT),
            invert: false,
        },
        Expr::Immediate {
            dreg: Reg::R2,
            data: vec![0, 80],
        },
        Expr::Verdict(Verdict::Accept),
        Expr::Verdict(Verdict::Drop),
        Expr::Verdict(Verdict::Return),
        Expr::Verdict(Verdict::Continue),
        Expr::Verdict(Verdict::Jump("services".into())),
        Expr::Verdict(Verdict::Goto("svc-x".into())),
        Expr::Numgen {
            kind: NumgenKind::Random,
            modulus: 3,
            offset: 0,
            dreg: Reg::R1,
        },
        Expr::Numgen {
            kind: NumgenKind::Incremental,
            modulus: 2,
            offset: 5,
            dreg: Reg::R1,
        },
        Expr::Nat {
            kind: NatKind::Dnat,
            family: Family::Ip,
            addr: Some(Reg::R1),
            port: Some(Reg::r32(1)),
            flags: nat_flags::MAP_IPS | nat_flags::PROTO_SPECIFIED,
        },
        Expr::Nat {
            kind: NatKind::Snat,
            family: Family::Ip6,
            addr: Some(Reg::R1),
            port: None,
            flags: 0,
        },
        Expr::Masquerade {
            flags: nat_flags::PROTO_RANDOM_FULLY,
        },
        Expr::Masquerade { flags: 0 },
        Expr::Ct {
            key: CtKey::State,
            dreg: Reg::R1,
        },
        Expr::Ct {
            key: CtKey::Status,
            dreg: Reg::R1,
        },
        Expr::CtSet {
            key: CtKey::Mark,
            sreg: Reg::R1,
        },
        Expr::Fib {
            flags: fib_flags::DADDR,
            result: FibResult::AddrType,
            dreg: Reg::R1,
        },
        Expr::Reject(Reject::IcmpUnreach(3)),
        Expr::Reject(Reject::TcpRst),
        Expr::Reject(Reject::IcmpxUnreach(1)),
        Expr::Counter,
        Expr::Dynset {
            op: DynsetOp::Update,
            set: "aff".into(),
            key: Reg::R1,
            data: None,
            timeout_ms: Some(10_800_000),
        },
        Expr::Dynset {
            op: DynsetOp::Add,
            set: "aff".into(),
            key: Reg::R1,
            data: Some(Reg::R2),
            timeout_ms: None,
        },
        Expr::XtMatch {
            name: "comment".into(),
            rev: 0,
            info: vec![b'x'; 256],
        },
    ];
    for e in &all {
        roundtrip_expr(e);
    }
}

/// Exact bytes for `ip daddr` (payload) and its comparison, as nft sends them.
#[test]
fn payload_and_cmp_bytes_match_nft() {
    let b = roundtrip_expr(&Expr::Payload {
        base: PayloadBase::Network,
        offset: 16,
        len: 4,
        dreg: Reg::R1,
    });
    #[rustfmt::skip]
    let want: Vec<u8> = [
        52u16.to_ne_bytes().to_vec(), (1u16 | 0x8000).to_ne_bytes().to_vec(), // list elem
        vec![12, 0, 1, 0], b"payload\0".to_vec(),                               // name
        36u16.to_ne_bytes().to_vec(), (2u16 | 0x8000).to_ne_bytes().to_vec(),  // data
        vec![8, 0, 1, 0, 0, 0, 0, 1],                                          // dreg 1
        vec![8, 0, 2, 0, 0, 0, 0, 1],                                          // base network
        vec![8, 0, 3, 0, 0, 0, 0, 16],                                         // offset 16
        vec![8, 0, 4, 0, 0, 0, 0, 4],                                          // len 4
    ].concat();
    assert_eq!(b, want);

    let b = roundtrip_expr(&Expr::Cmp {
        sreg: Reg::R1,
        op: CmpOp::Eq,
        data: vec![198, 18, 0, 1],
    });
    // cmp: sreg 1, op eq, data { value 198.18.0.1 }
    assert_eq!(
        &b[b.len() - 28..],
        &[
            8, 0, 1, 0, 0, 0, 0, 1, 8, 0, 2, 0, 0, 0, 0, 0, 12, 0, 3, 0x80, 8, 0, 1, 0, 198, 18, 0,
            1
        ]
    );
}

/// Verdicts carry a big-endian signed code and the chain name.
#[test]
fn goto_verdict_bytes() {
    let b = roundtrip_expr(&Expr::Verdict(Verdict::Goto("c".into())));
    let tail = &b[b.len() - 24..];
    assert_eq!(
        tail,
        &[
            24, 0, 2, 0x80, // immediate data
            20, 0, 2, 0x80, // verdict
            8, 0, 1, 0, 0xff, 0xff, 0xff, 0xfc, // NFT_GOTO
            6, 0, 2, 0, b'c', 0, 0, 0, // chain
        ]
    );
}

fn tref() -> TableRef {
    TableRef::new(Family::Ip, "kube-nlproxy")
}

/// All object messages of a batch, decoded.
fn decode_batch(ops: &[Op]) -> Vec<Object> {
    let batch = encode_batch(ops, 100, Some(7)).expect("encodes");
    let msgs: Vec<_> = NlMsgIter::new(&batch.bytes).collect();
    assert_eq!(msgs.first().map(|m| m.kind), Some(NFNL_MSG_BATCH_BEGIN));
    assert_eq!(msgs.last().map(|m| m.kind), Some(NFNL_MSG_BATCH_END));
    // generation guard in BATCH_BEGIN
    let (_, res_id, attrs) = msgs[0].nfgen().unwrap();
    assert_eq!(res_id, NFNL_SUBSYS_NFTABLES);
    assert_eq!(nft_wire::decode_genid(attrs), Some(7));
    // only the last object message asks for an ACK
    let acks: Vec<_> = msgs
        .iter()
        .filter(|m| m.flags & NLM_F_ACK != 0)
        .map(|m| m.seq)
        .collect();
    assert_eq!(acks, vec![batch.ack_seq.unwrap()]);
    msgs[1..msgs.len() - 1]
        .iter()
        .map(|m| {
            let (fam, _, attrs) = m.nfgen().unwrap();
            let kind = m.kind & 0xff;
            // NEW messages decode directly; DEL messages are checked elsewhere
            decode_object(kind, fam, attrs).expect("object decodes")
        })
        .collect()
}

fn sample_set() -> Set {
    let mut s = Set::map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
        SetData::Verdict,
    )
    .with_comment("ClusterIP, ExternalIP and LoadBalancer IP dispatch");
    s.elements = vec![Element::map(
        vec![
            Value::Ipv4(Ipv4Addr::new(198, 18, 0, 10)),
            Value::Proto(6),
            Value::Port(80),
        ],
        ElemData::Verdict(Verdict::Goto("svc-a".into())),
    )
    .with_comment("default/a:http")];
    s
}

#[test]
fn objects_round_trip_through_messages() {
    let t = tref();
    let base = BaseHook {
        chain_type: ChainType::Nat,
        hook: Hook::Prerouting,
        priority: -100,
        policy: Policy::Accept,
    };
    let set = sample_set();
    let mut dnat = Set::map(
        "eps",
        vec![DataType::HostInt32],
        SetData::Values(vec![DataType::Ipv4Addr, DataType::InetService]),
    );
    dnat.elements = vec![Element::map(
        vec![Value::Int(0)],
        ElemData::Values(vec![
            Value::Ipv4(Ipv4Addr::new(198, 19, 0, 2)),
            Value::Port(8080),
        ]),
    )];
    let mut aff = Set::set("aff", vec![DataType::Ipv4Addr]);
    aff.flags = SetFlags {
        dynamic: true,
        timeout: true,
        ..Default::default()
    };
    aff.timeout_ms = Some(10_800_000);
    let mut ranges = Set::set("fw", vec![DataType::Ipv4Addr, DataType::Ipv4Addr]);
    ranges.flags.interval = true;
    ranges.elements = vec![Element::key(vec![
        Value::Ipv4(Ipv4Addr::new(198, 18, 0, 5)),
        Value::Ipv4(Ipv4Addr::new(198, 19, 1, 0)),
    ])
    .with_key_end(vec![
        Value::Ipv4(Ipv4Addr::new(198, 18, 0, 5)),
        Value::Ipv4(Ipv4Addr::new(198, 19, 1, 255)),
    ])];
    let rule = Rule::new(build::vmap_lookup(
        Family::Ip,
        &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
        "service-ips",
    ))
    .with_comment("dispatch");
    let ops = vec![
        Op::AddTable {
            table: t.clone(),
            comment: Some("kube-nlproxy rules".into()),
        },
        Op::AddSet {
            table: t.clone(),
            set: Set {
                elements: vec![],
                ..set.clone()
            },
        },
        Op::AddSet {
            table: t.clone(),
            set: Set {
                elements: vec![],
                ..dnat.clone()
            },
        },
        Op::AddSet {
            table: t.clone(),
            set: aff.clone(),
        },
        Op::AddSet {
            table: t.clone(),
            set: Set {
                elements: vec![],
                ..ranges.clone()
            },
        },
        Op::AddChain {
            table: t.clone(),
            name: "nat-prerouting".into(),
            base: Some(base),
            comment: Some("entry".into()),
        },
        Op::AddChain {
            table: t.clone(),
            name: "svc-a".into(),
            base: None,
            comment: None,
        },
        Op::AddElements {
            table: t.clone(),
            set: set.name.clone(),
            elements: set.elements.clone(),
        },
        Op::AddElements {
            table: t.clone(),
            set: dnat.name.clone(),
            elements: dnat.elements.clone(),
        },
        Op::AddElements {
            table: t.clone(),
            set: ranges.name.clone(),
            elements: ranges.elements.clone(),
        },
        Op::AddRule {
            table: t.clone(),
            chain: "nat-prerouting".into(),
            rule: rule.clone(),
        },
    ];
    let objs = decode_batch(&ops);
    assert_eq!(
        objs[0],
        Object::Table {
            table: t.clone(),
            comment: Some("kube-nlproxy rules".into())
        }
    );
    let sets = [&set, &dnat, &aff, &ranges];
    for (i, s) in sets.iter().enumerate() {
        assert_eq!(
            objs[1 + i],
            Object::Set {
                table: t.clone(),
                set: Set {
                    elements: vec![],
                    ..(*s).clone()
                }
            }
        );
    }
    let mut want_chain = Chain::base("nat-prerouting", base).with_comment("entry");
    want_chain.rules = vec![];
    assert_eq!(
        objs[5],
        Object::Chain {
            table: t.clone(),
            chain: want_chain
        }
    );
    assert_eq!(
        objs[6],
        Object::Chain {
            table: t.clone(),
            chain: Chain::regular("svc-a")
        }
    );
    for (i, s) in [&set, &dnat, &ranges].iter().enumerate() {
        let Object::Elements { raw, set: name, .. } = &objs[7 + i] else {
            panic!("elements expected")
        };
        assert_eq!(name, &s.name);
        assert_eq!(decode_elements(s, raw).unwrap(), s.elements);
    }
    match &objs[10] {
        Object::Rule { chain, rule: r, .. } => {
            assert_eq!(chain, "nat-prerouting");
            assert_eq!(r, &rule);
        }
        o => panic!("rule expected, got {o:?}"),
    }
}

/// Set attributes as nft sends them for `map m { type ipv4_addr . inet_proto . inet_service : verdict }`.
#[test]
fn concat_verdict_map_attributes() {
    let mut w = NlaWriter::new();
    let s = Set {
        elements: vec![],
        comment: None,
        ..sample_set()
    };
    nft_wire::encode::encode_set(&mut w, &tref(), &s, 1);
    let attrs: Vec<_> = NlaIter::new(&w.buf)
        .map(|n| (n.kind, n.data.to_vec()))
        .collect();
    let get = |k: u16| {
        attrs
            .iter()
            .find(|(kind, _)| *kind == k)
            .map(|(_, d)| d.clone())
    };
    assert_eq!(get(NFTA_SET_FLAGS), Some(vec![0, 0, 0, 8]));
    assert_eq!(get(NFTA_SET_KEY_TYPE), Some(vec![0, 0, 0x73, 0x0d]));
    assert_eq!(get(NFTA_SET_KEY_LEN), Some(vec![0, 0, 0, 12]));
    assert_eq!(get(NFTA_SET_DATA_TYPE), Some(vec![0xff, 0xff, 0xff, 0]));
    assert_eq!(
        get(NFTA_SET_DESC),
        None,
        "nft sends no field lengths for non-interval concat maps"
    );
}

/// Element keys are padded per field, as the kernel lays concatenations out.
#[test]
fn element_key_layout() {
    let s = sample_set();
    let ops = vec![Op::AddElements {
        table: tref(),
        set: s.name.clone(),
        elements: s.elements.clone(),
    }];
    let batch = encode_batch(&ops, 1, None).unwrap();
    let key = [198u8, 18, 0, 10, 6, 0, 0, 0, 0, 80, 0, 0];
    assert!(batch.bytes.windows(key.len()).any(|w| w == key));
}

/// Large element lists are split so that no attribute reaches 64 KiB, and nothing is lost.
#[test]
fn element_lists_are_split_below_64k() {
    let mut s = Set::map(
        "big",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
        SetData::Verdict,
    );
    s.elements = (0..20_000u32)
        .map(|i| {
            Element::map(
                vec![
                    Value::Ipv4(Ipv4Addr::from(0xc612_0000 + i)),
                    Value::Proto(17),
                    Value::Port(53),
                ],
                ElemData::Verdict(Verdict::Goto(format!("svc-{i}"))),
            )
        })
        .collect();
    let ops = vec![Op::AddElements {
        table: tref(),
        set: "big".into(),
        elements: s.elements.clone(),
    }];
    let batch = encode_batch(&ops, 1, None).unwrap();
    let msgs: Vec<_> = NlMsgIter::new(&batch.bytes).collect();
    assert!(msgs.len() > 3, "split into several messages");
    let mut all = Vec::new();
    for m in &msgs[1..msgs.len() - 1] {
        let (fam, _, attrs) = m.nfgen().unwrap();
        for a in NlaIter::new(attrs) {
            assert!(a.data.len() + 4 < 65_536);
        }
        let Object::Elements { raw, .. } = decode_object(m.kind & 0xff, fam, attrs).unwrap() else {
            panic!()
        };
        all.extend(decode_elements(&s, &raw).unwrap());
        assert_eq!(
            batch.op_of_seq(m.seq),
            Some(0),
            "every piece maps back to the op"
        );
    }
    assert_eq!(all, s.elements);
}

/// Deletes and flushes are the messages the kernel expects.
#[test]
fn delete_and_flush_messages() {
    let t = TableRef::new(Family::Ip6, "kube-nlproxy");
    let ops = vec![
        Op::FlushChain {
            table: t.clone(),
            chain: "svc-a".into(),
        },
        Op::DeleteChain {
            table: t.clone(),
            chain: "svc-a".into(),
        },
        Op::FlushSet {
            table: t.clone(),
            set: "m".into(),
        },
        Op::DeleteSet {
            table: t.clone(),
            set: "m".into(),
        },
        Op::DeleteElements {
            table: t.clone(),
            set: "s".into(),
            elements: vec![Element::key(vec![Value::Ipv6(Ipv6Addr::LOCALHOST)])],
        },
        Op::DeleteTable { table: t.clone() },
    ];
    let batch = encode_batch(&ops, 1, None).unwrap();
    let kinds: Vec<(u16, u8)> = NlMsgIter::new(&batch.bytes)
        .map(|m| (m.kind, m.nfgen().unwrap().0))
        .collect();
    let nft = |k: u16| (10u16 << 8) | k;
    assert_eq!(
        kinds,
        vec![
            (NFNL_MSG_BATCH_BEGIN, 0),
            (nft(NFT_MSG_DELRULE), 10),
            (nft(NFT_MSG_DELCHAIN), 10),
            (nft(NFT_MSG_DELSETELEM), 10),
            (nft(NFT_MSG_DELSET), 10),
            (nft(NFT_MSG_DELSETELEM), 10),
            (nft(NFT_MSG_DELTABLE), 10),
            (NFNL_MSG_BATCH_END, 0),
        ]
    );
    assert_eq!(batch.op_of_seq(batch.ack_seq.unwrap()), Some(5));
}

/// An independent decoder (netlink-packet-netfilter) reads our messages as we meant them.
#[test]
fn independent_decoder_agrees() {
    use netlink_packet_core::{NetlinkBuffer, NetlinkMessage, Parseable};
    use netlink_packet_netfilter::NetfilterMessage;
    let t = tref();
    let base = BaseHook {
        chain_type: ChainType::Filter,
        hook: Hook::Input,
        priority: 0,
        policy: Policy::Drop,
    };
    let ops = vec![
        Op::AddTable {
            table: t.clone(),
            comment: None,
        },
        Op::AddChain {
            table: t.clone(),
            name: "input".into(),
            base: Some(base),
            comment: None,
        },
        Op::AddSet {
            table: t.clone(),
            set: Set {
                elements: vec![],
                ..sample_set()
            },
        },
        Op::AddRule {
            table: t.clone(),
            chain: "input".into(),
            rule: Rule::new([build::l4proto_eq(17), vec![Expr::Verdict(Verdict::Accept)]].concat()),
        },
    ];
    let batch = encode_batch(&ops, 1, None).unwrap();
    let mut texts = Vec::new();
    for m in NlMsgIter::new(&batch.bytes) {
        let start = m.payload.as_ptr() as usize - batch.bytes.as_ptr() as usize - 16;
        let raw = &batch.bytes[start..start + 16 + m.payload.len()];
        if m.kind >> 8 != 10 {
            continue;
        }
        let parsed = NetlinkMessage::<NetfilterMessage>::parse(&NetlinkBuffer::new(&raw))
            .unwrap_or_else(|e| panic!("independent parser rejects message {}: {e:?}", m.kind));
        texts.push(format!("{parsed:?}"));
    }
    assert_eq!(texts.len(), 4);
    assert!(
        texts[0].contains("NewTable") && texts[0].contains("kube-nlproxy"),
        "{}",
        texts[0]
    );
    assert!(
        texts[1].contains("NewChain") && texts[1].contains("input") && texts[1].contains("filter"),
        "{}",
        texts[1]
    );
    assert!(
        texts[2].contains("NewSet") && texts[2].contains("service-ips"),
        "{}",
        texts[2]
    );
    assert!(
        texts[3].contains("NewRule") && texts[3].contains("Meta") && texts[3].contains("Cmp"),
        "{}",
        texts[3]
    );
}

/// Malformed input never panics: every prefix of a valid message either decodes or errors.
#[test]
fn truncated_messages_never_panic() {
    let s = sample_set();
    let ops = vec![
        Op::AddSet {
            table: tref(),
            set: Set {
                elements: vec![],
                ..s.clone()
            },
        },
        Op::AddElements {
            table: tref(),
            set: s.name.clone(),
            elements: s.elements.clone(),
        },
        Op::AddRule {
            table: tref(),
            chain: "c".into(),
            rule: Rule::new(build::dnat_map(
                Family::Ip,
                &[KeyField::NumgenRandom(3)],
                "eps",
            )),
        },
    ];
    let batch = encode_batch(&ops, 1, None).unwrap();
    for m in NlMsgIter::new(&batch.bytes) {
        let Some((fam, _, attrs)) = m.nfgen() else {
            continue;
        };
        for cut in 0..attrs.len() {
            let mut bytes = attrs[..cut].to_vec();
            if let Ok(Object::Elements { raw, .. }) = decode_object(m.kind & 0xff, fam, &bytes) {
                let _ = decode_elements(&s, &raw);
            }
            // flip a byte too
            if cut < bytes.len() {
                bytes[cut / 2] ^= 0xa5;
                let _ = decode_object(m.kind & 0xff, fam, &bytes);
            }
        }
    }
}

/// A check batch is the commit batch without its BATCH_END message (what `nft --check`
/// sends): same messages, sequence numbers and acknowledgement request.
#[test]
fn check_batch_is_the_batch_without_its_end() {
    let ops = vec![
        Op::AddTable {
            table: tref(),
            comment: None,
        },
        Op::AddSet {
            table: tref(),
            set: sample_set(),
        },
    ];
    let full = encode_batch(&ops, 100, Some(7)).unwrap();
    let check = nft_wire::encode_check_batch(&ops, 100, Some(7)).unwrap();
    let kinds = |b: &[u8]| NlMsgIter::new(b).map(|m| m.kind).collect::<Vec<_>>();
    let (fk, ck) = (kinds(&full.bytes), kinds(&check.bytes));
    assert_eq!(fk.last(), Some(&NFNL_MSG_BATCH_END));
    assert_eq!(&fk[..fk.len() - 1], ck.as_slice());
    assert!(full.bytes.starts_with(&check.bytes));
    assert_eq!(full.bytes.len() - check.bytes.len(), 20);
    assert_eq!((full.seqs, full.ack_seq), (check.seqs, check.ack_seq));
}

/// An x_tables match (`nft_compat`): name, revision (big-endian), info as given.
#[test]
fn xt_match_bytes() {
    let bytes = roundtrip_expr(&Expr::XtMatch {
        name: "conntrack".into(),
        rev: 3,
        info: vec![1, 2, 3, 4, 5, 6, 7, 8],
    });
    let elem = NlaIter::new(&bytes).next().unwrap();
    let inner: Vec<_> = elem.nested().collect();
    assert_eq!(inner[0].str(), Some("match"));
    let data: Vec<_> = inner[1].nested().collect();
    assert_eq!((data[0].kind, data[0].str()), (1, Some("conntrack")));
    assert_eq!((data[1].kind, data[1].data), (2, &[0, 0, 0, 3][..]));
    assert_eq!(
        (data[2].kind, data[2].data),
        (3, &[1, 2, 3, 4, 5, 6, 7, 8][..])
    );
}

/// Named counters as `nft` sends them (bytes captured with `nft --debug=mnl` and strace,
/// nft 1.0.6): `add counter ip t c` is NEWOBJ with NLM_F_CREATE, the table, the name,
/// type counter and a data nest of zero bytes and packets; `delete counter ip t c` is
/// DELOBJ with the same attributes and an empty data nest.
#[test]
fn counter_objects_match_nft() {
    let t = TableRef::new(Family::Ip, "t");
    let ops = vec![
        Op::AddCounter {
            table: t.clone(),
            name: "c".into(),
        },
        Op::DeleteCounter {
            table: t,
            name: "c".into(),
        },
    ];
    let batch = encode_batch(&ops, 1, None).expect("encodes");
    let msgs: Vec<_> = NlMsgIter::new(&batch.bytes).collect();
    assert_eq!(msgs.len(), 4, "begin, two objects, end");
    #[rustfmt::skip]
    let head: Vec<u8> = [
        vec![6, 0, 1, 0, b't', 0, 0, 0],  // NFTA_OBJ_TABLE
        vec![6, 0, 2, 0, b'c', 0, 0, 0],  // NFTA_OBJ_NAME
        vec![8, 0, 3, 0, 0, 0, 0, 1],     // NFTA_OBJ_TYPE counter
    ].concat();
    let mut add = head.clone();
    add.extend([28, 0, 4, 0x80]); // NFTA_OBJ_DATA
    add.extend([12, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // bytes 0
    add.extend([12, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // packets 0
    let mut del = head;
    del.extend([4, 0, 4, 0x80]); // empty NFTA_OBJ_DATA
    for (m, kind, flags, want) in [
        (&msgs[1], NFT_MSG_NEWOBJ, NLM_F_REQUEST | NLM_F_CREATE, add),
        (&msgs[2], NFT_MSG_DELOBJ, NLM_F_REQUEST | NLM_F_ACK, del),
    ] {
        assert_eq!(m.kind, (NFNL_SUBSYS_NFTABLES << 8) | kind);
        assert_eq!(m.flags, flags);
        let (fam, _, attrs) = m.nfgen().unwrap();
        assert_eq!(fam, 2, "AF_INET");
        assert_eq!(attrs, &want[..]);
    }
    // what the kernel dumps back (with values, use and handle) decodes to the counter
    let mut dump = NlaWriter::new();
    dump.str(1, "t");
    dump.str(2, "c");
    dump.be32(3, 1);
    let d = dump.begin(4);
    dump.be64(1, 4242);
    dump.be64(2, 7);
    dump.end(d);
    dump.be32(5, 1);
    dump.be64(6, 3);
    assert_eq!(
        decode_object(NFT_MSG_NEWOBJ, 2, &dump.buf).unwrap(),
        Object::Counter {
            table: TableRef::new(Family::Ip, "t"),
            name: "c".into(),
            packets: 7,
            bytes: 4242,
        }
    );
    // an object of another type (a quota, 2) is an error naming it, not a counter
    let mut quota = NlaWriter::new();
    quota.str(1, "t");
    quota.str(2, "q");
    quota.be32(3, 2);
    assert!(decode_object(NFT_MSG_NEWOBJ, 2, &quota.buf).is_err());
}

/// `counter name "c"` is the kernel's objref expression (type counter, the name), as
/// `nft --debug=mnl add rule ip t ch counter name "c"` shows it.
#[test]
fn counter_ref_bytes_match_nft() {
    let b = roundtrip_expr(&Expr::CounterRef("c".into()));
    #[rustfmt::skip]
    let want: Vec<u8> = [
        36u16.to_ne_bytes().to_vec(), (1u16 | 0x8000).to_ne_bytes().to_vec(), // list elem
        vec![11, 0, 1, 0], b"objref\0".to_vec(), vec![0],                     // name
        20u16.to_ne_bytes().to_vec(), (2u16 | 0x8000).to_ne_bytes().to_vec(), // data
        vec![8, 0, 1, 0, 0, 0, 0, 1],                                          // type counter
        vec![5, 0, 2, 0, b'c', 0, 0, 0],                                       // name, no NUL
    ].concat();
    assert_eq!(b, want);
}

/// `NFTA_SET_DESC` with a size (`NFTA_SET_DESC_SIZE`, the kernel's fixed-bucket hash and
/// its cap), alone and before an interval set's field lengths, as `nft --debug=mnl` shows
/// nft 1.0.6 sending `add set ip t s { type ipv4_addr; size 4096; }` and `{ type ipv4_addr
/// . inet_service; flags interval; size 4096; }`; and read back.
#[test]
fn set_size_bytes_match_nft() {
    let desc = |s: &Set| -> Option<Vec<u8>> {
        let mut w = NlaWriter::new();
        nft_wire::encode::encode_set(&mut w, &tref(), s, 1);
        let d = NlaIter::new(&w.buf)
            .find(|n| n.kind == NFTA_SET_DESC)
            .map(|n| n.data.to_vec());
        let back = decode_object(NFT_MSG_NEWSET, 2, &w.buf).expect("decodes");
        assert!(matches!(back, Object::Set { set, .. } if set == *s));
        d
    };
    let mut plain = Set::set("s", vec![DataType::Ipv4Addr]);
    plain.size = Some(4096);
    assert_eq!(desc(&plain), Some(vec![8, 0, 1, 0, 0, 0, 0x10, 0]));
    let mut ranges = Set::set("s", vec![DataType::Ipv4Addr, DataType::InetService]);
    ranges.flags.interval = true;
    ranges.size = Some(4096);
    #[rustfmt::skip]
    let want: Vec<u8> = [
        vec![8, 0, 1, 0, 0, 0, 0x10, 0],               // NFTA_SET_DESC_SIZE 4096
        vec![28, 0, 2, 0x80],                          // NFTA_SET_DESC_CONCAT
        vec![12, 0, 1, 0x80, 8, 0, 1, 0, 0, 0, 0, 4],  //   field of 4 bytes
        vec![12, 0, 1, 0x80, 8, 0, 1, 0, 0, 0, 0, 2],  //   field of 2 bytes
    ].concat();
    assert_eq!(desc(&ranges), Some(want));
    // no size, no interval: no description
    assert_eq!(desc(&Set::set("s", vec![DataType::Ipv4Addr])), None);
    // session affinity's pins: a size and `typeof ip saddr . …` read back
    let mut pins = Set::set(
        "affinity",
        vec![DataType::Ipv4Addr, DataType::HostInt32, DataType::HostInt32],
    );
    pins.flags = SetFlags {
        dynamic: true,
        timeout: true,
        ..Default::default()
    };
    pins.size = Some(1 << 20);
    pins.saddr_key = true;
    assert_eq!(desc(&pins), Some(vec![8, 0, 1, 0, 0, 0x10, 0, 0]));
    // a dynamic set created without a size reads back without one (the kernel gives it
    // 65,535 when an `update` binds it)
    let mut dynset = pins.clone();
    dynset.size = Some(65_535);
    let mut w = NlaWriter::new();
    nft_wire::encode::encode_set(&mut w, &tref(), &dynset, 1);
    let back = decode_object(NFT_MSG_NEWSET, 2, &w.buf).expect("decodes");
    assert!(matches!(back, Object::Set { set, .. } if set.size.is_none() && set.saddr_key));
}

/// Each op's message carries nft's type and flags (a rule appended, `NLM_F_APPEND`;
/// inserted at the head, without it), and the sets of one batch their own ids in order,
/// mixed with element lists written between them.
#[test]
fn message_headers_and_set_ids() {
    let t = tref();
    let rule = Rule::new(vec![Expr::Verdict(Verdict::Accept)]);
    let mut second = sample_set();
    second.name = "second".into();
    let ops = vec![
        Op::AddTable {
            table: t.clone(),
            comment: None,
        },
        Op::AddChain {
            table: t.clone(),
            name: "c".into(),
            base: None,
            comment: None,
        },
        Op::AddSet {
            table: t.clone(),
            set: sample_set(),
        },
        Op::AddElements {
            table: t.clone(),
            set: "service-ips".into(),
            elements: sample_set().elements,
        },
        Op::AddSet {
            table: t.clone(),
            set: second,
        },
        Op::AddRule {
            table: t.clone(),
            chain: "c".into(),
            rule: rule.clone(),
        },
        Op::InsertRule {
            table: t.clone(),
            chain: "c".into(),
            rule,
        },
        Op::DeleteRule {
            table: t.clone(),
            chain: "c".into(),
            handle: 4,
        },
        Op::AddCounter {
            table: t.clone(),
            name: "n".into(),
        },
    ];
    let batch = encode_batch(&ops, 1, None).unwrap();
    let msgs: Vec<_> = NlMsgIter::new(&batch.bytes).collect();
    let heads: Vec<(u16, u16)> = msgs[1..msgs.len() - 1]
        .iter()
        .map(|m| (m.kind & 0xff, m.flags & !NLM_F_ACK))
        .collect();
    let (req, create) = (NLM_F_REQUEST, NLM_F_REQUEST | NLM_F_CREATE);
    assert_eq!(
        heads,
        vec![
            (NFT_MSG_NEWTABLE, create),
            (NFT_MSG_NEWCHAIN, create),
            (NFT_MSG_NEWSET, create),
            (NFT_MSG_NEWSETELEM, create),
            (NFT_MSG_NEWSET, create),
            (NFT_MSG_NEWRULE, create | NLM_F_APPEND),
            (NFT_MSG_NEWRULE, create),
            (NFT_MSG_DELRULE, req),
            (NFT_MSG_NEWOBJ, create),
        ]
    );
    let ids: Vec<u32> = msgs
        .iter()
        .filter(|m| m.kind & 0xff == NFT_MSG_NEWSET && m.kind >> 8 == NFNL_SUBSYS_NFTABLES)
        .map(|m| {
            let (_, _, attrs) = m.nfgen().unwrap();
            NlaIter::new(attrs)
                .find(|a| a.kind == NFTA_SET_ID)
                .and_then(|a| a.be32())
                .expect("a set id")
        })
        .collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(batch.op_of_seq(batch.ack_seq.unwrap()), Some(ops.len() - 1));
}
