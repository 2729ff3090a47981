//! `explain` golden tests: for each service type and a denied source, a packet's
//! explanation against a golden fixture equals `tests/explain/<case>.txt`.
//! `NLPROXY_BLESS=1 cargo test -p ruleset --test explain` rewrites the expectations.

mod common;

use ruleset::{explain, Packet};

/// (expectation name, golden fixture, packet). Pod sources come from the fixtures'
/// cluster CIDR 198.18.0.0/20 (198.18.5.9), external clients from outside it (198.18.66.9).
fn cases() -> Vec<(&'static str, &'static str, Packet)> {
    vec![
        (
            "cluster-ip",
            "cluster-ip-general",
            Packet::tcp("198.18.5.9", "198.18.100.41", 80).on("eth0"),
        ),
        (
            "cluster-ip-wrong-port",
            "cluster-ip-general",
            Packet::tcp("198.18.66.9", "198.18.100.41", 81).on("eth0"),
        ),
        (
            "cluster-ip-unallocated",
            "cluster-ip-general",
            Packet::tcp("198.18.66.9", "198.18.100.99", 80).on("eth0"),
        ),
        (
            "node-port",
            "node-ports",
            Packet::tcp("198.18.66.9", "198.18.200.1", 30080).on("eth0"),
        ),
        (
            "node-port-on-loopback",
            "node-ports",
            Packet::tcp("127.0.0.1", "127.0.0.1", 30080).from_host(),
        ),
        (
            "external-ip",
            "load-balancer",
            Packet::tcp("198.18.66.9", "198.18.251.1", 80).on("eth0"),
        ),
        (
            "load-balancer-ip",
            "load-balancer",
            Packet::tcp("198.18.66.9", "198.18.250.1", 80).on("eth0"),
        ),
        (
            "source-range-allowed",
            "lb-source-ranges",
            Packet::tcp("198.19.0.7", "198.18.250.4", 80).on("eth0"),
        ),
        (
            "source-range-denied",
            "lb-source-ranges",
            Packet::tcp("198.18.66.9", "198.18.250.4", 80).on("eth0"),
        ),
        (
            "etp-local-external",
            "etp-local",
            Packet::tcp("198.18.66.9", "198.18.250.7", 80).on("eth0"),
        ),
        (
            "no-endpoints",
            "no-endpoints-reject",
            Packet::tcp("198.18.66.9", "198.18.100.130", 80).on("eth0"),
        ),
        (
            "not-a-service",
            "cluster-ip-general",
            Packet::udp("198.18.66.9", "198.18.200.1", 53).on("eth0"),
        ),
    ]
}

#[test]
fn explain_golden() {
    let bless = std::env::var_os("NLPROXY_BLESS").is_some();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/explain");
    let mut failures = Vec::new();
    for (name, fixture, pkt) in cases() {
        let case = common::case(fixture);
        let got = explain(&case.compiled.tables, &case.local_addrs(), &pkt).to_string();
        let path = dir.join(format!("{name}.txt"));
        if bless {
            std::fs::write(&path, &got).expect("write expectation");
            continue;
        }
        let want = std::fs::read_to_string(&path).unwrap_or_default();
        if want != got {
            failures.push(format!(
                "{name}: differs (NLPROXY_BLESS=1 to accept)\n--- want\n{want}--- got\n{got}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The verdict names the reason for the cases an operator asks about most.
#[test]
fn verdicts_say_why() {
    let v = |fixture: &str, p: Packet| {
        let c = common::case(fixture);
        explain(&c.compiled.tables, &c.local_addrs(), &p).verdict
    };
    assert!(v(
        "lb-source-ranges",
        Packet::tcp("198.18.66.9", "198.18.250.4", 80).on("eth0")
    )
    .contains("outside the service's loadBalancerSourceRanges"));
    assert!(v(
        "no-endpoints-reject",
        Packet::tcp("198.18.66.9", "198.18.100.130", 80).on("eth0")
    )
    .contains("no usable endpoints"));
    assert!(v(
        "cluster-ip-general",
        Packet::tcp("198.18.66.9", "198.18.100.41", 81).on("eth0")
    )
    .contains("port that no service uses"));
    assert!(v(
        "cluster-ip-general",
        Packet::tcp("198.18.5.9", "198.18.100.41", 80).on("eth0")
    )
    .starts_with("DNAT to"));
    assert!(v(
        "cluster-ip-general",
        Packet::tcp("198.18.66.9", "198.18.100.99", 80).on("eth0")
    )
    .contains("not allocated"));
    assert!(v(
        "etp-local",
        Packet::tcp("198.18.66.9", "198.18.250.7", 80).on("eth0")
    )
    .contains("client source address kept"));
}
