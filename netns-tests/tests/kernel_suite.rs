//! The kernel suite: what the daemon relies on from the kernel, in one test process, so
//! that it can run on the kernels nodes run. `netns-tests/kernels/kernel-suite` runs it
//! on this machine's kernel and, under QEMU, on Debian's 6.1 and 6.12 (see
//! docs/kernels.md); there the process runs with `--ignored --test-threads=1` and
//! `NLP_TIME_SCALE` stretches every timeout and wait of the shared scenarios.
//!
//! Every test is a scenario of the harness that the host suite also runs (transport,
//! conntrack, sync engine, churn); only the cold load is the suite's own. The tests are
//! `#[ignore]`d in `cargo test`: the host suite already covers them on this kernel.

use std::time::Instant;

use kube_model::ServiceKey;
use netns_tests::churn::{self, Load, PODS};
use netns_tests::cluster::Cluster;
use netns_tests::engine::{self, Family::*, Via};
use netns_tests::{bins, bulk, ct, kernel_release, normalize_listing, require_root};
use netns_tests::{transport, Netns};
use nft_model::{render, Family, TableRef};
use nft_netlink::Nft;
use ruleset::{compile, diff, Config};

/// The churn scenarios' load inside an emulated guest: 24 flows per destination, one
/// datagram per flow every 120 ms (the conformance suite: 12 every 20 ms; an emulated
/// sender cannot keep that pace). Flows move only when their endpoint goes, so the
/// final re-balancing check fails by chance when no flow of a family happens to pick
/// the new endpoint: about (5/8)^flows per family, 0.4 % with 12 flows (seen once in
/// eight guest runs), 1e-5 with 24. The window is stretched by the time scale.
const LOAD: Load = Load {
    flows: 24,
    tick: std::time::Duration::from_millis(120),
    ..Load::CONFORMANCE
};

