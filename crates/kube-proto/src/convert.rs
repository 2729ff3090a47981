//! The lean protobuf messages to the `k8s-openapi` objects the rest of the proxy reads,
//! filled exactly as `kube_model::lean` fills them from JSON. Protobuf has no absent vs
//! empty for repeated and map fields; an empty one becomes absent, as the API server's
//! JSON omits it (`omitempty`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::Resource;
use kube_model::ANNOTATION_LAST_CHANGE_TRIGGER_TIME;
use prost::Message;

use crate::messages as pb;
use crate::Error;

/// A kind the proxy reads, decoded from its protobuf message (the envelope removed).
pub trait FromProto: Sized {
    /// `apiVersion` and `kind` as the envelope names them.
    const API_VERSION: &'static str;
    const KIND: &'static str;
    /// The kind of its list (`ServiceList`, ...).
    const LIST_KIND: &'static str;
    /// The object from its message's bytes; its resourceVersion apart (the proxy keeps
    /// it outside the object, as `kube_source` does).
    fn from_message(raw: &[u8]) -> Result<(Self, Option<String>), Error>;
}

fn some_vec<T>(v: Vec<T>) -> Option<Vec<T>> {
    (!v.is_empty()).then_some(v)
}

fn some_map(m: BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!m.is_empty()).then_some(m)
}

fn time(t: pb::Time) -> Result<meta::Time, Error> {
    let (s, n) = (t.seconds.unwrap_or(0), t.nanos.unwrap_or(0));
    k8s_openapi::jiff::Timestamp::new(s, n)
        .map(meta::Time)
        .map_err(|e| Error::Field {
            what: "metadata.deletionTimestamp",
            msg: e.to_string(),
        })
}

/// What `kube_model::lean` keeps of a Service's or a slice's metadata: name, namespace,
/// labels and, of the annotations, the trigger time.
fn lean_meta(m: pb::ObjectMeta) -> (meta::ObjectMeta, Option<String>) {
    let mut annotations = m.annotations;
    annotations.retain(|k, _| k == ANNOTATION_LAST_CHANGE_TRIGGER_TIME);
    let out = meta::ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: some_map(m.labels),
        annotations: some_map(annotations),
        ..meta::ObjectMeta::default()
    };
    (out, m.resource_version)
}

/// A Node's or a ServiceCIDR's metadata: what the engine reads of them.
fn node_meta(m: pb::ObjectMeta) -> Result<(meta::ObjectMeta, Option<String>), Error> {
    let out = meta::ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        labels: some_map(m.labels),
        annotations: some_map(m.annotations),
        deletion_timestamp: m.deletion_timestamp.map(time).transpose()?,
        ..meta::ObjectMeta::default()
    };
    Ok((out, m.resource_version))
}

fn decode<M: Message + Default>(raw: &[u8], what: &'static str) -> Result<M, Error> {
    M::decode(raw).map_err(|e| Error::wire(what, e))
}

impl FromProto for core::Service {
    const API_VERSION: &'static str = <core::Service as Resource>::API_VERSION;
    const KIND: &'static str = <core::Service as Resource>::KIND;
    const LIST_KIND: &'static str = "ServiceList";
    fn from_message(raw: &[u8]) -> Result<(Self, Option<String>), Error> {
        let s: pb::Service = decode(raw, "Service")?;
        let (metadata, rv) = lean_meta(s.metadata.unwrap_or_default());
        let spec = s.spec.map(|s| core::ServiceSpec {
            cluster_ip: s.cluster_ip,
            cluster_ips: some_vec(s.cluster_ips),
            external_ips: some_vec(s.external_ips),
            external_traffic_policy: s.external_traffic_policy,
            health_check_node_port: s.health_check_node_port,
            internal_traffic_policy: s.internal_traffic_policy,
            ip_families: some_vec(s.ip_families),
            load_balancer_source_ranges: some_vec(s.load_balancer_source_ranges),
            ports: some_vec(
                s.ports
                    .into_iter()
                    .map(|p| core::ServicePort {
                        name: p.name,
                        node_port: p.node_port,
                        port: p.port.unwrap_or_default(),
                        protocol: p.protocol,
                        ..core::ServicePort::default()
                    })
                    .collect(),
            ),
            session_affinity: s.session_affinity,
            session_affinity_config: s.session_affinity_config.map(|c| {
                core::SessionAffinityConfig {
                    client_ip: c.client_ip.map(|c| core::ClientIPConfig {
                        timeout_seconds: c.timeout_seconds,
                    }),
                }
            }),
            traffic_distribution: s.traffic_distribution,
            type_: s.r#type,
            ..core::ServiceSpec::default()
        });
        let status = s.status.map(|s| core::ServiceStatus {
            load_balancer: s.load_balancer.map(|lb| core::LoadBalancerStatus {
                ingress: some_vec(
                    lb.ingress
                        .into_iter()
                        .map(|i| core::LoadBalancerIngress {
                            ip: i.ip,
                            ip_mode: i.ip_mode,
                            ..core::LoadBalancerIngress::default()
                        })
                        .collect(),
                ),
            }),
            ..core::ServiceStatus::default()
        });
        Ok((
            core::Service {
                metadata,
                spec,
                status,
            },
            rv,
        ))
    }
}

