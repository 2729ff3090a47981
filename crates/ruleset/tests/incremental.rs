//! The incremental compiler judged by the reference model (docs/fuzzing.md): random
//! change sequences of generated legal clusters (`kube-reference`), each step's batch
//! played onto the tables as last committed, and the packets of the step's cluster
//! traced through the result must get `kube_reference::Model`'s verdicts; as an extra
//! check the result equals a fresh compile. Also: conflicts and conntrack cleanup inputs
//! equal what the whole tables and the whole model say, only the changed service's ports
//! are recompiled, excluded ports are left out as the model of the services without them
//! says; and the shape's promise: the frequent changes are element operations only.
//! Node changes and two services claiming one destination are inputs the model cannot
//! take (its environment is fixed, and it leaves such conflicts out): one property keeps
//! a fresh compile as its reference for them (docs/fuzzing.md, "property tests").

mod common;
mod reference;

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use common::changes::{change, play, Change};
use common::model::*;
use kube_model::{resolve_endpoints, Cluster, IpFamily, Protocol, ServiceKey};
use nft_model::{Op, Table};
use proptest::prelude::*;
use ruleset::incremental::served_destinations;
use ruleset::names::PortId;
use ruleset::{apply, compile_parsed, Changes, Compiler, ParsedConfig};

use kube_reference::{changes as ref_changes, generate, Model, Rng};

fn parsed() -> ParsedConfig {
    let mut cfg = config();
    // the Node's name decides which endpoints are local
    cfg.node_name = String::new();
    cfg.parse().expect("config")
}

fn canon(t: &[Table]) -> Vec<Table> {
    t.iter().map(Table::canonical).collect()
}

type Snapshot = BTreeMap<(ServiceKey, String, IpFamily), BTreeSet<(IpAddr, u16)>>;

/// The serving endpoints of every UDP port, from the whole model (as the engine
/// computed them before the incremental compiler), for the node `node` (the copy of an
/// address listed twice depends on it: decision 0016).
fn snapshot(c: &Cluster, node: &str) -> Snapshot {
    let mut out = Snapshot::new();
    for svc in c.services.values() {
        let slices: Vec<_> = c.slices_of(&svc.key).collect();
        for p in svc.ports.iter().filter(|p| p.protocol == Protocol::Udp) {
            for fam in [IpFamily::V4, IpFamily::V6] {
                let eps: BTreeSet<_> = resolve_endpoints(&slices, p, fam, node)
                    .into_iter()
                    .filter(|e| e.ready || e.serving)
                    .map(|e| (e.addr, e.port))
                    .collect();
                if !eps.is_empty() {
                    out.insert((svc.key.clone(), p.name.clone(), fam), eps);
                }
            }
        }
    }
    out
}

fn stale(old: &Snapshot, new: &Snapshot) -> BTreeSet<(IpAddr, u16)> {
    let empty = BTreeSet::new();
    old.iter()
        .flat_map(|(k, eps)| eps.difference(new.get(k).unwrap_or(&empty)).copied())
        .collect()
}

/// The service ports of `c` whose service is in `keys`.
fn ports_of(c: &Cluster, keys: &BTreeSet<ServiceKey>) -> usize {
    keys.iter()
        .filter_map(|k| c.services.get(k))
        .map(|s| s.ports.len())
        .sum()
}

