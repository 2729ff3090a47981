//! Which UDP conntrack entries are stale (pure): the committed state the cleanup judges
//! flows against, and the judgement itself, as kube-proxy 1.38 decides it
//! (`pkg/proxy/conntrack/cleanup.go` `CleanStaleEntries` with kubernetes PRs #130542,
//! #139629 and #141371; docs/decisions/0013-conntrack-judged-not-replayed.md).
//!
//! A UDP flow is judged by the service port whose frontend it was sent to: a ClusterIP,
//! external IP or LoadBalancer IP with the service port, or a NodePort on one of this
//! node's NodePort addresses. It is stale when its reply source (address and port) is
//! not a serving endpoint of *that* port: a flow DNAT'ed to an endpoint that stopped
//! serving, one never DNAT'ed (packets sent before the rules served the frontend:
//! kubernetes PR #98305), one DNAT'ed by another ruleset elsewhere. A port without
//! serving endpoints has none, so every flow to it is stale (#139629: one-way senders
//! would otherwise keep a flow to a deleted pod alive forever), and so is every flow to
//! the frontends of a service port that was deleted, judged once at the commit that
//! deleted it (#141371). Flows to other destinations are never judged. What is judged
//! and when is the cleanup's business ([`crate::cleanup`]); this module only says what
//! is stale.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ct_netlink::Flow;
use ruleset::UdpDest;

use ct_netlink::IPPROTO_UDP;

/// The serving endpoints (address, target port) of one service port, sorted.
pub type Serving = Arc<[(IpAddr, u16)]>;

/// What a [`Delta`] says of one frontend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frontend {
    /// A UDP service port owns it, with these serving endpoints (maybe none).
    Serving(Vec<(IpAddr, u16)>),
    /// Its UDP service port was deleted (the service, the port, or its UDP protocol):
    /// every flow to it is stale, judged once (kubernetes PR #141371).
    Deleted,
    /// No port owns it any more, but its port was not deleted (renumbered, an address
    /// removed from it): its flows are left alone, as upstream leaves them.
    Released,
}

/// One frontend as a [`Delta`] names it.
pub type DeltaDest = (UdpDest, Frontend);

/// The addresses this node serves NodePorts on, for one family.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodePortScope {
    /// The family is not programmed: no NodePort is judged.
    #[default]
    None,
    /// Every address (the host's addresses are not known).
    Any,
    /// These addresses.
    Addrs(BTreeSet<IpAddr>),
}

impl NodePortScope {
    fn contains(&self, a: &IpAddr) -> bool {
        match self {
            NodePortScope::None => false,
            NodePortScope::Any => true,
            NodePortScope::Addrs(s) => s.contains(a),
        }
    }

    /// Whether `new` covers an address this scope does not.
    fn grows_to(&self, new: &NodePortScope) -> bool {
        match (self, new) {
            (_, NodePortScope::None) => false,
            (NodePortScope::Any, _) => false,
            (_, NodePortScope::Any) => true,
            (NodePortScope::None, NodePortScope::Addrs(n)) => !n.is_empty(),
            (NodePortScope::Addrs(o), NodePortScope::Addrs(n)) => !n.is_subset(o),
        }
    }
}

/// Why a flow is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// Its reply source is not a serving endpoint of the port owning the frontend.
    NotServing(UdpDest),
    /// The port owning the frontend has no serving endpoint.
    NoEndpoints(UdpDest),
    /// The frontend's service port was deleted.
    Gone(UdpDest),
}

impl Stale {
    pub fn dest(&self) -> UdpDest {
        match *self {
            Stale::NotServing(d) | Stale::NoEndpoints(d) | Stale::Gone(d) => d,
        }
    }
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stale::NotServing(d) => write!(f, "reply source not a serving endpoint of {d}"),
            Stale::NoEndpoints(d) => write!(f, "{d} has no serving endpoint"),
            Stale::Gone(d) => write!(f, "the service port of {d} was deleted"),
        }
    }
}

/// A change of the committed state, as the engine sends it after a commit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delta {
    /// Replace the whole state (the first commit, a commit after an unknown outcome, a
    /// rebuild): every flow is judged again.
    pub full: bool,
    /// Frontends whose owner or serving endpoints may have changed, and what they are
    /// now (in a full replacement: every frontend, and those deleted since the last
    /// commit).
    pub dests: Vec<DeltaDest>,
    /// NodePort addresses per family (0: IPv4, 1: IPv6), when they may have changed.
    pub nodeports: [Option<NodePortScope>; 2],
}

