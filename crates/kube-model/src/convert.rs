//! k8s-openapi objects to the internal model.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::ip::{parse_cidr_sloppy, parse_ip_sloppy};
use crate::model::*;
use crate::{Kind, ObjectError, ObjectRef};

/// Services and slices carrying this label belong to another proxy and are ignored.
pub const LABEL_SERVICE_PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";
/// EndpointSlices of headless services carry this label; any Service or slice carrying
/// it is ignored (kube-proxy's informers filter it out).
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// Links an EndpointSlice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// A node's zone.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// Default ClientIP affinity timeout (3 hours), as Kubernetes defaults it.
pub const DEFAULT_AFFINITY_TIMEOUT: u32 = 10800;
/// Kubernetes' maximum ClientIP affinity timeout (1 day).
pub const MAX_AFFINITY_TIMEOUT: u32 = 86400;

fn obj_ref(kind: Kind, meta: &ObjectMeta) -> ObjectRef {
    if kind == Kind::Node {
        return ObjectRef::new(kind, "", meta.name.clone().unwrap_or_default());
    }
    let k = crate::ns_key(meta);
    ObjectRef::new(kind, k.namespace, k.name)
}

fn has_label(meta: &ObjectMeta, label: &str) -> bool {
    meta.labels.as_ref().is_some_and(|l| l.contains_key(label))
}

fn check_name(object: &ObjectRef) -> Result<(), ObjectError> {
    let ok = |s: &str| {
        !s.is_empty() && s.len() <= 253 && !s.chars().any(|c| c.is_whitespace() || c == '"')
    };
    if !ok(&object.name) || (object.kind != Kind::Node && !ok(&object.namespace)) {
        return Err(ObjectError::Invalid {
            object: object.clone(),
            reason: "missing or invalid name or namespace".into(),
        });
    }
    Ok(())
}

fn port_u16(object: &ObjectRef, field: String, v: i32) -> Result<u16, ObjectError> {
    if (1..=65535).contains(&v) {
        Ok(v as u16)
    } else {
        Err(ObjectError::BadPort {
            object: object.clone(),
            field,
            value: i64::from(v),
        })
    }
}

