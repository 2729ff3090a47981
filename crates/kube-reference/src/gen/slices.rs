//! The generator's EndpointSlices of a service: IP slices per family with their ports,
//! endpoints, conditions, hints and repeated addresses; the labels the EndpointSlice
//! controller copies; FQDN slices. (`gen.rs` holds the cluster, its addresses and its
//! Services.)

use super::*;

/// The service's slices: 0..=3 per family it has, ports matched by name (a few
/// unmatched), endpoints local and remote with every condition combination, hints, and
/// sometimes an endpoint repeated from another slice.
pub(crate) fn slices_for(
    rng: &mut Rng,
    env: &Env,
    svc: &core::Service,
) -> Vec<discovery::EndpointSlice> {
    let spec = svc.spec.as_ref().expect("generated with a spec");
    if spec.type_.as_deref() == Some("ExternalName") {
        return Vec::new();
    }
    let name = svc.metadata.name.clone().expect("named");
    let fams: Vec<usize> = spec
        .ip_families
        .iter()
        .flatten()
        .map(|f| usize::from(f == "IPv6"))
        .collect();
    let mut out: Vec<discovery::EndpointSlice> = Vec::new();
    let mut counter = 0u16;
    for fam in fams {
        let nslices = rng.below(4);
        for j in 0..nslices {
            let mut ports = Vec::new();
            // Half the later slices of a family carry the ports of an earlier one, so an
            // endpoint listed in both is a duplicate for the proxy (same address and port).
            let earlier: Vec<&discovery::EndpointSlice> = out
                .iter()
                .filter(|s| s.address_type == ["IPv4", "IPv6"][fam])
                .collect();
            let inherit = !earlier.is_empty() && rng.chance(50);
            if inherit {
                ports = rng.pick(&earlier).ports.clone().unwrap_or_default();
            }
            for p in spec.ports.iter().flatten().filter(|_| !inherit) {
                if rng.chance(85) {
                    ports.push(slice_port(rng, p));
                }
            }
            if !inherit && rng.chance(10) {
                ports.push(discovery::EndpointPort {
                    name: Some("unused".into()),
                    protocol: Some("TCP".into()),
                    port: Some(9999),
                    ..Default::default()
                });
            }
            let neps = if rng.chance(3) {
                rng.range(20, 100)
            } else {
                rng.below(6)
            };
            let mut eps: Vec<discovery::Endpoint> = Vec::new();
            let mut addrs = BTreeSet::new();
            for _ in 0..neps {
                if !out.is_empty() && rng.chance(10) {
                    // the same address in two slices: as a controller writes it while it
                    // moves an endpoint between slices (a verbatim copy), or another pod
                    // given the address of one still terminating (another node, zone,
                    // hints, conditions)
                    let prev = rng.pick(&out);
                    if prev.address_type == ["IPv4", "IPv6"][fam] && !endpoints(prev).is_empty() {
                        let mut e = rng.pick(endpoints(prev)).clone();
                        if rng.chance(50) {
                            e.node_name = match rng.below(3) {
                                0 => None,
                                1 => Some(env.node_name.clone()),
                                _ => Some("node-b".into()),
                            };
                            e.zone = rng.chance(50).then(|| "zone-b".to_string());
                            if rng.chance(50) {
                                e.hints = None;
                            }
                            e.conditions = Some(discovery::EndpointConditions {
                                ready: rng.tristate(),
                                serving: rng.tristate(),
                                terminating: rng.tristate(),
                            });
                        }
                        if addrs.insert(e.addresses[0].clone()) {
                            eps.push(e);
                        }
                        continue;
                    }
                }
                counter += 1;
                let local = rng.chance(45);
                let addr = pod_ip(fam, local, counter.wrapping_mul(7) + rng.below(3) as u16);
                if !addrs.insert(addr.to_string()) {
                    continue;
                }
                let mut addresses = vec![addr.to_string()];
                if rng.chance(4) {
                    // several addresses (the API allows up to 100 of the slice's type);
                    // consumers use the first one
                    for k in 1..=rng.range(1, 2) as u16 {
                        let other = pod_ip(fam, rng.chance(50), counter.wrapping_mul(7) + 3 * k);
                        addresses.push(other.to_string());
                    }
                }
                let node_name = match rng.below(5) {
                    0 => None,
                    _ if local => Some(env.node_name.clone()),
                    _ => Some("node-b".into()),
                };
                let zone = match rng.below(3) {
                    0 => None,
                    1 => Some("zone-a".to_string()),
                    _ => Some("zone-b".to_string()),
                };
                let hints = match rng.below(4) {
                    0 => Some(discovery::EndpointHints {
                        for_zones: Some(vec![discovery::ForZone {
                            name: zone.clone().unwrap_or_else(|| "zone-b".into()),
                        }]),
                        for_nodes: None,
                    }),
                    1 => Some(discovery::EndpointHints {
                        for_zones: Some(vec![discovery::ForZone {
                            name: "zone-a".into(),
                        }]),
                        for_nodes: rng.chance(50).then(|| {
                            vec![discovery::ForNode {
                                name: node_name.clone().unwrap_or_else(|| "node-b".into()),
                            }]
                        }),
                    }),
                    _ => None,
                };
                eps.push(discovery::Endpoint {
                    addresses,
                    conditions: Some(discovery::EndpointConditions {
                        ready: rng.tristate(),
                        serving: rng.tristate(),
                        terminating: rng.tristate(),
                    }),
                    node_name,
                    zone,
                    hints,
                    ..Default::default()
                });
            }
            out.push(discovery::EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(format!("{name}-{}{j}", ["v4", "v6"][fam])),
                    namespace: svc.metadata.namespace.clone(),
                    labels: Some(slice_labels(rng, svc)),
                    ..Default::default()
                },
                address_type: ["IPv4", "IPv6"][fam].into(),
                endpoints: Some(eps),
                ports: Some(ports),
            });
        }
    }
    if rng.chance(3) {
        out.push(fqdn_slice(rng, svc));
    }
    out
}