/// What must be judged again after a [`Delta`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejudge {
    /// Every flow.
    All,
    /// The flows sent to these frontends (a NodePort: on this node's addresses).
    Dests(BTreeSet<UdpDest>),
}

impl Rejudge {
    pub fn is_empty(&self) -> bool {
        matches!(self, Rejudge::Dests(d) if d.is_empty())
    }
}

fn fam(v6: bool) -> usize {
    usize::from(v6)
}

/// The committed state the cleanup judges flows against.
#[derive(Debug, Clone, Default)]
pub struct Judge {
    /// Frontends and the serving endpoints of the port owning each (maybe none).
    dests: HashMap<UdpDest, Serving>,
    /// Frontends of deleted service ports, judged until the cleanup forgets them
    /// ([`Judge::forget_gone`]) once their flows were dealt with.
    gone: BTreeSet<UdpDest>,
    nodeports: [NodePortScope; 2],
}

impl Judge {
    /// Whether `f` is stale (None: keep it).
    pub fn judge(&self, f: &Flow) -> Option<Stale> {
        if f.proto != IPPROTO_UDP {
            return None;
        }
        let addr = UdpDest::Addr {
            addr: f.dst,
            port: f.dport,
        };
        if let Some(s) = self.verdict(f, addr) {
            return Some(s);
        }
        let v6 = f.dst.is_ipv6();
        if !self.nodeports[fam(v6)].contains(&f.dst) {
            return None;
        }
        self.verdict(f, UdpDest::NodePort { v6, port: f.dport })
    }

    /// The judgement of `f` by the frontend `d` (None: not stale by it, or not judged).
    fn verdict(&self, f: &Flow, d: UdpDest) -> Option<Stale> {
        match self.dests.get(&d) {
            Some(s) if s.is_empty() => Some(Stale::NoEndpoints(d)),
            Some(s) if s.binary_search(&(f.reply_src, f.reply_sport)).is_err() => {
                Some(Stale::NotServing(d))
            }
            Some(_) => None,
            None if self.gone.contains(&d) => Some(Stale::Gone(d)),
            None => None,
        }
    }

    /// The serving endpoints of a judged frontend.
    pub fn serving(&self, d: &UdpDest) -> Option<&Serving> {
        self.dests.get(d)
    }

    /// Whether flows to `addr` on a NodePort of its family are judged.
    pub fn on_node(&self, addr: &IpAddr) -> bool {
        self.nodeports[fam(addr.is_ipv6())].contains(addr)
    }

    /// Judged frontends (of existing service ports).
    pub fn len(&self) -> usize {
        self.dests.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dests.is_empty()
    }

    /// Frontends of deleted service ports still judged.
    pub fn gone(&self) -> &BTreeSet<UdpDest> {
        &self.gone
    }

    /// Stop judging deleted frontends, but those in `keep` (flows to them still being
    /// dealt with).
    pub fn forget_gone(&mut self, keep: &BTreeSet<UdpDest>) {
        self.gone.retain(|d| keep.contains(d));
    }

    /// Take a change of the committed state; say what must be judged again: a frontend
    /// that is new, that lost a serving endpoint, that had none, or whose port was
    /// deleted (only then can a flow to it have become stale); every NodePort of a family
    /// whose NodePort addresses grew; everything after a full replacement.
    pub fn apply(&mut self, d: Delta) -> Rejudge {
        if d.full {
            self.dests.clear();
            self.gone.clear();
            for (dest, f) in d.dests {
                match f {
                    Frontend::Serving(s) => {
                        self.dests.insert(dest, sorted(s));
                    }
                    Frontend::Deleted => {
                        self.gone.insert(dest);
                    }
                    Frontend::Released => {}
                }
            }
            for (i, s) in d.nodeports.into_iter().enumerate() {
                if let Some(s) = s {
                    self.nodeports[i] = s;
                }
            }
            return Rejudge::All;
        }
        let mut again = BTreeSet::new();
        for (dest, f) in d.dests {
            let serving = match f {
                Frontend::Serving(s) => s,
                Frontend::Deleted => {
                    if self.dests.remove(&dest).is_some() {
                        self.gone.insert(dest);
                        again.insert(dest);
                    }
                    continue;
                }
                Frontend::Released => {
                    self.dests.remove(&dest);
                    continue;
                }
            };
            self.gone.remove(&dest);
            let new = sorted(serving);
            let judge_again = match self.dests.get(&dest) {
                None => true,
                Some(old) => old.is_empty() || old.iter().any(|e| new.binary_search(e).is_err()),
            };
            if judge_again {
                again.insert(dest);
            }
            self.dests.insert(dest, new);
        }
        for (i, s) in d.nodeports.into_iter().enumerate() {
            let Some(s) = s else { continue };
            if self.nodeports[i].grows_to(&s) {
                again.extend(
                    self.dests
                        .keys()
                        .chain(self.gone.iter())
                        .filter(|d| matches!(d, UdpDest::NodePort { v6, .. } if fam(*v6) == i))
                        .copied(),
                );
            }
            self.nodeports[i] = s;
        }
        Rejudge::Dests(again)
    }
}

