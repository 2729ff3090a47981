use super::*;

#[test]
fn a_seed_reproduces_its_case() {
    let a = generate(42);
    let b = generate(42);
    assert_eq!(a.services, b.services);
    assert_eq!(a.slices, b.slices);
}

#[test]
fn generated_objects_are_legal() {
    let label = |s: &str| {
        s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    };
    for seed in 0..2000 {
        let c = generate(seed);
        let keys: BTreeSet<_> = c
            .services
            .iter()
            .map(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()))
            .collect();
        assert_eq!(keys.len(), c.services.len(), "seed {seed}: unique services");
        for (ns, name) in &keys {
            assert!(
                label(ns.as_deref().unwrap()),
                "seed {seed}: namespace {ns:?}"
            );
            let name = name.as_deref().unwrap();
            assert!(label(name) && name.starts_with(|c: char| c.is_ascii_lowercase()));
        }
        let slice_keys: BTreeSet<_> = c
            .slices
            .iter()
            .map(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()))
            .collect();
        assert_eq!(
            slice_keys.len(),
            c.slices.len(),
            "seed {seed}: unique slices"
        );
        let mut node_ports = BTreeSet::new();
        for s in &c.services {
            let spec = s.spec.as_ref().unwrap();
            let ports = spec.ports.as_ref().unwrap();
            let names: BTreeSet<_> = ports.iter().map(|p| p.name.clone()).collect();
            assert_eq!(names.len(), ports.len(), "seed {seed}: unique port names");
            if ports.len() > 1 {
                assert!(ports.iter().all(|p| p.name.is_some()), "seed {seed}");
            }
            for p in ports {
                if let Some(np) = p.node_port {
                    let (lo, hi) = c.env.node_port_range;
                    assert!((lo..=hi).contains(&np));
                    assert!(node_ports.insert(np), "seed {seed}: nodePort {np} twice");
                }
            }
            if let Some(t) = spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
            {
                assert!((1..=86400).contains(&t));
            }
        }
        for sl in &c.slices {
            assert!(endpoints(sl).len() <= 100);
            for e in endpoints(sl) {
                assert!((1..=100).contains(&e.addresses.len()), "seed {seed}");
                for a in &e.addresses {
                    match sl.address_type.as_str() {
                        "FQDN" => assert!(crate::ip::parse_ip(a).is_none(), "seed {seed}"),
                        t => assert_eq!(crate::ip::parse_ip(a).unwrap().is_ipv6(), t == "IPv6"),
                    }
                }
            }
            let names: BTreeSet<_> = sl
                .ports
                .iter()
                .flatten()
                .map(|p| p.name.clone().unwrap_or_default())
                .collect();
            assert_eq!(
                names.len(),
                sl.ports.as_ref().map_or(0, Vec::len),
                "seed {seed}: unique slice port names"
            );
        }
    }
}
