//! The objects kube-nlproxy reads, as protobuf messages of only the fields it reads.
//! Field numbers are upstream's (`k8s.io/api/.../generated.proto`, as `k8s-pb` carries
//! them); prost skips every other field of the wire without building it. What is kept is
//! what `kube_model::lean` keeps from JSON (and, of a Node, what the engine and the
//! model read).

use std::collections::BTreeMap;

/// `runtime.TypeMeta` (in the envelope's `runtime.Unknown`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TypeMeta {
    #[prost(string, optional, tag = "1")]
    pub api_version: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub kind: Option<String>,
}

/// `meta.v1.ListMeta`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ListMeta {
    #[prost(string, optional, tag = "2")]
    pub resource_version: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub r#continue: Option<String>,
}

/// `meta.v1.Time`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Time {
    #[prost(int64, optional, tag = "1")]
    pub seconds: Option<i64>,
    #[prost(int32, optional, tag = "2")]
    pub nanos: Option<i32>,
}

/// `meta.v1.ObjectMeta`, the fields read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ObjectMeta {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub namespace: Option<String>,
    #[prost(string, optional, tag = "6")]
    pub resource_version: Option<String>,
    #[prost(message, optional, tag = "9")]
    pub deletion_timestamp: Option<Time>,
    #[prost(btree_map = "string, string", tag = "11")]
    pub labels: BTreeMap<String, String>,
    #[prost(btree_map = "string, string", tag = "12")]
    pub annotations: BTreeMap<String, String>,
}

/// `meta.v1.Status` (a watch's ERROR event), the fields read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    #[prost(string, optional, tag = "2")]
    pub status: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub message: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub reason: Option<String>,
    #[prost(int32, optional, tag = "6")]
    pub code: Option<i32>,
}

/// `meta.v1.WatchEvent`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WatchEvent {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(message, optional, tag = "2")]
    pub object: Option<RawExtension>,
}

/// `runtime.RawExtension`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RawExtension {
    #[prost(bytes = "vec", optional, tag = "1")]
    pub raw: Option<Vec<u8>>,
}

/// `core.v1.Service`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Service {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<ServiceSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<ServiceStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ServiceSpec {
    #[prost(message, repeated, tag = "1")]
    pub ports: Vec<ServicePort>,
    #[prost(string, optional, tag = "3")]
    pub cluster_ip: Option<String>,
    #[prost(string, optional, tag = "4")]
    pub r#type: Option<String>,
    #[prost(string, repeated, tag = "5")]
    pub external_ips: Vec<String>,
    #[prost(string, optional, tag = "7")]
    pub session_affinity: Option<String>,
    #[prost(string, repeated, tag = "9")]
    pub load_balancer_source_ranges: Vec<String>,
    #[prost(string, optional, tag = "11")]
    pub external_traffic_policy: Option<String>,
    #[prost(int32, optional, tag = "12")]
    pub health_check_node_port: Option<i32>,
    #[prost(message, optional, tag = "14")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    #[prost(string, repeated, tag = "18")]
    pub cluster_ips: Vec<String>,
    #[prost(string, repeated, tag = "19")]
    pub ip_families: Vec<String>,
    #[prost(string, optional, tag = "22")]
    pub internal_traffic_policy: Option<String>,
    #[prost(string, optional, tag = "23")]
    pub traffic_distribution: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ServicePort {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub protocol: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub port: Option<i32>,
    #[prost(int32, optional, tag = "5")]
    pub node_port: Option<i32>,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct SessionAffinityConfig {
    #[prost(message, optional, tag = "1")]
    pub client_ip: Option<ClientIpConfig>,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct ClientIpConfig {
    #[prost(int32, optional, tag = "1")]
    pub timeout_seconds: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ServiceStatus {
    #[prost(message, optional, tag = "1")]
    pub load_balancer: Option<LoadBalancerStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LoadBalancerStatus {
    #[prost(message, repeated, tag = "1")]
    pub ingress: Vec<LoadBalancerIngress>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LoadBalancerIngress {
    #[prost(string, optional, tag = "1")]
    pub ip: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub ip_mode: Option<String>,
}

/// `discovery.v1.EndpointSlice`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct EndpointSlice {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, repeated, tag = "2")]
    pub endpoints: Vec<Endpoint>,
    #[prost(message, repeated, tag = "3")]
    pub ports: Vec<EndpointPort>,
    #[prost(string, optional, tag = "4")]
    pub address_type: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Endpoint {
    #[prost(string, repeated, tag = "1")]
    pub addresses: Vec<String>,
    #[prost(message, optional, tag = "2")]
    pub conditions: Option<EndpointConditions>,
    #[prost(string, optional, tag = "6")]
    pub node_name: Option<String>,
    #[prost(string, optional, tag = "7")]
    pub zone: Option<String>,
    #[prost(message, optional, tag = "8")]
    pub hints: Option<EndpointHints>,
}

#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct EndpointConditions {
    #[prost(bool, optional, tag = "1")]
    pub ready: Option<bool>,
    #[prost(bool, optional, tag = "2")]
    pub serving: Option<bool>,
    #[prost(bool, optional, tag = "3")]
    pub terminating: Option<bool>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EndpointHints {
    #[prost(message, repeated, tag = "1")]
    pub for_zones: Vec<Named>,
    #[prost(message, repeated, tag = "2")]
    pub for_nodes: Vec<Named>,
}

/// `discovery.v1.ForZone` and `ForNode`: a name.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Named {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct EndpointPort {
    #[prost(string, optional, tag = "1")]
    pub name: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub protocol: Option<String>,
    #[prost(int32, optional, tag = "3")]
    pub port: Option<i32>,
}

/// `core.v1.Node`, the fields read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Node {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<NodeSpec>,
    #[prost(message, optional, tag = "3")]
    pub status: Option<NodeStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeSpec {
    #[prost(string, optional, tag = "1")]
    pub pod_cidr: Option<String>,
    #[prost(message, repeated, tag = "5")]
    pub taints: Vec<Taint>,
    #[prost(string, repeated, tag = "7")]
    pub pod_cidrs: Vec<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Taint {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub value: Option<String>,
    #[prost(string, optional, tag = "3")]
    pub effect: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeStatus {
    #[prost(message, repeated, tag = "5")]
    pub addresses: Vec<NodeAddress>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct NodeAddress {
    #[prost(string, optional, tag = "1")]
    pub r#type: Option<String>,
    #[prost(string, optional, tag = "2")]
    pub address: Option<String>,
}

/// `networking.v1.ServiceCIDR`, the fields read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServiceCidr {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    #[prost(message, optional, tag = "2")]
    pub spec: Option<ServiceCidrSpec>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ServiceCidrSpec {
    #[prost(string, repeated, tag = "1")]
    pub cidrs: Vec<String>,
}
