//! Upstream kube-proxy's packet-flow tests (every test of `pkg/proxy/iptables/proxier_test.go`
//! and `pkg/proxy/nftables/proxier_test.go` that calls `runPacketFlowTests`), translated
//! case by case and run with real packets against the daemon in the matching mode
//! (`mode: iptables` for the iptables proxier's, `mode: nftables` for the nftables
//! proxier's). The mapping of upstream's addresses and expectations onto the two-node
//! cluster is in `netns_tests::upstream_flows`; docs/conformance.md lists the results,
//! docs/migration.md the disagreements kept (the `KNOWN` lists below, which must still
//! disagree: a fixed one fails the test until it is taken off the list).
//!
//! Upstream versions read: the iptables proxier's test file with `nodeIPs []string`
//! packet-flow helpers and localhost NodePorts behind nfacct (kubernetes ~1.31/1.32), the
//! nftables proxier's after PR #132456 (filter chains after DNAT; commit 81810de6).

use netns_tests::upstream_flows::*;
use netns_tests::{bins, require_root};

use Mode::{Iptables, Nftables};

const NODE_IP: &str = "192.168.0.2"; // testNodeIP
const NODE_IP_ALT: &str = "192.168.1.2"; // testNodeIPAlt
const EXT_IP: &str = "192.168.99.11"; // testExternalIP (one of the node's IPs)
const CLIENT: &str = "203.0.113.2"; // testExternalClient
const CLIENT_BLOCKED: &str = "203.0.113.130"; // testExternalClientBlocked
const NODE_IP6: &str = "2001:db8::1"; // testNodeIPv6
const NODE_IP6_ALT: &str = "2001:db8:1::2"; // testNodeIPv6Alt

/// Disagreements kept, with their reasons (docs/migration.md, "Upstream's packet-flow
/// tests we differ from").
const KNOWN: &[Known] = &[
    Known {
        test: "iptables TestClusterIPGeneral",
        case: "TCP-only port does not match UDP traffic",
        reason: "a ClusterIP's unused port is rejected in both modes (upstream's nftables proxier rejects it too)",
    },
    Known {
        test: "iptables TestClusterIPGeneral",
        case: "svc1 does not accept svc2's ports",
        reason: "a ClusterIP's unused port is rejected in both modes (upstream's nftables proxier rejects it too)",
    },
    Known {
        test: "iptables TestHealthCheckNodePort",
        case: "firewall accepts HealthCheckNodePort",
        reason: "upstream's ACCEPT is a filter rule for hosts whose INPUT drops; with nodePortAddresses 127.0.0.0/8 the health server listens on 127.0.0.1 only, upstream's too, so the node IP refuses",
    },
];

fn run_all(mode: Mode, scenarios: Vec<Scenario>) {
    require_root!();
    for mut s in scenarios {
        s.test = format!("{} {}", mode.name(), s.test);
        let Some(results) = run(bins!(), &s) else {
            return;
        };
        assert_results(&results, KNOWN);
    }
}

fn p80(ns: &'static str, name: &'static str) -> USlice {
    slice_of(ns, name, vec![], &[("p80", 80, "TCP")])
}

fn with(mut s: USlice, eps: Vec<UEp>) -> USlice {
    s.eps = eps;
    s
}

// ---- TestTracePacket (iptables; the static rules are TestOverallIPTablesRules') ----

fn overall_services() -> (Vec<USvc>, Vec<USlice>) {
    let svcs = vec![
        USvc::new("ns1", "svc1", "172.30.0.41").port("p80", 80, "TCP"),
        USvc::new("ns2", "svc2", "172.30.0.42")
            .type_("LoadBalancer")
            .etp_local()
            .node_port("p80", 80, "TCP", 3001)
            .lb(&["1.2.3.4"])
            .external(&["192.168.99.22"])
            .hc(30000),
        USvc::new("ns3", "svc3", "172.30.0.43")
            .type_("NodePort")
            .node_port("p80", 80, "TCP", 3003),
        USvc::new("ns4", "svc4", "172.30.0.44")
            .type_("NodePort")
            .external(&["192.168.99.33"])
            .port("p80", 80, "TCP"),
        USvc::new("ns5", "svc5", "172.30.0.45")
            .type_("LoadBalancer")
            .node_port("p80", 80, "TCP", 3002)
            .lb(&["5.6.7.8"])
            .hc(30000)
            .ranges(&[" 203.0.113.0/25"])
            .affinity(10800),
        USvc::new("ns6", "svc6", "172.30.0.46").port("p80", 80, "TCP"),
    ];
    let slices = vec![
        with(p80("ns1", "svc1"), vec![ep("10.180.0.1", None)]),
        with(p80("ns2", "svc2"), vec![ep("10.180.0.2", None)]),
        with(p80("ns3", "svc3"), vec![ep("10.180.0.3", None)]),
        with(
            p80("ns4", "svc4"),
            vec![ep("10.180.0.4", None), ep("10.180.0.5", Some(TEST_NODE))],
        ),
        with(p80("ns5", "svc5"), vec![ep("10.180.0.3", None)]),
    ];
    (svcs, slices)
}

