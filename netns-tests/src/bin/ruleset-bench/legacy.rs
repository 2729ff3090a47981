//! The previous ruleset shape, as the negative control of the validation measurements:
//! one chain per service (`meta l4proto tcp dnat ip to numgen random mod N offset O map
//! @endpoints-XX`), reached through `goto` elements of `service-ips`, endpoints in 256
//! numgen-keyed maps. Only what the kernel's validation and commit costs depend on is
//! reproduced (ClusterIP services, the nat and filter base chains); the compiler no
//! longer emits it.

use std::collections::BTreeMap;

use kube_model::{resolve_endpoints, Cluster};
use nft_model::build::{self, jump, rule, KeyField};
use nft_model::*;

const SHARDS: usize = 256;

fn v(ip: &std::net::IpAddr) -> Value {
    match ip {
        std::net::IpAddr::V4(a) => Value::Ipv4(*a),
        std::net::IpAddr::V6(a) => Value::Ipv6(*a),
    }
}

/// The table of `cluster` (IPv4 ClusterIP services) in the previous shape.
pub fn table(cluster: &Cluster) -> Table {
    let fam = Family::Ip;
    let dst = [KeyField::Daddr, KeyField::L4proto, KeyField::Dport];
    let mut t = Table::new(fam, "kube-nlproxy");
    let mut cluster_ips = Set::set("cluster-ips", vec![DataType::Ipv4Addr]);
    let mut service_ips = Set::map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
        SetData::Verdict,
    );
    let mut maps: BTreeMap<usize, Set> = BTreeMap::new();
    let mut chains = Vec::new();
    let mut next_offset = vec![0u32; SHARDS];
    for (i, svc) in cluster.services.values().enumerate() {
        let (Some(ip), Some(port)) = (svc.cluster_ips.first(), svc.ports.first()) else {
            continue;
        };
        let slices: Vec<_> = cluster.slices_of(&svc.key).collect();
        let eps = resolve_endpoints(&slices, port, kube_model::IpFamily::V4, "");
        if eps.is_empty() {
            continue;
        }
        let shard = i % SHARDS;
        let offset = next_offset[shard];
        next_offset[shard] += 4096;
        let name = format!("endpoints-{shard:02x}");
        let map = maps.entry(shard).or_insert_with(|| {
            Set::map(
                name.clone(),
                vec![DataType::HostInt32],
                SetData::Values(vec![DataType::Ipv4Addr, DataType::InetService]),
            )
        });
        for (j, e) in eps.iter().enumerate() {
            map.elements.push(Element::map(
                vec![Value::Int(offset + j as u32)],
                ElemData::Values(vec![v(&e.addr), Value::Port(e.port)]),
            ));
        }
        let chain = format!("svc-{i}");
        chains.push(Chain::regular(chain.clone()).with_rules(vec![Rule::new(
            build::dnat_numgen_map(fam, 6, eps.len() as u32, offset, &name),
        )]));
        cluster_ips.elements.push(Element::key(vec![v(ip)]));
        service_ips.elements.push(Element::map(
            vec![v(ip), Value::Proto(6), Value::Port(port.port)],
            ElemData::Verdict(Verdict::Goto(chain)),
        ));
    }
    t.sets.push(cluster_ips);
    t.sets.push(service_ips);
    t.sets.extend(maps.into_values());
    let base = |name: &str, chain_type, hook, priority, target: &str| {
        Chain::base(
            name,
            BaseHook {
                chain_type,
                hook,
                priority,
                policy: Policy::Accept,
            },
        )
        .with_rules(vec![rule(vec![build::ct_new(), vec![jump(target)]])])
    };
    t.chains.push(base(
        "nat-prerouting",
        ChainType::Nat,
        Hook::Prerouting,
        -100,
        "services",
    ));
    t.chains.push(base(
        "nat-output",
        ChainType::Nat,
        Hook::Output,
        -100,
        "services",
    ));
    t.chains.push(base(
        "filter-forward",
        ChainType::Filter,
        Hook::Forward,
        0,
        "cluster-ips-check",
    ));
    t.chains.push(
        Chain::regular("services").with_rules(vec![Rule::new(build::vmap_lookup(
            fam,
            &dst,
            "service-ips",
        ))]),
    );
    t.chains.push(
        Chain::regular("cluster-ips-check").with_rules(vec![rule(vec![
            build::addr_in_set(fam, false, "cluster-ips", false),
            vec![build::reject(fam)],
        ])]),
    );
    t.chains.extend(chains);
    t
}
