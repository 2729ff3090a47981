//! Synthetic clusters at scale: N ClusterIP services with one TCP port, each with one
//! EndpointSlice of M ready endpoints, shaped as the API server returns them (uid,
//! resourceVersion, creationTimestamp, labels, selector, targetRef, zone...). Addresses
//! only from 198.18.0.0/15: cluster IPs from 198.18.0.0/17 (each IP with another port
//! past 32,766 services), endpoints from 198.18.128.0/17 + 198.19.0.0/16 (wrapping past
//! 98,304 endpoints).

use serde_json::{json, Value};

fn v4(n: u32) -> String {
    let a = 0xC612_0000u32 + n; // 198.18.0.0 + n
    format!(
        "{}.{}.{}.{}",
        a >> 24,
        (a >> 16) & 255,
        (a >> 8) & 255,
        a & 255
    )
}

/// The cluster IP of service `i`; past 32,766 services the addresses repeat, with
/// another port (see [`service_port`]), so that every (IP, port) stays unique.
pub fn cluster_ip(i: u32) -> String {
    v4(1 + (i % 32_766))
}

/// The port of service `i`: 80 for the first 32,766 services, then 81, 82...
pub fn service_port(i: u32) -> u16 {
    80 + (i / 32_766) as u16
}

/// The address of endpoint `k` (over all services).
pub fn endpoint_ip(k: u32) -> String {
    v4(0x8000 + (k % 98_304))
}

/// Service `i` of the synthetic cluster.
pub fn scale_service(i: u32) -> Value {
    let ip = cluster_ip(i);
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {
            "name": format!("svc-{i}"), "namespace": format!("ns-{}", i % 100),
            "uid": format!("00000000-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 1000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"app": format!("app-{i}"), "tier": "backend"}
        },
        "spec": {
            "type": "ClusterIP", "clusterIP": ip, "clusterIPs": [ip],
            "ipFamilies": ["IPv4"], "ipFamilyPolicy": "SingleStack",
            "internalTrafficPolicy": "Cluster", "sessionAffinity": "None",
            "selector": {"app": format!("app-{i}")},
            "ports": [{"name": "http", "port": service_port(i), "protocol": "TCP", "targetPort": 8080}]
        },
        "status": {"loadBalancer": {}}
    })
}

/// The one EndpointSlice of service `i`, with `m` ready endpoints.
pub fn scale_slice(i: u32, m: u32) -> Value {
    let eps: Vec<Value> = (0..m)
        .map(|j| {
            let k = i * m + j;
            json!({
                "addresses": [endpoint_ip(k)],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "nodeName": format!("node-{}", k % 50),
                "zone": "zone-a",
                "targetRef": {"kind": "Pod", "namespace": format!("ns-{}", i % 100),
                              "name": format!("app-{i}-{j}"),
                              "uid": format!("10000000-0000-4000-8000-{k:012}")}
            })
        })
        .collect();
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {
            "name": format!("svc-{i}-abcde"), "namespace": format!("ns-{}", i % 100),
            "uid": format!("20000000-0000-4000-8000-{i:012}"),
            "resourceVersion": format!("{}", 100_000 + i),
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "generateName": format!("svc-{i}-"),
            "labels": {"kubernetes.io/service-name": format!("svc-{i}"),
                       "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": eps
    })
}

/// The node `name` of the synthetic cluster.
pub fn scale_node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": "zone-a",
                                              "kubernetes.io/hostname": name}},
        "spec": {"podCIDRs": ["198.19.255.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "198.19.254.1"}]}
    })
}

/// The whole cluster as one `kind: List` JSON document: the node, `n` services, `n`
/// slices of `m` endpoints.
pub fn scale_manifest(node: &str, n: u32, m: u32) -> String {
    let mut items = vec![scale_node(node)];
    items.extend((0..n).map(scale_service));
    items.extend((0..n).map(|i| scale_slice(i, m)));
    json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}
