//! Checks of the nftables transport against the running kernel, each in namespaces of
//! its own; run by `tests/transport.rs` and the kernel suite (`tests/kernel_suite.rs`).

use crate::oracle::{nft_json_summary, Summary};
use crate::sample::{sample_table, SAMPLE_TABLE};
use crate::{normalize_listing, Netns};
use nft_model::build::{self, KeyField};
use nft_model::*;
use nft_netlink::{Nft, NftError};
use std::net::Ipv4Addr;

/// A table `ip kube-nlproxy`: a `service-ips` verdict map dispatching from a NAT base
/// chain to one DNAT chain per service (`svc-N`).
pub fn small_table(services: u32) -> Table {
    let mut t = Table::new(Family::Ip, "kube-nlproxy").with_comment("transport test");
    let mut map = Set::map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
        SetData::Verdict,
    );
    let mut chains = vec![Chain::base(
        "nat-prerouting",
        BaseHook {
            chain_type: ChainType::Nat,
            hook: Hook::Prerouting,
            priority: -100,
            policy: Policy::Accept,
        },
    )
    .with_rules(vec![Rule::new(build::vmap_lookup(
        Family::Ip,
        &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
        "service-ips",
    ))
    .with_comment("dispatch")])];
    for i in 0..services {
        let name = format!("svc-{i}");
        map.elements.push(Element::map(
            vec![
                Value::Ipv4(Ipv4Addr::from(0xc612_0000 + i)),
                Value::Proto(17),
                Value::Port(53),
            ],
            ElemData::Verdict(Verdict::Goto(name.clone())),
        ));
        chains.push(Chain::regular(name).with_rules(vec![Rule::new(
                [build::dnat_to(
                    Family::Ip,
                    &Value::Ipv4(Ipv4Addr::new(198, 19, 0, 1)),
                    5353,
                )]
                .concat(),
            )]));
    }
    t.sets.push(map);
    t.chains = chains;
    t
}

fn listing(ns: &Netns) -> String {
    ns.exec_ok("nft", &["list", "ruleset"])
}

/// A batch with one invalid object changes nothing, and the error names that object.
pub fn rejected_batch_changes_nothing_and_names_the_object() {
    let ns = Netns::new("reject");
    ns.nft("table inet other { chain c { type filter hook input priority 0; policy accept; }; }\n");
    let t = small_table(3);
    ns.run(|| {
        Nft::open()
            .unwrap()
            .commit(&create_table_ops(&t), None)
            .expect("initial load")
    });
    let before = listing(&ns);

    let tr = TableRef::new(Family::Ip, "kube-nlproxy");
    let mut ops = create_table_ops(&small_table(5));
    let bad_at = ops.len();
    ops.push(Op::AddRule {
        table: tr.clone(),
        chain: "svc-1".into(),
        rule: Rule::new(vec![Expr::Verdict(Verdict::Jump("no-such-chain".into()))]),
    });
    ops.push(Op::FlushChain {
        table: tr.clone(),
        chain: "svc-0".into(),
    });
    let err = ns
        .run(|| Nft::open().unwrap().commit(&ops, None))
        .expect_err("must be rejected");
    match &err {
        NftError::Rejected(list) => {
            assert_eq!(list.len(), 1, "{err}");
            assert_eq!(list[0].op_index, bad_at);
            assert_eq!(list[0].errno, libc::ENOENT);
            assert!(
                list[0].op_text.contains("no-such-chain"),
                "{}",
                list[0].op_text
            );
        }
        other => panic!("expected a rejection, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains("ENOENT") && msg.contains("no-such-chain"),
        "{msg}"
    );
    assert_eq!(
        listing(&ns),
        before,
        "a failed batch must leave the ruleset byte-identical"
    );
}

/// A refused element among thousands in one op (split over several messages) is named
/// by its index: the kernel's extended acknowledgement points at the element's
/// attribute (an interval set refuses an element overlapping another one, EEXIST).
/// Returns the element index the error named (None when the kernel names none).
pub fn a_refused_element_is_named_among_thousands() -> Option<usize> {
    refused_element_among_thousands(false)
}

/// [`a_refused_element_is_named_among_thousands`] with the elements sent packed
/// (`Op::AddPackedElements`, as a cold start sends the compiler's): the same element
/// is named.
pub fn a_refused_packed_element_is_named_among_thousands() -> Option<usize> {
    refused_element_among_thousands(true)
}

fn refused_element_among_thousands(packed: bool) -> Option<usize> {
    let ns = Netns::new("refelem");
    let tr = TableRef::new(Family::Ip, "kube-nlproxy");
    // `firewall-allow`'s kind of set: a concatenation with a range in the last field
    let mut set = Set::set("allow", vec![DataType::InetService, DataType::Ipv4Addr]);
    set.flags.interval = true;
    let range = |a: &str, z: &str| {
        let (a, z): (Ipv4Addr, Ipv4Addr) = (a.parse().unwrap(), z.parse().unwrap());
        Element::key(vec![Value::Port(80), Value::Ipv4(a)])
            .with_key_end(vec![Value::Port(80), Value::Ipv4(z)])
    };
    let host = |i: u32| {
        let a = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) + 2 * i).to_string();
        range(&a, &a)
    };
    let mut elements: Vec<Element> = (0..3000).map(host).collect();
    const BAD: usize = 2345;
    // 198.18.0.0 - 198.18.0.7 overlaps the first four hosts
    elements[BAD] = range("198.18.0.0", "198.18.0.7");
    let ops = vec![
        Op::AddTable {
            table: tr.clone(),
            comment: None,
        },
        Op::AddSet {
            table: tr.clone(),
            set,
        },
        if packed {
            Op::AddPackedElements {
                table: tr.clone(),
                set: "allow".into(),
                elements: elements.iter().map(PackedElement::new).collect(),
            }
        } else {
            Op::AddElements {
                table: tr.clone(),
                set: "allow".into(),
                elements,
            }
        },
    ];
    let err = ns
        .run(|| Nft::open().unwrap().commit(&ops, None))
        .expect_err("the overlapping element must be refused");
    let NftError::Rejected(list) = &err else {
        panic!("expected a rejection, got {err}");
    };
    assert_eq!(list.len(), 1, "{err}");
    assert_eq!(
        (list[0].op_index, list[0].errno),
        (2, libc::EEXIST),
        "{err}"
    );
    if list[0].element.is_some() {
        assert_eq!(list[0].element, Some(BAD), "{err}");
        assert!(
            list[0].op_text.contains("198.18.0.0/29") && !list[0].op_text.contains("198.18.0.2 "),
            "the refused element only: {}",
            list[0].op_text
        );
    }
    assert_eq!(listing(&ns), "", "nothing was changed");
    list[0].element
}