fn sorted(mut v: Vec<(IpAddr, u16)>) -> Serving {
    v.sort();
    v.dedup();
    v.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn flow(dst: &str, dport: u16, reply: &str, rport: u16) -> Flow {
        Flow {
            proto: IPPROTO_UDP,
            src: ip("198.18.9.9"),
            dst: ip(dst),
            sport: 40000,
            dport,
            reply_src: ip(reply),
            reply_sport: rport,
            zone: 0,
            id: Some(1),
        }
    }

    const CIP: &str = "198.18.0.10";
    const NODE: &str = "198.18.5.1";

    fn cip() -> UdpDest {
        UdpDest::Addr {
            addr: ip(CIP),
            port: 53,
        }
    }

    fn np() -> UdpDest {
        UdpDest::NodePort {
            v6: false,
            port: 30053,
        }
    }

    fn eps(v: &[(&str, u16)]) -> Vec<(IpAddr, u16)> {
        v.iter().map(|(a, p)| (ip(a), *p)).collect()
    }

    fn judge(serving: &[(&str, u16)]) -> Judge {
        let mut j = Judge::default();
        j.apply(Delta {
            full: true,
            dests: vec![
                (cip(), Frontend::Serving(eps(serving))),
                (np(), Frontend::Serving(eps(serving))),
            ],
            nodeports: [
                Some(NodePortScope::Addrs([ip(NODE)].into())),
                Some(NodePortScope::None),
            ],
        });
        j
    }

    /// Kept only when the reply comes from a serving endpoint, address and port (#130542:
    /// a target port change leaves the old port's flows stale).
    #[test]
    fn a_flow_is_kept_only_when_its_reply_comes_from_a_serving_endpoint() {
        let j = judge(&[("198.18.1.7", 5353), ("198.18.1.8", 5353)]);
        assert_eq!(j.judge(&flow(CIP, 53, "198.18.1.7", 5353)), None);
        assert_eq!(
            j.judge(&flow(CIP, 53, "198.18.1.7", 9999)),
            Some(Stale::NotServing(cip())),
            "another port of a serving address"
        );
        assert_eq!(
            j.judge(&flow(CIP, 53, "198.18.1.9", 5353)),
            Some(Stale::NotServing(cip()))
        );
        assert_eq!(
            j.judge(&flow(CIP, 53, CIP, 53)),
            Some(Stale::NotServing(cip())),
            "not DNAT'ed"
        );
        // another port of the ClusterIP is not this frontend
        assert_eq!(j.judge(&flow(CIP, 54, "198.18.1.9", 5353)), None);
        // TCP is never judged
        let mut t = flow(CIP, 53, "198.18.1.9", 5353);
        t.proto = 6;
        assert_eq!(j.judge(&t), None);
    }

    #[test]
    fn nodeports_are_judged_on_this_nodes_addresses_only() {
        let j = judge(&[("198.18.1.7", 5353)]);
        assert_eq!(
            j.judge(&flow(NODE, 30053, NODE, 30053)),
            Some(Stale::NotServing(np()))
        );
        assert_eq!(j.judge(&flow(NODE, 30053, "198.18.1.7", 5353)), None);
        // another host on the same port number: not NodePort traffic
        assert_eq!(
            j.judge(&flow("198.18.7.7", 30053, "198.18.7.7", 30053)),
            None
        );
    }

    /// A host-network endpoint on the node's own address: a flow to the NodePort that was
    /// not DNAT'ed is stale although its reply address serves; an identity DNAT (target
    /// port = NodePort) is kept.
    #[test]
    fn a_host_network_endpoint_on_the_node_address() {
        let j = judge(&[(NODE, 5353)]);
        assert_eq!(
            j.judge(&flow(NODE, 30053, NODE, 30053)),
            Some(Stale::NotServing(np()))
        );
        assert_eq!(j.judge(&flow(NODE, 30053, NODE, 5353)), None);
        let j = judge(&[(NODE, 30053)]);
        assert_eq!(j.judge(&flow(NODE, 30053, NODE, 30053)), None);
    }

    /// #139629: a port without serving endpoints: every flow to it is stale.
    #[test]
    fn every_flow_to_a_port_without_serving_endpoints_is_stale() {
        let j = judge(&[]);
        assert_eq!(
            j.judge(&flow(CIP, 53, "198.18.1.7", 5353)),
            Some(Stale::NoEndpoints(cip()))
        );
        assert_eq!(
            j.judge(&flow(NODE, 30053, "198.18.1.7", 5353)),
            Some(Stale::NoEndpoints(np()))
        );
    }

    #[test]
    fn only_losses_new_frontends_and_deletions_are_judged_again() {
        let mut j = judge(&[("198.18.1.7", 5353)]);
        let s = |v: &[&str]| Frontend::Serving(v.iter().map(|a| (ip(a), 5353)).collect());
        // an endpoint added: nothing can have become stale
        let r = j.apply(Delta {
            dests: vec![(cip(), s(&["198.18.1.7", "198.18.1.8"]))],
            ..Delta::default()
        });
        assert!(r.is_empty(), "{r:?}");
        // one removed: judged again
        let r = j.apply(Delta {
            dests: vec![(cip(), s(&["198.18.1.8"]))],
            ..Delta::default()
        });
        assert_eq!(r, Rejudge::Dests([cip()].into()));
        // to none: judged again, everything to it stale
        let r = j.apply(Delta {
            dests: vec![(cip(), s(&[]))],
            ..Delta::default()
        });
        assert_eq!(r, Rejudge::Dests([cip()].into()));
        // back with endpoints (0 -> N): judged again
        let r = j.apply(Delta {
            dests: vec![(cip(), s(&["198.18.1.8"]))],
            ..Delta::default()
        });
        assert_eq!(r, Rejudge::Dests([cip()].into()));
        // deleted (#141371): judged again, every flow stale until forgotten
        let r = j.apply(Delta {
            dests: vec![(cip(), Frontend::Deleted)],
            ..Delta::default()
        });
        assert_eq!(r, Rejudge::Dests([cip()].into()));
        assert_eq!(
            j.judge(&flow(CIP, 53, "198.18.1.8", 5353)),
            Some(Stale::Gone(cip()))
        );
        j.forget_gone(&BTreeSet::new());
        assert_eq!(j.judge(&flow(CIP, 53, "198.18.1.8", 5353)), None);
        // a deletion of a frontend never judged changes nothing
        let r = j.apply(Delta {
            dests: vec![(cip(), Frontend::Deleted)],
            ..Delta::default()
        });
        assert!(r.is_empty());
        // released (the port renumbered): no longer judged, its flows left alone
        j.apply(Delta {
            dests: vec![(cip(), s(&["198.18.1.8"]))],
            ..Delta::default()
        });
        let r = j.apply(Delta {
            dests: vec![(cip(), Frontend::Released)],
            ..Delta::default()
        });
        assert!(r.is_empty());
        assert_eq!(j.judge(&flow(CIP, 53, "198.18.1.9", 5353)), None);
        assert!(j.gone().is_empty());
    }

    /// A new NodePort address: every judged NodePort of the family is judged again, so
    /// the entries made to the address before it served NodePorts are found.
    #[test]
    fn a_new_nodeport_address_judges_the_nodeports_again() {
        let mut j = judge(&[("198.18.1.7", 5353)]);
        let vip = ip("198.18.5.9");
        assert_eq!(
            j.judge(&flow("198.18.5.9", 30053, "198.18.5.9", 30053)),
            None
        );
        let r = j.apply(Delta {
            nodeports: [Some(NodePortScope::Addrs([ip(NODE), vip].into())), None],
            ..Delta::default()
        });
        assert_eq!(r, Rejudge::Dests([np()].into()));
        assert_eq!(
            j.judge(&flow("198.18.5.9", 30053, "198.18.5.9", 30053)),
            Some(Stale::NotServing(np()))
        );
        // an address removed: nothing to judge
        let r = j.apply(Delta {
            nodeports: [Some(NodePortScope::Addrs([vip].into())), None],
            ..Delta::default()
        });
        assert!(r.is_empty());
    }
}
