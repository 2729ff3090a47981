//! `explain`: a packet's path through the ruleset in words — chains traversed, the
//! verdict, the possible endpoints, and why. Built on [`crate::trace`]; the reasons are
//! read off the chains the packet went through (see docs/ruleset.md for what each does).

use crate::names;
use crate::trace::{trace, Fate, Packet, Trace};
use nft_model::Table;
use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;

/// The explanation of one packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    pub packet: Packet,
    pub trace: Trace,
    /// One line saying what happens and why.
    pub verdict: String,
}

fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

fn sock(a: IpAddr, p: u16) -> String {
    std::net::SocketAddr::new(a, p).to_string()
}

/// Explain what the ruleset does with `pkt`.
pub fn explain(tables: &[Table], local_addrs: &[IpAddr], pkt: &Packet) -> Explanation {
    let t = trace(tables, local_addrs, pkt);
    let verdict = reason(&t);
    Explanation {
        packet: pkt.clone(),
        trace: t,
        verdict,
    }
}

fn reason(t: &Trace) -> String {
    // The chain a packet's path ends in is where its fate was decided.
    let ended_in = |c: &str| {
        t.outcomes
            .iter()
            .all(|o| o.path.last().map(String::as_str) == Some(c))
    };
    match t.fate() {
        None if t.outcomes.is_empty() => "no path: the packet does not reach our chains".into(),
        None => "depends on the endpoint chosen (see the paths)".into(),
        Some(Fate::Drop) if ended_in(names::FIREWALL_CHECK) => {
            "dropped: source outside the service's loadBalancerSourceRanges".into()
        }
        Some(Fate::Drop) if ended_in(names::CLUSTER_IPS_CHECK) => {
            "dropped: destination in a service CIDR but not allocated to any service".into()
        }
        Some(Fate::Drop) if ended_in(names::ENDPOINTS_CHECK) => {
            "dropped: traffic policy Local and no ready endpoint on this node".into()
        }
        Some(Fate::Drop) => "dropped".into(),
        Some(Fate::Reject) if ended_in(names::ENDPOINTS_CHECK) => {
            "rejected (ICMP port unreachable / TCP reset): the service has no usable endpoints"
                .into()
        }
        Some(Fate::Reject) if ended_in(names::CLUSTER_IPS_CHECK) => {
            "rejected: ClusterIP on a port that no service uses".into()
        }
        Some(Fate::Reject) => "rejected".into(),
        Some(fate) => {
            let targets = t.dnat_targets();
            if targets.is_empty() {
                return match fate {
                    Fate::Local => {
                        "not a service destination: delivered to the node, untouched".into()
                    }
                    _ => "not a service destination: forwarded untouched".into(),
                };
            }
            let masq = if t.all_masqueraded() {
                ", source masqueraded to the node's address"
            } else if t.none_masqueraded() {
                ", client source address kept"
            } else {
                ", source masqueraded on some paths"
            };
            let n = targets.len();
            let list: Vec<String> = targets.iter().map(|(a, p)| sock(*a, *p)).collect();
            // session affinity's list chains (`svc-…`, `local-…`: the only per-port
            // chains) pin the client
            let pinned = t.outcomes.iter().any(|o| {
                o.path
                    .iter()
                    .any(|c| c.starts_with("svc-") || c.starts_with("local-"))
            });
            format!(
                "DNAT to {} endpoint{} ({}){masq}{}",
                n,
                if n == 1 { "" } else { "s" },
                list.join(", "),
                if pinned {
                    "; session affinity: the client is pinned to the endpoint it gets, \
                     for the service's timeout after its last new connection"
                } else {
                    ""
                }
            )
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.packet;
        write!(
            f,
            "packet: {} -> {} {}",
            sock(p.src, p.sport),
            sock(p.dst, p.dport),
            proto_name(p.proto)
        )?;
        if let Some(i) = &p.iif {
            write!(f, " in {i}")?;
        }
        if p.local_origin {
            write!(f, " (from this host)")?;
        }
        writeln!(f)?;
        writeln!(f, "verdict: {}", self.verdict)?;
        // distinct paths, each once, with where they end
        let mut seen = BTreeSet::new();
        for o in &self.trace.outcomes {
            let end = match (o.fate, o.dnat) {
                (_, Some((a, port))) => format!("dnat {}", sock(a, port)),
                (Fate::Local, None) => "local".into(),
                (Fate::Out, None) => "out".into(),
                (Fate::Drop, None) => "drop".into(),
                (Fate::Reject, None) => "reject".into(),
            };
            let line = format!(
                "  path: {} => {end}{}",
                o.path.join(" -> "),
                if o.masquerade { " (masquerade)" } else { "" }
            );
            if seen.insert(line.clone()) {
                writeln!(f, "{line}")?;
            }
        }
        Ok(())
    }
}
