//! A representative table with every object kind and every expression kind the model
//! has, for round-trip tests of the renderer and of the wire layer.
//!
//! Every rule is the expression sequence nft 1.0.6 itself generates for the statement in
//! its comment, so the table can be programmed over netlink or through `nft -f` of its
//! rendering and list the same. Addresses come from 198.18.0.0/15 and 2001:db8::/32.

use std::net::{Ipv4Addr, Ipv6Addr};

use nft_model::build::{self, KeyField};
use nft_model::*;

/// The name of the sample table.
pub const SAMPLE_TABLE: &str = "nlp-sample";

/// An address of the family: `198.18.<hi>.<lo>` or `2001:db8::<hi>:<lo>`.
pub fn sample_addr(family: Family, hi: u8, lo: u8) -> Value {
    match family {
        Family::Ip6 => Value::Ipv6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            0,
            0,
            0,
            0,
            hi.into(),
            lo.into(),
        )),
        _ => Value::Ipv4(Ipv4Addr::new(198, 18, hi, lo)),
    }
}

fn addr_type(family: Family) -> DataType {
    if family == Family::Ip6 {
        DataType::Ipv6Addr
    } else {
        DataType::Ipv4Addr
    }
}

fn r(exprs: Vec<Expr>) -> Rule {
    Rule::new(exprs)
}

fn cat(parts: Vec<Vec<Expr>>) -> Vec<Expr> {
    parts.into_iter().flatten().collect()
}

fn v(verdict: Verdict) -> Vec<Expr> {
    vec![Expr::Verdict(verdict)]
}

fn jump(c: &str) -> Vec<Expr> {
    v(Verdict::Jump(c.into()))
}

fn u32b(x: u32) -> Vec<u8> {
    x.to_ne_bytes().to_vec()
}

fn base(chain_type: ChainType, hook: Hook, priority: i32, policy: Policy) -> BaseHook {
    BaseHook {
        chain_type,
        hook,
        priority,
        policy,
    }
}