/// A slice's labels as the EndpointSlice controller writes them (the service's labels,
/// the headless label exactly when the service is headless, the service name), and a
/// few slices written by hand with another proxy's label or the headless label.
fn slice_labels(rng: &mut Rng, svc: &core::Service) -> BTreeMap<String, String> {
    let mut l = svc.metadata.labels.clone().unwrap_or_default();
    l.remove(LABEL_HEADLESS);
    let spec = svc.spec.as_ref().expect("generated with a spec");
    if spec.cluster_ip.as_deref() == Some("None") {
        l.insert(LABEL_HEADLESS.into(), String::new());
    }
    l.insert(
        "kubernetes.io/service-name".into(),
        svc.metadata.name.clone().expect("named"),
    );
    match rng.below(100) {
        0 | 1 => {
            l.insert(LABEL_PROXY_NAME.into(), "other-proxy".into());
        }
        2 => {
            l.insert(LABEL_HEADLESS.into(), String::new());
        }
        _ => {}
    }
    l
}

/// A slice's port for the service port `p`: its name and protocol sometimes left out (the
/// API server defaults them to "" and TCP, `pkg/apis/discovery/v1/defaults.go`), and a
/// few without a port number (legal: "all ports"; upstream's endpoint slice cache takes
/// no endpoint from such a port).
fn slice_port(rng: &mut Rng, p: &core::ServicePort) -> discovery::EndpointPort {
    let name = p.name.clone().unwrap_or_default();
    let name = if name.is_empty() && rng.chance(50) {
        None
    } else {
        Some(name)
    };
    let protocol = match p.protocol.as_deref() {
        None | Some("TCP") if rng.chance(30) => None,
        _ => p.protocol.clone(),
    };
    discovery::EndpointPort {
        name,
        protocol,
        port: (!rng.chance(3)).then(|| rng.range(1, 65535) as i32),
        ..Default::default()
    }
}

/// An EndpointSlice of `addressType: FQDN` for `svc` (legal, written by hand or by other
/// controllers; kube-proxy handles IPv4 and IPv6 slices only).
fn fqdn_slice(rng: &mut Rng, svc: &core::Service) -> discovery::EndpointSlice {
    let name = svc.metadata.name.clone().expect("named");
    let spec = svc.spec.as_ref().expect("generated with a spec");
    let ports = spec
        .ports
        .iter()
        .flatten()
        .map(|p| slice_port(rng, p))
        .collect();
    let endpoints = (0..rng.range(1, 3))
        .map(|k| discovery::Endpoint {
            addresses: vec![format!("db-{k}.example.test")],
            node_name: rng.chance(50).then(|| "node-a".to_string()),
            ..Default::default()
        })
        .collect();
    discovery::EndpointSlice {
        metadata: ObjectMeta {
            name: Some(format!("{name}-fqdn")),
            namespace: svc.metadata.namespace.clone(),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/service-name".to_string(),
                name,
            )])),
            ..Default::default()
        },
        address_type: "FQDN".into(),
        endpoints: Some(endpoints),
        ports: Some(ports),
    }
}