#[test]
fn iptables_trace_packet() {
    let (svcs, slices) = overall_services();
    run_all(
        Iptables,
        vec![Scenario::new(Iptables, "TestTracePacket").step(
            svcs,
            slices,
            vec![
                flow("no match", "10.0.0.2", "10.0.0.3", 80, "", false),
                flow(
                    "single endpoint",
                    "10.0.0.2",
                    "172.30.0.41",
                    80,
                    "10.180.0.1:80",
                    false,
                ),
                flow(
                    "multiple endpoints",
                    "10.0.0.2",
                    "172.30.0.44",
                    80,
                    "10.180.0.4:80, 10.180.0.5:80",
                    false,
                ),
                flow(
                    "LOCAL, KUBE-MARK-MASQ",
                    NODE_IP,
                    "192.168.99.22",
                    80,
                    "10.180.0.2:80",
                    true,
                ),
                flow("DROP", CLIENT, "192.168.99.22", 80, "DROP", false),
                flow(
                    "ACCEPT (NodePortHealthCheck)",
                    NODE_IP,
                    NODE_IP,
                    30000,
                    "ACCEPT",
                    false,
                ),
                flow("REJECT", "10.0.0.2", "172.30.0.46", 80, "REJECT", false),
            ],
        )],
    );
}

// ---- TestNoEndpointsReject ----

fn no_endpoints_reject(mode: Mode) -> Vec<Scenario> {
    let svc = USvc::new("ns1", "svc1", "172.30.0.41")
        .type_("LoadBalancer")
        .external(&[EXT_IP])
        .node_port("p80", 80, "TCP", 3001)
        .lb(&["1.2.3.4"]);
    vec![Scenario::new(mode, "TestNoEndpointsReject").step(
        vec![svc],
        vec![],
        vec![
            flow(
                "pod to cluster IP with no endpoints",
                "10.0.0.2",
                "172.30.0.41",
                80,
                "REJECT",
                false,
            ),
            flow(
                "external to external IP with no endpoints",
                CLIENT,
                EXT_IP,
                80,
                "REJECT",
                false,
            ),
            flow(
                "pod to NodePort with no endpoints",
                "10.0.0.2",
                NODE_IP,
                3001,
                "REJECT",
                false,
            ),
            flow(
                "external to NodePort with no endpoints",
                CLIENT,
                NODE_IP,
                3001,
                "REJECT",
                false,
            ),
            flow(
                "pod to LoadBalancer IP with no endpoints",
                "10.0.0.2",
                "1.2.3.4",
                80,
                "REJECT",
                false,
            ),
            flow(
                "external to LoadBalancer IP with no endpoints",
                CLIENT,
                "1.2.3.4",
                80,
                "REJECT",
                false,
            ),
        ],
    )]
}

#[test]
fn iptables_no_endpoints_reject() {
    run_all(Iptables, no_endpoints_reject(Iptables));
}

#[test]
fn nftables_no_endpoints_reject() {
    run_all(Nftables, no_endpoints_reject(Nftables));
}

// ---- TestClusterIPGeneral ----

fn cluster_ip_general(mode: Mode) -> Vec<Scenario> {
    let svcs = vec![
        USvc::new("ns1", "svc1", "172.30.0.41").port("http", 80, "TCP"),
        USvc::new("ns2", "svc2", "172.30.0.42")
            .port("http", 80, "TCP")
            .port("https", 443, "TCP")
            .port("dns-udp", 53, "UDP")
            .port("dns-tcp", 53, "TCP")
            .port("dns-sctp", 53, "SCTP"),
    ];
    let slices = vec![
        slice_of(
            "ns1",
            "svc1",
            vec![ep("10.180.0.1", Some(TEST_NODE))],
            &[("http", 80, "TCP")],
        ),
        slice_of(
            "ns2",
            "svc2",
            vec![
                ep("10.180.0.1", Some(TEST_NODE)),
                ep("10.180.2.1", Some("node2")),
            ],
            &[
                ("http", 80, "TCP"),
                ("https", 8443, "TCP"),
                ("dns-udp", 53, "UDP"),
                ("dns-tcp", 5353, "TCP"),
                ("dns-sctp", 53, "SCTP"),
            ],
        ),
    ];
    let unused = if mode == Iptables { "" } else { "REJECT" };
    let mut flows = vec![
        flow(
            "simple clusterIP",
            "10.180.0.2",
            "172.30.0.41",
            80,
            "10.180.0.1:80",
            false,
        ),
        flow(
            "hairpin to cluster IP",
            "10.180.0.1",
            "172.30.0.41",
            80,
            "10.180.0.1:80",
            true,
        ),
        flow(
            "clusterIP with multiple endpoints",
            "10.180.0.2",
            "172.30.0.42",
            80,
            "10.180.0.1:80, 10.180.2.1:80",
            false,
        ),
        flow(
            "clusterIP with TargetPort",
            "10.180.0.2",
            "172.30.0.42",
            443,
            "10.180.0.1:8443, 10.180.2.1:8443",
            false,
        ),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (TCP)",
            "10.180.0.2",
            "172.30.0.42",
            53,
            "10.180.0.1:5353, 10.180.2.1:5353",
            false,
        ),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (UDP)",
            "10.180.0.2",
            "172.30.0.42",
            53,
            "10.180.0.1:53, 10.180.2.1:53",
            false,
        )
        .udp(),
        flow(
            "clusterIP with TCP, UDP, and SCTP on same port (SCTP)",
            "10.180.0.2",
            "172.30.0.42",
            53,
            "10.180.0.1:53, 10.180.2.1:53",
            false,
        )
        .sctp(),
        flow(
            "TCP-only port does not match UDP traffic",
            "10.180.0.2",
            "172.30.0.42",
            80,
            unused,
            false,
        )
        .udp(),
        flow(
            "svc1 does not accept svc2's ports",
            "10.180.0.2",
            "172.30.0.41",
            443,
            unused,
            false,
        ),
    ];
    if mode == Nftables {
        flows.push(flow(
            "packet to unallocated cluster ip",
            "10.180.0.2",
            "172.30.0.50",
            80,
            "DROP",
            false,
        ));
    }
    vec![Scenario::new(mode, "TestClusterIPGeneral").step(svcs, slices, flows)]
}

