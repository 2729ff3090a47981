//! Session affinity (ClientIP): the one case with per-port chains. A client is pinned to
//! an endpoint of a service port by an element `client . port id . endpoint id` of the
//! family's one dynamic set `affinity` (docs/decisions/0014), added or refreshed with the
//! service's own timeout by the rule that chooses the endpoint, which then DNATs. A list
//! chain (`svc-…`, `local-…`) first looks every endpoint's pin up (`meta l4proto tcp ip
//! saddr . <port id> . <endpoint id> @affinity update @affinity { … } dnat to …`, the key
//! loaded once for both: decision 0014's second amendment), then
//! draws one endpoint uniformly (`numgen random mod k 0 … update … dnat to …` for k = N,
//! N-1, ..., 2, then the last endpoint). Dispatch
//! to these chains goes through `goto` elements and rules, which make the kernel
//! re-validate the table at commit: affinity is rare (see docs/ruleset.md).
//!
//! Why one set: the kernel finds a named set by a walk of the table's list of sets (for
//! every set, element message and rule that names one), so a set per endpoint made a
//! cold start quadratic in the number of affinity endpoints. A pin keyed by the endpoint
//! (not an endpoint keyed by the client) keeps upstream's semantics: a removed endpoint's
//! pins are looked up by no rule any more, two endpoints' or two ports' pins never meet.
//!
//! The identifiers are constants written `numgen random mod 1 offset <id>`: nft 1.0.6
//! reads no constant inside a lookup's concatenation, but reads this (and lists and
//! reloads it). Port id: [`PortId::affinity_id`]; endpoint id:
//! [`PortId::endpoint_affinity_id`], made unique within the port here.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube_model::ResolvedEndpoint;
use nft_model::build::{self, goto, rule, KeyField};
use nft_model::*;

use super::Ctx;
use crate::names::{PortId, AFFINITY};

/// The most pins a family's `affinity` set holds (its `size`: the kernel adds none past
/// it; a client then goes unpinned). A power of two of at least 65,536: the kernel takes
/// the size as the hash table's initial size hint only modulo 65,536 (`nelem_hint` is a
/// `u16`), so the table starts small and grows with the pins.
pub const AFFINITY_SIZE: u32 = 1 << 20;

/// The family's pin set: `typeof ip saddr . numgen random mod 65536 . numgen random mod
/// 65536` (the client, the port id, the endpoint id: nft's `typeof` spelling of 32-bit
/// integers, `nft_model::render::NUMGEN_TYPEOF`; it reads elements of any value), dynamic,
/// each pin with its own timeout.
pub fn pin_set(family: Family) -> Set {
    let addr = if family == Family::Ip6 {
        DataType::Ipv6Addr
    } else {
        DataType::Ipv4Addr
    };
    let mut s = Set::set(
        AFFINITY,
        vec![addr, DataType::HostInt32, DataType::HostInt32],
    );
    s.flags = SetFlags {
        dynamic: true,
        timeout: true,
        ..SetFlags::default()
    };
    s.size = Some(AFFINITY_SIZE);
    s.saddr_key = true;
    s
}

fn pin_key(port_id: u32, ep_id: u32) -> [KeyField; 3] {
    [KeyField::Saddr, KeyField::Id(port_id), KeyField::Id(ep_id)]
}

/// One endpoint of a port with affinity, with its id.
struct Pinned<'a> {
    ep: &'a ResolvedEndpoint,
    id: u32,
}

