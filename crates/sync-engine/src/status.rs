//! What the health and metrics servers read, computed from the model one service at a
//! time (the types live in the `proxy-status` crate): after a sync only the services
//! that changed are looked at again.

use std::collections::{BTreeMap, BTreeSet};

use kube_model::{
    categorize, resolve_endpoints, Cluster, IpFamily, Protocol, ResolvedEndpoint, ServiceKey,
    ServicePort, TrafficPolicy,
};

use crate::{HealthCheck, LocalhostNodePort};

/// The endpoints of a service in one family as kube-proxy's endpoints map holds them: per
/// port of its slices (name and protocol), one copy per address and port
/// ([`resolve_endpoints`], decision 0016).
fn endpoints_of(
    cluster: &Cluster,
    key: &ServiceKey,
    family: IpFamily,
    node: &str,
) -> Vec<ResolvedEndpoint> {
    let slices: Vec<_> = cluster
        .slices_of(key)
        .filter(|s| s.family == family)
        .collect();
    let ports: BTreeSet<(&str, Protocol)> = slices
        .iter()
        .flat_map(|s| s.ports.iter().map(|p| (p.name.as_str(), p.protocol)))
        .collect();
    let mut out = Vec::new();
    for (name, protocol) in ports {
        let port = ServicePort {
            name: name.to_string(),
            protocol,
            port: 0,
            node_port: None,
        };
        out.extend(resolve_endpoints(&slices, &port, family, node));
    }
    out
}

fn is_local(e: &ResolvedEndpoint, node: &str) -> bool {
    !node.is_empty() && e.node_name.as_deref() == Some(node)
}