/// Probes traced per step of the model-judged properties.
const PROBES: usize = 24;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every change's batch, played onto the tables as last committed (also when earlier
    /// batches were not: then no [`Compiler::confirm`], and the batch covers everything
    /// since the last confirmed one), leaves tables that give the reference model's
    /// verdicts for the step's cluster; and (extra) a fresh compile's tables.
    #[test]
    fn incremental_updates_agree_with_the_reference(
        seed in any::<u64>(),
        commits in prop::collection::vec(prop::bool::weighted(0.8), 1..10),
    ) {
        let start = generate(seed);
        let cfg = reference::config(&start).parse().expect("config is valid");
        let mut c = reference::cluster(&start);
        let mut comp = Compiler::new(cfg.clone(), &c);
        let mut committed = comp.tables();
        let mut prev = committed.clone();
        let mut rng = Rng::new(seed ^ 0x1c4e);
        let bad = reference::compare(&start, &committed, &mut rng, PROBES, "start");
        prop_assert!(bad.is_empty(), "{}", bad.join("\n"));
        let steps = ref_changes::sequence(&start, &mut rng.fork(), commits.len());
        for (n, (step, commit)) in steps.iter().zip(&commits).enumerate() {
            let before = c.clone();
            c = reference::cluster(&step.case);
            let ch = reference::changes(step);
            let upd = comp.update(&c, &ch);
            let mut cur = committed.clone();
            apply(&mut cur, &upd.ops).map_err(|e| {
                TestCaseError::fail(format!(
                    "seed {seed} step {n} ({}): {e}\n{}",
                    step.what,
                    nft_model::render::script(&upd.ops)
                ))
            })?;
            // the reference: the model's verdicts on what the kernel would hold
            let what = format!("step {n} ({})", step.what);
            let bad = reference::compare(&step.case, &cur, &mut rng, PROBES, &what);
            prop_assert!(bad.is_empty(), "{}", bad.join("\n"));
            // extra: the same tables as a fresh compile
            let fresh = compile_parsed(&c, &cfg);
            prop_assert_eq!(canon(&cur), canon(&fresh.tables), "seed {} {}", seed, what);
            if *commit {
                comp.confirm();
                committed = cur;
            }
            let whole = Compiler::new(cfg.clone(), &c);
            let mut got = comp.conflicts();
            let mut want = whole.conflicts();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
            prop_assert_eq!(comp.errors(), whole.errors());
            let newly: BTreeSet<_> = served_destinations(&fresh.tables)
                .difference(&served_destinations(&prev))
                .copied()
                .collect();
            prop_assert_eq!(upd.became_served(), newly, "served, seed {} {}", seed, what);
            prop_assert_eq!(
                upd.stopped_serving(),
                stale(&snapshot(&before, &cfg.node_name), &snapshot(&c, &cfg.node_name)),
                "stale, seed {} {}", seed, what
            );
            prop_assert_eq!(
                upd.started_serving(),
                stale(&snapshot(&c, &cfg.node_name), &snapshot(&before, &cfg.node_name)),
                "started, seed {} {}", seed, what
            );
            // the changed service's ports only (its old and its new ones, in each family)
            let bound = 2 * (ports_of(&before, &ch.services) + ports_of(&c, &ch.services));
            prop_assert!(
                upd.recompiled <= bound,
                "seed {} {}: {} ports recompiled, at most {}", seed, what, upd.recompiled, bound
            );
            prev = fresh.tables;
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 250, ..ProptestConfig::default() })]

    /// Node changes (its name, zone, address) and two services claiming one destination,
    /// among the other changes: inputs the reference model cannot take (its environment
    /// is fixed; such conflicts are kept out of it), so the reference here is a fresh
    /// compile. Every change's batch turns the tables as last committed into a fresh
    /// compile of the new state, also when earlier batches were not committed.
    #[test]
    fn node_changes_and_conflicts_equal_a_fresh_compile(
        changes in prop::collection::vec((change(), prop::bool::weighted(0.8)), 1..30)
    ) {
        let cfg = parsed();
        let mut c = cluster(0);
        let mut comp = Compiler::new(cfg.clone(), &c);
        // what the kernel holds (the last committed tables), and the previous desired ones
        let mut committed = comp.tables();
        let mut prev = committed.clone();
        prop_assert_eq!(&committed, &compile_parsed(&c, &cfg).tables);
        for (ch, commit) in &changes {
            let before = c.clone();
            play(&mut c, ch);
            let upd = comp.update(&c, &Changes {
                services: ch.service().into_iter().collect(),
                node: matches!(ch, Change::Node { .. }),
            });
            let fresh = compile_parsed(&c, &cfg);
            prop_assert_eq!(&comp.tables(), &fresh.tables, "after {:?}", ch);
            let mut cur = committed.clone();
            apply(&mut cur, &upd.ops).map_err(|e| {
                TestCaseError::fail(format!("{e}\n{}", nft_model::render::script(&upd.ops)))
            })?;
            prop_assert_eq!(canon(&cur), canon(&fresh.tables), "ops of {:?}", ch);
            if *commit {
                comp.confirm();
                committed = cur;
            }
            let mut got = comp.conflicts();
            let mut want = Compiler::new(cfg.clone(), &c).conflicts();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
            prop_assert_eq!(comp.errors(), Compiler::new(cfg.clone(), &c).errors());
            let newly: BTreeSet<_> = served_destinations(&fresh.tables)
                .difference(&served_destinations(&prev))
                .copied()
                .collect();
            prop_assert_eq!(upd.became_served(), newly, "served after {:?}", ch);
            prop_assert_eq!(
                upd.stopped_serving(),
                stale(&snapshot(&before, &cfg.node_name), &snapshot(&c, &cfg.node_name)),
                "stale after {:?}", ch
            );
            prop_assert_eq!(
                upd.started_serving(),
                stale(&snapshot(&c, &cfg.node_name), &snapshot(&before, &cfg.node_name)),
                "started after {:?}", ch
            );
            if !matches!(ch, Change::Node { .. }) {
                // the changed service's ports only (at most two)
                prop_assert!(upd.recompiled <= 2, "{} ports recompiled", upd.recompiled);
            }
            prev = fresh.tables;
        }
    }
}