/// Prints how long a test took (also when it fails), for docs/kernels.md.
struct Timed(&'static str, Instant);

impl Drop for Timed {
    fn drop(&mut self) {
        eprintln!(
            "kernel-suite: {} took {:.1} s on {}",
            self.0,
            self.1.elapsed().as_secs_f64(),
            kernel_release()
        );
    }
}

// --- nftables transport ---------------------------------------------------------------

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn transport_rejected_batch_changes_nothing_and_names_the_object() {
    require_root!();
    let _t = Timed(
        "transport_rejected_batch_changes_nothing_and_names_the_object",
        Instant::now(),
    );
    transport::rejected_batch_changes_nothing_and_names_the_object();
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn transport_check_answers_as_a_commit_would_and_changes_nothing() {
    require_root!();
    let _t = Timed(
        "transport_check_answers_as_a_commit_would_and_changes_nothing",
        Instant::now(),
    );
    transport::check_answers_as_a_commit_would_and_changes_nothing();
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn transport_generation_guard_detects_other_writers() {
    require_root!();
    let _t = Timed(
        "transport_generation_guard_detects_other_writers",
        Instant::now(),
    );
    transport::generation_guard_detects_other_writers_and_retry_succeeds();
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn transport_committed_table_reads_back_equal() {
    require_root!();
    let _t = Timed("transport_committed_table_reads_back_equal", Instant::now());
    transport::committed_table_reads_back_equal();
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn transport_every_object_kind_programs_reads_back_and_round_trips() {
    require_root!();
    let _t = Timed(
        "transport_every_object_kind_programs_reads_back_and_round_trips",
        Instant::now(),
    );
    transport::every_object_kind_programs_reads_back_and_round_trips();
}

// --- cold load and bulk deletion -----------------------------------------------------

/// 300 ClusterIP services x 5 endpoints (every tenth with session affinity, so with a
/// service chain and per-endpoint chains) compiled and loaded in one batch over
/// netlink; read back equal (our decoder) and listed by `nft` as rendered. Then 100
/// services are deleted in one batch: their elements, and for the ten with affinity
/// their chains with the map elements pointing to them, in the same transaction.
#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn cold_load_300_services_then_delete_100() {
    require_root!();
    let _t = Timed("cold_load_300_services_then_delete_100", Instant::now());
    let cfg = Config {
        node_name: "node-a".into(),
        families: vec!["IPv4".into()],
        cluster_cidrs: vec!["198.18.0.0/20".into()],
        ..Default::default()
    };
    let mut c = bulk::big_cluster(300, 5);
    for i in (0..300).step_by(10) {
        let key = ServiceKey::new("ns", format!("svc-{i}"));
        c.services.get_mut(&key).expect("service").affinity_timeout = Some(300);
    }
    let t = Instant::now();
    let full = compile(&c, &cfg).expect("compile").tables;
    let compile_time = t.elapsed();
    let ns = Netns::new("coldload");
    let create = diff(&[], &full);
    let t = Instant::now();
    ns.run(|| Nft::open().unwrap().commit(&create, None))
        .unwrap_or_else(|e| panic!("cold load refused: {e}"));
    let load_time = t.elapsed();
    let table = TableRef::new(Family::Ip, ruleset::names::TABLE);
    let read = |ns: &Netns| {
        let t = table.clone();
        ns.run(move || Nft::open().unwrap().dump_table(&t).unwrap())
            .expect("our table")
    };
    assert_eq!(read(&ns).canonical(), full[0].canonical(), "read back");
    let listed = ns.exec_ok("nft", &["list", "table", "ip", ruleset::names::TABLE]);
    assert_eq!(
        normalize_listing(&listed),
        normalize_listing(&render::table(&full[0])),
        "nft lists what we rendered"
    );

    let mut smaller = c.clone();
    for i in 100..200 {
        smaller.remove_service(&ServiceKey::new("ns", format!("svc-{i}")));
        smaller.remove_slice(&ServiceKey::new("ns", format!("svc-{i}-1")));
    }
    let after = compile(&smaller, &cfg).expect("compile").tables;
    let ops = diff(&full, &after);
    let deleted_chains = ops
        .iter()
        .filter(|o| matches!(o, nft_model::Op::DeleteChain { .. }))
        .count();
    // Plain services are elements only; the ten with session affinity among them go
    // with their chains (service and per-endpoint ones, referenced from map elements).
    assert!(deleted_chains >= 10, "{deleted_chains} chain deletes");
    let t = Instant::now();
    ns.run(|| Nft::open().unwrap().commit(&ops, None))
        .unwrap_or_else(|e| panic!("deleting 100 services refused: {e}"));
    let delete_time = t.elapsed();
    assert_eq!(read(&ns).canonical(), after[0].canonical(), "after delete");
    eprintln!(
        "kernel {}: 300 services x 5 endpoints: compile {compile_time:?}, cold load {load_time:?} ({} ops); \
         delete 100 services {delete_time:?} ({} ops, {deleted_chains} chains)",
        kernel_release(),
        create.len(),
        ops.len()
    );
}

// --- conntrack ---------------------------------------------------------------------------

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn conntrack_probe_picks_the_kernels_strategy_and_deletes_nothing() {
    require_root!();
    let _t = Timed(
        "conntrack_probe_picks_the_kernels_strategy_and_deletes_nothing",
        Instant::now(),
    );
    ct::probe_picks_the_kernels_strategy_and_deletes_nothing_check();
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn conntrack_ipv4_each_filter_deletes_exactly_its_entries_with_each_strategy() {
    require_root!();
    let _t = Timed(
        "conntrack_ipv4_each_filter_deletes_exactly_its_entries_with_each_strategy",
        Instant::now(),
    );
    ct::every_filter_every_strategy(false);
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn conntrack_ipv6_each_filter_deletes_exactly_its_entries_with_each_strategy() {
    require_root!();
    let _t = Timed(
        "conntrack_ipv6_each_filter_deletes_exactly_its_entries_with_each_strategy",
        Instant::now(),
    );
    ct::every_filter_every_strategy(true);
}

// --- the sync engine with packets --------------------------------------------------------

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn seed_scenario_nodeport() {
    require_root!();
    let _t = Timed("seed_scenario_nodeport", Instant::now());
    engine::seed_scenario(bins!(), V4, Via::NodePort, true);
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn seed_scenario_without_cleanup_stays_broken_nodeport() {
    require_root!();
    let _t = Timed(
        "seed_scenario_without_cleanup_stays_broken_nodeport",
        Instant::now(),
    );
    engine::seed_scenario(bins!(), V4, Via::NodePort, false);
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn seed_scenario_cluster_ip_ipv6() {
    require_root!();
    let _t = Timed("seed_scenario_cluster_ip_ipv6", Instant::now());
    engine::seed_scenario(bins!(), V6, Via::ClusterIp, true);
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn seed_scenario_without_cleanup_stays_broken_cluster_ip_ipv6() {
    require_root!();
    let _t = Timed(
        "seed_scenario_without_cleanup_stays_broken_cluster_ip_ipv6",
        Instant::now(),
    );
    engine::seed_scenario(bins!(), V6, Via::ClusterIp, false);
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn restart_after_sigkill_keeps_established_flows() {
    require_root!();
    let _t = Timed(
        "restart_after_sigkill_keeps_established_flows",
        Instant::now(),
    );
    engine::restart_after_sigkill_keeps_established_flows(bins!());
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn tampering_is_repaired_within_a_second() {
    require_root!();
    let _t = Timed("tampering_is_repaired_within_a_second", Instant::now());
    engine::tampering_is_repaired_within_a_second(bins!());
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn kernel_rejection_changes_nothing_and_a_later_sync_converges() {
    require_root!();
    let _t = Timed(
        "kernel_rejection_changes_nothing_and_a_later_sync_converges",
        Instant::now(),
    );
    engine::kernel_rejection_changes_nothing_and_a_later_sync_converges(bins!());
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn sigkill_between_commit_and_cleanup_resumes_the_cleanup() {
    require_root!();
    let _t = Timed(
        "sigkill_between_commit_and_cleanup_resumes_the_cleanup",
        Instant::now(),
    );
    engine::sigkill_between_commit_and_cleanup_resumes_the_cleanup(bins!());
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn deleting_a_service_leaves_the_flows_of_another_to_the_same_pod() {
    require_root!();
    let _t = Timed(
        "deleting_a_service_leaves_the_flows_of_another_to_the_same_pod",
        Instant::now(),
    );
    netns_tests::cleanup_scenarios::deleting_a_service_leaves_the_flows_of_another_to_the_same_pod(
        bins!(),
    );
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn a_service_port_the_kernel_refuses_is_skipped_and_the_rest_stays_in_sync() {
    require_root!();
    let _t = Timed(
        "a_service_port_the_kernel_refuses_is_skipped_and_the_rest_stays_in_sync",
        Instant::now(),
    );
    engine::a_service_port_the_kernel_refuses_is_skipped_and_the_rest_stays_in_sync(bins!());
}

// --- the daemon on the two-node cluster ----------------------------------------------------

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn endpoint_churn_under_udp_load() {
    require_root!();
    let _t = Timed("endpoint_churn_under_udp_load", Instant::now());
    let mut c = Cluster::new(bins!(), &PODS);
    churn::rolling_update_every_packet_reaches_a_live_endpoint(&mut c, LOAD);
}

#[test]
#[ignore = "kernel suite: netns-tests/kernels/kernel-suite runs it per kernel"]
fn service_deletion_under_udp_load() {
    require_root!();
    let _t = Timed("service_deletion_under_udp_load", Instant::now());
    let mut c = Cluster::new(bins!(), &PODS);
    churn::service_deletion_under_udp_load(&mut c, LOAD);
}
