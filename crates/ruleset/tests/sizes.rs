//! Size hints for large sets (`compile::mirror::sizing`): sets created large get a size
//! (the kernel's fixed-bucket hash), a set its elements would pass is declared
//! again with a larger one in the batch that fills it, rules and all, and no batch ever
//! adds past a size (`ruleset::apply` refuses it as the kernel does, `ENFILE`).

mod common;

use std::collections::BTreeMap;

use common::model::*;
use kube_model::{Cluster, ServiceKey};
use nft_model::{Element, Op, Set, Table, TableRef, Value};
use ruleset::{apply, diff, ApplyError, Changes, Compiler, ParsedConfig};

fn parsed() -> ParsedConfig {
    let mut cfg = config();
    cfg.node_name = String::new();
    cfg.parse().expect("config")
}

fn canon(t: &[Table]) -> Vec<Table> {
    t.iter().map(Table::canonical).collect()
}

/// Every set with a size: (size, elements).
fn sized(t: &Table) -> BTreeMap<String, (u32, usize)> {
    t.sets
        .iter()
        .filter_map(|s| s.size.map(|n| (s.name.clone(), (n, s.elements.len()))))
        .collect()
}

fn services(from: u32, to: u32) -> Changes {
    Changes {
        services: (from..to)
            .map(|i| ServiceKey::new("ns", format!("svc{i}")))
            .collect(),
        node: false,
    }
}

fn grow(c: &mut Cluster, from: u32, to: u32) {
    for i in from..to {
        add(c, i, vec![endpoint(pod(i), "node-b", true, false)]);
    }
}

fn shrink(c: &mut Cluster, from: u32, to: u32) {
    for i in from..to {
        c.remove_service(&ServiceKey::new("ns", format!("svc{i}")));
        c.remove_slice(&ServiceKey::new("ns", format!("svc{i}-slice")));
    }
}

/// Sets created with 1,024 elements or more get the smallest three quarters of a power
/// of two at or above one and a half times their elements; smaller ones none.
#[test]
fn large_sets_are_created_with_a_size_small_ones_without() {
    let c = cluster(1100);
    let t = &Compiler::new(parsed(), &c).tables()[0];
    let s = sized(t);
    for name in [
        "cluster-ips",
        "dispatch-cluster",
        "hairpin",
        "endpoints-cluster-1",
    ] {
        assert_eq!(s.get(name), Some(&(3072, 1100)), "{name}: {s:?}");
    }
    let small = t.set("no-endpoint-services").unwrap();
    assert_eq!(small.size, None);
    let t = &Compiler::new(parsed(), &cluster(1000)).tables()[0];
    assert!(sized(t).is_empty(), "{:?}", sized(t));
}

/// Services added 300 at a time from 1,100 to 3,500: every batch applies to the tables as
/// the kernel holds them (no element past a size, no set deleted while a rule uses it)
/// and reaches the compiler's tables; the batch that takes `cluster-ips` past its size
/// (3,072) declares it again (6,144) with the rules using it flushed and added
/// again, in that one batch; the batches before it are element operations only.
#[test]
fn a_set_past_its_size_is_declared_again_in_the_same_batch() {
    let cfg = parsed();
    let mut c = cluster(1100);
    let mut comp = Compiler::new(cfg, &c);
    let mut kernel = Vec::new();
    apply(&mut kernel, &diff(&[], &comp.tables())).expect("cold start");
    let mut n = 1100;
    let mut grown = 0;
    while n < 3500 {
        grow(&mut c, n, n + 300);
        let upd = comp.update(&c, &services(n, n + 300));
        n += 300;
        let text = nft_model::render::script(&upd.ops);
        apply(&mut kernel, &upd.ops).unwrap_or_else(|e| panic!("{e}\n{text}"));
        comp.confirm();
        assert_eq!(canon(&kernel), canon(&comp.tables()), "{n}");
        for (set, (size, count)) in sized(&kernel[0]) {
            assert!(count <= size as usize, "{set}: {count} of {size}");
        }
        let redeclared: Vec<&str> = upd
            .ops
            .iter()
            .filter_map(|o| match o {
                Op::DeleteSet { set, .. } => Some(set.as_str()),
                _ => None,
            })
            .collect();
        if n <= 3072 {
            assert!(redeclared.is_empty(), "{n}: {text}");
            continue;
        }
        if redeclared.is_empty() {
            continue;
        }
        grown += 1;
        assert!(redeclared.contains(&"cluster-ips"), "{text}");
        let added = upd.ops.iter().find_map(|o| match o {
            Op::AddSet { set, .. } if set.name == "cluster-ips" => Some(set.size),
            _ => None,
        });
        assert_eq!(added, Some(Some(6144)), "{text}");
        // the chains looking it up, rewritten in the same batch
        for chain in ["services", "cluster-ips-check"] {
            assert!(
                upd.ops
                    .iter()
                    .any(|o| matches!(o, Op::FlushChain { chain: c, .. } if c == chain)),
                "{chain} not flushed:\n{text}"
            );
        }
    }
    assert_eq!(grown, 1, "cluster-ips grew once");
}

