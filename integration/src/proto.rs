//! The API-server double's protobuf (`application/vnd.kubernetes.protobuf`), written as
//! apimachinery writes it: an object is `k8s\0` + `runtime.Unknown` {typeMeta, raw}; a
//! list is one such envelope around the `XList` message; a watch stream is frames of a
//! 4-byte big-endian length and a `meta.v1.WatchEvent` (no envelope) whose object is an
//! enveloped object. Objects are encoded by `k8s-pb` (upstream's generated types) from
//! their JSON through `k8s-openapi`: no code of the proxy's decoder (`kube-proto`).

use k8s_openapi::api::core::v1 as core;
use k8s_openapi::api::discovery::v1 as discovery;
use k8s_openapi::api::networking::v1 as networking;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::api::core::v1 as pcore;
use k8s_pb::api::discovery::v1 as pdisc;
use k8s_pb::api::networking::v1 as pnet;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pmeta;
use k8s_pb::apimachinery::pkg::runtime as prt;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use prost::Message;
use serde_json::Value;

/// The content type clients ask for.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The stream content type of a protobuf watch.
pub const WATCH_CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// `k8s\0` + runtime.Unknown around a message.
pub fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let u = prt::Unknown {
        type_meta: Some(prt::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw.to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(u.encode_to_vec());
    out
}

/// An object's `(apiVersion, kind, message)` from its JSON; None for a kind the double
/// does not encode or JSON that is not that kind.
pub fn message(v: &Value) -> Option<(String, String, Vec<u8>)> {
    let api_version = v.get("apiVersion")?.as_str()?.to_string();
    let kind = v.get("kind")?.as_str()?.to_string();
    let raw = match kind.as_str() {
        "Service" => service(&serde_json::from_value(v.clone()).ok()?).encode_to_vec(),
        "EndpointSlice" => slice(&serde_json::from_value(v.clone()).ok()?).encode_to_vec(),
        "Node" => node(&serde_json::from_value(v.clone()).ok()?).encode_to_vec(),
        "ServiceCIDR" => service_cidr(&serde_json::from_value(v.clone()).ok()?).encode_to_vec(),
        _ => return None,
    };
    Some((api_version, kind, raw))
}

/// An enveloped object from its JSON.
pub fn object(v: &Value) -> Option<Vec<u8>> {
    message(v).map(|(a, k, raw)| envelope(&a, &k, &raw))
}

/// An enveloped `XList` of item messages.
pub fn list<'a>(
    api_version: &str,
    list_kind: &str,
    resource_version: &str,
    r#continue: Option<&str>,
    items: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<u8> {
    let lm = pmeta::ListMeta {
        resource_version: Some(resource_version.into()),
        r#continue: r#continue.map(str::to_string),
        ..Default::default()
    };
    // An XList is {1: ListMeta, 2: items...} for every kind: each a length-delimited
    // field (keys 0x0a and 0x12), so the items need not be decoded again.
    let mut raw = Vec::new();
    let mut field = |key: u8, body: &[u8]| {
        raw.push(key);
        prost::encode_length_delimiter(body.len(), &mut raw).expect("a Vec grows");
        raw.extend_from_slice(body);
    };
    field(0x0a, &lm.encode_to_vec());
    for item in items {
        field(0x12, item);
    }
    envelope(api_version, list_kind, &raw)
}

/// A watch frame: the event type and its enveloped object.
pub fn watch_frame(r#type: &str, enveloped: &[u8]) -> Vec<u8> {
    let e = pmeta::WatchEvent {
        r#type: Some(r#type.into()),
        object: Some(prt::RawExtension {
            raw: Some(enveloped.to_vec()),
        }),
    };
    let body = e.encode_to_vec();
    let mut out = u32::try_from(body.len())
        .unwrap_or(u32::MAX)
        .to_be_bytes()
        .to_vec();
    out.extend(body);
    out
}

/// An enveloped `Status` (a watch's ERROR event, an error response).
pub fn status(code: i32, reason: &str, message: &str) -> Vec<u8> {
    let s = pmeta::Status {
        status: Some("Failure".into()),
        message: Some(message.into()),
        reason: Some(reason.into()),
        code: Some(code),
        ..Default::default()
    };
    envelope("v1", "Status", &s.encode_to_vec())
}

/// An enveloped bookmark object of `kind`: only its resourceVersion (and, ending a
/// watch's initial events, the annotation `k8s.io/initial-events-end: "true"`), as the
/// watch cache sends it. An unknown kind gets a Service's message.
pub fn bookmark(
    api_version: &str,
    kind: &str,
    resource_version: &str,
    initial_end: bool,
) -> Vec<u8> {
    let mut metadata = pmeta::ObjectMeta {
        resource_version: Some(resource_version.into()),
        ..Default::default()
    };
    if initial_end {
        metadata
            .annotations
            .insert("k8s.io/initial-events-end".into(), "true".into());
    }
    let metadata = Some(metadata);
    let raw = match kind {
        "EndpointSlice" => pdisc::EndpointSlice {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        "Node" => pcore::Node {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        "ServiceCIDR" => pnet::ServiceCIDR {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
        _ => pcore::Service {
            metadata,
            ..Default::default()
        }
        .encode_to_vec(),
    };
    envelope(api_version, kind, &raw)
}

fn time(t: &meta::Time) -> pmeta::Time {
    pmeta::Time {
        seconds: Some(t.0.as_second()),
        nanos: Some(t.0.subsec_nanosecond()),
    }
}

/// Metadata, every field the double's objects carry.
pub fn object_meta(m: &meta::ObjectMeta) -> pmeta::ObjectMeta {
    pmeta::ObjectMeta {
        name: m.name.clone(),
        generate_name: m.generate_name.clone(),
        namespace: m.namespace.clone(),
        uid: m.uid.clone(),
        resource_version: m.resource_version.clone(),
        generation: m.generation,
        creation_timestamp: m.creation_timestamp.as_ref().map(time),
        deletion_timestamp: m.deletion_timestamp.as_ref().map(time),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: m.labels.clone().unwrap_or_default(),
        annotations: m.annotations.clone().unwrap_or_default(),
        finalizers: m.finalizers.clone().unwrap_or_default(),
        ..Default::default()
    }
}

fn int_or_string(v: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString) -> IntOrString {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString as Is;
    match v {
        Is::Int(i) => IntOrString {
            r#type: Some(0),
            int_val: Some(*i),
            str_val: None,
        },
        Is::String(s) => IntOrString {
            r#type: Some(1),
            int_val: None,
            str_val: Some(s.clone()),
        },
    }
}

pub fn service(o: &core::Service) -> pcore::Service {
    let spec = o.spec.as_ref().map(|s| pcore::ServiceSpec {
        ports: s
            .ports
            .iter()
            .flatten()
            .map(|p| pcore::ServicePort {
                name: p.name.clone(),
                protocol: p.protocol.clone(),
                app_protocol: p.app_protocol.clone(),
                port: Some(p.port),
                target_port: p.target_port.as_ref().map(int_or_string),
                node_port: p.node_port,
            })
            .collect(),
        selector: s.selector.clone().unwrap_or_default(),
        cluster_ip: s.cluster_ip.clone(),
        cluster_ips: s.cluster_ips.clone().unwrap_or_default(),
        r#type: s.type_.clone(),
        external_ips: s.external_ips.clone().unwrap_or_default(),
        session_affinity: s.session_affinity.clone(),
        load_balancer_ip: s.load_balancer_ip.clone(),
        load_balancer_source_ranges: s.load_balancer_source_ranges.clone().unwrap_or_default(),
        external_name: s.external_name.clone(),
        external_traffic_policy: s.external_traffic_policy.clone(),
        health_check_node_port: s.health_check_node_port,
        publish_not_ready_addresses: s.publish_not_ready_addresses,
        session_affinity_config: s.session_affinity_config.as_ref().map(|c| {
            pcore::SessionAffinityConfig {
                client_ip: c.client_ip.as_ref().map(|c| pcore::ClientIpConfig {
                    timeout_seconds: c.timeout_seconds,
                }),
            }
        }),
        ip_families: s.ip_families.clone().unwrap_or_default(),
        ip_family_policy: s.ip_family_policy.clone(),
        allocate_load_balancer_node_ports: s.allocate_load_balancer_node_ports,
        load_balancer_class: s.load_balancer_class.clone(),
        internal_traffic_policy: s.internal_traffic_policy.clone(),
        traffic_distribution: s.traffic_distribution.clone(),
    });
    let status = o.status.as_ref().map(|st| pcore::ServiceStatus {
        load_balancer: st
            .load_balancer
            .as_ref()
            .map(|lb| pcore::LoadBalancerStatus {
                ingress: lb
                    .ingress
                    .iter()
                    .flatten()
                    .map(|i| pcore::LoadBalancerIngress {
                        ip: i.ip.clone(),
                        hostname: i.hostname.clone(),
                        ip_mode: i.ip_mode.clone(),
                        ports: vec![],
                    })
                    .collect(),
            }),
        conditions: vec![],
    });
    pcore::Service {
        metadata: Some(object_meta(&o.metadata)),
        spec,
        status,
    }
}

pub fn slice(o: &discovery::EndpointSlice) -> pdisc::EndpointSlice {
    pdisc::EndpointSlice {
        metadata: Some(object_meta(&o.metadata)),
        address_type: Some(o.address_type.clone()),
        endpoints: o
            .endpoints
            .iter()
            .flatten()
            .map(|e| pdisc::Endpoint {
                addresses: e.addresses.clone(),
                conditions: e.conditions.as_ref().map(|c| pdisc::EndpointConditions {
                    ready: c.ready,
                    serving: c.serving,
                    terminating: c.terminating,
                }),
                hostname: e.hostname.clone(),
                target_ref: e.target_ref.as_ref().map(|r| pcore::ObjectReference {
                    kind: r.kind.clone(),
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    uid: r.uid.clone(),
                    ..Default::default()
                }),
                deprecated_topology: e.deprecated_topology.clone().unwrap_or_default(),
                node_name: e.node_name.clone(),
                zone: e.zone.clone(),
                hints: e.hints.as_ref().map(|h| pdisc::EndpointHints {
                    for_zones: h
                        .for_zones
                        .iter()
                        .flatten()
                        .map(|z| pdisc::ForZone {
                            name: Some(z.name.clone()),
                        })
                        .collect(),
                    for_nodes: h
                        .for_nodes
                        .iter()
                        .flatten()
                        .map(|n| pdisc::ForNode {
                            name: Some(n.name.clone()),
                        })
                        .collect(),
                }),
            })
            .collect(),
        ports: o
            .ports
            .iter()
            .flatten()
            .map(|p| pdisc::EndpointPort {
                name: p.name.clone(),
                protocol: p.protocol.clone(),
                port: p.port,
                app_protocol: p.app_protocol.clone(),
            })
            .collect(),
    }
}

pub fn node(o: &core::Node) -> pcore::Node {
    pcore::Node {
        metadata: Some(object_meta(&o.metadata)),
        spec: o.spec.as_ref().map(|s| pcore::NodeSpec {
            pod_cidr: s.pod_cidr.clone(),
            pod_cid_rs: s.pod_cidrs.clone().unwrap_or_default(),
            provider_id: s.provider_id.clone(),
            unschedulable: s.unschedulable,
            taints: s
                .taints
                .iter()
                .flatten()
                .map(|t| pcore::Taint {
                    key: Some(t.key.clone()),
                    value: t.value.clone(),
                    effect: Some(t.effect.clone()),
                    time_added: t.time_added.as_ref().map(time),
                })
                .collect(),
            ..Default::default()
        }),
        status: o.status.as_ref().map(|st| pcore::NodeStatus {
            phase: st.phase.clone(),
            addresses: st
                .addresses
                .iter()
                .flatten()
                .map(|a| pcore::NodeAddress {
                    r#type: Some(a.type_.clone()),
                    address: Some(a.address.clone()),
                })
                .collect(),
            ..Default::default()
        }),
    }
}

pub fn service_cidr(o: &networking::ServiceCIDR) -> pnet::ServiceCIDR {
    pnet::ServiceCIDR {
        metadata: Some(object_meta(&o.metadata)),
        spec: o.spec.as_ref().map(|s| pnet::ServiceCIDRSpec {
            cidrs: s.cidrs.clone().unwrap_or_default(),
        }),
        status: None,
    }
}
