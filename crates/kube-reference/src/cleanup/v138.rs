//! kube-proxy 1.38's decision (what kube-nlproxy follows): `CleanStaleEntries` with
//! #130542 (1.33: the reply source's *port* is compared too, so a target port change
//! leaves the old port's entries stale), #139629 (a UDP service port without serving
//! endpoints is processed with an empty set: every entry to its frontends is stale) and
//! #141371 (the frontends of the UDP service ports deleted at this sync are processed
//! with an empty set). Written from the PRs' descriptions and the 1.33 `cleanup.go`
//! (serving endpoints kept as address and port), not copied. The gate stays upstream's
//! [`super::cleanup_required`], or a UDP service port was deleted.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::{CleanupModel, CtFlow, Reason, Rule, UdpServicePort};
use crate::gen::Case;

/// The serving endpoints (address and port) of a port.
fn serving(p: &UdpServicePort) -> Vec<SocketAddr> {
    p.endpoints
        .iter()
        .filter(|e| e.serving)
        .map(|e| e.addr)
        .collect()
}

impl CleanupModel {
    /// 1.38's judgement under this state (ungated): (a) to a service IP and port of a UDP
    /// service port, with a reply source (address and port) that is not one of its
    /// serving endpoints (none: every reply); (b) to its NodePort on any address, the
    /// same. (a) first.
    pub fn stale_1_38(&self, f: &CtFlow) -> Option<Reason> {
        let fam = f.family();
        let to_node = self.env.local_addrs.contains(&f.dst.ip());
        let judge = |p: &UdpServicePort, ip: bool| {
            let s = serving(p);
            if s.contains(&f.reply_src) {
                return None;
            }
            let rule = match (s.is_empty(), ip) {
                (false, true) => Rule::ServiceIp,
                (false, false) => Rule::NodePort { to_node },
                (true, true) => Rule::NoEndpointsIp,
                (true, false) => Rule::NoEndpointsNodePort { to_node },
            };
            Some(Reason {
                port: p.port_ref.clone(),
                rule,
            })
        };
        if let Some(r) = self.ports[fam]
            .iter()
            .find(|p| p.is_frontend(&f.dst))
            .and_then(|p| judge(p, true))
        {
            return Some(r);
        }
        self.ports[fam]
            .iter()
            .find(|p| p.node_port == Some(f.dst.port()))
            .and_then(|p| judge(p, false))
    }
}

/// The UDP service ports of `before` (`family`) that `after` no longer has (the service,
/// the port or its protocol deleted, or the service left the family's map).
pub fn deleted_ports(before: &Case, after: &Case, family: usize) -> Vec<UdpServicePort> {
    let now = CleanupModel::new(after);
    CleanupModel::new(before).ports[family]
        .iter()
        .filter(|p| !now.ports[family].iter().any(|q| q.port_ref == p.port_ref))
        .cloned()
        .collect()
}

/// The judgement of the deleted ports' frontends: every entry to one of them.
fn deleted_reason(deleted: &[UdpServicePort], f: &CtFlow, to_node: bool) -> Option<Reason> {
    if let Some(p) = deleted.iter().find(|p| p.is_frontend(&f.dst)) {
        return Some(Reason {
            port: p.port_ref.clone(),
            rule: Rule::DeletedIp,
        });
    }
    deleted
        .iter()
        .find(|p| p.node_port == Some(f.dst.port()))
        .map(|p| Reason {
            port: p.port_ref.clone(),
            rule: Rule::DeletedNodePort { to_node },
        })
}

/// 1.38's judgement of `f` at the sync from `before` to `after`, ungated: by `after`'s
/// ports first, then by the ports deleted at this sync.
pub fn stale(before: &Case, after: &Case, f: &CtFlow) -> Option<Reason> {
    CleanupModel::new(after).stale_1_38(f).or_else(|| {
        let deleted = deleted_ports(before, after, f.family());
        deleted_reason(&deleted, f, after.env.local_addrs.contains(&f.dst.ip()))
    })
}

/// What kube-proxy 1.38 deletes at the sync from `before` to `after` in `family`, by
/// index in `flows`: when the sync runs the cleanup ([`super::cleanup_required`], or a
/// UDP service port was deleted), every entry [`stale`] judges.
pub fn upstream_deletes(
    before: &Case,
    after: &Case,
    family: usize,
    flows: &[CtFlow],
) -> BTreeMap<usize, Reason> {
    let deleted = deleted_ports(before, after, family);
    let mut out = BTreeMap::new();
    if !super::cleanup_required(before, after, family) && deleted.is_empty() {
        return out;
    }
    let m = CleanupModel::new(after);
    for (i, f) in flows.iter().enumerate() {
        if f.family() != family {
            continue;
        }
        let to_node = after.env.local_addrs.contains(&f.dst.ip());
        if let Some(r) = m
            .stale_1_38(f)
            .or_else(|| deleted_reason(&deleted, f, to_node))
        {
            out.insert(i, r);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cleanup::flows;
    use crate::{changes, generate, Rng};

    /// 1.38 deletes at least what 1.32 deletes (#130542, #139629 and #141371 only add),
    /// over generated tables: a check that the two readings agree where they must.
    /// (Negative control: comparing reply addresses only in `stale_1_38` loses nothing
    /// here, but making it judge nothing fails: "1.32 deletes ... 1.38 keeps".)
    #[test]
    fn v138_deletes_everything_v132_deletes() {
        let mut checked = 0;
        for seed in 0..80u64 {
            let start = generate(seed);
            let mut rng = Rng::new(seed ^ 0xc1ea);
            let steps = changes::sequence(&start, &mut rng, 3);
            let mut before = start;
            for st in steps {
                for fam in 0..2 {
                    let table: Vec<CtFlow> = flows(&before, &st.case, fam, &mut rng, 200)
                        .into_iter()
                        .map(|(f, _)| f)
                        .collect();
                    let m = CleanupModel::new(&st.case);
                    for f in &table {
                        if m.stale(f).is_some() {
                            assert!(
                                stale(&before, &st.case, f).is_some(),
                                "seed {seed}: 1.32 deletes {f}, 1.38 keeps it"
                            );
                            checked += 1;
                        }
                    }
                }
                before = st.case;
            }
        }
        assert!(checked > 100, "{checked}");
    }

    /// #141371: a deleted service port's entries are all stale at the sync that deleted
    /// it, even DNAT'ed to an endpoint still serving another port.
    #[test]
    fn a_deleted_ports_entries_are_stale() {
        for seed in 0..200u64 {
            let start = generate(seed);
            let mut after = start.clone();
            after.services.clear();
            for fam in 0..2 {
                let deleted = deleted_ports(&start, &after, fam);
                for p in &deleted {
                    let f = CtFlow {
                        src: SocketAddr::new(p.cluster_ip, 40000),
                        dst: SocketAddr::new(p.cluster_ip, p.port),
                        reply_src: SocketAddr::new(p.cluster_ip, p.port),
                    };
                    assert!(stale(&start, &after, &f).is_some(), "seed {seed}: {f}");
                }
                if !deleted.is_empty() {
                    return;
                }
            }
        }
        panic!("no case with a UDP port");
    }
}
