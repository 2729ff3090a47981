//! Conntrack cleanup scenarios with real packets, the engine as a separate process
//! (`engine-runner`: the cleanup beside the engine, following conntrack events), on the
//! node of [`crate::engine`]. The cases of issue 36 that upstream decides: a pod shared
//! by two Services.

use std::net::UdpSocket;
use std::time::Duration;

use crate::cluster::Bins;
use crate::engine::{
    cluster_ip_service_doc, config_doc, node, node_doc, slice_doc, Family::V4, Manifest, Runner,
    UdpServer, CLUSTER_IP, CLUSTER_IP_B,
};
use crate::{scaled, wait_until, Line, Netns};

/// UDP entries whose original destination is `ip`, in the router.
pub fn entries_to(router: &Netns, ip: &str) -> usize {
    router
        .exec_ok("conntrack", &["-L", "-f", "ipv4", "-p", "udp", "-d", ip])
        .lines()
        .filter(|l| l.starts_with("udp"))
        .count()
}

/// `n` UDP flows from the client to `dst` (one socket each, from `first_port` on).
fn flows(client: &Netns, dst: &str, first_port: u16, n: u16) {
    let dst: std::net::SocketAddr = format!("{dst}:53").parse().unwrap();
    client.run(move || {
        for i in 0..n {
            let s = UdpSocket::bind((Line::CLIENT4, first_port + i)).unwrap();
            let _ = s.send_to(b"0123456789", dst);
        }
    });
}

/// Services A and B (UDP) both select the pod SERVER4:5353; 50 flows through each. A is
/// deleted: A's flows are deleted (kube-proxy 1.38, #141371) and every one of B's stays,
/// 5 s later. (The report: with the targets of before, 0 of B's 50 were left;
/// negative control: the engine telling the cleanup that the pod stopped serving on every
/// frontend, as those targets did, `B's flows: 0 of 50 left`.)
pub fn deleting_a_service_leaves_the_flows_of_another_to_the_same_pod(bins: Bins) {
    let l = node();
    let _server = UdpServer::start(&l.server, Line::SERVER4, 5353);
    let a = [cluster_ip_service_doc("a", CLUSTER_IP), slice_doc(V4, "a")];
    let b = [
        cluster_ip_service_doc("b", CLUSTER_IP_B),
        slice_doc(V4, "b"),
    ];
    let base = [config_doc(V4), node_doc(V4)];
    let all: Vec<String> = base.iter().chain(&a).chain(&b).cloned().collect();
    let m = Manifest::new(&all);
    let runner = Runner::start(bins, &l.router, &m, &[]);
    runner
        .wait_settled(scaled(Duration::from_secs(10)))
        .expect("first sync and its cleanup");
    flows(&l.client, CLUSTER_IP, 41000, 50);
    flows(&l.client, CLUSTER_IP_B, 42000, 50);
    assert!(
        wait_until(scaled(Duration::from_secs(5)), || {
            entries_to(&l.router, CLUSTER_IP) == 50 && entries_to(&l.router, CLUSTER_IP_B) == 50
        }),
        "50 flows through each: A {}, B {}",
        entries_to(&l.router, CLUSTER_IP),
        entries_to(&l.router, CLUSTER_IP_B)
    );
    let without_a: Vec<String> = base.iter().chain(&b).cloned().collect();
    m.write(&without_a);
    assert!(
        wait_until(scaled(Duration::from_secs(5)), || entries_to(
            &l.router, CLUSTER_IP
        ) == 0),
        "A's flows are deleted with it: {} left",
        entries_to(&l.router, CLUSTER_IP)
    );
    std::thread::sleep(scaled(Duration::from_secs(5)));
    assert_eq!(
        entries_to(&l.router, CLUSTER_IP_B),
        50,
        "B's flows: all 50 stay (lines: {:?})",
        runner.lines()
    );
}