/// The cluster without some service ports.
fn without(c: &Cluster, ex: &BTreeSet<PortId>) -> Cluster {
    let mut c = c.clone();
    for (k, svc) in c.services.iter_mut() {
        svc.ports.retain(|p| !ex.contains(&PortId::new(k, p)));
    }
    c
}

/// The case's objects without the excluded service ports, as the model should see them.
fn model_without(case: &kube_reference::Case, ex: &BTreeSet<PortId>) -> Model {
    let mut services = case.services.clone();
    for s in &mut services {
        let key = ServiceKey::new(
            s.metadata.namespace.clone().unwrap_or_default(),
            s.metadata.name.clone().unwrap_or_default(),
        );
        if let Some(ports) = s.spec.as_mut().and_then(|sp| sp.ports.as_mut()) {
            ports.retain(|p| {
                !ex.contains(&PortId {
                    service: key.clone(),
                    port_name: p.name.clone().unwrap_or_default().into(),
                })
            });
        }
    }
    Model::of(&case.env, &services, &case.slices)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Excluded service ports (the engine skips ports the kernel refuses) are left out:
    /// through changes and exclusions coming and going (about one port in six), every
    /// batch applies and the tables give the verdicts of the reference model of the
    /// services without those ports; (extra) they equal a fresh compile of the cluster
    /// without them.
    #[test]
    fn excluded_ports_agree_with_the_reference_without_them(
        seed in any::<u64>(),
        picks in prop::collection::vec(any::<u64>(), 1..10),
    ) {
        let start = generate(seed);
        let cfg = reference::config(&start).parse().expect("config is valid");
        let mut comp = Compiler::new(cfg.clone(), &reference::cluster(&start));
        let mut cur = comp.tables();
        let mut rng = Rng::new(seed ^ 0xe8c1);
        let steps = ref_changes::sequence(&start, &mut rng.fork(), picks.len());
        for (n, (step, pick)) in steps.iter().zip(&picks).enumerate() {
            let c = reference::cluster(&step.case);
            let mut r = Rng::new(*pick);
            let ex: BTreeSet<PortId> = c
                .services
                .iter()
                .flat_map(|(k, s)| s.ports.iter().map(move |p| PortId::new(k, p)))
                .filter(|_| r.chance(17))
                .collect();
            let mut ch = reference::changes(step);
            ch.services.extend(comp.set_excluded(ex.clone()));
            let upd = comp.update(&c, &ch);
            apply(&mut cur, &upd.ops).map_err(|e| TestCaseError::fail(format!("seed {seed} step {n}: {e}")))?;
            comp.confirm();
            let what = format!("step {n} ({}) without {ex:?}", step.what);
            let model = model_without(&step.case, &ex);
            let bad = reference::compare_with(&step.case, &model, &cur, &mut rng, PROBES, &what);
            prop_assert!(bad.is_empty(), "{}", bad.join("\n"));
            let fresh = compile_parsed(&without(&c, &ex), &cfg);
            prop_assert_eq!(canon(&cur), canon(&fresh.tables), "seed {} {}", seed, what);
        }
        let c = reference::cluster(&steps.last().expect("one step at least").case);
        let fresh = Compiler::with_excluded(cfg.clone(), &c, comp.excluded().clone());
        prop_assert_eq!(fresh.tables(), comp.tables());
    }
}

