//! Unit tests of rule rendering.

use super::rule;
use super::test_util::*;
use crate::build::{self, KeyField};
use crate::expr::*;
use crate::object::*;
use crate::value::*;

#[test]
fn concatenated_vmap_lookup() {
    let r = Rule::new(build::vmap_lookup(
        Family::Ip,
        &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
        "service-ips",
    ))
    .with_comment("dispatch");
    assert_eq!(
        rule(Family::Ip, &r),
        r#"ip daddr . meta l4proto . th dport vmap @service-ips comment "dispatch""#
    );
    let r6 = build::vmap_lookup(Family::Ip6, &[KeyField::Saddr, KeyField::Dport], "m");
    assert_eq!(
        rule(Family::Ip6, &Rule::new(r6)),
        "ip6 saddr . th dport vmap @m"
    );
}

#[test]
fn concatenation_in_legacy_32bit_registers() {
    // the same key loaded from NFT_REG32_00 instead of NFT_REG_1
    let e = vec![
        build::load_addr(Family::Ip, false, Reg::r32(0)),
        Expr::Meta {
            key: MetaKey::L4proto,
            dreg: Reg::r32(1),
        },
        build::load_port(false, Reg::r32(2)),
        Expr::Lookup {
            set: "s".into(),
            sreg: Reg::r32(0),
            dreg: None,
            invert: true,
        },
    ];
    assert_eq!(
        rule(Family::Ip, &Rule::new(e)),
        "ip daddr . meta l4proto . th dport != @s"
    );
}

#[test]
fn l4proto_dependency_is_folded_into_transport_fields() {
    let s = rule_of(
        Family::Ip,
        vec![
            build::l4proto_eq(6),
            build::dnat_map(Family::Ip, &[KeyField::Daddr, KeyField::Dport], "eps"),
        ],
    );
    assert_eq!(s, "dnat ip to ip daddr . tcp dport map @eps");
    // without a transport field the match stays
    let s = rule_of(
        Family::Ip,
        vec![
            build::l4proto_eq(6),
            build::dnat_to(Family::Ip, &v4(198, 18, 2, 2), 8080),
        ],
    );
    assert_eq!(s, "meta l4proto tcp dnat to 198.18.2.2:8080");
    let s = rule_of(
        Family::Ip,
        vec![build::l4proto_eq(17), verdict_expr(Verdict::Accept)],
    );
    assert_eq!(s, "meta l4proto udp accept");
    let s = rule_of(
        Family::Ip,
        vec![build::l4proto_eq(6), vec![Expr::Reject(Reject::TcpRst)]],
    );
    assert_eq!(s, "reject with tcp reset");
}

#[test]
fn ip6_nat() {
    let a = Value::Ipv6("2001:db8::2".parse().unwrap());
    let s = rule_of(
        Family::Ip6,
        vec![build::l4proto_eq(6), build::dnat_to(Family::Ip6, &a, 80)],
    );
    assert_eq!(s, "meta l4proto tcp dnat to [2001:db8::2]:80");
    let s = rule_of(
        Family::Ip6,
        vec![
            build::l4proto_eq(17),
            build::dnat_map(Family::Ip6, &[KeyField::NumgenRandom(3)], "m"),
        ],
    );
    assert_eq!(s, "meta l4proto udp dnat ip6 to numgen random mod 3 map @m");
}

#[test]
fn marks_and_bitwise() {
    assert_eq!(
        rule_of(Family::Ip, vec![build::mark_or(0x4000)]),
        "meta mark set meta mark | 0x00004000"
    );
    assert_eq!(
        rule_of(
            Family::Ip,
            vec![
                build::mark_test(0x4000, false),
                verdict_expr(Verdict::Return)
            ]
        ),
        "meta mark & 0x00004000 == 0x00000000 return"
    );
    assert_eq!(
        rule_of(Family::Ip, vec![build::mark_test(0x4000, true)]),
        "meta mark & 0x00004000 != 0x00000000"
    );
    let xor = vec![
        Expr::Meta {
            key: MetaKey::Mark,
            dreg: Reg::R1,
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: vec![0xff; 4],
            xor: 1u32.to_ne_bytes().to_vec(),
        },
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R1,
        },
    ];
    assert_eq!(
        rule(Family::Ip, &Rule::new(xor)),
        "meta mark set meta mark ^ 0x00000001"
    );
    let imm = vec![
        Expr::Immediate {
            dreg: Reg::R1,
            data: 0x10u32.to_ne_bytes().to_vec(),
        },
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R1,
        },
        Expr::Meta {
            key: MetaKey::Mark,
            dreg: Reg::R1,
        },
        Expr::CtSet {
            key: CtKey::Mark,
            sreg: Reg::R1,
        },
    ];
    assert_eq!(
        rule(Family::Ip, &Rule::new(imm)),
        "meta mark set 0x00000010 ct mark set meta mark"
    );
}