/// Convert a Service. `Ok(None)`: ignored (headless, ExternalName, another proxy's).
/// Tolerated problems in parts of the object are pushed to `warnings`.
pub fn service_from_k8s(
    svc: &core::Service,
    warnings: &mut Vec<ObjectError>,
) -> Result<Option<Service>, ObjectError> {
    let object = obj_ref(Kind::Service, &svc.metadata);
    check_name(&object)?;
    // kube-proxy's informers list Services with the same selector as EndpointSlices
    // (cmd/kube-proxy/app/server.go): a Service labelled headless is never seen either
    if has_label(&svc.metadata, LABEL_SERVICE_PROXY_NAME)
        || has_label(&svc.metadata, LABEL_HEADLESS)
    {
        return Ok(None);
    }
    let Some(spec) = &svc.spec else {
        return Err(ObjectError::Invalid {
            object,
            reason: "no spec".into(),
        });
    };
    let service_type = match spec.type_.as_deref() {
        None | Some("ClusterIP") => ServiceType::ClusterIp,
        Some("NodePort") => ServiceType::NodePort,
        Some("LoadBalancer") => ServiceType::LoadBalancer,
        Some("ExternalName") => return Ok(None),
        Some(t) => {
            return Err(ObjectError::Invalid {
                object,
                reason: format!("unknown service type {t:?}"),
            })
        }
    };
    // Cluster IPs: clusterIPs when set, else clusterIP.
    let raw_ips: Vec<String> = match (&spec.cluster_ips, &spec.cluster_ip) {
        (Some(v), _) if !v.is_empty() => v.clone(),
        (_, Some(ip)) => vec![ip.clone()],
        _ => Vec::new(),
    };
    if raw_ips.iter().any(|ip| ip.trim() == "None") {
        return Ok(None); // headless
    }
    if raw_ips.is_empty() || raw_ips.iter().all(|ip| ip.trim().is_empty()) {
        return Err(ObjectError::Invalid {
            object,
            reason: "no cluster ip".into(),
        });
    }
    let families: Vec<Option<IpFamily>> = spec
        .ip_families
        .as_ref()
        .map(|f| f.iter().map(|s| IpFamily::from_k8s_name(s)).collect())
        .unwrap_or_default();
    let mut cluster_ips = Vec::new();
    for (i, raw) in raw_ips.iter().enumerate() {
        let ip = parse_ip_sloppy(raw).ok_or_else(|| ObjectError::BadIp {
            object: object.clone(),
            field: "spec.clusterIPs",
            value: raw.clone(),
        })?;
        if let Some(Some(fam)) = families.get(i) {
            if IpFamily::of(&ip) != *fam {
                return Err(ObjectError::WrongFamily {
                    object,
                    field: "spec.clusterIPs",
                    value: ip.to_string(),
                    family: *fam,
                });
            }
        }
        if ip.is_unspecified() || ip.is_loopback() || ip.is_multicast() {
            return Err(ObjectError::BadIp {
                object,
                field: "spec.clusterIPs",
                value: raw.clone(),
            });
        }
        if cluster_ips
            .iter()
            .any(|c: &IpAddr| c.is_ipv4() == ip.is_ipv4())
        {
            return Err(ObjectError::Invalid {
                object,
                reason: "two cluster ips of one family".into(),
            });
        }
        cluster_ips.push(ip);
    }

    let node_ports_allowed = service_type != ServiceType::ClusterIp;
    let mut names = BTreeSet::new();
    let raw_ports = spec.ports.as_deref().unwrap_or_default();
    let mut ports = Vec::with_capacity(raw_ports.len());
    if raw_ports.is_empty() {
        return Err(ObjectError::Invalid {
            object,
            reason: "no ports".into(),
        });
    }
    for (i, p) in raw_ports.iter().enumerate() {
        let name = p.name.clone().unwrap_or_default();
        if !names.insert(name.clone()) {
            return Err(ObjectError::DuplicatePortName { object, port: name });
        }
        if name.len() > 63
            || name
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'))
        {
            return Err(ObjectError::Invalid {
                object,
                reason: format!("bad port name {name:?}"),
            });
        }
        let protocol = Protocol::from_k8s(p.protocol.as_deref()).ok_or_else(|| {
            ObjectError::UnknownProtocol {
                object: object.clone(),
                field: format!("spec.ports[{i}].protocol"),
                value: p.protocol.clone().unwrap_or_default(),
            }
        })?;
        let port = port_u16(&object, format!("spec.ports[{i}].port"), p.port)?;
        let node_port = match p.node_port {
            None | Some(0) => None,
            Some(n) => {
                let n = port_u16(&object, format!("spec.ports[{i}].nodePort"), n)?;
                node_ports_allowed.then_some(n)
            }
        };
        ports.push(ServicePort {
            name,
            protocol,
            port,
            node_port,
        });
    }

    let mut external_ips = Vec::new();
    for raw in spec.external_ips.iter().flatten() {
        match parse_ip_sloppy(raw) {
            Some(ip) if !ip.is_unspecified() && !ip.is_loopback() => {
                if !external_ips.contains(&ip) {
                    external_ips.push(ip)
                }
            }
            _ => warnings.push(ObjectError::BadIp {
                object: object.clone(),
                field: "spec.externalIPs",
                value: raw.clone(),
            }),
        }
    }

    let mut load_balancer_ips = Vec::new();
    let mut source_ranges = Vec::new();
    if service_type == ServiceType::LoadBalancer {
        let ingress = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref());
        for ing in ingress.into_iter().flatten() {
            let Some(raw) = &ing.ip else { continue };
            if ing.ip_mode.as_deref() == Some("Proxy") {
                continue;
            }
            match parse_ip_sloppy(raw) {
                Some(ip) if !ip.is_unspecified() && !ip.is_loopback() => {
                    if !load_balancer_ips.contains(&ip) {
                        load_balancer_ips.push(ip)
                    }
                }
                _ => warnings.push(ObjectError::BadIp {
                    object: object.clone(),
                    field: "status.loadBalancer.ingress",
                    value: raw.clone(),
                }),
            }
        }
        for raw in spec.load_balancer_source_ranges.iter().flatten() {
            match parse_cidr_sloppy(raw) {
                Some(c) => {
                    if !source_ranges.contains(&c) {
                        source_ranges.push(c)
                    }
                }
                None => warnings.push(ObjectError::BadCidr {
                    object: object.clone(),
                    field: "spec.loadBalancerSourceRanges",
                    value: raw.clone(),
                }),
            }
        }
    }

    let policy = |v: Option<&str>, field: &str, warnings: &mut Vec<ObjectError>| match v {
        None | Some("Cluster") => TrafficPolicy::Cluster,
        Some("Local") => TrafficPolicy::Local,
        Some(other) => {
            warnings.push(ObjectError::Invalid {
                object: object.clone(),
                reason: format!("unknown {field} {other:?}, using Cluster"),
            });
            TrafficPolicy::Cluster
        }
    };
    let mut external_traffic_policy = policy(
        spec.external_traffic_policy.as_deref(),
        "externalTrafficPolicy",
        warnings,
    );
    // externalTrafficPolicy applies to externally accessible services: NodePort,
    // LoadBalancer, and ClusterIP with externalIPs (upstream's ExternallyAccessible)
    if service_type == ServiceType::ClusterIp
        && spec.external_ips.as_deref().unwrap_or(&[]).is_empty()
    {
        external_traffic_policy = TrafficPolicy::Cluster;
    }
    let internal_traffic_policy = policy(
        spec.internal_traffic_policy.as_deref(),
        "internalTrafficPolicy",
        warnings,
    );

    let affinity_timeout = match spec.session_affinity.as_deref() {
        Some("ClientIP") => {
            let t = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds);
            Some(match t {
                None => DEFAULT_AFFINITY_TIMEOUT,
                Some(t) if t >= 1 && t as u32 <= MAX_AFFINITY_TIMEOUT => t as u32,
                Some(t) => {
                    warnings.push(ObjectError::Invalid {
                        object: object.clone(),
                        reason: format!(
                            "affinity timeout {t} out of range, using {DEFAULT_AFFINITY_TIMEOUT}"
                        ),
                    });
                    DEFAULT_AFFINITY_TIMEOUT
                }
            })
        }
        _ => None,
    };

    let health_check_node_port = match spec.health_check_node_port {
        Some(p)
            if service_type == ServiceType::LoadBalancer
                && external_traffic_policy == TrafficPolicy::Local =>
        {
            Some(port_u16(&object, "spec.healthCheckNodePort".into(), p)?)
        }
        _ => None,
    };

    Ok(Some(Service {
        key: ServiceKey::new(object.namespace, object.name),
        service_type,
        cluster_ips,
        external_ips,
        load_balancer_ips,
        source_ranges,
        ports,
        external_traffic_policy,
        internal_traffic_policy,
        affinity_timeout,
        health_check_node_port,
        traffic_distribution: spec.traffic_distribution.clone(),
    }))
}

