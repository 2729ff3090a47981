//! Property tests: every decoder of this crate takes random bytes and mutated valid
//! messages without panicking (decode_object, decode_elements, decode_genid, scan_rule,
//! decode_expr, the event parser). Errors are fine; panics are not.

use nft_model::build::{self, KeyField};
use nft_model::*;
use nft_wire::events::{EventParser, Poll};
use nft_wire::expr::decode_expr;
use nft_wire::msg::NlMsgIter;
use nft_wire::nla::NlaIter;
use nft_wire::{decode_elements, decode_genid, decode_object, encode_batch, scan_rule, Object};
use proptest::prelude::*;
use std::net::Ipv4Addr;

/// A table with every object kind and many expression kinds, as one batch.
fn sample_batch() -> Vec<u8> {
    let mut t = Table::new(Family::Ip, "kube-nlproxy").with_comment("fuzz");
    let mut map = Set::map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
        SetData::Verdict,
    )
    .with_comment("dispatch");
    map.elements = vec![Element::map(
        vec![
            Value::Ipv4(Ipv4Addr::new(198, 18, 0, 10)),
            Value::Proto(17),
            Value::Port(53),
        ],
        ElemData::Verdict(Verdict::Goto("svc".into())),
    )
    .with_comment("default/dns")];
    let mut eps = Set::map(
        "eps",
        vec![DataType::HostInt32],
        SetData::Values(vec![DataType::Ipv4Addr, DataType::InetService]),
    );
    eps.elements = vec![Element::map(
        vec![Value::Int(0)],
        ElemData::Values(vec![
            Value::Ipv4(Ipv4Addr::new(198, 19, 0, 2)),
            Value::Port(5353),
        ]),
    )];
    t.sets = vec![map, eps];
    let mut rule = build::vmap_lookup(
        Family::Ip,
        &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
        "service-ips",
    );
    rule.extend(build::mark_or(0x4000));
    rule.extend(build::ct_state_any(2));
    rule.extend(build::fib_daddr_local());
    rule.extend(build::dnat_to(
        Family::Ip,
        &Value::Ipv4(Ipv4Addr::new(198, 19, 0, 1)),
        80,
    ));
    rule.push(Expr::Numgen {
        kind: NumgenKind::Random,
        modulus: 3,
        offset: 0,
        dreg: Reg::R1,
    });
    rule.push(Expr::Masquerade { flags: 0 });
    rule.push(Expr::Reject(Reject::TcpRst));
    rule.push(Expr::Counter);
    rule.push(Expr::CounterRef("rejected".into()));
    t.counters = vec!["rejected".into()];
    t.chains = vec![
        Chain::base(
            "nat-prerouting",
            BaseHook {
                chain_type: ChainType::Nat,
                hook: Hook::Prerouting,
                priority: -100,
                policy: Policy::Accept,
            },
        )
        .with_rules(vec![Rule::new(rule).with_comment("all")]),
        Chain::regular("svc"),
    ];
    encode_batch(&create_table_ops(&t), 1, Some(7))
        .expect("encodes")
        .bytes
}

/// Run every decoder on one message's attributes.
fn decode_all(kind: u16, family: u8, attrs: &[u8]) {
    if let Ok(Object::Elements { raw, .. }) = decode_object(kind, family, attrs) {
        {
            let set = Set::map(
                "eps",
                vec![DataType::HostInt32],
                SetData::Values(vec![DataType::Ipv4Addr, DataType::InetService]),
            );
            let _ = decode_elements(&set, &raw);
            let verdicts = Set::map("v", vec![DataType::Ipv4Addr], SetData::Verdict);
            let _ = decode_elements(&verdicts, &raw);
        }
    }
    let _ = scan_rule(family, attrs);
    let _ = decode_genid(attrs);
    for a in NlaIter::new(attrs) {
        let _ = decode_expr(&a);
        for inner in a.nested() {
            let _ = decode_expr(&inner);
        }
    }
}

/// Every message of a datagram through every decoder, and the event parser.
fn feed(buf: &[u8]) {
    for m in NlMsgIter::new(buf) {
        if let Some((family, _, attrs)) = m.nfgen() {
            for kind in [m.kind & 0xff, 0, 3, 6, 9, 12, 15] {
                decode_all(kind, family, attrs);
            }
        }
    }
    let mut p = EventParser::new(vec![TableRef::new(Family::Ip, "kube-nlproxy")]);
    p.feed(buf, &mut Poll::default());
}

#[test]
fn the_sample_batch_decodes() {
    // The unmutated input is valid: the mutations below start from real messages.
    let b = sample_batch();
    let mut objects = 0;
    for m in NlMsgIter::new(&b) {
        let (family, _, attrs) = m.nfgen().unwrap();
        if m.kind >> 8 == 10 {
            decode_object(m.kind & 0xff, family, attrs).expect("valid message");
            objects += 1;
        }
    }
    assert!(objects >= 6, "{objects}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..2048)) {
        feed(&buf);
        for kind in 0..17u16 {
            decode_all(kind, 2, &buf);
        }
    }

    #[test]
    fn mutated_messages_never_panic(
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut b = sample_batch();
        for (at, v) in flips {
            let i = at % b.len();
            b[i] = v;
        }
        feed(&b);
        feed(&b[..cut % (b.len() + 1)]);
    }
}
