//! Endpoint churn and service deletion under UDP load on the two-node namespace cluster
//! (root only). The scenarios are in the harness (`netns_tests::churn`); see
//! docs/conformance.md.

use netns_tests::churn::{self, Load, PODS};
use netns_tests::cluster::Cluster;
use netns_tests::{bins, require_root};

/// Behaviour 11: a rolling update under UDP load (12 UDP flows per family), every packet
/// sent after each sync reaches a live endpoint.
#[test]
fn rolling_update_under_udp_load_every_packet_reaches_a_live_endpoint() {
    require_root!();
    let mut c = Cluster::new(bins!(), &PODS);
    churn::rolling_update_every_packet_reaches_a_live_endpoint(&mut c, Load::CONFORMANCE);
}

/// Behaviour 13: deleting a service under UDP load (12 UDP flows per family to it and to
/// another service): the other service loses nothing, the deleted one's flows never
/// reach its former endpoints again, its chains are gone.
#[test]
fn service_deletion_under_udp_load() {
    require_root!();
    let mut c = Cluster::new(bins!(), &PODS);
    churn::service_deletion_under_udp_load(&mut c, Load::CONFORMANCE);
}