#[test]
fn iptables_cluster_ip_general() {
    run_all(Iptables, cluster_ip_general(Iptables));
}

#[test]
fn nftables_cluster_ip_general() {
    run_all(Nftables, cluster_ip_general(Nftables));
}

// ---- TestLoadBalancer ----

fn load_balancer(mode: Mode) -> Vec<Scenario> {
    let svc = USvc::new("ns1", "svc1", "172.30.0.41")
        .type_("LoadBalancer")
        .node_port("p80", 80, "TCP", 3001)
        .lb(&["1.2.3.4", "5.6.7.8"])
        .ranges(&["192.168.0.0/24", " 203.0.113.0/25"]);
    let ep_out = "10.180.0.1:80";
    let mut s = Scenario::new(mode, "TestLoadBalancer").step(
        vec![svc],
        vec![with(p80("ns1", "svc1"), vec![ep("10.180.0.1", None)])],
        vec![
            flow(
                "pod to cluster IP",
                "10.0.0.2",
                "172.30.0.41",
                80,
                ep_out,
                false,
            ),
            flow("external to nodePort", CLIENT, NODE_IP, 3001, ep_out, true),
            flow(
                "nodePort bypasses LoadBalancerSourceRanges",
                CLIENT_BLOCKED,
                NODE_IP,
                3001,
                ep_out,
                true,
            ),
            flow(
                "accepted external to LB1",
                CLIENT,
                "1.2.3.4",
                80,
                ep_out,
                true,
            ),
            flow(
                "accepted external to LB2",
                CLIENT,
                "5.6.7.8",
                80,
                ep_out,
                true,
            ),
            flow(
                "blocked external to LB1",
                CLIENT_BLOCKED,
                "1.2.3.4",
                80,
                "DROP",
                false,
            ),
            flow(
                "blocked external to LB2",
                CLIENT_BLOCKED,
                "5.6.7.8",
                80,
                "DROP",
                false,
            ),
            flow(
                "pod to LB1 (blocked by LoadBalancerSourceRanges)",
                "10.0.0.2",
                "1.2.3.4",
                80,
                "DROP",
                false,
            ),
            flow(
                "pod to LB2 (blocked by LoadBalancerSourceRanges)",
                "10.0.0.2",
                "5.6.7.8",
                80,
                "DROP",
                false,
            ),
            flow(
                "node to LB1 (allowed by LoadBalancerSourceRanges)",
                NODE_IP,
                "1.2.3.4",
                80,
                ep_out,
                true,
            ),
            flow(
                "node to LB2 (allowed by LoadBalancerSourceRanges)",
                NODE_IP,
                "5.6.7.8",
                80,
                ep_out,
                true,
            ),
            flow(
                "same node to LB1, SNATted to LB1 (implicitly allowed)",
                "1.2.3.4",
                "1.2.3.4",
                80,
                ep_out,
                true,
            ),
            flow(
                "same node to LB2, SNATted to LB2 (implicitly allowed)",
                "5.6.7.8",
                "5.6.7.8",
                80,
                ep_out,
                true,
            ),
        ],
    );
    // "connect from a node to a LB IP ... SNATted to the LB IP": the VIPs are the node's
    s.local = vec!["1.2.3.4", "5.6.7.8"];
    vec![s]
}

#[test]
fn iptables_load_balancer() {
    run_all(Iptables, load_balancer(Iptables));
}

#[test]
fn nftables_load_balancer() {
    run_all(Nftables, load_balancer(Nftables));
}

// ---- TestNodePorts ----

struct NodePortCase {
    name: &'static str,
    v6: bool,
    localhost: bool,
    addresses: Option<Vec<&'static str>>,
    alt: bool,
}

