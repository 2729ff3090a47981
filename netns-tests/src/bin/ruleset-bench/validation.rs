//! Which batches make the kernel re-validate the whole table at commit?
//!
//! `nf_tables` validates every chain reachable from the base chains (`nft_table_validate`)
//! when a transaction contains something that may create a loop or break a hook
//! restriction. Its cost grows with the ruleset, so a sync that triggers it costs
//! O(cluster). This probe loads a compiled ruleset of N services, then times commits of
//! single operations of each kind (median over the runs; set-up and undo not timed). An
//! operation that costs about as much as an empty batch does not validate; one whose cost
//! grows with N does. Run with `--case NAME --repeat K` under `perf record` to see where
//! the time goes.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use netns_tests::Netns;
use nft_model::build;
use nft_model::*;
use nft_netlink::Nft;

use crate::{median, ms};

/// One probe: set-up (untimed), the timed batch, the undo (untimed).
pub struct Case {
    pub name: &'static str,
    pub what: &'static str,
    pub setup: Vec<Op>,
    pub timed: Vec<Op>,
    pub undo: Vec<Op>,
}

fn v4(a: u32) -> Value {
    Value::Ipv4(Ipv4Addr::from(a))
}

/// The probes for a table compiled by ruleset (names read from the table itself).
pub fn cases(t: &Table) -> Vec<Case> {
    let tr = TableRef::new(t.family, t.name.clone());
    // a chain drawing an endpoint: a service chain in the per-service shape, a class
    // chain in the element-only shape
    let svc = t
        .chains
        .iter()
        .find(|c| {
            c.rules.first().is_some_and(|r| {
                r.exprs.iter().any(|e| matches!(e, Expr::Numgen { .. }))
                    && r.set_refs().next().is_some()
            })
        })
        .expect("a chain drawing an endpoint");
    let svc_rule = svc.rules[0].clone();
    let ep_map = svc_rule
        .set_refs()
        .next()
        .expect("the service rule uses its endpoint map")
        .to_string();
    let (ep_key, ep_data) = {
        let s = t.set(&ep_map).expect("endpoint map");
        let e = &s.elements[0];
        // a key no list uses: the same type as the map's keys, far away from them
        let key: Vec<Value> = e
            .key
            .iter()
            .map(|v| match v {
                Value::Int(_) => Value::Int(0xffff_ff00),
                other => other.clone(),
            })
            .collect();
        (key, e.data.clone().expect("map data"))
    };
    let probe_ip = v4(0xc613_fffe); // 198.19.255.254, used by nothing
    let dst_key = vec![probe_ip.clone(), Value::Proto(6), Value::Port(1)];
    let elems = |set: &str, e: Element, add: bool| {
        if add {
            Op::AddElements {
                table: tr.clone(),
                set: set.into(),
                elements: vec![e],
            }
        } else {
            Op::DeleteElements {
                table: tr.clone(),
                set: set.into(),
                elements: vec![e],
            }
        }
    };
    let data_el = Element::map(ep_key, ep_data);
    let goto_el = Element::map(
        dst_key.clone(),
        ElemData::Verdict(Verdict::Goto(svc.name.clone())),
    );
    let drop_el = Element::map(dst_key.clone(), ElemData::Verdict(Verdict::Drop));
    let probe = "probe-chain";
    let add_chain = Op::AddChain {
        table: tr.clone(),
        name: probe.into(),
        base: None,
        comment: None,
    };
    let del_chain = Op::DeleteChain {
        table: tr.clone(),
        chain: probe.into(),
    };
    let flush = |c: &str| Op::FlushChain {
        table: tr.clone(),
        chain: c.into(),
    };
    let add_rule = |c: &str, exprs: Vec<Expr>| Op::AddRule {
        table: tr.clone(),
        chain: c.into(),
        rule: Rule::new(exprs),
    };
    let rule_case = |name, what, exprs: Vec<Expr>| Case {
        name,
        what,
        setup: vec![add_chain.clone()],
        timed: vec![add_rule(probe, exprs)],
        undo: vec![flush(probe), del_chain.clone()],
    };
    let mut changed_modulus = svc_rule.clone();
    for e in std::sync::Arc::make_mut(&mut changed_modulus.exprs) {
        if let Expr::Numgen { modulus, .. } = e {
            *modulus += 1;
        }
    }
    let dnat = {
        let mut e = build::l4proto_eq(6);
        e.extend(build::dnat_to(t.family, &v4(0xc613_fffd), 80));
        e
    };
    vec![
        Case {
            name: "empty",
            what: "a batch declaring the existing table again (baseline)",
            setup: vec![],
            timed: vec![Op::AddTable {
                table: tr.clone(),
                comment: t.comment.clone(),
            }],
            undo: vec![],
        },
        Case {
            name: "elem-data-add",
            what: "add an element to a data map (endpoints)",
            setup: vec![],
            timed: vec![elems(&ep_map, data_el.clone(), true)],
            undo: vec![elems(&ep_map, data_el.clone(), false)],
        },
        Case {
            name: "elem-data-del",
            what: "delete an element of a data map",
            setup: vec![elems(&ep_map, data_el.clone(), true)],
            timed: vec![elems(&ep_map, data_el.clone(), false)],
            undo: vec![],
        },
        Case {
            name: "elem-set-add",
            what: "add an element to a plain set (cluster-ips)",
            setup: vec![],
            timed: vec![elems(
                "cluster-ips",
                Element::key(vec![probe_ip.clone()]),
                true,
            )],
            undo: vec![elems(
                "cluster-ips",
                Element::key(vec![probe_ip.clone()]),
                false,
            )],
        },
        Case {
            name: "elem-vmap-drop-add",
            what: "add a `drop` element to a verdict map (service-ips)",
            setup: vec![],
            timed: vec![elems("service-ips", drop_el.clone(), true)],
            undo: vec![elems("service-ips", drop_el.clone(), false)],
        },
        Case {
            name: "elem-vmap-goto-add",
            what: "add a `goto` element to a verdict map (service-ips)",
            setup: vec![],
            timed: vec![elems("service-ips", goto_el.clone(), true)],
            undo: vec![elems("service-ips", goto_el.clone(), false)],
        },
        Case {
            name: "elem-vmap-goto-del",
            what: "delete a `goto` element of a verdict map",
            setup: vec![elems("service-ips", goto_el.clone(), true)],
            timed: vec![elems("service-ips", goto_el.clone(), false)],
            undo: vec![],
        },
        Case {
            name: "chain-add",
            what: "add an empty regular chain",
            setup: vec![],
            timed: vec![add_chain.clone()],
            undo: vec![del_chain.clone()],
        },
        Case {
            name: "chain-del",
            what: "delete an empty unreferenced chain",
            setup: vec![add_chain.clone()],
            timed: vec![del_chain.clone()],
            undo: vec![],
        },
        Case {
            name: "set-add",
            what: "add an empty set",
            setup: vec![],
            timed: vec![Op::AddSet {
                table: tr.clone(),
                set: Set::set("probe-set", vec![DataType::Ipv4Addr]),
            }],
            undo: vec![Op::DeleteSet {
                table: tr.clone(),
                set: "probe-set".into(),
            }],
        },
        rule_case(
            "rule-counter",
            "add a rule `counter` (no expression with a validate hook)",
            vec![Expr::Counter],
        ),
        rule_case(
            "rule-cmp",
            "add a rule `meta l4proto tcp` (meta + cmp)",
            build::l4proto_eq(6),
        ),
        rule_case(
            "rule-lookup",
            "add a rule `ip daddr @cluster-ips` (set lookup)",
            build::addr_in_set(t.family, false, "cluster-ips", false),
        ),
        rule_case(
            "rule-dnat",
            "add a rule `meta l4proto tcp dnat to A:P` (immediate + nat)",
            dnat.clone(),
        ),
        rule_case(
            "rule-jump",
            "add a rule `jump <a chain>` (verdict immediate)",
            vec![Expr::Verdict(Verdict::Jump(svc.name.clone()))],
        ),
        Case {
            name: "rule-del",
            what: "flush a chain holding a dnat rule (rule delete)",
            setup: vec![add_chain.clone(), add_rule(probe, dnat.clone())],
            timed: vec![flush(probe)],
            undo: vec![del_chain.clone()],
        },
        Case {
            name: "rule-replace",
            what: "flush a chain drawing an endpoint and add its rule with another modulus",
            setup: vec![],
            timed: vec![
                flush(&svc.name),
                Op::AddRule {
                    table: tr.clone(),
                    chain: svc.name.clone(),
                    rule: changed_modulus,
                },
            ],
            undo: vec![
                flush(&svc.name),
                Op::AddRule {
                    table: tr.clone(),
                    chain: svc.name.clone(),
                    rule: svc_rule.clone(),
                },
            ],
        },
    ]
}