#[test]
fn ct_state_flags() {
    let est = build::ct_state_any(ct_state::ESTABLISHED | ct_state::RELATED);
    assert_eq!(
        rule_of(Family::Ip, vec![est, verdict_expr(Verdict::Accept)]),
        "ct state established,related accept"
    );
    let not_new = vec![
        Expr::Ct {
            key: CtKey::State,
            dreg: Reg::R1,
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: ct_state::NEW.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: vec![0; 4],
        },
    ];
    assert_eq!(rule(Family::Ip, &Rule::new(not_new)), "ct state ! new");
    let plain = vec![
        Expr::Ct {
            key: CtKey::State,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Neq,
            data: ct_state::ESTABLISHED.to_ne_bytes().to_vec(),
        },
    ];
    assert_eq!(
        rule(Family::Ip, &Rule::new(plain)),
        "ct state != established"
    );
}

#[test]
fn comparisons_prefixes_and_ranges() {
    let s = rule_of(
        Family::Ip,
        vec![
            build::addr_cmp(Family::Ip, false, CmpOp::Neq, &v4(198, 18, 0, 1)),
            verdict_expr(Verdict::Drop),
        ],
    );
    assert_eq!(s, "ip daddr != 198.18.0.1 drop");
    let prefix = vec![
        Expr::Payload {
            base: PayloadBase::Network,
            offset: 16,
            len: 2,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: vec![198, 18],
        },
    ];
    assert_eq!(
        rule(Family::Ip, &Rule::new(prefix)),
        "ip daddr 198.18.0.0/16"
    );
    let masked = vec![
        build::load_addr(Family::Ip, true, Reg::R1),
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: vec![255, 255, 240, 0],
            xor: vec![0; 4],
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Neq,
            data: vec![198, 18, 16, 0],
        },
    ];
    assert_eq!(
        rule(Family::Ip, &Rule::new(masked)),
        "ip saddr != 198.18.16.0/20"
    );
    let range = vec![
        build::load_port(true, Reg::R1),
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Gte,
            data: 80u16.to_be_bytes().to_vec(),
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Lte,
            data: 90u16.to_be_bytes().to_vec(),
        },
    ];
    assert_eq!(rule(Family::Ip, &Rule::new(range)), "th sport 80-90");
    let lt = vec![
        build::load_port(false, Reg::R1),
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Lt,
            data: 1024u16.to_be_bytes().to_vec(),
        },
    ];
    assert_eq!(rule(Family::Ip, &Rule::new(lt)), "th dport < 1024");
    assert_eq!(
        rule_of(Family::Ip, vec![build::iifname_eq("eth0", false)]),
        r#"iifname "eth0""#
    );
    assert_eq!(
        rule_of(Family::Ip, vec![build::iifname_eq("veth", true)]),
        r#"iifname "veth*""#
    );
}

#[test]
fn sets_fib_numgen_dynset() {
    let s = rule_of(
        Family::Ip,
        vec![
            build::addr_in_set(Family::Ip, true, "cluster", true),
            verdict_expr(Verdict::Jump("mark".into())),
        ],
    );
    assert_eq!(s, "ip saddr != @cluster jump mark");
    let s = rule_of(
        Family::Ip,
        vec![
            build::fib_daddr_local(),
            verdict_expr(Verdict::Goto("np".into())),
        ],
    );
    assert_eq!(s, "fib daddr type local goto np");
    let s = rule_of(
        Family::Ip,
        vec![build::vmap_lookup(
            Family::Ip,
            &[KeyField::NumgenRandom(2)],
            "eps",
        )],
    );
    assert_eq!(s, "numgen random mod 2 vmap @eps");
    let s = rule_of(
        Family::Ip,
        vec![build::set_update(Family::Ip, &[KeyField::Saddr], "aff")],
    );
    assert_eq!(s, "update @aff { ip saddr }");
    let add = vec![
        build::load_addr(Family::Ip6, true, Reg::R1),
        Expr::Dynset {
            op: DynsetOp::Add,
            set: "aff".into(),
            key: Reg::R1,
            data: None,
            timeout_ms: Some(10_000),
        },
    ];
    assert_eq!(
        rule(Family::Ip6, &Rule::new(add)),
        "add @aff { ip6 saddr timeout 10s }"
    );
    let ng = vec![
        Expr::Numgen {
            kind: NumgenKind::Incremental,
            modulus: 3,
            offset: 1,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: 2u32.to_ne_bytes().to_vec(),
        },
    ];
    assert_eq!(
        rule(Family::Ip, &Rule::new(ng)),
        "numgen inc mod 3 offset 1 2"
    );
}

