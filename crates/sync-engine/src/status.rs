//! What the health and metrics servers read, computed from the model one service at a
//! time (the types live in the `proxy-status` crate): after a sync only the services
//! that changed are looked at again.

use std::collections::{BTreeMap, BTreeSet};

use kube_model::{Cluster, ServiceKey, TrafficPolicy};

use crate::HealthCheck;

/// (internal, external): whether the service has that traffic policy Local, ready
/// endpoints, and none of them on this node (kube-proxy's `no_local_endpoints_total`).
pub fn no_local_endpoints_of(cluster: &Cluster, key: &ServiceKey, node: &str) -> (bool, bool) {
    let Some(svc) = cluster.services.get(key) else {
        return (false, false);
    };
    let (mut any, mut local) = (false, false);
    for s in cluster.slices_of(key) {
        for e in s.endpoints.iter().filter(|e| e.ready) {
            any = true;
            local |= !node.is_empty() && e.node_name.as_deref() == Some(node);
        }
    }
    if any && !local {
        (
            svc.internal_traffic_policy == TrafficPolicy::Local,
            svc.external_traffic_policy == TrafficPolicy::Local,
        )
    } else {
        (false, false)
    }
}

/// Ready local endpoints of a service with a healthCheckNodePort (distinct addresses).
pub fn health_check_of(cluster: &Cluster, key: &ServiceKey, node: &str) -> Option<HealthCheck> {
    let np = cluster.services.get(key)?.health_check_node_port?;
    // Ready local endpoint addresses per family: a dual-stack pod is one endpoint
    // (kube-proxy counts per family, one proxier each).
    let (mut v4, mut v6) = (BTreeSet::new(), BTreeSet::new());
    for s in cluster.slices_of(key) {
        for e in &s.endpoints {
            if e.ready && !node.is_empty() && e.node_name.as_deref() == Some(node) {
                if e.addr.is_ipv4() { &mut v4 } else { &mut v6 }.insert(e.addr);
            }
        }
    }
    Some(HealthCheck {
        node_port: np,
        local_endpoints: v4.len().max(v6.len()),
    })
}

/// The per-service facts of the status, kept up to date service by service.
#[derive(Debug, Default)]
pub struct PerService {
    /// Services counted in `no_local_*` (internal, external).
    no_local: BTreeMap<ServiceKey, (bool, bool)>,
    pub no_local_internal: usize,
    pub no_local_external: usize,
}

impl PerService {
    /// Look at `key` again; returns its health check (None: it has none).
    pub fn refresh(
        &mut self,
        cluster: &Cluster,
        key: &ServiceKey,
        node: &str,
    ) -> Option<HealthCheck> {
        if let Some((i, e)) = self.no_local.remove(key) {
            self.no_local_internal -= usize::from(i);
            self.no_local_external -= usize::from(e);
        }
        let (i, e) = no_local_endpoints_of(cluster, key, node);
        if i || e {
            self.no_local.insert(key.clone(), (i, e));
            self.no_local_internal += usize::from(i);
            self.no_local_external += usize::from(e);
        }
        health_check_of(cluster, key, node)
    }
}
