//! The conntrack kernel over ctnetlink ([`ct_netlink`]): listings by kernel-filtered
//! dumps, deletes by exact tuple, and the NEW/DESTROY event stream.

use std::os::fd::BorrowedFd;

use ct_netlink::{
    Conntrack, EventConfig, EventSocket, Filter, Flow, FlowEvent, FlowOutcome, ListOutcome,
};
use kube_model::IpFamily;
use ruleset::UdpDest;

use crate::cleanup::{Removal, Scope};
use crate::kernel::{ConntrackKernel, FlowEvents, Received};
use crate::EngineError;

fn family(f: IpFamily) -> ct_netlink::Family {
    match f {
        IpFamily::V4 => ct_netlink::Family::V4,
        IpFamily::V6 => ct_netlink::Family::V6,
    }
}

fn filter(s: &Scope) -> Option<Filter> {
    match *s {
        Scope::Dest(UdpDest::Addr { addr, port }) => Some(Filter::udp_orig_dst(addr, Some(port))),
        Scope::Dest(UdpDest::NodePort { v6, port }) => Some(Filter::udp_nodeport(
            if v6 {
                ct_netlink::Family::V6
            } else {
                ct_netlink::Family::V4
            },
            port,
        )),
        Scope::All(_) => None,
    }
}

impl ConntrackKernel for Conntrack {
    fn list_udp(&mut self, f: IpFamily, out: &mut Vec<Flow>) -> Result<bool, EngineError> {
        let o = self.list_proto(family(f), ct_netlink::IPPROTO_UDP, out)?;
        Ok(o == ListOutcome::Complete)
    }

    fn list(&mut self, scopes: &[Scope], out: &mut Vec<Flow>) -> Result<Vec<bool>, EngineError> {
        let mut done = vec![false; scopes.len()];
        let mut filters = Vec::new();
        let mut at = Vec::new();
        for (i, s) in scopes.iter().enumerate() {
            match (s, filter(s)) {
                (_, Some(f)) => {
                    filters.push(f);
                    at.push(i);
                }
                (Scope::All(fam), None) => {
                    done[i] = self.list_udp(*fam, out).unwrap_or(false);
                }
                _ => {}
            }
        }
        if !filters.is_empty() {
            let r = Conntrack::list(self, &filters);
            out.extend(r.flows);
            for (k, o) in r.per_filter.iter().enumerate() {
                if let Some(i) = at.get(k) {
                    done[*i] = *o == ListOutcome::Complete;
                }
            }
        }
        Ok(done)
    }

    fn delete(&mut self, flows: &[Flow]) -> Result<Vec<Removal>, EngineError> {
        Ok(self
            .delete_flows(flows)
            .into_iter()
            .map(|o| match o {
                FlowOutcome::Deleted => Removal::Deleted,
                FlowOutcome::AlreadyGone => Removal::AlreadyGone,
                FlowOutcome::Failed(_) | FlowOutcome::Unacked => Removal::Failed,
            })
            .collect())
    }

    fn events(&mut self) -> Option<Box<dyn FlowEvents>> {
        if ct_netlink::events_sysctl() == ct_netlink::EventsSysctl::Off {
            tracing::info!(
                "conntrack events are off on this host (net.netfilter.nf_conntrack_events=0)"
            );
            return None;
        }
        match EventSocket::open(EventConfig::default()) {
            Ok(s) => Some(Box::new(Events(s))),
            Err(e) => {
                tracing::info!(error = %e, "cannot open the conntrack event stream");
                None
            }
        }
    }

    fn listing(&self) -> &'static str {
        "kernel-filtered"
    }
}

struct Events(EventSocket);

impl FlowEvents for Events {
    fn recv(
        &mut self,
        out: &mut Vec<FlowEvent>,
        stop: BorrowedFd<'_>,
    ) -> std::io::Result<Received> {
        match self.0.recv_until(stop, out, None) {
            Ok(ct_netlink::Received::Events(_)) | Ok(ct_netlink::Received::Timeout) => {
                Ok(Received::Events)
            }
            Ok(ct_netlink::Received::Lost) => Ok(Received::Lost),
            Ok(ct_netlink::Received::Stopped) => Ok(Received::Stopped),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
    }
}