fn only_elements(ops: &[Op]) -> bool {
    ops.iter()
        .all(|o| matches!(o, Op::AddElements { .. } | Op::DeleteElements { .. }))
}

/// The frequent changes commit as element operations only: an endpoint added, removed,
/// becoming ready or terminating (counts crossing from 1 to 12 endpoints, so every
/// class), a service created with endpoints and deleted, while another service keeps
/// every class in use. The first list of a class adds its chain and rules (once).
#[test]
fn frequent_changes_are_element_operations_only() {
    let cfg = parsed();
    let mut c = cluster(0);
    let eps = |n: u32| {
        (0..n)
            .map(|a| endpoint(pod(a), "node-b", true, false))
            .collect()
    };
    // service 5 holds a list of every size 1..=12 over time: keep every class alive in
    // services 1..=4 (1, 2, 3, 4 endpoints ... and 9-16 in one of them)
    for (i, n) in [(1u32, 1u32), (2, 2), (3, 3), (4, 12)] {
        add(&mut c, i, eps(n));
    }
    for (i, n) in [(6u32, 4u32), (7, 5), (8, 6), (9, 7), (10, 8)] {
        add(&mut c, i, eps(n));
    }
    let mut comp = Compiler::new(cfg.clone(), &c);
    let svc = ServiceKey::new("ns", "svc5");
    let changed = Changes {
        services: BTreeSet::from([svc.clone()]),
        node: false,
    };
    // created with endpoints
    add(&mut c, 5, eps(1));
    let upd = comp.update(&c, &changed);
    comp.confirm();
    assert!(
        only_elements(&upd.ops),
        "{}",
        nft_model::render::script(&upd.ops)
    );
    // endpoints added one by one, up to 12 (every class)
    for n in 2..=12 {
        c.insert_slice(slice(5, eps(n)));
        let upd = comp.update(&c, &changed);
        comp.confirm();
        assert!(
            only_elements(&upd.ops),
            "to {n}: {}",
            nft_model::render::script(&upd.ops)
        );
    }
    // one becomes not ready, then terminating only, then ready again
    for (ready, term) in [(false, false), (false, true), (true, false)] {
        let mut e: Vec<_> = eps(12);
        e[3] = endpoint(pod(3), "node-b", ready, term);
        c.insert_slice(slice(5, e));
        let upd = comp.update(&c, &changed);
        comp.confirm();
        assert!(
            only_elements(&upd.ops),
            "{}",
            nft_model::render::script(&upd.ops)
        );
    }
    // removed one by one, down to none, then the service deleted
    for n in (0..12).rev() {
        c.insert_slice(slice(5, eps(n)));
        let upd = comp.update(&c, &changed);
        comp.confirm();
        assert!(
            only_elements(&upd.ops),
            "to {n}: {}",
            nft_model::render::script(&upd.ops)
        );
    }
    c.services.remove(&svc);
    c.remove_slice(&slice(5, vec![]).key);
    let upd = comp.update(&c, &changed);
    comp.confirm();
    assert!(
        only_elements(&upd.ops),
        "{}",
        nft_model::render::script(&upd.ops)
    );
    assert_eq!(comp.tables(), compile_parsed(&c, &cfg).tables);

    // control: the first list of a new class brings its chain and rules
    add(&mut c, 11, eps(20));
    let upd = comp.update(
        &c,
        &Changes {
            services: BTreeSet::from([ServiceKey::new("ns", "svc11")]),
            node: false,
        },
    );
    assert!(
        upd.ops
            .iter()
            .any(|o| matches!(o, Op::AddRule { chain, .. } if chain == "pick-cluster-32")),
        "{}",
        nft_model::render::script(&upd.ops)
    );
}

