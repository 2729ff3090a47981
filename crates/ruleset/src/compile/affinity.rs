//! Session affinity (ClientIP): the one case with per-service objects. Each endpoint has
//! a chain that records the client in the endpoint's dynamic set (with the affinity
//! timeout) and DNATs, and a check chain that sends a client found in that set to it;
//! the list chain first jumps to every endpoint's check chain, then draws one through
//! the list's verdict map. Dispatch to these chains goes through `goto` elements, which
//! make the kernel re-validate the table at commit; affinity is rare and the table it
//! validates is small (see docs/ruleset.md).
//!
//! Why a check chain rather than the check in the list chain: a rule that looks a named
//! set up finds it by a linear walk of every set of the table (`nft_set_lookup`), and a
//! list chain is rewritten whole (flushed, every rule added again) whenever its list
//! changes. With the lookups in the list chain, one endpoint added to a list of N cost
//! N walks of every set (a rolling update of a large affinity service, or a node drain,
//! walked the table's thousands of per-endpoint sets thousands of times per sync); with
//! them in check chains, which change only with their own endpoint, the list chain's
//! rules are `jump`s, whose chain is found through the kernel's hash of chain names.

use kube_model::ResolvedEndpoint;
use nft_model::build::{self, goto, jump, rule, KeyField};
use nft_model::*;

use super::Ctx;
use crate::names::PortId;
use crate::rules::addr_type;

/// The list chain (`svc-…` or `local-…`), its verdict map and the per-endpoint chains
/// (`chk-…`, `ep-…`) and sets of one endpoint list.
pub fn list_objects(
    ctx: &Ctx,
    id: &PortId,
    local: bool,
    proto: u8,
    eps: &[ResolvedEndpoint],
    timeout_s: u32,
) -> (Vec<Chain>, Vec<Set>) {
    let family = ctx.family;
    let chain = if local {
        id.local_chain()
    } else {
        id.cluster_chain()
    };
    let map_name = id.affinity_map(local);
    let mut map = Set::map(
        map_name.clone(),
        vec![DataType::HostInt32],
        SetData::Verdict,
    );
    let mut rules = Vec::new();
    let mut chains = Vec::new();
    let mut sets = Vec::new();
    for (i, e) in eps.iter().enumerate() {
        let ep_chain = id.endpoint_chain(&e.addr, e.port);
        let check = id.affinity_check_chain(&e.addr, e.port);
        let aff = id.affinity_set(&e.addr, e.port);
        rules.push(rule(vec![vec![jump(&check)]]));
        chains.push(Chain::regular(check).with_rules(vec![rule(vec![
            build::addr_in_set(family, true, &aff, false),
            vec![goto(&ep_chain)],
        ])]));
        map.elements.push(Element::map(
            vec![Value::Int(i as u32)],
            ElemData::Verdict(Verdict::Goto(ep_chain.clone())),
        ));
        let mut set = Set::set(aff.clone(), vec![addr_type(family)]);
        set.flags = SetFlags {
            dynamic: true,
            timeout: true,
            ..SetFlags::default()
        };
        set.timeout_ms = Some(u64::from(timeout_s) * 1000);
        sets.push(set);
        chains.push(Chain::regular(ep_chain).with_rules(vec![
            Rule::new(build::set_update(family, &[KeyField::Saddr], &aff)),
            Rule::new(build::dnat_to_proto(
                family,
                proto,
                &Value::from(e.addr),
                e.port,
            )),
        ]));
    }
    rules.push(Rule::new(build::numgen_vmap(
        eps.len() as u32,
        0,
        &map_name,
    )));
    chains.push(Chain::regular(chain).with_rules(rules));
    sets.push(map);
    (chains, sets)
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