impl FromProto for discovery::EndpointSlice {
    const API_VERSION: &'static str = <discovery::EndpointSlice as Resource>::API_VERSION;
    const KIND: &'static str = <discovery::EndpointSlice as Resource>::KIND;
    const LIST_KIND: &'static str = "EndpointSliceList";
    fn from_message(raw: &[u8]) -> Result<(Self, Option<String>), Error> {
        let s: pb::EndpointSlice = decode(raw, "EndpointSlice")?;
        let (metadata, rv) = lean_meta(s.metadata.unwrap_or_default());
        let endpoints = s
            .endpoints
            .into_iter()
            .map(|e| discovery::Endpoint {
                addresses: e.addresses,
                conditions: e.conditions.map(|c| discovery::EndpointConditions {
                    ready: c.ready,
                    serving: c.serving,
                    terminating: c.terminating,
                }),
                hints: e.hints.map(|h| discovery::EndpointHints {
                    for_zones: some_vec(
                        h.for_zones
                            .into_iter()
                            .map(|z| discovery::ForZone {
                                name: z.name.unwrap_or_default(),
                            })
                            .collect(),
                    ),
                    for_nodes: some_vec(
                        h.for_nodes
                            .into_iter()
                            .map(|n| discovery::ForNode {
                                name: n.name.unwrap_or_default(),
                            })
                            .collect(),
                    ),
                }),
                node_name: e.node_name,
                zone: e.zone,
                ..discovery::Endpoint::default()
            })
            .collect();
        let ports = s
            .ports
            .into_iter()
            .map(|p| discovery::EndpointPort {
                name: p.name,
                port: p.port,
                protocol: p.protocol,
                ..discovery::EndpointPort::default()
            })
            .collect();
        Ok((
            discovery::EndpointSlice {
                address_type: s.address_type.unwrap_or_default(),
                endpoints: some_vec(endpoints),
                metadata,
                ports: some_vec(ports),
            },
            rv,
        ))
    }
}

impl FromProto for core::Node {
    const API_VERSION: &'static str = <core::Node as Resource>::API_VERSION;
    const KIND: &'static str = <core::Node as Resource>::KIND;
    const LIST_KIND: &'static str = "NodeList";
    fn from_message(raw: &[u8]) -> Result<(Self, Option<String>), Error> {
        let n: pb::Node = decode(raw, "Node")?;
        let (metadata, rv) = node_meta(n.metadata.unwrap_or_default())?;
        let spec = n.spec.map(|s| core::NodeSpec {
            pod_cidr: s.pod_cidr,
            pod_cidrs: some_vec(s.pod_cidrs),
            taints: some_vec(
                s.taints
                    .into_iter()
                    .map(|t| core::Taint {
                        key: t.key.unwrap_or_default(),
                        value: t.value,
                        effect: t.effect.unwrap_or_default(),
                        ..core::Taint::default()
                    })
                    .collect(),
            ),
            ..core::NodeSpec::default()
        });
        let status = n.status.map(|s| core::NodeStatus {
            addresses: some_vec(
                s.addresses
                    .into_iter()
                    .map(|a| core::NodeAddress {
                        address: a.address.unwrap_or_default(),
                        type_: a.r#type.unwrap_or_default(),
                    })
                    .collect(),
            ),
            ..core::NodeStatus::default()
        });
        Ok((
            core::Node {
                metadata,
                spec,
                status,
            },
            rv,
        ))
    }
}

impl FromProto for networking::ServiceCIDR {
    const API_VERSION: &'static str = <networking::ServiceCIDR as Resource>::API_VERSION;
    const KIND: &'static str = <networking::ServiceCIDR as Resource>::KIND;
    const LIST_KIND: &'static str = "ServiceCIDRList";
    fn from_message(raw: &[u8]) -> Result<(Self, Option<String>), Error> {
        let c: pb::ServiceCidr = decode(raw, "ServiceCIDR")?;
        let (metadata, rv) = node_meta(c.metadata.unwrap_or_default())?;
        Ok((
            networking::ServiceCIDR {
                metadata,
                spec: c.spec.map(|s| networking::ServiceCIDRSpec {
                    cidrs: some_vec(s.cidrs),
                }),
                status: None,
            },
            rv,
        ))
    }
}