/// externalTrafficPolicy Local: the node's only local endpoint coming and going while
/// remote ones stay (the destination switches between dropping external clients, pods
/// and the host short-circuited, and serving the local endpoint) commits as element
/// operations only.
#[test]
fn a_local_endpoint_coming_and_going_is_element_operations_only() {
    let cfg = parsed();
    let mut c = cluster(3);
    let etp_local = |c: &mut Cluster, i: u32, eps: Vec<kube_model::Endpoint>| {
        let mut s = service(i);
        s.service_type = kube_model::ServiceType::LoadBalancer;
        s.external_traffic_policy = kube_model::TrafficPolicy::Local;
        s.load_balancer_ips = vec![IpAddr::from([198, 18, 250, i as u8])];
        s.ports[0].node_port = Some(30000 + i as u16);
        let key = s.key.clone();
        c.services.insert(key.clone(), s);
        c.insert_slice(slice(i, eps));
        key
    };
    let remote = vec![
        endpoint(pod(1), "node-b", true, false),
        endpoint(pod(2), "node-b", true, false),
    ];
    let mut with_local = remote.clone();
    with_local.push(endpoint(pod(3), "node-a", true, false));
    // the classes both shapes use stay in use (their first list adds rules, once)
    etp_local(&mut c, 6, remote.clone());
    etp_local(&mut c, 7, with_local.clone());
    let svc = etp_local(&mut c, 5, remote.clone());
    let mut comp = Compiler::new(cfg.clone(), &c);
    let changed = Changes {
        services: BTreeSet::from([svc]),
        node: false,
    };
    for eps in [with_local.clone(), remote.clone(), with_local, remote] {
        c.insert_slice(slice(5, eps));
        let upd = comp.update(&c, &changed);
        comp.confirm();
        assert!(!upd.ops.is_empty());
        assert!(
            only_elements(&upd.ops),
            "{}",
            nft_model::render::script(&upd.ops)
        );
    }
    assert_eq!(comp.tables(), compile_parsed(&c, &cfg).tables);
}

/// Session affinity: an endpoint added to a list of many is the list's chain rewritten
/// (a pin check and a draw per endpoint, each pinning and DNATing), every set lookup and update in
/// the family's one set of pins: no set is created or deleted (the kernel finds a named
/// set by a walk of the table's sets, which a set per endpoint made long), and the pins
/// of the other endpoints stay.
#[test]
fn an_affinity_endpoint_added_is_its_list_rewritten() {
    let cfg = parsed();
    let mut c = cluster(0);
    let eps = |n: u32| -> Vec<kube_model::Endpoint> {
        (0..n)
            .map(|a| endpoint(pod(a), "node-b", true, false))
            .collect()
    };
    add(&mut c, 1, eps(40));
    let svc = ServiceKey::new("ns", "svc1");
    c.services.get_mut(&svc).unwrap().affinity_timeout = Some(10_800);
    let mut comp = Compiler::new(cfg.clone(), &c);
    let changed = Changes {
        services: BTreeSet::from([svc]),
        node: false,
    };
    c.insert_slice(slice(1, eps(41)));
    let upd = comp.update(&c, &changed);
    comp.confirm();
    let text = nft_model::render::script(&upd.ops);
    let mut chains_added = Vec::new();
    let mut rules: BTreeMap<&str, usize> = BTreeMap::new();
    for op in &upd.ops {
        match op {
            Op::AddChain { name, .. } => chains_added.push(name.as_str()),
            Op::AddRule { chain, rule, .. } => {
                *rules.entry(chain.as_str()).or_default() += 1;
                for e in rule.exprs.iter() {
                    if let nft_model::Expr::Lookup { set, .. }
                    | nft_model::Expr::Dynset { set, .. } = e
                    {
                        assert_eq!(set, "affinity", "{text}");
                    }
                }
            }
            Op::FlushChain { chain, .. } => assert!(chain.starts_with("svc-"), "{text}"),
            Op::AddSet { .. } | Op::DeleteSet { .. } | Op::FlushSet { .. } => {
                panic!("a set touched:\n{text}")
            }
            _ => {}
        }
    }
    // no chain per endpoint: the list's rules rewritten (41 checks, 41 draws)
    assert!(chains_added.is_empty(), "{text}");
    assert_eq!(rules.values().sum::<usize>(), 82, "{text}");
    assert_eq!(comp.tables(), compile_parsed(&c, &cfg).tables);
}

