//! Diff tests: minimal batches, valid for the kernel (checked by `ruleset::apply`), and
//! independent of the number of other services.

mod common;

use common::model::*;
use nft_model::{Op, Table};
use ruleset::{apply, compile, diff};

fn tables(c: &kube_model::Cluster) -> Vec<Table> {
    compile(c, &config()).unwrap().tables
}

fn canon(t: &[Table]) -> Vec<Table> {
    t.iter().map(Table::canonical).collect()
}

/// Diff, check the batch applies and reaches the target, return it.
fn step(old: &[Table], new: &[Table]) -> Vec<Op> {
    let ops = diff(old, new);
    let mut cur = old.to_vec();
    apply(&mut cur, &ops)
        .unwrap_or_else(|e| panic!("batch refused: {e}\n{}", nft_model::render::script(&ops)));
    assert_eq!(
        canon(&cur),
        canon(new),
        "batch does not reach the target:\n{}",
        nft_model::render::script(&ops)
    );
    ops
}

#[test]
fn cold_start_creates_everything() {
    let new = tables(&cluster(3));
    let ops = step(&[], &new);
    assert!(matches!(ops[0], Op::AddTable { .. }));
}

#[test]
fn no_change_is_empty_and_names_are_stable_across_restarts() {
    let c = cluster(20);
    let a = tables(&c);
    // a "restarted" compiler from the same objects
    let b = tables(&c.clone());
    assert_eq!(a, b);
    assert!(diff(&a, &b).is_empty());
}

#[test]
fn add_delete_and_change_one_service() {
    let mut c = cluster(20);
    let base = tables(&c);
    add(&mut c, 100, vec![endpoint(pod(100), "node-b", true, false)]);
    let added = tables(&c);
    let ops = step(&base, &added);
    eprintln!("add:\n{}", nft_model::render::script(&ops));
    // chain + its rule, cluster-ips, service-ips, hairpin, endpoint map (+ the shard map
    // itself when the shard was empty)
    assert!(
        ops.len() <= 7,
        "{} ops:\n{}",
        ops.len(),
        nft_model::render::script(&ops)
    );

    let ops = step(&added, &base);
    eprintln!("delete:\n{}", nft_model::render::script(&ops));
    assert!(ops.len() <= 7, "{} ops", ops.len());

    // change the endpoint's address
    let mut c2 = cluster(20);
    add(&mut c2, 7, vec![endpoint(pod(999), "node-b", true, false)]);
    let changed = tables(&c2);
    let ops = step(&base, &changed);
    eprintln!("change:\n{}", nft_model::render::script(&ops));
    assert!(
        ops.iter()
            .all(|o| matches!(o, Op::AddElements { .. } | Op::DeleteElements { .. })),
        "no chain touched"
    );
    assert!(ops.len() <= 4, "{} ops", ops.len());
}

#[test]
fn one_endpoint_change_costs_the_same_at_any_scale() {
    let count = |n: u32| {
        let mut c = cluster(n);
        let before = tables(&c);
        add(
            &mut c,
            3,
            vec![
                endpoint(pod(3), "node-b", true, false),
                endpoint(pod(5000), "node-b", true, false),
            ],
        );
        let after = tables(&c);
        let ops = step(&before, &after);
        let elements: usize = ops
            .iter()
            .map(|o| match o {
                Op::AddElements { elements, .. } | Op::DeleteElements { elements, .. } => {
                    elements.len()
                }
                _ => 1,
            })
            .sum();
        (ops.len(), elements)
    };
    let small = count(10);
    let large = count(2000);
    assert_eq!(
        small, large,
        "one-endpoint change must not grow with other services"
    );
}

/// A new affinity timeout is the list chains' rules rewritten (their `update`s): the pins
/// (one set for the family) are kept, each refreshed with the new timeout at its
/// client's next connection.
#[test]
fn affinity_timeout_change_keeps_the_pins() {
    let mut c = cluster(3);
    let mut s = c.services.values().next().unwrap().clone();
    s.affinity_timeout = Some(100);
    c.services.insert(s.key.clone(), s.clone());
    let a = tables(&c);
    s.affinity_timeout = Some(200);
    c.services.insert(s.key.clone(), s);
    let b = tables(&c);
    let ops = step(&a, &b);
    let text = nft_model::render::script(&ops);
    assert!(
        !ops.iter()
            .any(|o| matches!(o, Op::DeleteSet { .. } | Op::AddSet { .. })),
        "{text}"
    );
    assert!(text.contains("timeout 3m20s"), "{text}");
    assert!(
        ops.iter().all(|o| match o {
            Op::FlushChain { chain, .. } | Op::AddRule { chain, .. } => chain.starts_with("svc-"),
            _ => false,
        }),
        "{text}"
    );
}