/// Convert an EndpointSlice. `Ok(None)`: ignored (FQDN, headless, another proxy's).
pub fn slice_from_k8s(
    slice: &discovery::EndpointSlice,
    warnings: &mut Vec<ObjectError>,
) -> Result<Option<EndpointSlice>, ObjectError> {
    let object = obj_ref(Kind::EndpointSlice, &slice.metadata);
    check_name(&object)?;
    if has_label(&slice.metadata, LABEL_SERVICE_PROXY_NAME)
        || has_label(&slice.metadata, LABEL_HEADLESS)
    {
        return Ok(None);
    }
    let family = match slice.address_type.as_str() {
        "IPv4" => IpFamily::V4,
        "IPv6" => IpFamily::V6,
        "FQDN" => return Ok(None),
        t => {
            return Err(ObjectError::Invalid {
                object,
                reason: format!("unknown address type {t:?}"),
            })
        }
    };
    let service_name = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_SERVICE_NAME))
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ObjectError::Invalid {
            object: object.clone(),
            reason: format!("no {LABEL_SERVICE_NAME} label"),
        })?;
    let mut ports = Vec::with_capacity(slice.ports.as_ref().map_or(0, Vec::len));
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        let name = p.name.clone().unwrap_or_default();
        let Some(protocol) = Protocol::from_k8s(p.protocol.as_deref()) else {
            warnings.push(ObjectError::UnknownProtocol {
                object: object.clone(),
                field: format!("ports[{i}].protocol"),
                value: p.protocol.clone().unwrap_or_default(),
            });
            continue;
        };
        let port = match p.port {
            Some(v) => match port_u16(&object, format!("ports[{i}].port"), v) {
                Ok(v) => v,
                Err(e) => {
                    warnings.push(e);
                    continue;
                }
            },
            None => continue, // "all ports": not usable by a proxy
        };
        if ports
            .iter()
            .any(|q: &SlicePort| q.name == name && q.protocol == protocol)
        {
            warnings.push(ObjectError::DuplicatePortName {
                object: object.clone(),
                port: name,
            });
            continue;
        }
        ports.push(SlicePort {
            name,
            protocol,
            port,
        });
    }
    let mut endpoints = Vec::with_capacity(slice.endpoints.as_ref().map_or(0, Vec::len));
    for ep in slice.endpoints.iter().flatten() {
        let Some(raw) = ep.addresses.first() else {
            continue;
        };
        let Some(addr) = parse_ip_sloppy(raw) else {
            warnings.push(ObjectError::BadIp {
                object: object.clone(),
                field: "endpoints.addresses",
                value: raw.clone(),
            });
            continue;
        };
        if IpFamily::of(&addr) != family {
            warnings.push(ObjectError::WrongFamily {
                object: object.clone(),
                field: "endpoints.addresses",
                value: addr.to_string(),
                family,
            });
            continue;
        }
        if addr.is_unspecified() || addr.is_loopback() || addr.is_multicast() {
            warnings.push(ObjectError::BadIp {
                object: object.clone(),
                field: "endpoints.addresses",
                value: raw.clone(),
            });
            continue;
        }
        // unset conditions as upstream's endpoint slice cache reads them
        // (pkg/proxy/endpointslicecache.go): ready and serving true, terminating false
        let c = ep.conditions.as_ref();
        let ready = c.and_then(|c| c.ready).unwrap_or(true);
        let serving = c.and_then(|c| c.serving).unwrap_or(true);
        let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
        let hints = ep.hints.as_ref();
        let mut e = Endpoint::ready_on(addr, ep.node_name.as_deref().filter(|n| !n.is_empty()));
        (e.ready, e.serving, e.terminating) = (ready, serving, terminating);
        e.zone = ep.zone.as_deref().map(Into::into);
        e.set_hints(
            hints
                .and_then(|h| h.for_zones.as_ref())
                .map(|z| z.iter().map(|z| z.name.clone()).collect())
                .unwrap_or_default(),
            hints
                .and_then(|h| h.for_nodes.as_ref())
                .map(|n| n.iter().map(|n| n.name.clone()).collect())
                .unwrap_or_default(),
        );
        endpoints.push(e);
    }
    endpoints.shrink_to_fit();
    Ok(Some(EndpointSlice {
        service: ServiceKey::new(object.namespace.clone(), service_name.clone()),
        key: ServiceKey::new(object.namespace, object.name),
        family,
        ports,
        endpoints,
    }))
}