/// Conflicts: both names, once per change that touches the destination; the first
/// service keeps it, in full and incremental compiles alike.
#[test]
fn conflicts_name_both_services() {
    let cfg = parsed();
    let mut c = cluster(2);
    let mut comp = Compiler::new(cfg.clone(), &c);
    // service 1 takes service 0's ClusterIP
    let mut s1 = c.services[&ServiceKey::new("ns", "svc1")].clone();
    s1.cluster_ips = c.services[&ServiceKey::new("ns", "svc0")]
        .cluster_ips
        .clone();
    c.services.insert(s1.key.clone(), s1);
    let upd = comp.update(
        &c,
        &Changes {
            services: BTreeSet::from([ServiceKey::new("ns", "svc1")]),
            node: false,
        },
    );
    comp.confirm();
    assert_eq!(upd.conflicts.len(), 1, "{:?}", upd.conflicts);
    let k = &upd.conflicts[0];
    assert_eq!(k.winner.service, ServiceKey::new("ns", "svc0"));
    assert_eq!(k.loser.service, ServiceKey::new("ns", "svc1"));
    let text = k.error().to_string();
    assert!(
        text.contains("ns/svc0") && text.contains("ns/svc1"),
        "{text}"
    );
    // a change elsewhere does not repeat it
    add(&mut c, 3, vec![endpoint(pod(3), "node-b", true, false)]);
    let upd = comp.update(
        &c,
        &Changes {
            services: BTreeSet::from([ServiceKey::new("ns", "svc3")]),
            node: false,
        },
    );
    assert!(upd.conflicts.is_empty());
    assert_eq!(comp.tables(), compile_parsed(&c, &cfg).tables);
}

