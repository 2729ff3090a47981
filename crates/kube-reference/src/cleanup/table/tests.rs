//! Tests of the table generator over generated cases. Each test names the change to the
//! code that made it fail (its negative control, run by hand).

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::super::{
    cleanup_required, unnated_deletes, CleanupModel, CtFlow, Origin, Rule, UdpServicePort,
};
use super::flows;
use crate::changes;
use crate::gen::{generate, Case};
use crate::rng::Rng;

/// Pairs of cases a sync goes between: a generated case and the case after one to three
/// random changes.
fn pairs(seeds: std::ops::Range<u64>) -> impl Iterator<Item = (u64, Case, Case)> {
    seeds.map(|seed| {
        let before = generate(seed);
        let mut rng = Rng::new(seed ^ 0x5eed);
        let n = 1 + rng.below(3) as usize;
        let after = changes::sequence(&before, &mut rng, n).pop().unwrap().case;
        (seed, before, after)
    })
}

/// The same seed makes the same table; another seed another one.
///
/// Negative control: taking the client flows' source ports from the clock instead of
/// `rng` fails (`seed 1 family 1`).
#[test]
fn a_seed_reproduces_its_table() {
    let mut differ = 0;
    for (seed, before, after) in pairs(0..30) {
        for fam in 0..2 {
            let a = flows(&before, &after, fam, &mut Rng::new(seed), 200);
            let b = flows(&before, &after, fam, &mut Rng::new(seed), 200);
            assert_eq!(a, b, "seed {seed} family {fam}");
            differ += usize::from(a != flows(&before, &after, fam, &mut Rng::new(seed + 1), 200));
        }
    }
    assert!(differ > 10, "{differ}");
}

fn allowed(a: &IpAddr) -> bool {
    match a {
        IpAddr::V4(v) => v.octets()[0] == 198 && (v.octets()[1] & 0xfe) == 18,
        IpAddr::V6(v) => v.segments()[0] == 0x2001 && v.segments()[1] == 0xdb8,
    }
}

/// Every generated flow is well formed: one family throughout, addresses from
/// 198.18.0.0/15 and 2001:db8::/32, no port 0, one flow per original tuple, `Unnated`
/// exactly when not DNAT'ed, `Current` to an endpoint serving after the sync, `Past` and
/// `Current` to an endpoint of before, `Never` to an address no port with that frontend
/// ever had; at most `max` flows. Over the seeds, every origin and every rule occurs.
///
/// Negative controls: making `Never` flows from every endpoint of the cluster (no `was`
/// filter in `table.rs`) fails on the `Never` check (seed 3); taking LoadBalancer VIPs of
/// both families in `model.rs`'s `frontends` fails on the family check (seed 3).
#[test]
fn generated_flows_are_well_formed() {
    let mut origins = BTreeSet::new();
    let mut rules = BTreeSet::new();
    for (seed, before, after) in pairs(0..300) {
        let (mb, ma) = (CleanupModel::new(&before), CleanupModel::new(&after));
        for fam in 0..2 {
            let max = if seed % 5 == 0 { 7 } else { 10_000 };
            let gen = flows(&before, &after, fam, &mut Rng::new(seed), max);
            assert!(gen.len() <= max);
            let mut tuples = BTreeSet::new();
            for (f, o) in &gen {
                let msg = format!("seed {seed} family {fam}: {f} {o:?}");
                for a in [f.src.ip(), f.dst.ip(), f.reply_src.ip()] {
                    assert_eq!(usize::from(a.is_ipv6()), fam, "{msg}");
                    assert!(allowed(&a), "{msg}");
                }
                assert!(
                    f.src.port() != 0 && f.dst.port() != 0 && f.reply_src.port() != 0,
                    "{msg}"
                );
                assert!(tuples.insert((f.src, f.dst)), "{msg}: twice");
                assert_eq!(*o == Origin::Unnated, !f.is_nated(), "{msg}");
                let serving_after = |p: &UdpServicePort| {
                    p.endpoints
                        .iter()
                        .any(|e| e.addr == f.reply_src && e.serving)
                };
                let of_before =
                    |p: &UdpServicePort| p.endpoints.iter().any(|e| e.addr == f.reply_src);
                match o {
                    Origin::Current => assert!(ma.ports(fam).iter().any(serving_after), "{msg}"),
                    Origin::Past => assert!(mb.ports(fam).iter().any(of_before), "{msg}"),
                    Origin::Never => {
                        let had = mb.ports(fam).iter().chain(ma.ports(fam)).any(|p| {
                            p.is_frontend(&f.dst)
                                && p.endpoints.iter().any(|e| e.addr.ip() == f.reply_src.ip())
                        });
                        assert!(!had, "{msg}");
                    }
                    Origin::Unnated => {}
                }
                origins.insert(*o);
            }
            let fs: Vec<CtFlow> = gen.iter().map(|g| g.0).collect();
            if cleanup_required(&before, &after, fam) {
                rules.extend(fs.iter().filter_map(|f| ma.stale(f)).map(|r| r.rule));
            }
            rules.extend(
                unnated_deletes(&before, &after, fam, &fs)
                    .values()
                    .map(|r| r.rule),
            );
        }
    }
    assert_eq!(origins.len(), 4, "{origins:?}");
    assert_eq!(rules.len(), 6, "{rules:?}");
}

/// A `Current` flow (its endpoint still serves its service port) is never deleted by the
/// service IP rule over one change; only a NodePort number it shares with another port
/// can take it (over several changes a freed ClusterIP can go to another service).
///
/// Negative control: classifying against the state before the sync (`mb` for `ma` in
/// `table.rs`'s `still`) fails (seed 3: a flow to an endpoint that left is `Current` and
/// falls to the service IP rule).
#[test]
fn current_flows_fall_only_to_a_shared_node_port_number() {
    let mut current = 0;
    for (seed, before, _) in pairs(0..300) {
        let mut rng = Rng::new(seed);
        let after = changes::sequence(&before, &mut rng, 1).pop().unwrap().case;
        let m = CleanupModel::new(&after);
        for fam in 0..2 {
            for (f, o) in flows(&before, &after, fam, &mut rng, 10_000) {
                if o != Origin::Current {
                    continue;
                }
                current += 1;
                if let Some(r) = m.stale(&f) {
                    assert!(
                        matches!(r.rule, Rule::NodePort { .. }),
                        "seed {seed} family {fam}: {f} {r}"
                    );
                }
            }
        }
    }
    assert!(current > 100, "{current}");
}