/// The sample table of `family` (`Family::Ip` or `Family::Ip6`).
pub fn sample_table(family: Family) -> Table {
    let a = |hi, lo| sample_addr(family, hi, lo);
    let mut t = Table::new(family, SAMPLE_TABLE).with_comment("kube-nlproxy sample");
    t.sets = sample_sets(family);

    // --- base chains
    let nat_pre = Chain::base(
        "nat-prerouting",
        base(ChainType::Nat, Hook::Prerouting, -100, Policy::Accept),
    )
    .with_comment("dnat entry")
    .with_rules(vec![r(jump("services")).with_comment("to services")]);
    let nat_out = Chain::base(
        "nat-output",
        base(ChainType::Nat, Hook::Output, -100, Policy::Accept),
    )
    .with_rules(vec![r(jump("services"))]);
    let nat_post = Chain::base(
        "nat-postrouting",
        base(ChainType::Nat, Hook::Postrouting, 100, Policy::Accept),
    )
    .with_rules(vec![r(jump("masquerading"))]);
    let route_out = Chain::base(
        "mangle-output",
        base(ChainType::Route, Hook::Output, -150, Policy::Accept),
    )
    .with_comment("route chain");

    // ct state established,related accept
    let ct_est = cat(vec![
        build::ct_state_any(ct_state::ESTABLISHED | ct_state::RELATED),
        v(Verdict::Accept),
    ]);
    // ct state ! new continue
    let ct_not_new = vec![
        Expr::Ct {
            key: CtKey::State,
            dreg: Reg::R1,
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: u32b(ct_state::NEW),
            xor: u32b(0),
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: u32b(0),
        },
        Expr::Verdict(Verdict::Continue),
    ];
    // ct status dnat accept
    let ct_dnat = vec![
        Expr::Ct {
            key: CtKey::Status,
            dreg: Reg::R1,
        },
        Expr::Bitwise {
            sreg: Reg::R1,
            dreg: Reg::R1,
            len: 4,
            mask: u32b(ct_status::DNAT),
            xor: u32b(0),
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Neq,
            data: u32b(0),
        },
        Expr::Verdict(Verdict::Accept),
    ];
    // ct direction reply accept
    let ct_reply = vec![
        Expr::Ct {
            key: CtKey::Direction,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: vec![1],
        },
        Expr::Verdict(Verdict::Accept),
    ];
    // ct mark 0x00000010 accept
    let ct_mark = vec![
        Expr::Ct {
            key: CtKey::Mark,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: u32b(0x10),
        },
        Expr::Verdict(Verdict::Accept),
    ];
    // ct mark set meta mark
    let ct_mark_set = vec![
        Expr::Meta {
            key: MetaKey::Mark,
            dreg: Reg::R1,
        },
        Expr::CtSet {
            key: CtKey::Mark,
            sreg: Reg::R1,
        },
    ];
    // meta mark set 0x00000010
    let mark_set = vec![
        Expr::Immediate {
            dreg: Reg::R1,
            data: u32b(0x10),
        },
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R1,
        },
    ];
    // meta mark set ip saddr map @marks
    let mark_map = vec![
        build::load_addr(family, true, Reg::R1),
        Expr::Lookup {
            set: "marks".into(),
            sreg: Reg::R1,
            dreg: Some(Reg::R1),
            invert: false,
        },
        Expr::MetaSet {
            key: MetaKey::Mark,
            sreg: Reg::R1,
        },
    ];
    // numgen inc mod 3 1 accept
    let numgen_inc = vec![
        Expr::Numgen {
            kind: NumgenKind::Incremental,
            modulus: 3,
            offset: 0,
            dreg: Reg::R1,
        },
        Expr::Cmp {
            sreg: Reg::R1,
            op: CmpOp::Eq,
            data: u32b(1),
        },
        Expr::Verdict(Verdict::Accept),
    ];
    let filter_fwd = Chain::base(
        "filter-forward",
        base(ChainType::Filter, Hook::Forward, -10, Policy::Drop),
    )
    .with_comment("forwarding")
    .with_rules(vec![
        r(ct_est),
        r(cat(vec![
            build::ct_state_any(ct_state::INVALID),
            vec![Expr::Counter],
            v(Verdict::Drop),
        ])),
        r(ct_not_new),
        r(ct_dnat),
        r(ct_reply),
        r(ct_mark),
        r(ct_mark_set),
        r(mark_set),
        r(mark_map),
        r(numgen_inc),
        // ip daddr . meta l4proto . th dport @no-endpoints reject
        r(cat(vec![
            build::set_lookup(
                family,
                &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
                "no-endpoints",
                false,
            ),
            vec![Expr::Reject(Reject::IcmpUnreach(
                if family == Family::Ip6 { 4 } else { 3 },
            ))],
        ]))
        .with_comment("no endpoints"),
        // reject with tcp reset
        r(cat(vec![
            build::l4proto_eq(6),
            vec![Expr::Reject(Reject::TcpRst)],
        ])),
        // reject with icmp host-unreachable / icmpv6 admin-prohibited
        r(vec![Expr::Reject(Reject::IcmpUnreach(1))]),
        // iifname "eth0" accept; iifname "veth*" accept
        r(cat(vec![
            build::iifname_eq("eth0", false),
            v(Verdict::Accept),
        ])),
        r(cat(vec![
            build::iifname_eq("veth", true),
            v(Verdict::Accept),
        ])),
        // iifname @ifaces accept
        r(vec![
            Expr::Meta {
                key: MetaKey::Iifname,
                dreg: Reg::R1,
            },
            Expr::Lookup {
                set: "ifaces".into(),
                sreg: Reg::R1,
                dreg: None,
                invert: false,
            },
            Expr::Verdict(Verdict::Accept),
        ]),
        // meta l4proto udp accept
        r(cat(vec![build::l4proto_eq(17), v(Verdict::Accept)])),
        r(vec![Expr::Counter]).with_comment("end of forward"),
    ]);
    let filter_in = Chain::base(
        "filter-input",
        base(ChainType::Filter, Hook::Input, 0, Policy::Accept),
    )
    .with_rules(vec![
        // fib daddr type local counter accept
        r(cat(vec![
            build::fib_daddr_local(),
            vec![Expr::Counter],
            v(Verdict::Accept),
        ])),
        // ip saddr . ip daddr @ranges accept
        r(cat(vec![
            build::set_lookup(family, &[KeyField::Saddr, KeyField::Daddr], "ranges", false),
            v(Verdict::Accept),
        ])),
    ]);
    let filter_out = Chain::base(
        "filter-output",
        base(ChainType::Filter, Hook::Output, 10, Policy::Accept),
    )
    .with_rules(vec![
        // oifname "lo" accept
        r(vec![
            Expr::Meta {
                key: MetaKey::Oifname,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Eq,
                data: ifname16("lo"),
            },
            Expr::Verdict(Verdict::Accept),
        ]),
    ]);

    // --- regular chains
    let services = Chain::regular("services")
        .with_comment("service dispatch")
        .with_rules(vec![
            r(build::vmap_lookup(
                family,
                &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
                "service-ips",
            ))
            .with_comment("dispatch"),
            r(cat(vec![build::fib_daddr_local(), jump("nodeports")])),
            r(cat(vec![
                build::addr_in_set(family, true, "cluster-ips", true),
                jump("mark-for-masquerade"),
            ])),
            r(cat(vec![
                build::addr_in_set(family, false, "cluster-ips", false),
                v(Verdict::Drop),
            ])),
        ]);
    let prefix16: Vec<u8> = match a(0, 0) {
        Value::Ipv6(x) => x.octets()[..4].to_vec(),
        other => other.to_bytes()[..2].to_vec(),
    };
    let (net_mask, net_val) = match family {
        // 198.18.0.0/20, 2001:db8::/36
        Family::Ip6 => {
            let mut m = vec![0xff, 0xff, 0xff, 0xff, 0xf0];
            m.resize(16, 0);
            let mut val = vec![0x20, 0x01, 0x0d, 0xb8];
            val.resize(16, 0);
            (m, val)
        }
        _ => (vec![0xff, 0xff, 0xf0, 0], vec![198, 18, 0, 0]),
    };
    let nodeports = Chain::regular("nodeports").with_rules(vec![
        // tcp dport 30000-32767 counter accept
        r(cat(vec![
            build::l4proto_eq(6),
            vec![
                build::load_port(false, Reg::R1),
                Expr::Cmp {
                    sreg: Reg::R1,
                    op: CmpOp::Gte,
                    data: 30000u16.to_be_bytes().to_vec(),
                },
                Expr::Cmp {
                    sreg: Reg::R1,
                    op: CmpOp::Lte,
                    data: 32767u16.to_be_bytes().to_vec(),
                },
                Expr::Counter,
                Expr::Verdict(Verdict::Accept),
            ],
        ])),
        // th dport < 1024 drop
        r(vec![
            build::load_port(false, Reg::R1),
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Lt,
                data: 1024u16.to_be_bytes().to_vec(),
            },
            Expr::Verdict(Verdict::Drop),
        ]),
        // ip daddr 198.18.0.0/16 return (nft loads only the prefix bytes)
        r(vec![
            Expr::Payload {
                base: PayloadBase::Network,
                offset: if family == Family::Ip6 { 24 } else { 16 },
                len: prefix16.len() as u32,
                dreg: Reg::R1,
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Eq,
                data: prefix16,
            },
            Expr::Verdict(Verdict::Return),
        ]),
        // ip daddr != 198.18.0.0/20 drop (ip6 daddr != 2001:db8::/36)
        r(vec![
            build::load_addr(family, false, Reg::R1),
            Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                len: net_mask.len() as u32,
                mask: net_mask.clone(),
                xor: vec![0; net_mask.len()],
            },
            Expr::Cmp {
                sreg: Reg::R1,
                op: CmpOp::Neq,
                data: net_val,
            },
            Expr::Verdict(Verdict::Drop),
        ]),
        // ip daddr 198.18.0.1 accept / ip saddr != ... drop
        r(cat(vec![
            build::addr_cmp(family, false, CmpOp::Eq, &a(0, 1)),
            v(Verdict::Accept),
        ])),
        r(cat(vec![
            build::addr_cmp(family, true, CmpOp::Neq, &a(0, 2)),
            v(Verdict::Drop),
        ])),
    ]);
    let mark_masq =
        Chain::regular("mark-for-masquerade").with_rules(vec![r(build::mark_or(0x4000))]);
    let masquerading = Chain::regular("masquerading").with_rules(vec![
        r(cat(vec![
            build::mark_test(0x4000, false),
            v(Verdict::Return),
        ])),
        // meta mark set meta mark ^ 0x00004000
        r(vec![
            Expr::Meta {
                key: MetaKey::Mark,
                dreg: Reg::R1,
            },
            Expr::Bitwise {
                sreg: Reg::R1,
                dreg: Reg::R1,
                len: 4,
                mask: u32b(0xffff_ffff),
                xor: u32b(0x4000),
            },
            Expr::MetaSet {
                key: MetaKey::Mark,
                sreg: Reg::R1,
            },
        ]),
        r(vec![Expr::Masquerade {
            flags: nat_flags::PROTO_RANDOM_FULLY,
        }])
        .with_comment("masquerade"),
    ]);
    let svc_a = Chain::regular("svc-a").with_rules(vec![
        r(build::set_update(family, &[KeyField::Saddr], "affinity")),
        r(build::vmap_lookup(
            family,
            &[KeyField::NumgenRandom(2)],
            "svc-a-eps",
        )),
    ]);
    let ep_a1 = Chain::regular("ep-a1").with_rules(vec![
        r(cat(vec![
            build::addr_cmp(family, true, CmpOp::Eq, &a(2, 2)),
            jump("mark-for-masquerade"),
        ])),
        r(cat(vec![
            build::l4proto_eq(6),
            build::dnat_to(family, &a(2, 2), 8080),
        ]))
        .with_comment("endpoint"),
    ]);
    let ep_a2 = Chain::regular("ep-a2").with_rules(vec![r(cat(vec![
        build::l4proto_eq(6),
        build::dnat_map(family, &[KeyField::NumgenRandom(2)], "ep-addrs"),
    ]))]);
    let svc_b = Chain::regular("svc-b").with_rules(vec![
        r(cat(vec![
            build::l4proto_eq(17),
            build::dnat_map(family, &[KeyField::Daddr, KeyField::Dport], "svc-eps"),
        ])),
        // add @affinity { ip saddr timeout 10s }
        r(vec![
            build::load_addr(family, true, Reg::R1),
            Expr::Dynset {
                op: DynsetOp::Add,
                set: "affinity".into(),
                key: Reg::R1,
                data: None,
                timeout_ms: Some(10_000),
            },
        ]),
    ]);
    // session affinity's shape: pins keyed `client . id . id` (constants written as
    // `numgen random mod 1 offset <id>`), each with its own timeout; a uniform draw
    let pin = |id: u32| {
        [
            KeyField::Saddr,
            KeyField::Id(4_000_000_000),
            KeyField::Id(id),
        ]
    };
    let svc_c = Chain::regular("svc-c").with_rules(vec![
        r(cat(vec![
            build::set_lookup(family, &pin(7), "pins", false),
            vec![build::goto("ep-c")],
        ])),
        r(cat(vec![build::one_in(3), vec![build::goto("ep-c")]])),
        r(vec![build::goto("ep-c")]),
    ]);
    let ep_c = Chain::regular("ep-c").with_rules(vec![
        r(build::set_update_timeout(
            family,
            &pin(7),
            "pins",
            Some(600_000),
        )),
        r(build::dnat_to_proto(family, 6, &a(2, 3), 8080)),
    ]);
    t.chains = vec![
        nat_pre,
        nat_out,
        nat_post,
        route_out,
        filter_fwd,
        filter_in,
        filter_out,
        services,
        nodeports,
        mark_masq,
        masquerading,
        svc_a,
        ep_a1,
        ep_a2,
        svc_b,
        svc_c,
        ep_c,
    ];
    t
}

