//! What the health and metrics servers read, computed from the model (the types live in
//! the `proxy-status` crate).

use std::collections::{BTreeMap, BTreeSet};

use kube_model::{Cluster, IpFamily, ServiceKey, TrafficPolicy};

use crate::HealthCheck;

/// (internal, external): services with that traffic policy Local, ready endpoints, and
/// none of them on this node (kube-proxy's `no_local_endpoints_total`).
pub fn no_local_endpoints(cluster: &Cluster, node: &str) -> (usize, usize) {
    let idx = cluster.endpoint_index();
    let (mut internal, mut external) = (0, 0);
    for svc in cluster.services.values() {
        let (mut any, mut local) = (false, false);
        for s in idx.get(&svc.key).map(Vec::as_slice).unwrap_or(&[]) {
            for e in s.endpoints.iter().filter(|e| e.ready) {
                any = true;
                local |= !node.is_empty() && e.node_name.as_deref() == Some(node);
            }
        }
        if any && !local {
            internal += usize::from(svc.internal_traffic_policy == TrafficPolicy::Local);
            external += usize::from(svc.external_traffic_policy == TrafficPolicy::Local);
        }
    }
    (internal, external)
}

/// [`no_local_endpoints`] per IP family and per service port, as kube-proxy's
/// per-family proxiers count them (a port of a service with a ClusterIP of the family,
/// ready endpoints of that family, none on this node): the series of both families
/// add up without counting a service twice.
pub fn no_local_endpoints_by_family(
    cluster: &Cluster,
    node: &str,
) -> BTreeMap<IpFamily, (usize, usize)> {
    let idx = cluster.endpoint_index();
    let mut out = BTreeMap::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let (mut internal, mut external) = (0, 0);
        for svc in cluster.services.values() {
            if svc.cluster_ip(family).is_none() {
                continue;
            }
            let (mut any, mut local) = (false, false);
            for s in idx.get(&svc.key).map(Vec::as_slice).unwrap_or(&[]) {
                if s.family != family {
                    continue;
                }
                for e in s.endpoints.iter().filter(|e| e.ready) {
                    any = true;
                    local |= !node.is_empty() && e.node_name.as_deref() == Some(node);
                }
            }
            if any && !local {
                let ports = svc.ports.len();
                if svc.internal_traffic_policy == TrafficPolicy::Local {
                    internal += ports;
                }
                if svc.external_traffic_policy == TrafficPolicy::Local {
                    external += ports;
                }
            }
        }
        out.insert(family, (internal, external));
    }
    out
}

/// Ready local endpoints per service with a healthCheckNodePort (distinct addresses).
pub fn health_checks(cluster: &Cluster, node: &str) -> BTreeMap<ServiceKey, HealthCheck> {
    let idx = cluster.endpoint_index();
    let mut out = BTreeMap::new();
    for svc in cluster.services.values() {
        let Some(np) = svc.health_check_node_port else {
            continue;
        };
        // Ready local endpoint addresses per family: a dual-stack pod is one endpoint
        // (kube-proxy counts per family, one proxier each).
        let (mut v4, mut v6) = (BTreeSet::new(), BTreeSet::new());
        for s in idx.get(&svc.key).map(Vec::as_slice).unwrap_or(&[]) {
            for e in &s.endpoints {
                if e.ready && !node.is_empty() && e.node_name.as_deref() == Some(node) {
                    if e.addr.is_ipv4() { &mut v4 } else { &mut v6 }.insert(e.addr);
                }
            }
        }
        out.insert(
            svc.key.clone(),
            HealthCheck {
                node_port: np,
                local_endpoints: v4.len().max(v6.len()),
            },
        );
    }
    out
}