/// Sizes are never lowered, and a compiler built from scratch (a restart, a new
/// configuration) keeps the sizes the kernel holds where they are enough: its diff from
/// the kernel's tables is empty.
#[test]
fn sizes_hold_across_a_restart_and_a_configuration_change() {
    let cfg = parsed();
    let mut c = cluster(1100);
    let mut comp = Compiler::new(cfg.clone(), &c);
    let mut kernel = Vec::new();
    apply(&mut kernel, &diff(&[], &comp.tables())).unwrap();
    grow(&mut c, 1100, 3200);
    let upd = comp.update(&c, &services(1100, 3200));
    apply(&mut kernel, &upd.ops).unwrap();
    comp.confirm();
    shrink(&mut c, 1500, 3200);
    let upd = comp.update(&c, &services(1500, 3200));
    apply(&mut kernel, &upd.ops).unwrap();
    comp.confirm();
    assert_eq!(sized(&kernel[0]).get("cluster-ips"), Some(&(6144, 1500)));

    // a restart: built from scratch, the sizes read back
    let mut fresh = Compiler::new(cfg.clone(), &c);
    assert_eq!(
        sized(&fresh.tables()[0]).get("cluster-ips"),
        Some(&(3072, 1500))
    );
    fresh.adopt_sizes(&kernel);
    assert_eq!(diff(&kernel, &fresh.tables()), Vec::<Op>::new());

    // a configuration change that recompiles everything
    let mut other = cfg;
    other.masquerade_all = true;
    let upd = comp.set_config(other, &c);
    assert!(upd.full);
    assert!(
        !upd.ops.iter().any(|o| matches!(o, Op::DeleteSet { .. })),
        "{}",
        nft_model::render::script(&upd.ops)
    );
    apply(&mut kernel, &upd.ops).unwrap();
    assert_eq!(canon(&kernel), canon(&comp.tables()));
}

/// A growth in a batch that is not committed and then taken back (the engine's trial of
/// a skipped service port) leaves the kernel's size: the next batch declares nothing
/// again.
#[test]
fn a_growth_taken_back_before_its_commit_is_undone() {
    let mut c = cluster(3000);
    let mut comp = Compiler::new(parsed(), &c);
    let kernel = comp.tables();
    assert_eq!(sized(&kernel[0]).get("cluster-ips"), Some(&(6144, 3000)));
    // 3,000 of 6,144: take it past 6,144 and back without a commit
    grow(&mut c, 3000, 6200);
    let upd = comp.update(&c, &services(3000, 6200));
    assert!(upd.ops.iter().any(|o| matches!(o, Op::DeleteSet { .. })));
    shrink(&mut c, 3000, 6200);
    let upd = comp.update(&c, &services(3000, 6200));
    assert_eq!(
        upd.ops,
        Vec::<Op>::new(),
        "{}",
        nft_model::render::script(&upd.ops)
    );
    comp.confirm();
    assert_eq!(canon(&comp.tables()), canon(&kernel));
}

/// The kernel's `ENFILE`, as `apply` plays it: no element past a set's size.
#[test]
fn apply_refuses_an_element_past_the_size() {
    let tr = TableRef::new(nft_model::Family::Ip, "t");
    let mut s = Set::set("s", vec![nft_model::DataType::Ipv4Addr]);
    s.size = Some(2);
    let e = |i: u8| Element::key(vec![Value::Ipv4([198, 18, 0, i].into())]);
    let mut t = vec![];
    let ops = vec![
        Op::AddTable {
            table: tr.clone(),
            comment: None,
        },
        Op::AddSet {
            table: tr.clone(),
            set: s,
        },
        Op::AddElements {
            table: tr.clone(),
            set: "s".into(),
            elements: vec![e(1), e(2)],
        },
    ];
    apply(&mut t, &ops).unwrap();
    let more = [Op::AddElements {
        table: tr.clone(),
        set: "s".into(),
        elements: vec![e(3)],
    }];
    assert!(matches!(
        apply(&mut t, &more),
        Err(ApplyError::Full { size: 2, .. })
    ));
    // room made in the same batch
    let swap = [
        Op::DeleteElements {
            table: tr.clone(),
            set: "s".into(),
            elements: vec![e(1)],
        },
        Op::AddElements {
            table: tr,
            set: "s".into(),
            elements: vec![e(3)],
        },
    ];
    apply(&mut t, &swap).unwrap();
}
