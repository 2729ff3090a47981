//! `bindAddress` / `--bind-address` acted on as upstream does (`detectNodeIPs` in
//! `cmd/kube-proxy/app/server.go`): an address that is not unspecified overrides the
//! node's primary IP of its family (used for `nodePortAddresses: primary` and for
//! loadBalancerSourceRanges that include the node). kube-proxy binds no socket to it.
//!
//! Done on the Node object on its way to the engine (`events::EventSender`): the address is put first among the
//! node's InternalIPs, which is where the model takes a family's primary IP from.

use std::net::IpAddr;

use k8s_openapi::api::core::v1 as core;

/// Make `ip` the node's primary address of its family.
pub fn override_primary(node: &mut core::Node, ip: IpAddr) {
    let status = node.status.get_or_insert_with(Default::default);
    let addrs = status.addresses.get_or_insert_with(Vec::new);
    addrs.retain(|a| !(a.type_ == "InternalIP" && a.address.parse::<IpAddr>().ok() == Some(ip)));
    addrs.insert(
        0,
        core::NodeAddress {
            address: ip.to_string(),
            type_: "InternalIP".into(),
        },
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(addrs: &[(&str, &str)]) -> core::Node {
        core::Node {
            metadata: Default::default(),
            spec: None,
            status: Some(core::NodeStatus {
                addresses: Some(
                    addrs
                        .iter()
                        .map(|(t, a)| core::NodeAddress {
                            type_: t.to_string(),
                            address: a.to_string(),
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
        }
    }

    fn primary(n: &core::Node) -> Vec<IpAddr> {
        let mut n = n.clone();
        n.metadata.name = Some("a".into());
        let (cluster, _) = kube_model::Cluster::from_objects(&[], &[], Some(&n));
        cluster.node.map(|n| n.primary_ips).unwrap_or_default()
    }

    #[test]
    fn bind_address_becomes_the_primary_ip_of_its_family() {
        let mut n = node(&[("InternalIP", "198.18.0.1"), ("InternalIP", "2001:db8::1")]);
        assert_eq!(primary(&n)[0], "198.18.0.1".parse::<IpAddr>().unwrap());
        override_primary(&mut n, "198.18.0.9".parse().unwrap());
        let p = primary(&n);
        assert!(p.contains(&"198.18.0.9".parse().unwrap()), "{p:?}");
        assert!(!p.contains(&"198.18.0.1".parse().unwrap()), "{p:?}");
        assert!(
            p.contains(&"2001:db8::1".parse().unwrap()),
            "the other family stays"
        );
        // a node without addresses gets one
        let mut bare = node(&[]);
        override_primary(&mut bare, "2001:db8::9".parse().unwrap());
        assert_eq!(
            primary(&bare),
            vec!["2001:db8::9".parse::<IpAddr>().unwrap()]
        );
    }
}
