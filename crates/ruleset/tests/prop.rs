//! Property tests: random change sequences of generated legal clusters
//! (`kube-reference`), each state compiled from scratch and its diff played onto the
//! tables the previous diffs left: the result gives the reference model's verdicts
//! (`kube_reference::Model`, docs/fuzzing.md) and (extra) equals the compiled tables;
//! every batch is one the kernel would accept (per `ruleset::apply`). Random malformed
//! Kubernetes objects never panic the model or the compiler.

mod common;
mod reference;

use common::model::*;
use kube_model::Cluster;
use kube_reference::{changes, generate, Rng};
use nft_model::Table;
use proptest::prelude::*;
use ruleset::{apply, compile, diff};

fn canon(t: &[Table]) -> Vec<Table> {
    t.iter().map(Table::canonical).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn diffs_compose_to_tables_that_agree_with_the_reference(
        seed in any::<u64>(),
        steps in 1usize..10,
    ) {
        let start = generate(seed);
        let cfg = reference::config(&start);
        let mut rng = Rng::new(seed ^ 0xd1ff);
        let mut cur: Vec<Table> = Vec::new();
        let mut cases = vec![("start".to_string(), start.clone())];
        cases.extend(
            changes::sequence(&start, &mut rng.fork(), steps)
                .into_iter()
                .map(|s| (s.what, s.case)),
        );
        for (n, (what, case)) in cases.iter().enumerate() {
            let new = compile(&reference::cluster(case), &cfg).unwrap().tables;
            for t in &new {
                t.validate().unwrap();
            }
            let ops = diff(&cur, &new);
            apply(&mut cur, &ops).map_err(|e| TestCaseError::fail(format!("seed {seed} step {n}: {e}\n{}", nft_model::render::script(&ops))))?;
            let what = format!("step {n} ({what})");
            let bad = reference::compare(case, &cur, &mut rng, 24, &what);
            prop_assert!(bad.is_empty(), "{}", bad.join("\n"));
            prop_assert_eq!(canon(&cur), canon(&new), "seed {} {}", seed, what);
            prop_assert!(diff(&new, &new).is_empty());
        }
    }
}

// --- malformed Kubernetes objects never panic ---------------------------------------

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;

fn junk_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("None".to_string()),
        Just("198.18.100.1".to_string()),
        Just(" 198.018.100.001 ".to_string()),
        Just("2001:db8::1".to_string()),
        Just("::ffff:198.18.0.1".to_string()),
        Just("0.0.0.0".to_string()),
        Just("127.0.0.1".to_string()),
        Just("198.18.0.0/16".to_string()),
        "[ -~]{0,20}",
        "\\PC{0,12}",
    ]
}

fn junk_service() -> impl Strategy<Value = core::Service> {
    (
        prop::option::of("[a-z0-9\\-]{0,10}"),
        prop::option::of(junk_string()),
        prop::option::of(prop::collection::vec(junk_string(), 0..3)),
        prop::option::of(prop::sample::select(vec![
            "ClusterIP",
            "NodePort",
            "LoadBalancer",
            "ExternalName",
            "Bogus",
        ])),
        prop::collection::vec(
            (
                prop::option::of("[a-z]{0,3}"),
                prop::option::of(junk_string()),
                any::<i32>(),
                prop::option::of(any::<i32>()),
            ),
            0..4,
        ),
        prop::option::of(prop::collection::vec(junk_string(), 0..3)),
        prop::option::of(prop::collection::vec(junk_string(), 0..3)),
        prop::option::of(prop::collection::vec(prop::option::of(junk_string()), 0..3)),
        prop::option::of(any::<i32>()),
    )
        .prop_map(
            |(name, cip, cips, ty, ports, ext, ranges, ingress, timeout)| {
                let mut s = core::Service::default();
                s.metadata.name = name;
                s.metadata.namespace = Some("ns".into());
                let mut spec = core::ServiceSpec {
                    cluster_ip: cip,
                    cluster_ips: cips,
                    type_: ty.map(str::to_string),
                    external_ips: ext,
                    load_balancer_source_ranges: ranges,
                    ..Default::default()
                };
                spec.ports = Some(
                    ports
                        .into_iter()
                        .map(|(name, proto, port, np)| core::ServicePort {
                            name,
                            protocol: proto,
                            port,
                            node_port: np,
                            ..Default::default()
                        })
                        .collect(),
                );
                if let Some(t) = timeout {
                    spec.session_affinity = Some("ClientIP".into());
                    spec.session_affinity_config = Some(core::SessionAffinityConfig {
                        client_ip: Some(core::ClientIPConfig {
                            timeout_seconds: Some(t),
                        }),
                    });
                }
                s.spec = Some(spec);
                s.status = ingress.map(|ips| core::ServiceStatus {
                    load_balancer: Some(core::LoadBalancerStatus {
                        ingress: Some(
                            ips.into_iter()
                                .map(|ip| core::LoadBalancerIngress {
                                    ip,
                                    ..Default::default()
                                })
                                .collect(),
                        ),
                    }),
                    ..Default::default()
                });
                s
            },
        )
}

fn junk_slice() -> impl Strategy<Value = discovery::EndpointSlice> {
    (
        prop::option::of("[a-z0-9\\-]{0,10}"),
        prop::sample::select(vec!["IPv4", "IPv6", "FQDN", "x"]),
        prop::option::of("[a-z0-9\\-]{0,10}"),
        prop::collection::vec(
            (
                prop::collection::vec(junk_string(), 0..2),
                prop::option::of(any::<bool>()),
                prop::option::of("[a-z\\-]{0,8}"),
            ),
            0..4,
        ),
        prop::collection::vec(
            (
                prop::option::of("[a-z]{0,3}"),
                prop::option::of(junk_string()),
                prop::option::of(any::<i32>()),
            ),
            0..3,
        ),
    )
        .prop_map(|(name, at, svc, eps, ports)| {
            let mut s = discovery::EndpointSlice {
                address_type: at.to_string(),
                ..Default::default()
            };
            s.metadata.name = name;
            s.metadata.namespace = Some("ns".into());
            if let Some(svc) = svc {
                s.metadata.labels = Some(
                    [("kubernetes.io/service-name".to_string(), svc)]
                        .into_iter()
                        .collect(),
                );
            }
            s.endpoints = Some(
                eps.into_iter()
                    .map(|(addresses, ready, node)| discovery::Endpoint {
                        addresses,
                        conditions: Some(discovery::EndpointConditions {
                            ready,
                            ..Default::default()
                        }),
                        node_name: node,
                        ..Default::default()
                    })
                    .collect(),
            );
            s.ports = Some(
                ports
                    .into_iter()
                    .map(|(name, protocol, port)| discovery::EndpointPort {
                        name,
                        protocol,
                        port,
                        ..Default::default()
                    })
                    .collect(),
            );
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn malformed_objects_never_panic(svcs in prop::collection::vec(junk_service(), 0..6), slices in prop::collection::vec(junk_slice(), 0..6)) {
        let (cluster, errors) = Cluster::from_objects(&svcs, &slices, None);
        for e in &errors {
            // every error names its object or document
            let msg = e.to_string();
            prop_assert!(!msg.is_empty());
            prop_assert!(msg.chars().next().unwrap().is_lowercase(), "{}", msg);
        }
        let mut cfg = config();
        cfg.families = vec!["IPv4".into(), "IPv6".into()];
        let compiled = compile(&cluster, &cfg).unwrap();
        for t in &compiled.tables {
            prop_assert!(t.validate().is_ok(), "{:?}", t.validate());
            let _ = nft_model::render::table(t);
        }
    }
}