fn ifname16(name: &str) -> Vec<u8> {
    let mut b = name.as_bytes().to_vec();
    b.resize(16, 0);
    b
}

fn sample_sets(family: Family) -> Vec<Set> {
    let a = |hi, lo| sample_addr(family, hi, lo);
    let at = addr_type(family);
    let mut cluster = Set::set("cluster-ips", vec![at]).with_comment("cluster ips");
    cluster.elements = vec![
        Element::key(vec![a(0, 1)]).with_comment("first"),
        Element::key(vec![a(0, 2)]),
    ];

    let goto = |c: &str| ElemData::Verdict(Verdict::Goto(c.into()));
    let mut service_ips = Set::map(
        "service-ips",
        vec![at, DataType::InetProto, DataType::InetService],
        SetData::Verdict,
    );
    service_ips.elements = vec![
        Element::map(
            vec![a(0, 10), Value::Proto(6), Value::Port(80)],
            goto("svc-a"),
        ),
        Element::map(
            vec![a(0, 11), Value::Proto(17), Value::Port(53)],
            goto("svc-b"),
        )
        .with_comment("dns"),
        Element::map(
            vec![a(0, 12), Value::Proto(132), Value::Port(9)],
            ElemData::Verdict(Verdict::Jump("svc-b".into())),
        ),
    ];

    let mut no_eps = Set::set(
        "no-endpoints",
        vec![at, DataType::InetProto, DataType::InetService],
    );
    no_eps.elements = vec![Element::key(vec![
        a(0, 13),
        Value::Proto(6),
        Value::Port(80),
    ])];

    let mut svc_eps = Set::map(
        "svc-eps",
        vec![at, DataType::InetService],
        SetData::Values(vec![at, DataType::InetService]),
    );
    svc_eps.elements = vec![Element::map(
        vec![a(0, 11), Value::Port(53)],
        ElemData::Values(vec![a(2, 2), Value::Port(5353)]),
    )];

    let mut svc_a_eps = Set::map("svc-a-eps", vec![DataType::HostInt32], SetData::Verdict);
    svc_a_eps.elements = vec![
        Element::map(vec![Value::Int(0)], goto("ep-a1")),
        Element::map(vec![Value::Int(1)], goto("ep-a2")),
    ];

    let mut ep_addrs = Set::map(
        "ep-addrs",
        vec![DataType::HostInt32],
        SetData::Values(vec![at, DataType::InetService]),
    );
    ep_addrs.elements = vec![
        Element::map(
            vec![Value::Int(0)],
            ElemData::Values(vec![a(2, 2), Value::Port(8080)]),
        ),
        Element::map(
            vec![Value::Int(1)],
            ElemData::Values(vec![a(2, 3), Value::Port(8081)]),
        ),
    ];

    let mut ranges = Set::set("ranges", vec![at, at]);
    ranges.flags.interval = true;
    let (net_start, net_end) = match family {
        Family::Ip6 => (
            Value::Ipv6(Ipv6Addr::new(0x2001, 0xdb8, 5, 0, 0, 0, 0, 0)),
            Value::Ipv6(Ipv6Addr::new(
                0x2001, 0xdb8, 5, 0, 0xffff, 0xffff, 0xffff, 0xffff,
            )),
        ),
        _ => (
            Value::Ipv4(Ipv4Addr::new(198, 18, 5, 0)),
            Value::Ipv4(Ipv4Addr::new(198, 18, 5, 255)),
        ),
    };
    ranges.elements = vec![
        // 198.18.0.1 . 198.18.5.0/24
        Element::key(vec![a(0, 1), net_start])
            .with_key_end(vec![a(0, 1), net_end])
            .with_comment("a net"),
        // 198.18.0.2-198.18.0.5 . 198.18.6.1
        Element::key(vec![a(0, 2), a(6, 1)]).with_key_end(vec![a(0, 5), a(6, 1)]),
    ];

    let mut affinity = Set::set("affinity", vec![at]);
    affinity.flags.dynamic = true;
    affinity.flags.timeout = true;
    affinity.timeout_ms = Some(3 * 3600 * 1000);

    let mut pins = Set::set("pins", vec![at, DataType::HostInt32, DataType::HostInt32]);
    pins.flags.dynamic = true;
    pins.flags.timeout = true;
    pins.size = Some(1 << 20);
    pins.saddr_key = true;

    // a size given: the kernel's fixed-size hash
    let mut sized = Set::set("sized", vec![at]);
    sized.size = Some(1024);
    sized.elements = vec![Element::key(vec![a(0, 40)]), Element::key(vec![a(0, 41)])];

    let mut timeouts = Set::set("timeouts", vec![at]).with_comment("with timeouts");
    timeouts.flags.timeout = true;
    timeouts.timeout_ms = Some(60_000);
    timeouts.elements = vec![
        Element::key(vec![a(0, 20)])
            .with_comment("short")
            .with_timeout_ms(10_000),
        Element::key(vec![a(0, 21)]),
    ];

    let mut marks = Set::map("marks", vec![at], SetData::Values(vec![DataType::Mark]));
    marks.elements = vec![Element::map(
        vec![a(0, 30)],
        ElemData::Values(vec![Value::Mark(0x10)]),
    )];

    let mut ifaces = Set::set("ifaces", vec![DataType::Ifname]);
    ifaces.flags.constant = true;
    ifaces.elements = vec![Element::key(vec![Value::Ifname("eth0".into())])];

    vec![
        cluster,
        service_ips,
        no_eps,
        svc_eps,
        svc_a_eps,
        ep_addrs,
        ranges,
        affinity,
        pins,
        sized,
        timeouts,
        marks,
        ifaces,
    ]
}
