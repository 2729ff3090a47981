//! Scale smoke on the two-node namespace cluster (root only): 2,000 services x 5
//! endpoints programmed in node A; the last service answers on TCP and UDP and spreads
//! over its five real endpoints. See docs/conformance.md.

use std::time::{Duration, Instant};

use netns_tests::cluster::*;
use netns_tests::{bins, require_root};
use serde_json::Value;

const SERVICES: usize = 2000;

fn cluster_ip(i: usize) -> String {
    // 198.18.96.1 .. 198.18.103.250, inside the service CIDR 198.18.96.0/20
    format!("198.18.{}.{}", 96 + i / 250, 1 + i % 250)
}

#[test]
fn scale_2000_services_x_5_endpoints_last_service_answers() {
    require_root!();
    let mut c = Cluster::new(
        bins!(),
        &[
            ("a1", On::A),
            ("a2", On::A),
            ("a3", On::A),
            ("b1", On::B),
            ("b2", On::B),
            ("b3", On::B),
        ],
    );
    let real = ["a2", "a3", "b1", "b2", "b3"];
    let mut objs: Vec<Value> = Vec::with_capacity(2 * SERVICES);
    for i in 0..SERVICES {
        let name = format!("s{i}");
        objs.push(Svc::new(&name, &[&cluster_ip(i)]).to_json());
        let eps: Vec<Ep> = if i == SERVICES - 1 {
            real.iter().map(|p| Ep::ready(c.pod(p), Fam::V4)).collect()
        } else {
            // endpoints that do not exist, on node B's pod network
            (0..5)
                .map(|k| {
                    let mut e = Ep::ready(c.pod("b1"), Fam::V4);
                    e.addr = format!("198.18.2.{}", 100 + (i * 5 + k) % 150)
                        .parse()
                        .unwrap();
                    e
                })
                .collect()
        };
        objs.push(slice(&name, Fam::V4, &eps));
    }
    let t = Instant::now();
    c.start_proxy(&objs, Duration::from_secs(240));
    eprintln!(
        "{SERVICES} services x 5 endpoints programmed in {:?}",
        t.elapsed()
    );
    let listing = c.node_a.exec_ok(
        "nft",
        &["list", "set", "ip", "kube-nlproxy", "dispatch-cluster"],
    );
    let entries = listing.matches(" . 80").count();
    assert_eq!(
        entries,
        2 * SERVICES,
        "dispatch-cluster entries (TCP and UDP per service)"
    );
    let last = sa(&cluster_ip(SERVICES - 1), SERVICE_PORT);
    for proto in Proto::BOTH {
        let got = reach_all(&c.pod("a1").ns, proto, last, &real, 80);
        for o in got.values().flatten() {
            assert_eq!(o.seen(), Some(c.pod("a1").v4), "{proto:?}: {o:?}");
        }
    }
}
