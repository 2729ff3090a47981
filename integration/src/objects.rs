//! Objects for the double, shaped as the API server returns them.

use serde_json::{json, Value};

pub fn node(name: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "zone-a"}},
        "spec": {"podCIDRs": ["198.18.64.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": ip}]}
    })
}

/// A ClusterIP service with one TCP port.
pub fn service(ns: &str, name: &str, cluster_ip: &str, port: u16) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "ClusterIP", "clusterIP": cluster_ip, "clusterIPs": [cluster_ip],
                 "ports": [{"name": "p", "port": port, "targetPort": port, "protocol": "TCP"}]}
    })
}

/// An IPv4 endpoint slice for `service` with ready endpoints on `node`.
pub fn slice(ns: &str, service: &str, name: &str, addrs: &[&str], port: u16, node: &str) -> Value {
    let eps: Vec<Value> = addrs
        .iter()
        .map(|a| json!({"addresses": [a], "conditions": {"ready": true}, "nodeName": node}))
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": ns,
                     "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "p", "port": port, "protocol": "TCP"}],
        "endpoints": eps
    })
}