/// `Nft::check` answers what a commit would (the same per-op errors, including the
/// kernel's validation of what base chains reach: a jump loop) and changes nothing,
/// also when the batch is good.
pub fn check_answers_as_a_commit_would_and_changes_nothing() {
    let ns = Netns::new("check");
    let t = small_table(3);
    ns.run(|| {
        Nft::open()
            .unwrap()
            .commit(&create_table_ops(&t), None)
            .expect("initial load")
    });
    let before = listing(&ns);
    let tr = TableRef::new(Family::Ip, "kube-nlproxy");
    let add_chain = |name: &str, to: &str| {
        vec![
            Op::AddChain {
                table: tr.clone(),
                name: name.into(),
                base: None,
                comment: None,
            },
            Op::AddRule {
                table: tr.clone(),
                chain: name.into(),
                rule: Rule::new(vec![Expr::Verdict(Verdict::Jump(to.into()))]),
            },
        ]
    };
    let good = add_chain("extra", "svc-0");
    let missing = add_chain("extra", "no-such-chain");
    let mut looping = add_chain("loop-a", "loop-b");
    looping.extend(add_chain("loop-b", "loop-a"));
    looping.swap(1, 2); // both chains exist before the first jump
                        // (the kernel validates what base chains reach: an unreachable loop is allowed)
    looping.push(Op::AddRule {
        table: tr.clone(),
        chain: "nat-prerouting".into(),
        rule: Rule::new(vec![Expr::Verdict(Verdict::Jump("loop-a".into()))]),
    });
    ns.run(|| {
        let mut nft = Nft::open().unwrap();
        let genid = nft.generation().unwrap();
        nft.check(&good, Some(genid)).expect("a good batch checks");
        match nft.check(&missing, Some(genid)) {
            Err(NftError::Rejected(list)) => {
                assert_eq!(
                    (list[0].op_index, list[0].errno),
                    (1, libc::ENOENT),
                    "{list:?}"
                )
            }
            other => panic!("expected ENOENT, got {other:?}"),
        }
        match nft.check(&looping, Some(genid)) {
            Err(NftError::Rejected(list)) => {
                // (EMLINK on this kernel: the loop is found when the jump into it
                // is added to a base chain)
                assert!(
                    list.iter()
                        .any(|e| e.errno == libc::ELOOP || e.errno == libc::EMLINK),
                    "{list:?}"
                )
            }
            other => panic!("expected the loop to be refused, got {other:?}"),
        }
        assert_eq!(nft.generation().unwrap(), genid, "nothing was committed");
    });
    assert_eq!(listing(&ns), before);
}