#[test]
fn terminal_statements() {
    let one = |e: Expr| rule(Family::Ip, &Rule::new(vec![e]));
    assert_eq!(
        one(Expr::Masquerade {
            flags: nat_flags::PROTO_RANDOM_FULLY
        }),
        "masquerade fully-random"
    );
    assert_eq!(one(Expr::Masquerade { flags: 0 }), "masquerade");
    assert_eq!(
        one(Expr::Masquerade {
            flags: nat_flags::PERSISTENT | nat_flags::PROTO_RANDOM
        }),
        "masquerade random,persistent"
    );
    assert_eq!(one(Expr::Reject(Reject::IcmpUnreach(3))), "reject");
    assert_eq!(
        one(Expr::Reject(Reject::IcmpUnreach(1))),
        "reject with icmp host-unreachable"
    );
    assert_eq!(one(Expr::Reject(Reject::IcmpxUnreach(1))), "reject");
    assert_eq!(
        one(Expr::Reject(Reject::IcmpxUnreach(3))),
        "reject with icmpx admin-prohibited"
    );
    let r6 = |c| {
        rule(
            Family::Ip6,
            &Rule::new(vec![Expr::Reject(Reject::IcmpUnreach(c))]),
        )
    };
    assert_eq!(r6(4), "reject");
    assert_eq!(r6(1), "reject with icmpv6 admin-prohibited");
    assert_eq!(one(Expr::Counter), "counter packets 0 bytes 0");
    assert_eq!(one(Expr::Verdict(Verdict::Continue)), "continue");
    let c = Rule::new(vec![Expr::Counter]).with_comment("x");
    assert_eq!(
        rule(Family::Ip, &c),
        r#"counter packets 0 bytes 0 comment "x""#
    );
}

#[test]
fn odd_sequences_do_not_panic() {
    let odd = vec![
        Expr::Cmp {
            sreg: Reg::R3,
            op: CmpOp::Eq,
            data: vec![1, 2, 3],
        },
        Expr::Lookup {
            set: "s".into(),
            sreg: Reg(77),
            dreg: Some(Reg(99)),
            invert: false,
        },
        Expr::Bitwise {
            sreg: Reg::R4,
            dreg: Reg::R4,
            len: 2,
            mask: vec![1],
            xor: vec![],
        },
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R2,
        },
        Expr::Nat {
            kind: NatKind::Snat,
            family: Family::Inet,
            addr: None,
            port: Some(Reg::R4),
            flags: 0,
        },
        Expr::Payload {
            base: PayloadBase::LinkLayer,
            offset: 6,
            len: 6,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Gt,
            data: vec![0; 6],
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Lte,
            data: vec![],
        },
        Expr::Dynset {
            op: DynsetOp::Update,
            set: "d".into(),
            key: Reg(50),
            data: Some(Reg::R2),
            timeout_ms: None,
        },
    ];
    let s = rule(Family::Inet, &Rule::new(odd));
    assert!(s.contains("@ll,48,48 > 0x000000000000"), "{s}");
}

/// nftables mode's localhost NodePort reject, as `nft list` prints it (nft 1.0.6), and
/// a table's named counters listed before its sets.
#[test]
fn named_counter_reference_and_declaration() {
    let r = build::rule(vec![
        build::prefix_match(
            Family::Ip,
            false,
            &Value::Ipv4(std::net::Ipv4Addr::new(127, 0, 0, 0)),
            8,
            false,
        ),
        build::l4proto_eq(17),
        build::set_lookup(Family::Ip, &[build::KeyField::Dport], "s", false),
        vec![build::counter_ref("c"), build::reject(Family::Ip)],
    ]);
    assert_eq!(
        rule(Family::Ip, &r),
        r#"ip daddr 127.0.0.0/8 udp dport @s counter name "c" reject"#
    );
    let mut t = Table::new(Family::Ip, "t");
    t.counters.push("c".into());
    t.sets.push(Set::set("s", vec![DataType::InetService]));
    t.chains.push(Chain::regular("ch").with_rules(vec![r]));
    assert_eq!(t.validate(), Ok(()));
    let text = crate::render::table(&t);
    assert!(
        text.starts_with("table ip t {\n\tcounter c {\n\t\tpackets 0 bytes 0\n\t}\n\n\tset s {"),
        "{text}"
    );
    t.counters.clear();
    assert!(matches!(
        t.validate(),
        Err(crate::ModelError::Dangling { .. })
    ));
}