fn node_ports(mode: Mode) -> Vec<Scenario> {
    let cases = match mode {
        Iptables => vec![
            NodePortCase {
                name: "ipv4, localhost-nodeports enabled",
                v6: false,
                localhost: true,
                addresses: None,
                alt: true,
            },
            NodePortCase {
                name: "ipv4, localhost-nodeports disabled",
                v6: false,
                localhost: false,
                addresses: None,
                alt: true,
            },
            NodePortCase {
                name: "ipv4, localhost-nodeports disabled, localhost in nodeport-addresses",
                v6: false,
                localhost: false,
                addresses: Some(vec!["192.168.0.0/24", "127.0.0.1/32"]),
                alt: false,
            },
            NodePortCase {
                name: "ipv4, localhost-nodeports enabled, multiple nodeport-addresses",
                v6: false,
                localhost: false,
                addresses: Some(vec!["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"]),
                alt: true,
            },
            NodePortCase {
                name: "ipv6, localhost-nodeports enabled",
                v6: true,
                localhost: true,
                addresses: None,
                alt: true,
            },
            NodePortCase {
                name: "ipv6, localhost-nodeports disabled",
                v6: true,
                localhost: false,
                addresses: None,
                alt: true,
            },
            NodePortCase {
                name: "ipv6, localhost-nodeports disabled, multiple nodeport-addresses",
                v6: true,
                localhost: false,
                addresses: Some(vec!["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"]),
                alt: false,
            },
        ],
        Nftables => vec![
            NodePortCase {
                name: "ipv4",
                v6: false,
                localhost: false,
                addresses: None,
                alt: false,
            },
            NodePortCase {
                name: "ipv4, multiple nodeport-addresses",
                v6: false,
                localhost: false,
                addresses: Some(vec!["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"]),
                alt: true,
            },
            NodePortCase {
                name: "ipv6",
                v6: true,
                localhost: false,
                addresses: None,
                alt: false,
            },
            NodePortCase {
                name: "ipv6, multiple nodeport-addresses",
                v6: true,
                localhost: false,
                addresses: Some(vec![
                    "192.168.0.0/24",
                    "192.168.1.0/24",
                    "2001:db8::/64",
                    "2001:db8:1::2/128",
                ]),
                alt: true,
            },
        ],
    };
    cases
        .into_iter()
        .map(|c| {
            let (svc_ip, ep1, ep2, pod, client, node, alt, lo) = if c.v6 {
                (
                    "fd00:172:30::41",
                    "fd00:10:180::1",
                    "fd00:10:180::2:1",
                    "fd00:10::2",
                    "2600:5200::1",
                    NODE_IP6,
                    NODE_IP6_ALT,
                    "::1",
                )
            } else {
                (
                    "172.30.0.41",
                    "10.180.0.1",
                    "10.180.2.1",
                    "10.0.0.2",
                    CLIENT,
                    NODE_IP,
                    NODE_IP_ALT,
                    "127.0.0.1",
                )
            };
            let output: &'static str = if c.v6 {
                "[fd00:10:180::1]:80, [fd00:10:180::2:1]:80"
            } else {
                "10.180.0.1:80, 10.180.2.1:80"
            };
            let svc = USvc::new("ns1", "svc1", svc_ip)
                .type_("NodePort")
                .node_port("p80", 80, "TCP", 3001);
            let sl = with(
                p80("ns1", "svc1"),
                vec![ep(ep1, None), ep(ep2, Some(TEST_NODE))],
            );
            let mut flows = vec![
                flow("pod to cluster IP", pod, svc_ip, 80, output, false),
                flow("external to nodePort", client, node, 3001, output, true),
                flow("node to nodePort", node, node, 3001, output, true),
            ];
            if mode == Iptables {
                flows.push(if !c.v6 && c.localhost {
                    flow(
                        "localhost to nodePort gets masqueraded",
                        lo,
                        lo,
                        3001,
                        output,
                        true,
                    )
                } else {
                    flow("localhost to nodePort is ignored", lo, lo, 3001, "", false)
                });
            }
            flows.push(if c.alt {
                flow(
                    "external to nodePort on secondary IP",
                    client,
                    alt,
                    3001,
                    output,
                    true,
                )
            } else {
                flow(
                    "secondary nodeIP ignores NodePorts",
                    client,
                    alt,
                    3001,
                    "",
                    false,
                )
            });
            let mut s = Scenario::new(mode, &format!("TestNodePorts/{}", c.name)).step(
                vec![svc],
                vec![sl],
                flows,
            );
            s.localhost_node_ports = c.localhost;
            s.node_port_addresses = c.addresses;
            s
        })
        .collect()
}

#[test]
fn iptables_node_ports() {
    run_all(Iptables, node_ports(Iptables));
}

#[test]
fn nftables_node_ports() {
    run_all(Nftables, node_ports(Nftables));
}

// ---- TestHealthCheckNodePort (iptables) ----

#[test]
fn iptables_health_check_node_port() {
    let svc = USvc::new("ns1", "svc1", "172.30.0.42")
        .type_("LoadBalancer")
        .node_port("p80", 80, "TCP", 3001)
        .hc(30000)
        .etp_local();
    let mut s = Scenario::new(Iptables, "TestHealthCheckNodePort")
        .step(
            vec![svc],
            vec![],
            vec![flow(
                "firewall accepts HealthCheckNodePort",
                CLIENT,
                NODE_IP,
                30000,
                "ACCEPT",
                false,
            )],
        )
        .step(
            vec![],
            vec![],
            vec![flow(
                "HealthCheckNodePort no longer has any rule",
                CLIENT,
                NODE_IP,
                30000,
                "",
                false,
            )],
        );
    s.node_port_addresses = Some(vec!["127.0.0.0/8"]);
    run_all(Iptables, vec![s]);
}