/// The generation guard notices another writer between our read and our commit,
/// and the guarded commit rebuilds and succeeds.
pub fn generation_guard_detects_other_writers_and_retry_succeeds() {
    let ns = Netns::new("genid");
    let t = small_table(2);
    let ops = create_table_ops(&t);
    ns.run(|| {
        let mut nft = Nft::open().unwrap();
        let genid = nft.generation().unwrap();
        // another program changes an unrelated table
        let other = Nft::open().unwrap().commit(
            &[Op::AddTable {
                table: TableRef::new(Family::Inet, "someone-else"),
                comment: None,
            }],
            None,
        );
        other.unwrap();
        match nft.commit(&ops, Some(genid)) {
            Err(NftError::GenerationChanged { expected }) => assert_eq!(expected, genid),
            other => panic!("expected the generation guard to refuse, got {other:?}"),
        }
        assert!(!nft
            .table_exists(&TableRef::new(Family::Ip, "kube-nlproxy"))
            .unwrap());
        // guarded commit: the first attempt races with another writer, the second wins
        let mut attempts = 0;
        let report = nft
            .commit_guarded(3, |_| {
                attempts += 1;
                if attempts == 1 {
                    Nft::open()?.commit(
                        &[Op::AddTable {
                            table: TableRef::new(Family::Inet, "someone-else-2"),
                            comment: None,
                        }],
                        None,
                    )?;
                }
                Ok(ops.clone())
            })
            .expect("retry succeeds");
        assert_eq!(attempts, 2);
        assert_eq!(report.ops, ops.len());
    });
    let l = listing(&ns);
    assert!(
        l.contains("table ip kube-nlproxy") && l.contains("someone-else-2"),
        "{l}"
    );
}

/// What we program reads back through our decoder as the model, and an empty
/// batch sends nothing.
pub fn committed_table_reads_back_equal() {
    let ns = Netns::new("readback");
    let t = small_table(50);
    let got = ns.run(|| {
        let mut nft = Nft::open().unwrap();
        nft.commit(&create_table_ops(&t), None).unwrap();
        let gen = nft.generation().unwrap();
        assert_eq!(nft.commit(&[], Some(gen)).unwrap().messages, 0);
        assert_eq!(
            nft.generation().unwrap(),
            gen,
            "an empty batch must not touch the kernel"
        );
        nft.dump_table(&TableRef::new(Family::Ip, "kube-nlproxy"))
            .unwrap()
    });
    assert_eq!(got.expect("table exists").canonical(), t.canonical());
    let missing = ns.run(|| {
        Nft::open()
            .unwrap()
            .dump_table(&TableRef::new(Family::Ip6, "kube-nlproxy"))
            .unwrap()
    });
    assert!(missing.is_none());
}

/// The sample table with every object and expression kind, programmed through our
/// transport: our decoder reads back the model, `nft -j` (an independent oracle)
/// agrees, `nft list table` equals our rendering, and that listing reloads with
/// `nft -f` into a fresh namespace and lists identically.
pub fn every_object_kind_programs_reads_back_and_round_trips() {
    for family in [Family::Ip, Family::Ip6] {
        let model = sample_table(family);
        model.validate().expect("sample is valid");
        let fam = family.nft_name();
        let ns = Netns::new("every");
        let dumped = ns.run(|| {
            let mut nft = Nft::open().unwrap();
            nft.commit(&create_table_ops(&model), None)
                .unwrap_or_else(|e| panic!("{fam}: {e}"));
            nft.dump_table(&TableRef::new(family, SAMPLE_TABLE))
                .unwrap()
        });
        assert_eq!(
            dumped.expect("table exists").canonical(),
            model.canonical(),
            "{fam}: decoder"
        );
        assert_eq!(
            nft_json_summary(&ns, fam, SAMPLE_TABLE),
            Summary::of_model(&model),
            "{fam}: nft -j"
        );
        let listed = ns.exec_ok("nft", &["list", "table", fam, SAMPLE_TABLE]);
        assert_eq!(
            normalize_listing(&listed),
            normalize_listing(&render::table(&model)),
            "{fam}: listing"
        );
        let again = Netns::new("every2");
        again.nft(&listed);
        let relisted = again.exec_ok("nft", &["list", "table", fam, SAMPLE_TABLE]);
        assert_eq!(
            normalize_listing(&relisted),
            normalize_listing(&listed),
            "{fam}: reload"
        );
    }
}

/// The watcher's subscription (`nft_netlink::watch::Membership`), dropped, hears none of
/// a commit; taken again, it hears the next one. Another socket of the same process,
/// subscribed all along, hears both (the drop is this socket's alone).
pub fn a_dropped_watcher_subscription_hears_nothing_until_taken_again() {
    let ns = Netns::new("mute");
    let ours = vec![TableRef::new(Family::Ip, "kube-nlproxy")];
    let (muted, heard, other) = ns.run(|| {
        let mut w = nft_netlink::watch::Watcher::open(ours.clone()).unwrap();
        let mut witness = nft_netlink::watch::Watcher::open(ours.clone()).unwrap();
        let m = w.membership().unwrap();
        let mut nft = Nft::open().unwrap();
        m.set(false).unwrap();
        nft.commit(&create_table_ops(&small_table(2)), None)
            .unwrap();
        m.set(true).unwrap();
        let muted = w.poll();
        let mut more = small_table(3);
        more.chains.retain(|c| c.name == "svc-2");
        nft.commit(
            &[add_chain_op(
                &TableRef::new(Family::Ip, "kube-nlproxy"),
                &more.chains[0],
            )],
            None,
        )
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        (muted, w.poll(), witness.poll())
    });
    assert!(muted.touches.is_empty() && !muted.overflow, "{muted:?}");
    assert_eq!(heard.touches.len(), 1, "{heard:?}");
    assert_eq!(other.touches.len(), 2, "{other:?}");
}