/// A new configuration: host addresses or service CIDRs only recompile the skeleton and
/// the ports depending on node addresses; anything else recompiles everything. Either
/// way the batch reaches a fresh compile.
#[test]
fn configuration_changes_reach_a_fresh_compile() {
    let mut c = cluster(4);
    let mut s = c.services[&ServiceKey::new("ns", "svc2")].clone();
    s.service_type = kube_model::ServiceType::LoadBalancer;
    s.ports[0].node_port = Some(30002);
    s.load_balancer_ips = vec!["198.18.250.3".parse().unwrap()];
    s.source_ranges = vec![kube_model::Cidr::new("198.18.200.0".parse().unwrap(), 24).unwrap()];
    c.services.insert(s.key.clone(), s);
    let mut cfg = config();
    cfg.node_name = String::new();
    cfg.node_port_addresses = vec!["198.18.200.0/24".into()];
    let mut comp = Compiler::new(cfg.parse().unwrap(), &c);
    let mut cur = comp.tables();
    let mut step = |cfg: &ruleset::Config, full: bool| {
        let p = cfg.parse().unwrap();
        let upd = comp.set_config(p.clone(), &c);
        comp.confirm();
        assert_eq!(upd.full, full);
        apply(&mut cur, &upd.ops).unwrap();
        let fresh = compile_parsed(&c, &p).tables;
        assert_eq!(canon(&cur), canon(&fresh));
        assert_eq!(comp.tables(), fresh);
        upd
    };
    // a host address appears: nodeport-ips and the source-range service change
    cfg.local_addresses = vec!["198.18.200.7".into()];
    let upd = step(&cfg, false);
    assert!(upd.recompiled <= 1, "{}", upd.recompiled);
    cfg.service_cidrs = vec!["198.18.100.0/24".into()];
    step(&cfg, false);
    cfg.masquerade_all = true;
    let upd = step(&cfg, true);
    assert_eq!(upd.recompiled, 4);
    // nftables mode's localhost NodePort rejects: the gate on creates their named
    // counters (a NodePort's port in its protocol's set), a change of anything else
    // leaves them alone (never re-created: the kernel keeps their values), the gate off
    // deletes them after the rules using them
    let counters = |ops: &[Op]| -> (usize, usize) {
        let add = ops
            .iter()
            .filter(|o| matches!(o, Op::AddCounter { .. }))
            .count();
        let del = ops
            .iter()
            .filter(|o| matches!(o, Op::DeleteCounter { .. }))
            .count();
        (add, del)
    };
    cfg.nftables_localhost_node_ports = true;
    let upd = step(&cfg, true);
    // udp, sctp and tcp (no loopback in nodePortAddresses: no proxy; IPv4 only here)
    assert_eq!(
        counters(&upd.ops),
        (3, 0),
        "{}",
        nft_model::render::script(&upd.ops)
    );
    assert!(upd.ops.iter().any(|o| matches!(o,
        Op::AddElements { set, .. } if set == "localhost-reject-tcp")));
    cfg.local_addresses = vec!["198.18.200.8".into()];
    let upd = step(&cfg, false);
    assert_eq!(counters(&upd.ops), (0, 0));
    // loopback in nodePortAddresses: the proxy serves TCP, its reject goes
    cfg.node_port_addresses
        .extend(["127.0.0.0/8".into(), "::1/128".into()]);
    let upd = step(&cfg, true);
    assert_eq!(
        counters(&upd.ops),
        (0, 1),
        "{}",
        nft_model::render::script(&upd.ops)
    );
    cfg.nftables_localhost_node_ports = false;
    let upd = step(&cfg, true);
    assert_eq!(counters(&upd.ops), (0, 2));
    let last_flush = upd
        .ops
        .iter()
        .rposition(|o| matches!(o, Op::FlushChain { .. }));
    let first_delete = upd
        .ops
        .iter()
        .position(|o| matches!(o, Op::DeleteCounter { .. }));
    assert!(
        last_flush < first_delete,
        "counters deleted after their rules"
    );
}