/// Convert the proxier's own Node.
pub fn node_from_k8s(
    node: &core::Node,
    warnings: &mut Vec<ObjectError>,
) -> Result<Node, ObjectError> {
    let object = obj_ref(Kind::Node, &node.metadata);
    check_name(&object)?;
    let labels: BTreeMap<String, String> = node.metadata.labels.clone().unwrap_or_default();
    let mut pod_cidrs = Vec::new();
    let spec = node.spec.as_ref();
    let raw: Vec<String> = match spec.and_then(|s| s.pod_cidrs.clone()) {
        Some(v) if !v.is_empty() => v,
        _ => spec.and_then(|s| s.pod_cidr.clone()).into_iter().collect(),
    };
    for r in raw {
        match parse_cidr_sloppy(&r) {
            Some(c)
                if !pod_cidrs
                    .iter()
                    .any(|p: &crate::Cidr| p.family() == c.family()) =>
            {
                pod_cidrs.push(c)
            }
            Some(_) => {}
            None => warnings.push(ObjectError::BadCidr {
                object: object.clone(),
                field: "spec.podCIDRs",
                value: r,
            }),
        }
    }
    let mut primary_ips = Vec::new();
    let addrs = node
        .status
        .as_ref()
        .and_then(|s| s.addresses.clone())
        .unwrap_or_default();
    for kind in ["InternalIP", "ExternalIP"] {
        for a in addrs.iter().filter(|a| a.type_ == kind) {
            match parse_ip_sloppy(&a.address) {
                Some(ip) => {
                    if !primary_ips
                        .iter()
                        .any(|p: &IpAddr| p.is_ipv4() == ip.is_ipv4())
                    {
                        primary_ips.push(ip)
                    }
                }
                None => warnings.push(ObjectError::BadIp {
                    object: object.clone(),
                    field: "status.addresses",
                    value: a.address.clone(),
                }),
            }
        }
    }
    Ok(Node {
        name: object.name,
        zone: labels.get(LABEL_ZONE).cloned(),
        pod_cidrs,
        primary_ips,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conditions_of(conditions: &str) -> (bool, bool, bool) {
        let json = format!(
            r#"{{"metadata":{{"name":"s-1","namespace":"n","labels":{{"kubernetes.io/service-name":"s"}}}},
                "addressType":"IPv4","ports":[{{"port":80}}],
                "endpoints":[{{"addresses":["198.18.1.1"]{conditions}}}]}}"#
        );
        let slice: discovery::EndpointSlice = serde_json::from_str(&json).unwrap();
        let s = slice_from_k8s(&slice, &mut Vec::new()).unwrap().unwrap();
        let e = &s.endpoints[0];
        (e.ready, e.serving, e.terminating)
    }

    /// Unset conditions read as upstream's endpoint slice cache reads them: ready and
    /// serving true, terminating false; serving does not follow ready.
    #[test]
    fn unset_conditions_are_upstreams_defaults() {
        assert_eq!(conditions_of(""), (true, true, false));
        assert_eq!(conditions_of(r#","conditions":{}"#), (true, true, false));
        assert_eq!(
            conditions_of(r#","conditions":{"ready":false,"terminating":true}"#),
            (false, true, true)
        );
        assert_eq!(
            conditions_of(r#","conditions":{"ready":false}"#),
            (false, true, false)
        );
        assert_eq!(
            conditions_of(r#","conditions":{"ready":false,"serving":false,"terminating":true}"#),
            (false, false, true)
        );
    }
}
