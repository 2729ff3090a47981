//! Synthetic clusters of many services, for load tests.

use std::net::IpAddr;

use kube_model::{
    Cluster, Endpoint, EndpointSlice, IpFamily, Protocol, Service, ServiceKey, ServicePort,
    SlicePort,
};

/// `services` IPv4 ClusterIP services `ns/svc-<i>` (ClusterIP 198.18.x.y from
/// 198.18.0.1 up, TCP port 80 -> 8080), each with one slice `ns/svc-<i>-1` of
/// `endpoints` ready endpoints on node-b (198.18.64.0 up).
pub fn big_cluster(services: u32, endpoints: u32) -> Cluster {
    let mut c = Cluster::new();
    for i in 0..services {
        let key = ServiceKey::new("ns", format!("svc-{i}"));
        let n = 0x00ff_ffff & (i + 1);
        c.services.insert(
            key.clone(),
            Service::new_cluster_ip(
                key.clone(),
                IpAddr::from([198, 18, (n >> 8) as u8, n as u8]),
                ServicePort {
                    name: "http".into(),
                    protocol: Protocol::Tcp,
                    port: 80,
                    node_port: None,
                },
            ),
        );
        let eps = (0..endpoints)
            .map(|j| {
                let k = 0x4000 + i * endpoints + j;
                Endpoint::ready_on(
                    IpAddr::from([198, 18 + (k >> 16) as u8, (k >> 8) as u8, k as u8]),
                    Some("node-b"),
                )
            })
            .collect();
        let sk = ServiceKey::new("ns", format!("svc-{i}-1"));
        c.insert_slice(EndpointSlice {
            key: sk,
            service: key,
            family: IpFamily::V4,
            ports: vec![SlicePort {
                name: "http".into(),
                protocol: Protocol::Tcp,
                port: 8080,
            }],
            endpoints: eps,
        });
    }
    c
}
