//! The fixed part of a table: base chains, the chains every service shares, the sets
//! and maps they look up, and one chain, set and map per endpoint class in use. It
//! depends on the configuration, the node and the classes in use only, never on a
//! service: services are elements of its sets (see docs/ruleset.md).

use std::collections::BTreeSet;

use nft_model::build::{self, goto, jump, rule, verdict, KeyField};
use nft_model::*;

use super::classes::{Class, Space};
use super::Ctx;
use crate::config::{NodePortAddrs, Proxier};
use crate::names::*;
use crate::rules::{addr_type, cidr_match, DST_KEY, PORT_KEY};

/// What a base chain does: enter a fixed chain, for new connections only or always.
#[derive(Debug, Clone, Copy)]
enum Entry {
    /// `ct state new jump <chain>`
    New(&'static str),
    /// `jump <chain>`
    Always(&'static str),
}

/// The base chains: name, type, hook, priority, what they enter (policy accept).
const BASE_CHAINS: [(&str, ChainType, Hook, i32, &[Entry]); 8] = [
    (
        FIREWALL_PREROUTING,
        ChainType::Filter,
        Hook::Prerouting,
        -110,
        &[Entry::New(FIREWALL_CHECK)],
    ),
    (
        FIREWALL_OUTPUT,
        ChainType::Filter,
        Hook::Output,
        -110,
        &[Entry::New(FIREWALL_CHECK)],
    ),
    (
        NAT_PREROUTING,
        ChainType::Nat,
        Hook::Prerouting,
        -100,
        &[Entry::Always(SERVICES)],
    ),
    (
        NAT_OUTPUT,
        ChainType::Nat,
        Hook::Output,
        -100,
        &[Entry::Always(SERVICES)],
    ),
    (
        FILTER_INPUT,
        ChainType::Filter,
        Hook::Input,
        0,
        &[Entry::New(ENDPOINTS_CHECK)],
    ),
    (
        FILTER_FORWARD,
        ChainType::Filter,
        Hook::Forward,
        0,
        &[Entry::New(ENDPOINTS_CHECK), Entry::New(CLUSTER_IPS_CHECK)],
    ),
    (
        FILTER_OUTPUT,
        ChainType::Filter,
        Hook::Output,
        0,
        &[Entry::New(ENDPOINTS_CHECK), Entry::New(CLUSTER_IPS_CHECK)],
    ),
    (
        NAT_POSTROUTING,
        ChainType::Nat,
        Hook::Postrouting,
        100,
        &[Entry::Always(MASQUERADING)],
    ),
];

/// Where a destination set sends its keys: (set, marks for masquerading, chain).
const DEST_DISPATCH: [(&str, bool, &str); 4] = [
    (DISPATCH_CLUSTER, false, PICK_CLUSTER),
    (DISPATCH_CLUSTER_MASQ, true, PICK_CLUSTER),
    (DISPATCH_LOCAL, false, PICK_LOCAL),
    (DISPATCH_EXTERNAL_LOCAL, false, EXTERNAL_LOCAL),
];

/// The same for NodePorts.
const NODEPORT_DISPATCH: [(&str, bool, &str); 2] = [
    (DISPATCH_NP_CLUSTER_MASQ, true, PICK_NP_CLUSTER),
    (DISPATCH_NP_EXTERNAL_LOCAL, false, NP_EXTERNAL_LOCAL),
];

/// The fixed objects of one table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Skeleton {
    /// Named counters (the localhost NodePort rejects' of nftables mode).
    pub counters: Vec<String>,
    /// Declarations, with the elements that belong to the skeleton itself (nodeport-ips).
    pub sets: Vec<Set>,
    pub chains: Vec<Chain>,
}

/// The skeleton for this context, these classes in use, and whether a service port has
/// session affinity (the `affinity` set of pins).
pub fn skeleton(ctx: &Ctx, classes: &BTreeSet<Class>, affinity: bool) -> Skeleton {
    let family = ctx.family;
    let at = addr_type(family);
    let dst_key = vec![at, DataType::InetProto, DataType::InetService];
    let port_key = vec![DataType::InetProto, DataType::InetService];
    let np_addrs = ctx.np_addrs();

    // The pin set first: the kernel finds a set named by a rule by walking the table's
    // sets in the order they were declared, and every affinity rule names this one
    // (docs/decisions/0014, "Where the pin set is declared").
    let mut sets = Vec::new();
    if affinity {
        sets.push(super::affinity::pin_set(family));
    }
    sets.push(Set::set(CLUSTER_IPS, vec![at]));
    for (name, _, _) in DEST_DISPATCH {
        sets.push(Set::set(name, dst_key.clone()));
    }
    for (name, _, _) in NODEPORT_DISPATCH {
        sets.push(Set::set(name, port_key.clone()));
    }
    sets.push(Set::map(SERVICE_IPS, dst_key.clone(), SetData::Verdict));
    sets.push(Set::map(
        SERVICE_NODEPORTS,
        port_key.clone(),
        SetData::Verdict,
    ));
    if let NodePortAddrs::Addrs(a) = &np_addrs {
        let mut s = Set::set(NODEPORT_IPS, vec![at]);
        s.elements = a
            .iter()
            .map(|ip| Element::key(vec![Value::from(*ip)]))
            .collect();
        sets.push(s);
    }
    sets.push(Set::set(NO_ENDPOINT_SERVICES, dst_key.clone()));
    sets.push(Set::set(NO_LOCAL_ENDPOINT_SERVICES, dst_key.clone()));
    sets.push(Set::set(NO_ENDPOINT_NODEPORTS, port_key.clone()));
    sets.push(Set::set(NO_LOCAL_ENDPOINT_NODEPORTS, port_key));
    sets.push(Set::set(FIREWALL_IPS, dst_key.clone()));
    let mut fw_key = dst_key;
    fw_key.push(at);
    let mut allow = Set::set(FIREWALL_ALLOW, fw_key);
    allow.flags.interval = true;
    sets.push(allow);
    sets.push(Set::set(HAIRPIN, vec![at, at]));
    for c in classes {
        sets.push(c.dests_decl(family));
        sets.push(c.endpoints_decl(family));
    }

    let mut chains: Vec<Chain> = BASE_CHAINS
        .iter()
        .map(|(name, chain_type, hook, priority, entries)| {
            let mut rules = base_chain_guards(ctx, name);
            rules.extend(entries.iter().map(|e| match e {
                Entry::New(c) => rule(vec![build::ct_new(), vec![jump(c)]]),
                Entry::Always(c) => rule(vec![vec![jump(c)]]),
            }));
            Chain::base(
                *name,
                BaseHook {
                    chain_type: *chain_type,
                    hook: *hook,
                    priority: *priority,
                    policy: Policy::Accept,
                },
            )
            .with_rules(rules)
        })
        .collect();
    chains.extend(fixed_chains(ctx, &np_addrs));
    for space in Space::ALL {
        let rules = classes
            .iter()
            .filter(|c| c.space == space)
            .map(|c| c.dispatch_rule(family))
            .collect();
        chains.push(Chain::regular(space.pick_chain()).with_rules(rules));
    }
    for c in classes {
        chains.push(Chain::regular(c.chain()).with_rules(c.chain_rules(family)));
    }
    let rejects = ctx.localhost_rejects();
    let mut counters: Vec<String> = rejects
        .iter()
        .map(|p| localhost_reject(*p).1.to_string())
        .collect();
    if ctx.localhost_node_ports() {
        counters.push(LOCALHOST_ACCEPTED.to_string());
    }
    for p in &rejects {
        sets.push(Set::set(
            localhost_reject(*p).0,
            vec![DataType::InetService],
        ));
    }
    // in input, before its entry: the packet has looped back through lo, so the ICMP
    // error reaches the client's socket (ECONNREFUSED); rejected in output, the send
    // itself would fail (EPERM)
    if let Some(c) = chains.iter_mut().find(|c| c.name == FILTER_INPUT) {
        let at = c.rules.len().saturating_sub(1);
        let rules: Vec<Rule> = rejects
            .iter()
            .map(|p| localhost_reject_rule(family, *p))
            .collect();
        c.rules.splice(at..at, rules);
    }
    Skeleton {
        counters,
        sets,
        chains,
    }
}

/// nftables mode's localhost NodePort reject for protocol `proto` (KEP-6032, decision
/// 0010): `ct state new ip daddr 127.0.0.0/8 udp dport @localhost-reject-udp counter
/// name "localhost-nodeport-rejected-udp" reject` (IPv6: `ip6 daddr ::1`). A new
/// connection from the node to a loopback address's NodePort of that protocol is
/// refused (ICMP port unreachable) and counted; the proxy's listeners serve TCP instead
/// when it runs.
fn localhost_reject_rule(family: Family, proto: u8) -> Rule {
    let lo = match family {
        Family::Ip6 => build::addr_cmp(
            family,
            false,
            CmpOp::Eq,
            &Value::Ipv6(std::net::Ipv6Addr::LOCALHOST),
        ),
        _ => build::prefix_match(
            family,
            false,
            &Value::Ipv4(std::net::Ipv4Addr::new(127, 0, 0, 0)),
            8,
            false,
        ),
    };
    let (set, counter) = localhost_reject(proto);
    rule(vec![
        build::ct_new(),
        lo,
        build::l4proto_eq(proto),
        build::set_lookup(family, &[KeyField::Dport], set, false),
        vec![build::counter_ref(counter), build::reject(family)],
    ])
}

/// The rules a base chain has before its entries, as upstream's proxier of the
/// configured mode has them in the hook's chain:
/// - localhost NodePorts (iptables mode), or `route_localnet` found set on the host
///   (another program's, or an earlier iptables mode's): the iptables proxier's
///   `KUBE-FIREWALL` rule in input and output (CVE-2020-8558: with `route_localnet` the
///   node would accept packets to 127.0.0.0/8 from its neighbours; upstream keeps that
///   chain, shared with kubelet, in every mode): packets to 127.0.0.0/8 from elsewhere
///   are dropped unless they belong to an established or related connection or were
///   DNATed (`! --ctstate RELATED,ESTABLISHED,DNAT`; the invalid and untracked ones,
///   which have no conntrack status to test, by a rule of their own);
/// - iptables mode: forwarded packets conntrack finds INVALID are dropped, as its
///   `KUBE-FORWARD` chain does unless `nf_conntrack_tcp_be_liberal` is set.
fn base_chain_guards(ctx: &Ctx, chain: &str) -> Vec<Rule> {
    use nft_model::{ct_state, ct_status};
    let family = ctx.family;
    let mut rules = Vec::new();
    let guard = ctx.localhost_node_ports()
        || (ctx.cfg.route_localnet && ctx.fam == kube_model::IpFamily::V4);
    if guard && (chain == FILTER_INPUT || chain == FILTER_OUTPUT) {
        let lo = Value::Ipv4(std::net::Ipv4Addr::new(127, 0, 0, 0));
        let martian = || {
            vec![
                build::prefix_match(family, false, &lo, 8, false),
                build::prefix_match(family, true, &lo, 8, true),
            ]
        };
        let mut invalid = martian();
        invalid.push(build::ct_state_any(ct_state::INVALID | ct_state::UNTRACKED));
        invalid.push(vec![verdict(Verdict::Drop)]);
        rules.push(rule(invalid));
        let mut not_dnat = martian();
        not_dnat.push(build::ct_state_none(
            ct_state::ESTABLISHED | ct_state::RELATED,
        ));
        not_dnat.push(build::ct_status_none(ct_status::DNAT));
        not_dnat.push(vec![verdict(Verdict::Drop)]);
        rules.push(rule(not_dnat));
    }
    if ctx.cfg.drops_invalid_forwarded() && chain == FILTER_FORWARD {
        rules.push(rule(vec![
            build::ct_state_any(ct_state::INVALID),
            vec![verdict(Verdict::Drop)],
        ]));
    }
    rules
}

/// `ip daddr @nodeport-ips`, or every local address but loopback (IPv4 loopback too
/// with localhost NodePorts).
fn nodeport_match(ctx: &Ctx, np_addrs: &NodePortAddrs) -> Vec<Expr> {
    let family = ctx.family;
    match np_addrs {
        NodePortAddrs::Addrs(_) => build::addr_in_set(family, false, NODEPORT_IPS, false),
        NodePortAddrs::AllLocal if ctx.localhost_node_ports() => build::fib_daddr_local(),
        NodePortAddrs::AllLocal => {
            let mut e = build::fib_daddr_local();
            if family == Family::Ip6 {
                e.extend(build::addr_cmp(
                    family,
                    false,
                    CmpOp::Neq,
                    &Value::Ipv6(std::net::Ipv6Addr::LOCALHOST),
                ));
            } else {
                e.extend(build::prefix_match(
                    family,
                    false,
                    &Value::Ipv4(std::net::Ipv4Addr::new(127, 0, 0, 0)),
                    8,
                    true,
                ));
            }
            e
        }
    }
}

/// The regular chains that do not depend on classes.
fn fixed_chains(ctx: &Ctx, np_addrs: &NodePortAddrs) -> Vec<Chain> {
    let family = ctx.family;
    let mark = ctx.cfg.masquerade_mark;
    let np_match = nodeport_match(ctx, np_addrs);
    let dispatch = |fields: &[KeyField], (set, masq, chain): (&str, bool, &str)| {
        let mut parts = vec![build::set_lookup(family, fields, set, false)];
        if masq {
            parts.push(build::mark_or(mark));
        }
        parts.push(vec![goto(chain)]);
        rule(parts)
    };

    let mut services = Vec::new();
    let cluster_masq = if ctx.cfg.masquerade_all {
        Some(Vec::new())
    } else {
        ctx.detector_not_local()
    };
    if let Some(d) = cluster_masq {
        // ClusterIP traffic not from a local pod is masqueraded (all of it with
        // masqueradeAll); traffic that is not DNATed is rejected or dropped anyway.
        services.push(rule(vec![
            build::addr_in_set(family, false, CLUSTER_IPS, false),
            d,
            build::mark_or(mark),
        ]));
    }
    services.extend(DEST_DISPATCH.iter().map(|d| dispatch(&DST_KEY, *d)));
    services.push(Rule::new(build::vmap_lookup(family, &DST_KEY, SERVICE_IPS)));
    services.push(rule(vec![np_match.clone(), vec![goto(NODEPORTS)]]));

    let mut nodeports: Vec<Rule> = Vec::new();
    if ctx.localhost_node_ports() {
        // iptables mode's `-d 127.0.0.0/8 ... -m nfacct --nfacct-name
        // localhost_nps_accepted_pkts` on the NodePorts with endpoints (the dispatched
        // ones), first packets only (a nat chain), as a named counter
        let lo = Value::Ipv4(std::net::Ipv4Addr::new(127, 0, 0, 0));
        for (set, _, _) in NODEPORT_DISPATCH {
            nodeports.push(rule(vec![
                build::prefix_match(family, false, &lo, 8, false),
                build::set_lookup(family, &PORT_KEY, set, false),
                vec![build::counter_ref(LOCALHOST_ACCEPTED)],
            ]));
        }
    }
    nodeports.extend(NODEPORT_DISPATCH.iter().map(|d| dispatch(&PORT_KEY, *d)));
    nodeports.push(Rule::new(build::vmap_lookup(
        family,
        &PORT_KEY,
        SERVICE_NODEPORTS,
    )));

    // externalTrafficPolicy Local: pods short-circuit to the cluster-wide endpoints,
    // the host too (masqueraded), everyone else gets the node-local endpoints.
    let external_local = |cluster: &str, local: &str| {
        let mut rules: Vec<Rule> = ctx
            .detector_local()
            .into_iter()
            .map(|d| rule(vec![d, vec![goto(cluster)]]))
            .collect();
        rules.push(rule(vec![build::fib_saddr_local(), build::mark_or(mark)]));
        rules.push(rule(vec![build::fib_saddr_local(), vec![goto(cluster)]]));
        rules.push(rule(vec![vec![goto(local)]]));
        rules
    };

    let mut cip_rules = vec![rule(vec![
        build::addr_in_set(family, false, CLUSTER_IPS, false),
        vec![build::reject(family)],
    ])];
    // nested and duplicate prefixes once: a rule per outermost prefix
    for c in kube_model::outermost(&ctx.cfg.service_cidrs)
        .iter()
        .filter(|c| c.family() == ctx.fam)
    {
        cip_rules.push(rule(vec![
            cidr_match(family, false, c, false),
            vec![verdict(Verdict::Drop)],
        ]));
    }

    let no_endpoint = |fields: &[KeyField], pre: &[Expr], set: &str, end: Expr| {
        rule(vec![
            pre.to_vec(),
            build::set_lookup(family, fields, set, false),
            vec![end],
        ])
    };
    let drop = verdict(Verdict::Drop);
    // NodePorts without (external) endpoints: the nftables proxier checks them on the
    // NodePort addresses (`nodeport-endpoints-check`); the iptables proxier's
    // `KUBE-EXTERNAL-SERVICES` on every local address, loopback included (`-m addrtype
    // --dst-type LOCAL`), whatever nodePortAddresses selects
    let np_check = if ctx.cfg.proxier == Proxier::Iptables {
        build::fib_daddr_local()
    } else {
        np_match.clone()
    };
    vec![
        Chain::regular(SERVICES).with_rules(services),
        Chain::regular(NODEPORTS).with_rules(nodeports),
        Chain::regular(EXTERNAL_LOCAL).with_rules(external_local(PICK_CLUSTER, PICK_LOCAL)),
        Chain::regular(NP_EXTERNAL_LOCAL)
            .with_rules(external_local(PICK_NP_CLUSTER, PICK_NP_LOCAL)),
        Chain::regular(MASQUERADING).with_rules(vec![
            rule(vec![
                build::set_lookup(family, &[KeyField::Saddr, KeyField::Daddr], HAIRPIN, false),
                build::mark_or(mark),
            ]),
            rule(vec![
                build::mark_test(mark, false),
                vec![verdict(Verdict::Return)],
            ]),
            rule(vec![build::mark_xor(mark)]),
            rule(vec![vec![build::masquerade_fully_random()]]),
        ]),
        Chain::regular(FIREWALL_CHECK).with_rules(vec![rule(vec![
            build::set_lookup(family, &DST_KEY, FIREWALL_IPS, false),
            build::set_lookup(
                family,
                &[
                    KeyField::Daddr,
                    KeyField::L4proto,
                    KeyField::Dport,
                    KeyField::Saddr,
                ],
                FIREWALL_ALLOW,
                true,
            ),
            vec![verdict(Verdict::Drop)],
        ])]),
        Chain::regular(ENDPOINTS_CHECK).with_rules(vec![
            no_endpoint(&DST_KEY, &[], NO_ENDPOINT_SERVICES, build::reject(family)),
            no_endpoint(&DST_KEY, &[], NO_LOCAL_ENDPOINT_SERVICES, drop.clone()),
            no_endpoint(
                &PORT_KEY,
                &np_check,
                NO_ENDPOINT_NODEPORTS,
                build::reject(family),
            ),
            no_endpoint(&PORT_KEY, &np_check, NO_LOCAL_ENDPOINT_NODEPORTS, drop),
        ]),
        Chain::regular(CLUSTER_IPS_CHECK).with_rules(cip_rules),
    ]
}