/// The chains of a port with affinity: one list chain per list in `lists` (`local`: the
/// node-local list, `local-…`; else `svc-…`). Each endpoint's rules pin the client (add
/// or refresh its pin, with the port's timeout) and DNAT in the rule that chose it: no
/// chain per endpoint (the kernel walks every chain of the table at each commit).
pub fn chains(
    ctx: &Ctx,
    id: &PortId,
    proto: u8,
    timeout_s: u32,
    lists: &[(bool, &[ResolvedEndpoint])],
) -> Vec<Chain> {
    let family = ctx.family;
    let port_id = id.affinity_id();
    // every endpoint once, in address order, each with an id no other has
    let mut all: BTreeMap<(IpAddr, u16), &ResolvedEndpoint> = BTreeMap::new();
    for (_, list) in lists {
        for e in list.iter() {
            all.entry((e.addr, e.port)).or_insert(e);
        }
    }
    let mut taken = std::collections::BTreeSet::new();
    let pinned: BTreeMap<(IpAddr, u16), Pinned> = all
        .into_iter()
        .map(|(k, ep)| {
            let mut salt = 0;
            let mut ep_id = id.endpoint_affinity_id(&ep.addr, ep.port, salt);
            // bounded: each salt is a fresh hash, and a port has far fewer than 2^32
            while !taken.insert(ep_id) && salt < 64 {
                salt += 1;
                ep_id = id.endpoint_affinity_id(&ep.addr, ep.port, salt);
            }
            (k, Pinned { ep, id: ep_id })
        })
        .collect();
    let timeout_ms = u64::from(timeout_s) * 1000;
    // the endpoint chosen: its pin added or refreshed (`checked`: looked up first, from
    // the same load of its key), then DNAT; the protocol match first, so that nothing
    // loads a register between the key and the `update`
    let pin_and_dnat = |p: &Pinned, checked: bool| -> Vec<Expr> {
        let key = pin_key(port_id, p.id);
        let mut e = build::l4proto_eq(proto);
        e.extend(if checked {
            build::set_lookup_update(family, &key, AFFINITY, Some(timeout_ms))
        } else {
            build::set_update_timeout(family, &key, AFFINITY, Some(timeout_ms))
        });
        e.extend(build::dnat_to(family, &Value::from(p.ep.addr), p.ep.port));
        e
    };
    let mut out: Vec<Chain> = Vec::with_capacity(lists.len());
    for (local, list) in lists {
        let name = if *local {
            id.local_chain()
        } else {
            id.cluster_chain()
        };
        let eps: Vec<&Pinned> = list
            .iter()
            .filter_map(|e| pinned.get(&(e.addr, e.port)))
            .collect();
        let mut rules = Vec::with_capacity(2 * eps.len());
        for p in &eps {
            rules.push(rule(vec![pin_and_dnat(p, true)]));
        }
        // a uniform draw: endpoint i is taken with probability 1/(N-i) once the draws
        // before it passed, 1/N in all
        let n = eps.len() as u32;
        for (i, p) in eps.iter().enumerate() {
            let left = n - i as u32;
            if left > 1 {
                rules.push(rule(vec![build::one_in(left), pin_and_dnat(p, false)]));
            } else {
                rules.push(rule(vec![pin_and_dnat(p, false)]));
            }
        }
        out.push(Chain::regular(name).with_rules(rules));
    }
    out
}

/// The `ext-…` chain of a port with affinity: externalTrafficPolicy Cluster marks for
/// masquerading and goes to the cluster-wide list; Local sends pods and the host
/// (masqueraded) to the cluster-wide list and everyone else to the node-local one, when
/// there is one (`has_local`; else they are not DNATed, and dropped).
pub fn external_chain(ctx: &Ctx, id: &PortId, local_policy: bool, has_local: bool) -> Chain {
    let mark = ctx.cfg.masquerade_mark;
    let cluster = id.cluster_chain();
    let mut rules = Vec::new();
    if local_policy {
        for d in ctx.detector_local() {
            rules.push(rule(vec![d, vec![goto(&cluster)]]));
        }
        rules.push(rule(vec![build::fib_saddr_local(), build::mark_or(mark)]));
        rules.push(rule(vec![build::fib_saddr_local(), vec![goto(&cluster)]]));
        if has_local {
            rules.push(rule(vec![vec![goto(&id.local_chain())]]));
        }
    } else {
        rules.push(rule(vec![build::mark_or(mark)]));
        rules.push(rule(vec![vec![goto(&cluster)]]));
    }
    Chain::regular(id.external_chain()).with_rules(rules)
}