// ---- TestExternalTrafficPolicyLocal / Cluster ----

fn etp(mode: Mode, local: bool) -> Vec<Scenario> {
    let mut svc = USvc::new("ns1", "svc1", "172.30.0.41")
        .type_("LoadBalancer")
        .external(&[EXT_IP])
        .node_port("p80", 80, "TCP", 3001)
        .lb(&["1.2.3.4"]);
    if local {
        svc = svc.etp_local().hc(30000);
    }
    let sl = with(
        p80("ns1", "svc1"),
        vec![ep("10.180.0.1", None), ep("10.180.2.1", Some(TEST_NODE))],
    );
    let both = "10.180.0.1:80, 10.180.2.1:80";
    let flows = if local {
        vec![
            flow(
                "pod to cluster IP hits both endpoints, unmasqueraded",
                "10.0.0.2",
                "172.30.0.41",
                80,
                both,
                false,
            ),
            flow(
                "pod to external IP hits both endpoints, unmasqueraded",
                "10.0.0.2",
                EXT_IP,
                80,
                both,
                false,
            ),
            flow(
                "external to external IP hits only local endpoint, unmasqueraded",
                CLIENT,
                EXT_IP,
                80,
                "10.180.2.1:80",
                false,
            ),
            flow(
                "pod to LB IP hits only both endpoints, unmasqueraded",
                "10.0.0.2",
                "1.2.3.4",
                80,
                both,
                false,
            ),
            flow(
                "external to LB IP hits only local endpoint, unmasqueraded",
                CLIENT,
                "1.2.3.4",
                80,
                "10.180.2.1:80",
                false,
            ),
            flow(
                "pod to NodePort hits both endpoints, unmasqueraded",
                "10.0.0.2",
                NODE_IP,
                3001,
                both,
                false,
            ),
            flow(
                "external to NodePort hits only local endpoint, unmasqueraded",
                CLIENT,
                NODE_IP,
                3001,
                "10.180.2.1:80",
                false,
            ),
        ]
    } else {
        vec![
            flow(
                "pod to cluster IP hits both endpoints, unmasqueraded",
                "10.0.0.2",
                "172.30.0.41",
                80,
                both,
                false,
            ),
            flow(
                "pod to external IP hits both endpoints, masqueraded",
                "10.0.0.2",
                EXT_IP,
                80,
                both,
                true,
            ),
            flow(
                "external to external IP hits both endpoints, masqueraded",
                CLIENT,
                EXT_IP,
                80,
                both,
                true,
            ),
            flow(
                "pod to LB IP hits both endpoints, masqueraded",
                "10.0.0.2",
                "1.2.3.4",
                80,
                both,
                true,
            ),
            flow(
                "external to LB IP hits both endpoints, masqueraded",
                CLIENT,
                "1.2.3.4",
                80,
                both,
                true,
            ),
            flow(
                "pod to NodePort hits both endpoints, masqueraded",
                "10.0.0.2",
                NODE_IP,
                3001,
                both,
                true,
            ),
            flow(
                "external to NodePort hits both endpoints, masqueraded",
                CLIENT,
                NODE_IP,
                3001,
                both,
                true,
            ),
        ]
    };
    let name = if local {
        "TestExternalTrafficPolicyLocal"
    } else {
        "TestExternalTrafficPolicyCluster"
    };
    vec![Scenario::new(mode, name).step(vec![svc], vec![sl], flows)]
}

#[test]
fn iptables_external_traffic_policy_local() {
    run_all(Iptables, etp(Iptables, true));
}

#[test]
fn nftables_external_traffic_policy_local() {
    run_all(Nftables, etp(Nftables, true));
}

#[test]
fn iptables_external_traffic_policy_cluster() {
    run_all(Iptables, etp(Iptables, false));
}

#[test]
fn nftables_external_traffic_policy_cluster() {
    run_all(Nftables, etp(Nftables, false));
}

// ---- TestInternalTrafficPolicy (its subtests as steps of one cluster) ----

