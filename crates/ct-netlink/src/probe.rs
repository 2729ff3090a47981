//! Choosing the strategy once, at open: which kernel-side filters this kernel honours
//! (see docs/conntrack.md, "Probing").

use crate::exec::KernelFilter;
use crate::filter::Filter;
use crate::wire::*;
use crate::{Conntrack, DeleteReport, Error, Probe, Strategy, IPPROTO_UDP};
use nl_core::{NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP_FILTERED, NLM_F_REQUEST};
use std::net::{IpAddr, Ipv4Addr};

/// The probe's filter: UDP to 0.0.0.0 port 0. No real flow has that original
/// destination (a packet to 0.0.0.0 leaves with a rewritten destination, and port 0 is
/// reserved), so even a kernel that honours it deletes nothing; a kernel that does not
/// know filtered flushes refuses the request because its tuple is partial.
pub const PROBE_FILTER: Filter = Filter::OrigDst {
    addr: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    port: Some(0),
    proto: IPPROTO_UDP,
};

impl Conntrack {
    pub(crate) fn run_probe(&mut self) -> Result<Probe, Error> {
        // 1. Filtered flush that can match nothing (see PROBE_FILTER).
        let flush_errno =
            self.request_ack(&PROBE_FILTER, "probe filtered flush", |m, f, seq| {
                let s = m.begin_nfnl(MSG_CT_DELETE, NLM_F_REQUEST | NLM_F_ACK, seq, f.af());
                f.put_kernel_filter(m, true);
                m.end_msg(s);
            })?;
        if flush_errno == 0 {
            return Ok(Probe {
                strategy: Strategy::FilteredFlush,
                forced: false,
                flush_errno: Some(0),
                ipv6_addr_filter: false,
                reason: "kernel accepted a filtered flush (Linux >= 6.12)".into(),
            });
        }
        // 2. Filtered dump with the same filter: it returns nothing on a kernel that
        // honours CTA_FILTER; an older kernel ignores the attribute and returns entries
        // without NLM_F_DUMP_FILTERED.
        let mut unfiltered = false;
        let out = self.dump(
            PROBE_FILTER.af(),
            KernelFilter::Filter(&PROBE_FILTER, true),
            "probe filtered dump",
            0,
            &mut |e, flags| {
                if flags & NLM_F_DUMP_FILTERED == 0 || !PROBE_FILTER.matches(e) {
                    unfiltered = true;
                }
            },
        )?;
        let (strategy, reason) = if unfiltered {
            (
                Strategy::FullDump,
                format!("filtered flush refused (errno {flush_errno}), dump ignored CTA_FILTER"),
            )
        } else if out.filtered_flag_seen || out.entries > 0 {
            (
                Strategy::FilteredDump,
                format!("filtered flush refused (errno {flush_errno}), dump honoured CTA_FILTER"),
            )
        } else {
            // Nothing came back, as from any kernel whose IPv4 table is empty or which
            // filters: decide on the release (>= 5.8 has CTA_FILTER). Entries from a
            // filtered dump are re-checked in user space, so a wrong guess costs time,
            // never correctness.
            match kernel_release() {
                Some(v) if v >= (5, 8) => (
                    Strategy::FilteredDump,
                    format!(
                        "filtered flush refused (errno {flush_errno}), kernel {}.{} >= 5.8",
                        v.0, v.1
                    ),
                ),
                _ => (
                    Strategy::FullDump,
                    format!("filtered flush refused (errno {flush_errno}), kernel older than 5.8"),
                ),
            }
        };
        Ok(Probe {
            strategy,
            forced: false,
            flush_errno: Some(flush_errno),
            ipv6_addr_filter: false,
            reason,
        })
    }

    /// Does the kernel match IPv6 addresses in CTA_FILTER correctly? Insert an entry of
    /// our own (UDP 100::1:9 -> 100::2:9, from the discard-only prefix 100::/64, 2 s
    /// timeout), run a filtered dump for exactly its addresses, and delete it again.
    /// Any doubt answers false, which is the safe side (user-space address matching).
    pub(crate) fn probe_ipv6_addr_filter(&mut self) -> Result<bool, Error> {
        let src: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 1));
        let dst: IpAddr = IpAddr::V6(std::net::Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 2));
        let flow = SyntheticFlow {
            src,
            dst,
            proto: IPPROTO_UDP,
            sport: 9,
            dport: 9,
        };
        let probe = Filter::OrigDst {
            addr: dst,
            port: Some(9),
            proto: IPPROTO_UDP,
        };
        let errno = self.request_ack(&probe, "probe ipv6 entry", |m, _, seq| {
            push_new_entry(
                &mut m.buf,
                &SyntheticEntry::from(flow),
                2,
                seq,
                NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE,
            );
        })?;
        if errno != 0 && errno != libc::EEXIST {
            tracing::warn!(
                errno,
                "could not insert the IPv6 probe entry; matching IPv6 addresses in user space"
            );
            return Ok(false);
        }
        // Our entry, by a dump filtered in the kernel (`kernel` true) or by a plain
        // dump matched in user space.
        let find =
            |this: &mut Self, kernel: bool, op: &'static str| -> Result<Option<Target>, Error> {
                let mut t = None;
                this.dump(
                    AF_INET6,
                    KernelFilter::Filter(&probe, kernel),
                    op,
                    0,
                    &mut |e, _| {
                        if e.orig.src == Some(src) && probe.matches(e) {
                            t = Target::of(e);
                        }
                    },
                )?;
                Ok(t)
            };
        let found = find(self, true, "probe ipv6 filtered dump")?;
        // Remove the probe entry; when the kernel filter missed it, find it in user space.
        let target = match found.clone() {
            Some(t) => Some(t),
            None => find(self, false, "probe ipv6 cleanup dump")?,
        };
        if let Some(t) = target {
            let mut rep = DeleteReport::empty(self.probe.strategy, &[probe]);
            self.delete_targets(&[(t, 0)], &[probe], &mut rep);
        }
        Ok(found.is_some())
    }
}

/// (major, minor) of the running kernel, from uname(2).
pub(crate) fn kernel_release() -> Option<(u32, u32)> {
    // SAFETY: utsname is plain data; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to a utsname.
    if unsafe { libc::uname(&mut u) } != 0 {
        return None;
    }
    let rel: Vec<u8> = u
        .release
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let rel = String::from_utf8_lossy(&rel);
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty());
    Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
}
