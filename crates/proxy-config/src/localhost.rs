//! Localhost NodePorts in nftables mode (KEP-6032, `pkg/proxy/localnodeportproxy`):
//! which IP families get the userspace TCP proxy on `127.0.0.1` / `::1` (the feature
//! gate that allows it, `KubeProxyNFTablesLocalhostNodePorts`, is in `gates`).

use kube_model::{parse_cidr_sloppy, IpFamily};

/// `nodePortAddresses`' `localhost` keyword: the loopback CIDRs of both families.
pub const LOCALHOST_CIDRS: [&str; 2] = ["127.0.0.0/8", "::1/128"];

/// The families whose TCP NodePorts the proxy serves: nftables mode, the gate on, and a
/// CIDR of the family in nodePortAddresses (keywords expanded) whose network address is
/// loopback, as upstream's `ContainsExplicitLoopback` (so `localhost`, `127.0.0.1/32`
/// or `::1/128`, never `all`, `0.0.0.0/0` or `::/0`).
pub fn proxy_families(nftables: bool, gate: bool, node_port_addresses: &[String]) -> Vec<IpFamily> {
    if !nftables || !gate {
        return Vec::new();
    }
    let mut out = Vec::new();
    for family in [IpFamily::V4, IpFamily::V6] {
        let explicit = node_port_addresses.iter().any(|a| {
            parse_cidr_sloppy(a).is_some_and(|c| c.family() == family && c.addr.is_loopback())
        });
        if explicit {
            out.push(family);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fams(addrs: &[&str]) -> Vec<IpFamily> {
        let a: Vec<String> = addrs.iter().map(|s| s.to_string()).collect();
        proxy_families(true, true, &a)
    }

    #[test]
    fn only_explicit_loopback_cidrs_select_a_family() {
        assert_eq!(fams(&LOCALHOST_CIDRS), vec![IpFamily::V4, IpFamily::V6]);
        assert_eq!(fams(&["127.0.0.1/32"]), vec![IpFamily::V4]);
        assert_eq!(fams(&["::1/128", "198.18.0.0/15"]), vec![IpFamily::V6]);
        assert!(fams(&["0.0.0.0/0", "::/0"]).is_empty());
        assert!(fams(&["198.18.0.0/15"]).is_empty());
        assert!(fams(&[]).is_empty());
        let a = vec!["127.0.0.0/8".to_string()];
        assert!(proxy_families(false, true, &a).is_empty(), "iptables mode");
        assert!(proxy_families(true, false, &a).is_empty(), "gate off");
    }
}
