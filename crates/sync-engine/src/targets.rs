//! Conntrack cleanup targets: what a committed batch makes stale.
//!
//! Two kinds (see docs/sync.md):
//! - *Destinations*: a UDP service destination (ClusterIP, ExternalIP or LoadBalancer IP
//!   with the service port; or a NodePort) that the new rules send to endpoints while the
//!   old rules did not (its usable endpoints went from 0 to > 0, or it is new). Derived
//!   from the tables themselves (the sets that send destinations to endpoints), so that the
//!   same rule holds after a restart, when the old rules are the ones dumped from the kernel.
//!   Which sets hold them is the ruleset's business (`ruleset::incremental`).
//! - *Endpoints*: a UDP endpoint (address, target port) that served a service port before
//!   and no longer does (removed, no longer serving, service deleted or scaled to 0).
//!   Reported by the incremental compiler per service port; on the first sync after a
//!   restart, from the dumped tables (UDP endpoints only: the endpoint maps' keys name
//!   the destination's protocol).

use std::collections::BTreeSet;
use std::net::IpAddr;

use ct_netlink::Filter;
use nft_model::TableElements;
use ruleset::Served;

/// One conntrack cleanup target (UDP only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// Flows whose original destination is this address and port, not DNAT'ed.
    Dst { addr: IpAddr, port: u16 },
    /// Flows whose original destination port is this NodePort (any address of the
    /// family), not DNAT'ed to another port.
    NodePort { v6: bool, port: u16 },
    /// Flows DNAT'ed to this endpoint (reply source address and port).
    Endpoint { addr: IpAddr, port: u16 },
}

impl Target {
    /// The conntrack filter of a target. A destination that starts being served
    /// concerns the flows that were NOT DNAT'ed (their packets went nowhere, and NAT is
    /// decided on a flow's first packet: kubernetes PR #98305); flows already DNAT'ed
    /// to a live endpoint (e.g. by kube-proxy's rules before a takeover) are kept, and
    /// those DNAT'ed to an endpoint that stopped serving are endpoint targets.
    pub fn filter(&self) -> Filter {
        match *self {
            Target::Dst { addr, port } => Filter::udp_unnated(addr, port),
            Target::NodePort { v6, port } => Filter::udp_unnated_nodeport(
                if v6 {
                    ct_netlink::Family::V6
                } else {
                    ct_netlink::Family::V4
                },
                port,
            ),
            Target::Endpoint { addr, port } => Filter::udp_reply_src(addr, port),
        }
    }
}

/// The UDP destinations the tables send to endpoints (the ruleset knows which sets
/// hold them: `ruleset::incremental::served_destinations`).
pub fn served_destinations<'a, T: TableElements + 'a>(
    tables: impl IntoIterator<Item = &'a T>,
) -> BTreeSet<Target> {
    ruleset::incremental::served_destinations(tables)
        .into_iter()
        .map(of_served)
        .collect()
}

/// The served destination a destination target stands for (None: an endpoint target).
pub fn served_of(t: &Target) -> Option<Served> {
    match *t {
        Target::Dst { addr, port } => Some(Served::Dst { addr, port }),
        Target::NodePort { v6, port } => Some(Served::NodePort { v6, port }),
        Target::Endpoint { .. } => None,
    }
}

/// The destination target of a served destination.
pub fn of_served(s: Served) -> Target {
    match s {
        Served::Dst { addr, port } => Target::Dst { addr, port },
        Served::NodePort { v6, port } => Target::NodePort { v6, port },
    }
}

/// Every UDP `address . port` DNAT target of the tables (the protocol is the destination's,
/// in the endpoint maps' keys; used only on the first sync after a restart).
pub fn table_endpoints<'a, T: TableElements + 'a>(
    tables: impl IntoIterator<Item = &'a T>,
) -> BTreeSet<(IpAddr, u16)> {
    ruleset::incremental::table_endpoints(tables)
}