fn commit(nft: &mut Nft, ops: &[Op]) -> Duration {
    let start = Instant::now();
    nft.commit(ops, None)
        .unwrap_or_else(|e| panic!("commit refused: {e}"));
    start.elapsed()
}

/// Load `create` into a fresh namespace and time every case `runs` times. With `only`,
/// run that case `runs` times and print nothing else (for `perf record`).
pub fn probe(label: &str, create: &[Op], table: &Table, runs: u32, only: Option<&str>) {
    let ns = Netns::new("rsvalid");
    ns.run(|| {
        let mut nft = Nft::open().expect("open netlink");
        let load = commit(&mut nft, create);
        println!("{label}: loaded in {:.0} ms", ms(load));
        if only.is_none() {
            println!("| operation | commit median | min |");
            println!("|---|---|---|");
        }
        for c in cases(table) {
            if only.is_some_and(|o| o != c.name) {
                continue;
            }
            let mut times = Vec::new();
            for _ in 0..runs {
                if !c.setup.is_empty() {
                    commit(&mut nft, &c.setup);
                }
                times.push(commit(&mut nft, &c.timed));
                if !c.undo.is_empty() {
                    commit(&mut nft, &c.undo);
                }
            }
            let min = *times.iter().min().expect("runs >= 1");
            println!(
                "| `{}`: {} | {:.2} ms | {:.2} ms |",
                c.name,
                c.what,
                ms(median(times)),
                ms(min)
            );
        }
    });
}