/// A refused batch is blamed on the service ports its ops are about: every op a session
/// affinity port's change makes (its list chain rewritten with each endpoint's pin
/// `update` and DNAT) names that port; the family's set of pins names none (it
/// is the skeleton's).
#[test]
fn affinity_ops_name_their_port() {
    let cfg = parsed();
    let mut c = cluster(3);
    let svc = ServiceKey::new("ns", "svc1");
    let port = PortId {
        service: svc.clone(),
        port_name: "http".into(),
    };
    c.services.get_mut(&svc).unwrap().affinity_timeout = Some(60);
    let mut comp = Compiler::new(cfg, &c);
    let cold = ruleset::diff(&[], &comp.tables());
    let mut named = 0;
    for op in &cold {
        match op {
            Op::AddChain { name, .. } | Op::AddRule { chain: name, .. }
                if name.contains("ns/svc1") =>
            {
                assert_eq!(comp.owners(op), BTreeSet::from([port.clone()]), "{op:?}");
                named += 1;
            }
            Op::AddSet { set, .. } if set.name == "affinity" => {
                assert!(comp.owners(op).is_empty())
            }
            _ => {}
        }
    }
    // the list chain and its two rules (a check and a draw for its one endpoint)
    assert!(named >= 3, "{named}");
    c.insert_slice(slice(
        1,
        vec![
            endpoint(pod(1), "node-b", true, false),
            endpoint(pod(40), "node-b", true, false),
        ],
    ));
    let upd = comp.update(
        &c,
        &Changes {
            services: BTreeSet::from([svc]),
            node: false,
        },
    );
    assert!(!upd.ops.is_empty());
    for op in &upd.ops {
        assert_eq!(comp.owners(op), BTreeSet::from([port.clone()]), "{op:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// A compiler built while its cluster arrives (`Build`: a cold start's lists), fed
    /// the changes in chunks (node changes and two services claiming one destination
    /// among them; the start's cluster played from changes too, so that it may hold
    /// services without slices, which a build defers), ends as the compiler built from
    /// scratch of the final cluster: the same tables (packed too), conflicts and
    /// errors; and the next change's batch, played onto its tables, reaches a fresh
    /// compile (its journal starts where the build ends).
    #[test]
    fn a_build_spread_over_arrivals_equals_a_fresh_compile(
        changes in prop::collection::vec((change(), prop::bool::weighted(0.3)), 1..30),
        next in change(),
        empty_start in any::<bool>(),
        start in prop::collection::vec(change(), 0..12),
        readdress in prop::option::of(0usize..30),
    ) {
        let mut cfg = parsed();
        let mut c = if empty_start { Cluster::default() } else { cluster(0) };
        for ch in &start {
            play(&mut c, ch);
        }
        let mut build = ruleset::Build::new(cfg.clone(), &c, BTreeSet::new());
        let mut pending = Changes::default();
        for (i, (ch, add_now)) in changes.iter().enumerate() {
            if readdress == Some(i) {
                // the host's addresses change while the lists arrive
                cfg.local_addresses = vec!["198.18.9.9".parse().unwrap()];
                build.set_config(&cfg, &c);
            }
            play(&mut c, ch);
            pending.services.extend(ch.service());
            pending.node |= matches!(ch, Change::Node { .. });
            if *add_now {
                build.add(&c, &std::mem::take(&mut pending));
            }
        }
        let mut comp = build.finish(&cfg, &c, &BTreeSet::new(), &pending);
        let fresh = Compiler::new(cfg.clone(), &c);
        prop_assert_eq!(comp.tables(), fresh.tables());
        prop_assert_eq!(comp.packed_tables(), fresh.packed_tables());
        let (mut got, mut want) = (comp.conflicts(), fresh.conflicts());
        got.sort();
        want.sort();
        prop_assert_eq!(got, want);
        prop_assert_eq!(comp.errors(), fresh.errors());
        prop_assert!(comp.confirmed());
        let mut cur = comp.tables();
        play(&mut c, &next);
        let upd = comp.update(&c, &Changes {
            services: next.service().into_iter().collect(),
            node: matches!(next, Change::Node { .. }),
        });
        apply(&mut cur, &upd.ops).map_err(|e| {
            TestCaseError::fail(format!("{e}\n{}", nft_model::render::script(&upd.ops)))
        })?;
        prop_assert_eq!(canon(&cur), canon(&compile_parsed(&c, &cfg).tables));
    }
}

/// A build whose configuration changed before it finished starts again from scratch.
#[test]
fn a_build_finished_with_another_configuration_is_built_again() {
    let cfg = parsed();
    let c = cluster(3);
    let build = ruleset::Build::new(cfg.clone(), &c, BTreeSet::new());
    let mut other = cfg.clone();
    other.masquerade_all = !other.masquerade_all;
    let comp = build.finish(&other, &c, &BTreeSet::new(), &Changes::default());
    assert_eq!(comp.config(), &other);
    assert_eq!(comp.tables(), Compiler::new(other, &c).tables());
}

/// A build whose host addresses changed before it finished compiles again the services
/// depending on them, and ends as a fresh compile with the new addresses.
#[test]
fn a_build_takes_new_host_addresses() {
    let cfg = parsed();
    let c = cluster(4);
    let mut build = ruleset::Build::new(cfg.clone(), &c, BTreeSet::new());
    let mut other = cfg.clone();
    other.local_addresses = vec!["198.18.9.9".parse().unwrap()];
    build.set_config(&other, &c);
    let comp = build.finish(&other, &c, &BTreeSet::new(), &Changes::default());
    assert_eq!(comp.tables(), Compiler::new(other, &c).tables());
}
