//! Large clusters: thousands of services in one case (issue 39 item 2), generated like
//! [`generate`]'s (the same services, slices, legacy spellings) in an environment with
//! room for them: the IPv4 service CIDR 198.18.96.0/20 ([`SERVICE_CIDR4`], 4,094
//! ClusterIPs instead of 254), NodePorts from 1-65535, external and LoadBalancer IPs
//! from 198.18.240.0/21 and 198.18.248.0/21 (IPv6: 65,534 each in their /112s).
//! [`generate`] never makes one; the fuzzer runs them as a test of their own
//! (`large_clusters_agree_with_the_reference`), with the probes sampled as always.

use super::*;

/// The IPv4 service CIDR of a large case (contains the default 198.18.100.0/24).
pub const SERVICE_CIDR4: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 96, 0), 20);

/// The case of `seed` with `services` services (at most 4,000: the IPv4 ClusterIPs).
pub fn generate_large(seed: u64, services: usize) -> Case {
    assert!(services <= 4000, "at most 4,000 services ({services})");
    let mut rng = Rng::new(seed);
    let mut env = Env::default();
    env.service_cidrs[0] = (IpAddr::V4(SERVICE_CIDR4.0), SERVICE_CIDR4.1);
    env.node_port_range = (1, 65535);
    let mut alloc = Alloc::new(&env);
    let mut out = Vec::with_capacity(services);
    let mut slices = Vec::new();
    let mut keys: Vec<(String, String)> = Vec::with_capacity(services);
    for i in 0..services as u64 {
        let (ns, name) = service_key(&mut rng, i, &keys);
        keys.push((ns.clone(), name.clone()));
        let svc = service(&mut rng, &mut alloc, &ns, &name);
        slices.extend(slices_for(&mut rng, &env, &svc));
        out.push(svc);
    }
    legacy::respell(&mut Rng::new(seed ^ 0x001e_9ac5), &mut out, &mut slices);
    Case {
        seed,
        node: node(&env),
        env,
        services: out,
        slices,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::cidr_contains;

    #[test]
    fn a_large_case_is_legal_and_in_its_pools() {
        let c = generate_large(3, 3000);
        assert_eq!(c.services.len(), 3000);
        let keys: BTreeSet<_> = c
            .services
            .iter()
            .map(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()))
            .collect();
        assert_eq!(keys.len(), 3000, "unique services");
        let mut ips = BTreeSet::new();
        let mut node_ports = BTreeSet::new();
        for s in &c.services {
            let spec = s.spec.as_ref().unwrap();
            for a in spec.cluster_ips.iter().flatten().filter(|a| *a != "None") {
                let a = crate::ip::parse_ip(a).unwrap();
                assert!(c.env.service_cidrs.iter().any(|n| cidr_contains(n, &a)));
                assert!(ips.insert(a), "{a} twice");
            }
            for p in spec.ports.iter().flatten() {
                if let Some(np) = p.node_port {
                    assert!(node_ports.insert(np), "nodePort {np} twice");
                }
            }
        }
        assert!(ips.len() > 3000, "{}", ips.len());
    }
}