/// (internal, external): whether the service has that traffic policy Local, ready
/// endpoints, and none of them on this node (kube-proxy's `no_local_endpoints_total`).
pub fn no_local_endpoints_of(cluster: &Cluster, key: &ServiceKey, node: &str) -> (bool, bool) {
    let Some(svc) = cluster.services.get(key) else {
        return (false, false);
    };
    let (mut any, mut local) = (false, false);
    for family in [IpFamily::V4, IpFamily::V6] {
        for e in endpoints_of(cluster, key, family, node)
            .iter()
            .filter(|e| e.ready)
        {
            any = true;
            local |= is_local(e, node);
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

/// [`no_local_endpoints_of`] per IP family and per service port, as kube-proxy's
/// per-family proxiers count them (a port of a service with a ClusterIP of the family,
/// ready endpoints of that family, none on this node): the series of both families
/// add up without counting a service twice. Index 0 is IPv4, 1 IPv6; each
/// (internal, external) counts service ports.
pub fn no_local_by_family_of(
    cluster: &Cluster,
    key: &ServiceKey,
    node: &str,
) -> [(usize, usize); 2] {
    let mut out = [(0, 0); 2];
    let Some(svc) = cluster.services.get(key) else {
        return out;
    };
    for (i, family) in [IpFamily::V4, IpFamily::V6].into_iter().enumerate() {
        if svc.cluster_ip(family).is_none() {
            continue;
        }
        let (mut any, mut local) = (false, false);
        for e in endpoints_of(cluster, key, family, node)
            .iter()
            .filter(|e| e.ready)
        {
            any = true;
            local |= is_local(e, node);
        }
        if any && !local {
            let ports = svc.ports.len();
            if svc.internal_traffic_policy == TrafficPolicy::Local {
                out[i].0 = ports;
            }
            if svc.external_traffic_policy == TrafficPolicy::Local {
                out[i].1 = ports;
            }
        }
    }
    out
}

/// Ready local endpoints of a service with a healthCheckNodePort (distinct addresses).
pub fn health_check_of(cluster: &Cluster, key: &ServiceKey, node: &str) -> Option<HealthCheck> {
    let np = cluster.services.get(key)?.health_check_node_port?;
    // Ready local endpoint addresses per family: a dual-stack pod is one endpoint
    // (kube-proxy counts per family, one proxier each).
    let count = |family| {
        endpoints_of(cluster, key, family, node)
            .iter()
            .filter(|e| e.ready && is_local(e, node))
            .map(|e| e.addr)
            .collect::<BTreeSet<_>>()
            .len()
    };
    Some(HealthCheck {
        node_port: np,
        local_endpoints: count(IpFamily::V4).max(count(IpFamily::V6)),
    })
}

/// The TCP NodePorts of a service that the localhost NodePort proxy serves in
/// `families`, as upstream's nftables proxier hands them to its userspace proxy
/// (`pkg/proxy/localnodeportproxy`): endpoints categorised as for the rules (topology,
/// serving-and-terminating fallback), the local ones with externalTrafficPolicy Local;
/// a NodePort without such an endpoint is left out (its listener closes).
pub fn localhost_node_ports_of(
    cluster: &Cluster,
    key: &ServiceKey,
    node: &str,
    families: &[IpFamily],
) -> Vec<LocalhostNodePort> {
    let mut out = Vec::new();
    let Some(svc) = cluster.services.get(key) else {
        return out;
    };
    if families.is_empty() {
        return out;
    }
    let zone = cluster.node.as_ref().and_then(|n| n.zone.as_deref());
    let slices: Vec<_> = cluster.slices_of(key).collect();
    for port in &svc.ports {
        let Some(node_port) = port.node_port else {
            continue;
        };
        if port.protocol != Protocol::Tcp {
            continue;
        }
        for family in families {
            if svc.cluster_ip(*family).is_none() {
                continue;
            }
            let cat = categorize(&resolve_endpoints(&slices, port, *family, node), node, zone);
            let eps = if svc.external_traffic_policy == TrafficPolicy::Local {
                cat.local
            } else {
                cat.cluster
            };
            if eps.is_empty() {
                continue;
            }
            out.push(LocalhostNodePort {
                family: *family,
                node_port,
                service_port: format!("{key}:{}", port.name),
                endpoints: eps
                    .iter()
                    .map(|e| std::net::SocketAddr::new(e.addr, e.port))
                    .collect(),
                affinity_timeout: svc.affinity_timeout,
            });
        }
    }
    out
}

/// What one service adds to the `no_local` counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NoLocal {
    internal: bool,
    external: bool,
    /// Service ports per family (IPv4, IPv6): (internal, external).
    by_family: [(usize, usize); 2],
}

/// The per-service facts of the status, kept up to date service by service.
#[derive(Debug, Default)]
pub struct PerService {
    /// Services counted in `no_local_*`.
    no_local: BTreeMap<ServiceKey, NoLocal>,
    pub no_local_internal: usize,
    pub no_local_external: usize,
    by_family: [(usize, usize); 2],
}

impl PerService {
    /// Look at `key` again; returns its health check (None: it has none).
    pub fn refresh(
        &mut self,
        cluster: &Cluster,
        key: &ServiceKey,
        node: &str,
    ) -> Option<HealthCheck> {
        if let Some(old) = self.no_local.remove(key) {
            self.no_local_internal -= usize::from(old.internal);
            self.no_local_external -= usize::from(old.external);
            for (total, n) in self.by_family.iter_mut().zip(old.by_family) {
                total.0 -= n.0;
                total.1 -= n.1;
            }
        }
        // Only a traffic policy Local or a health check makes its endpoints matter here
        // (most services have neither: a cold start resolves no endpoints for them).
        let svc = cluster.services.get(key)?;
        if svc.internal_traffic_policy != TrafficPolicy::Local
            && svc.external_traffic_policy != TrafficPolicy::Local
            && svc.health_check_node_port.is_none()
        {
            return None;
        }
        let (internal, external) = no_local_endpoints_of(cluster, key, node);
        let by_family = no_local_by_family_of(cluster, key, node);
        if internal || external || by_family != [(0, 0); 2] {
            self.no_local_internal += usize::from(internal);
            self.no_local_external += usize::from(external);
            for (total, n) in self.by_family.iter_mut().zip(by_family) {
                total.0 += n.0;
                total.1 += n.1;
            }
            let facts = NoLocal {
                internal,
                external,
                by_family,
            };
            self.no_local.insert(key.clone(), facts);
        }
        health_check_of(cluster, key, node)
    }

    /// Service ports with traffic policy Local and no local endpoint, per family
    /// (internal, external), as the metrics report them.
    pub fn no_local_by_family(&self) -> BTreeMap<IpFamily, (usize, usize)> {
        BTreeMap::from([
            (IpFamily::V4, self.by_family[0]),
            (IpFamily::V6, self.by_family[1]),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Service;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::json;

    fn copy(node: &str, ready: bool, terminating: bool) -> serde_json::Value {
        json!({"addresses": ["198.18.1.10"], "nodeName": node,
               "conditions": {"ready": ready, "serving": true, "terminating": terminating}})
    }

    /// One pod listed in two slices with the copies given; the service has a health check.
    fn local_endpoints(a: serde_json::Value, b: serde_json::Value) -> (usize, (usize, usize)) {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": "s", "namespace": "ns1"},
            "spec": {"type": "LoadBalancer", "clusterIP": "198.18.100.1",
                     "externalTrafficPolicy": "Local", "healthCheckNodePort": 30700,
                     "ports": [{"port": 80, "nodePort": 30080}]}
        }))
        .unwrap();
        let slice = |name: &str, ep: serde_json::Value| -> EndpointSlice {
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns1",
                             "labels": {"kubernetes.io/service-name": "s"}},
                "addressType": "IPv4", "endpoints": [ep], "ports": [{"port": 8080}]
            }))
            .unwrap()
        };
        let (c, errors) = Cluster::from_objects(&[svc], &[slice("s-a", a), slice("s-b", b)], None);
        assert!(errors.is_empty(), "{errors:?}");
        let key = c.services.keys().next().unwrap().clone();
        let hc = health_check_of(&c, &key, "node-a").unwrap();
        let no_local = no_local_by_family_of(&c, &key, "node-a")[0];
        (hc.local_endpoints, no_local)
    }

    /// The health check and `no_local_endpoints` see the copy the rules use (decision
    /// 0016), not every copy.
    #[test]
    fn a_duplicated_address_counts_as_the_copy_the_rules_use() {
        // both ready: the local copy, whatever the slices are called
        assert_eq!(
            local_endpoints(copy("node-b", true, false), copy("node-a", true, false)),
            (1, (0, 0))
        );
        // the local copy terminating, a remote one ready: the remote one, so no local
        // endpoint (every copy looked at: the local one counted, and no metric)
        assert_eq!(
            local_endpoints(copy("node-a", true, true), copy("node-b", true, false)),
            (0, (0, 1))
        );
    }
}