fn itp(mode: Mode) -> Vec<Scenario> {
    /// (subtest, internalTrafficPolicy Local, endpoints (ip, node), pod to ClusterIP)
    type Case = (
        &'static str,
        bool,
        Vec<(&'static str, &'static str)>,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "internalTrafficPolicy is cluster",
            false,
            vec![
                ("10.0.1.1", TEST_NODE),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            "10.0.1.1:80, 10.0.1.2:80, 10.0.1.3:80",
        ),
        (
            "internalTrafficPolicy is local and there is one local endpoint",
            true,
            vec![
                ("10.0.1.1", TEST_NODE),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            "10.0.1.1:80",
        ),
        (
            "internalTrafficPolicy is local and there are multiple local endpoints",
            true,
            vec![
                ("10.0.1.1", TEST_NODE),
                ("10.0.1.2", TEST_NODE),
                ("10.0.1.3", "node2"),
            ],
            "10.0.1.1:80, 10.0.1.2:80",
        ),
        (
            "internalTrafficPolicy is local and there are no local endpoints",
            true,
            vec![
                ("10.0.1.1", "node0"),
                ("10.0.1.2", "node1"),
                ("10.0.1.3", "node2"),
            ],
            "DROP",
        ),
    ];
    let mut s = Scenario::new(mode, "TestInternalTrafficPolicy");
    for (name, local, eps, out) in cases {
        let mut svc = USvc::new("ns1", "svc1", "172.30.1.1").port("", 80, "TCP");
        if local {
            svc = svc.itp_local();
        }
        let eps = eps
            .into_iter()
            .map(|(ip, node)| UEp {
                ready: Some(true),
                ..ep(ip, Some(node))
            })
            .collect();
        let sl = slice_of("ns1", "svc1", eps, &[("", 80, "TCP")]);
        s = s
            .step(
                vec![svc.clone()],
                vec![sl],
                vec![flow(
                    &format!("{name}: pod to ClusterIP"),
                    "10.0.0.2",
                    "172.30.1.1",
                    80,
                    out,
                    false,
                )],
            )
            .step(
                vec![svc],
                vec![],
                vec![flow(
                    &format!("{name}: endpoints deleted"),
                    "10.0.0.2",
                    "172.30.1.1",
                    80,
                    "REJECT",
                    false,
                )],
            );
    }
    vec![s]
}

#[test]
fn iptables_internal_traffic_policy() {
    run_all(Iptables, itp(Iptables));
}

#[test]
fn nftables_internal_traffic_policy() {
    run_all(Nftables, itp(Nftables));
}

// ---- TestTerminatingEndpointsTrafficPolicyLocal / Cluster ----

fn terminating(mode: Mode, local: bool) -> Vec<Scenario> {
    let mut svc = USvc::new("ns1", "svc1", "172.30.1.1")
        .type_("LoadBalancer")
        .port("", 80, "TCP")
        .lb(&["1.2.3.4"])
        .hc(30000);
    if local {
        svc = svc.etp_local();
    }
    let other = if local { "node-1" } else { "another-node" };
    let c = ep_cond;
    // (subtest, endpoints, pod to ClusterIP, external to LB, masq of external)
    let cases: Vec<(&str, Vec<UEp>, &str, &str)> = if local {
        vec![
            (
                "ready endpoints exist",
                vec![
                    c("10.0.1.1", TEST_NODE, true, true, false),
                    c("10.0.1.2", TEST_NODE, true, true, false),
                    c("10.0.1.3", TEST_NODE, false, true, true),
                    c("10.0.1.4", TEST_NODE, false, false, true),
                    c("10.0.1.5", "node-1", true, true, false),
                ],
                "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80",
                "10.0.1.1:80, 10.0.1.2:80",
            ),
            (
                "only terminating endpoints exist",
                vec![
                    c("10.0.1.2", TEST_NODE, false, true, true),
                    c("10.0.1.3", TEST_NODE, false, true, true),
                    c("10.0.1.4", TEST_NODE, false, false, true),
                    c("10.0.1.5", "node-1", true, true, false),
                ],
                "10.0.1.5:80",
                "10.0.1.2:80, 10.0.1.3:80",
            ),
            (
                "terminating endpoints on remote node",
                vec![c("10.0.1.5", "node-1", false, true, true)],
                "10.0.1.5:80",
                "DROP",
            ),
            (
                "no usable endpoints on any node",
                vec![
                    c("10.0.1.5", TEST_NODE, false, false, true),
                    c("10.0.1.5", "node-1", false, false, true),
                ],
                "REJECT",
                "REJECT",
            ),
        ]
    } else {
        vec![
            (
                "ready endpoints exist",
                vec![
                    c("10.0.1.1", TEST_NODE, true, true, false),
                    c("10.0.1.2", TEST_NODE, true, true, false),
                    c("10.0.1.3", other, false, true, true),
                    c("10.0.1.4", other, false, false, true),
                    c("10.0.1.5", other, true, true, false),
                ],
                "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80",
                "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80",
            ),
            (
                "only terminating endpoints exist",
                vec![
                    c("10.0.1.2", TEST_NODE, false, true, true),
                    c("10.0.1.3", TEST_NODE, false, true, true),
                    c("10.0.1.4", other, false, false, true),
                    c("10.0.1.5", other, false, true, true),
                ],
                "10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80",
                "10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80",
            ),
            (
                "terminating endpoints on remote node",
                vec![c("10.0.1.5", "node-1", false, true, true)],
                "10.0.1.5:80",
                "10.0.1.5:80",
            ),
            (
                "no usable endpoints on any node",
                vec![
                    c("10.0.1.5", TEST_NODE, false, false, true),
                    c("10.0.1.5", "node-1", false, false, true),
                ],
                "REJECT",
                "REJECT",
            ),
        ]
    };
    let name = if local {
        "TestTerminatingEndpointsTrafficPolicyLocal"
    } else {
        "TestTerminatingEndpointsTrafficPolicyCluster"
    };
    let mut s = Scenario::new(mode, name);
    for (sub, eps, to_cip, to_lb) in cases {
        let lb_masq = !local && to_lb.contains(':');
        let sl = slice_of("ns1", "svc1", eps, &[("", 80, "TCP")]);
        s = s
            .step(
                vec![svc.clone()],
                vec![sl],
                vec![
                    flow(
                        &format!("{sub}: pod to clusterIP"),
                        "10.0.0.2",
                        "172.30.1.1",
                        80,
                        to_cip,
                        false,
                    ),
                    flow(
                        &format!("{sub}: external to LB"),
                        CLIENT,
                        "1.2.3.4",
                        80,
                        to_lb,
                        lb_masq,
                    ),
                ],
            )
            .step(
                vec![svc.clone()],
                vec![],
                vec![
                    flow(
                        &format!("{sub}: pod to clusterIP after endpoints deleted"),
                        "10.0.0.2",
                        "172.30.1.1",
                        80,
                        "REJECT",
                        false,
                    ),
                    flow(
                        &format!("{sub}: external to LB after endpoints deleted"),
                        CLIENT,
                        "1.2.3.4",
                        80,
                        "REJECT",
                        false,
                    ),
                ],
            );
    }
    vec![s]
}

#[test]
fn iptables_terminating_endpoints_traffic_policy_local() {
    run_all(Iptables, terminating(Iptables, true));
}

#[test]
fn nftables_terminating_endpoints_traffic_policy_local() {
    run_all(Nftables, terminating(Nftables, true));
}

#[test]
fn iptables_terminating_endpoints_traffic_policy_cluster() {
    run_all(Iptables, terminating(Iptables, false));
}

#[test]
fn nftables_terminating_endpoints_traffic_policy_cluster() {
    run_all(Nftables, terminating(Nftables, false));
}

// ---- TestInternalExternalMasquerade ----

fn internal_external_masquerade(mode: Mode) -> Vec<Scenario> {
    let svcs = vec![
        USvc::new("ns1", "svc1", "172.30.0.41")
            .type_("LoadBalancer")
            .node_port("p80", 80, "TCP", 3001)
            .hc(30001)
            .lb(&["1.2.3.4"]),
        USvc::new("ns2", "svc2", "172.30.0.42")
            .type_("LoadBalancer")
            .node_port("p80", 80, "TCP", 3002)
            .hc(30002)
            .etp_local()
            .lb(&["5.6.7.8"]),
        USvc::new("ns3", "svc3", "172.30.0.43")
            .type_("LoadBalancer")
            .node_port("p80", 80, "TCP", 3003)
            .hc(30003)
            .itp_local()
            .lb(&["9.10.11.12"]),
    ];
    let slices = vec![
        with(
            p80("ns1", "svc1"),
            vec![
                ep("10.180.0.1", Some(TEST_NODE)),
                ep("10.180.1.1", Some("remote")),
            ],
        ),
        with(
            p80("ns2", "svc2"),
            vec![
                ep("10.180.0.2", Some(TEST_NODE)),
                ep("10.180.1.2", Some("remote")),
            ],
        ),
        with(
            p80("ns3", "svc3"),
            vec![
                ep("10.180.0.3", Some(TEST_NODE)),
                ep("10.180.1.3", Some("remote")),
            ],
        ),
    ];
    let s1 = "10.180.0.1:80, 10.180.1.1:80";
    let s2 = "10.180.0.2:80, 10.180.1.2:80";
    let s3 = "10.180.0.3:80, 10.180.1.3:80";
    let lo = "127.0.0.1";
    let mut base = vec![
        flow("pod to ClusterIP", "10.0.0.2", "172.30.0.41", 80, s1, false),
        flow("pod to NodePort", "10.0.0.2", NODE_IP, 3001, s1, true),
        flow("pod to LB", "10.0.0.2", "1.2.3.4", 80, s1, true),
        flow("node to ClusterIP", NODE_IP, "172.30.0.41", 80, s1, true),
        flow("node to NodePort", NODE_IP, NODE_IP, 3001, s1, true),
        flow("localhost to NodePort", lo, lo, 3001, s1, true),
        flow("node to LB", NODE_IP, "1.2.3.4", 80, s1, true),
        flow("external to ClusterIP", CLIENT, "172.30.0.41", 80, s1, true),
        flow("external to NodePort", CLIENT, NODE_IP, 3001, s1, true),
        flow("external to LB", CLIENT, "1.2.3.4", 80, s1, true),
        flow(
            "pod to ClusterIP with eTP:Local",
            "10.0.0.2",
            "172.30.0.42",
            80,
            s2,
            false,
        ),
        flow(
            "pod to NodePort with eTP:Local",
            "10.0.0.2",
            NODE_IP,
            3002,
            s2,
            false,
        ),
        flow(
            "pod to LB with eTP:Local",
            "10.0.0.2",
            "5.6.7.8",
            80,
            s2,
            false,
        ),
        flow(
            "node to ClusterIP with eTP:Local",
            NODE_IP,
            "172.30.0.42",
            80,
            s2,
            true,
        ),
        // upstream's case targets svc1's NodePort (3001), not svc2's
        flow(
            "node to NodePort with eTP:Local",
            NODE_IP,
            NODE_IP,
            3001,
            s1,
            true,
        ),
        flow(
            "localhost to NodePort with eTP:Local",
            lo,
            lo,
            3002,
            s2,
            true,
        ),
        flow(
            "node to LB with eTP:Local",
            NODE_IP,
            "5.6.7.8",
            80,
            s2,
            true,
        ),
        flow(
            "external to ClusterIP with eTP:Local",
            CLIENT,
            "172.30.0.42",
            80,
            s2,
            true,
        ),
        flow(
            "external to NodePort with eTP:Local",
            CLIENT,
            NODE_IP,
            3002,
            "10.180.0.2:80",
            false,
        ),
        flow(
            "external to LB with eTP:Local",
            CLIENT,
            "5.6.7.8",
            80,
            "10.180.0.2:80",
            false,
        ),
        flow(
            "pod to ClusterIP with iTP:Local",
            "10.0.0.2",
            "172.30.0.43",
            80,
            "10.180.0.3:80",
            false,
        ),
        flow(
            "pod to NodePort with iTP:Local",
            "10.0.0.2",
            NODE_IP,
            3003,
            s3,
            true,
        ),
        flow(
            "pod to LB with iTP:Local",
            "10.0.0.2",
            "9.10.11.12",
            80,
            s3,
            true,
        ),
        flow(
            "node to ClusterIP with iTP:Local",
            NODE_IP,
            "172.30.0.43",
            80,
            "10.180.0.3:80",
            true,
        ),
        flow(
            "node to NodePort with iTP:Local",
            NODE_IP,
            NODE_IP,
            3003,
            s3,
            true,
        ),
        flow(
            "localhost to NodePort with iTP:Local",
            lo,
            lo,
            3003,
            s3,
            true,
        ),
        flow(
            "node to LB with iTP:Local",
            NODE_IP,
            "9.10.11.12",
            80,
            s3,
            true,
        ),
        flow(
            "external to ClusterIP with iTP:Local",
            CLIENT,
            "172.30.0.43",
            80,
            "10.180.0.3:80",
            true,
        ),
        flow(
            "external to NodePort with iTP:Local",
            CLIENT,
            NODE_IP,
            3003,
            s3,
            true,
        ),
        flow(
            "external to LB with iTP:Local",
            CLIENT,
            "9.10.11.12",
            80,
            s3,
            true,
        ),
    ];
    if mode == Nftables {
        // the nftables proxier's list has no localhost cases
        base.retain(|f| !f.name.starts_with("localhost"));
    }
    // (subtest, masqueradeAll, detector, overrides: case -> (output, masq))
    type Overrides = Vec<(&'static str, Option<&'static str>, Option<bool>)>;
    let no_detector: Overrides = vec![
        ("node to ClusterIP", None, Some(false)),
        ("node to ClusterIP with eTP:Local", None, Some(false)),
        ("node to ClusterIP with iTP:Local", None, Some(false)),
        ("external to ClusterIP", None, Some(false)),
        ("external to ClusterIP with eTP:Local", None, Some(false)),
        ("external to ClusterIP with iTP:Local", None, Some(false)),
        (
            "pod to NodePort with eTP:Local",
            Some("10.180.0.2:80"),
            None,
        ),
        ("pod to LB with eTP:Local", Some("10.180.0.2:80"), None),
    ];
    let masq_all: Overrides = vec![
        ("pod to ClusterIP", None, Some(true)),
        ("pod to ClusterIP with eTP:Local", None, Some(true)),
        ("pod to ClusterIP with iTP:Local", None, Some(true)),
    ];
    let mut both = masq_all.clone();
    both.extend(no_detector.iter().skip(6).cloned());
    let cases: Vec<(&str, bool, bool, Overrides)> = vec![
        ("base", false, true, vec![]),
        ("no LocalTrafficDetector", false, false, no_detector),
        ("masqueradeAll", true, true, masq_all),
        ("masqueradeAll, no LocalTrafficDetector", true, false, both),
    ];
    cases
        .into_iter()
        .map(|(sub, masq_all, detector, overrides)| {
            let flows: Vec<Flow> = base
                .iter()
                .map(|f| {
                    let mut f = f.clone();
                    if let Some((_, out, masq)) = overrides.iter().find(|o| o.0 == f.name) {
                        if let Some(o) = out {
                            f.output = o.to_string();
                        }
                        if let Some(m) = masq {
                            f.masq = *m;
                        }
                    }
                    f
                })
                .collect();
            let mut s = Scenario::new(mode, &format!("TestInternalExternalMasquerade/{sub}")).step(
                svcs.clone(),
                slices.clone(),
                flows,
            );
            s.masquerade_all = masq_all;
            s.detector = detector;
            s
        })
        .collect()
}

#[test]
fn iptables_internal_external_masquerade() {
    run_all(Iptables, internal_external_masquerade(Iptables));
}

#[test]
fn nftables_internal_external_masquerade() {
    run_all(Nftables, internal_external_masquerade(Nftables));
}
