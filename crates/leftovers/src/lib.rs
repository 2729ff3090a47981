//! Removing what kube-proxy left behind, in all three of its modes, over netlink only
//! (as upstream's `kube-proxy --cleanup` does, by upstream's exact names):
//!
//! 1. IPVS mode's virtual services (generic netlink), when kube-proxy's IPVS mode has
//!    left a sign on this node (the `kube-ipvs0` dummy link, one of its ipsets or one of
//!    its IPVS-only iptables chains): the services its proxier owns (address-based,
//!    outside `ipvs.excludeCIDRs`). Without such a sign IPVS is another program's and is
//!    left alone. Upstream flushes every virtual service instead.
//! 2. The `kube-ipvs0` link, only if it is a dummy (as upstream).
//! 3. One atomic nftables batch: kube-proxy's iptables-nft chains of iptables and IPVS
//!    mode with the jumps to them, its nftables-mode tables (`ip`/`ip6 kube-proxy`), and
//!    for `--cleanup` our own tables.
//! 4. kube-proxy's ipsets, after the rules that used them are gone; a set still used by
//!    another program's rule is kept.
//!
//! Each step's failure is logged and the next step still runs: a migration never stops
//! the proxy. The scan ([`scan`]) is what `--cleanup --dry-run` prints; [`migrate`] is
//! what the daemon runs once after its first sync, and `--cleanup`.
//!
//! Knows nothing of Kubernetes, the engine or the configuration file: it is given the
//! `ipvs.excludeCIDRs` and the extra ops of the batch.

use std::fmt::Write as _;
use std::time::Duration;

use ipvs_netlink::ipset::{kube_proxy_sets, Ipset, SetRemoval};
use ipvs_netlink::ipvs::{kube_proxy_services, Cidr, Ipvs, VirtualService};
use nft_model::Op;
use nft_netlink::migrate::{plan, Keep, Leftovers};
use rt_netlink::{Link, LinkRemoval};
use tracing::{info, warn};

/// kube-proxy IPVS mode's dummy link.
pub const IPVS_LINK: &str = "kube-ipvs0";

/// What to remove besides kube-proxy's leftovers, and what to keep.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `ipvs.excludeCIDRs`: virtual services with an address inside are never removed.
    pub exclude_cidrs: Vec<Cidr>,
    /// Ops for the same nftables batch, first (`--cleanup`: delete our tables).
    pub extra_ops: Vec<Op>,
    /// kube-proxy chains we write ourselves and keep (iptables mode:
    /// [`nft_netlink::migrate::KEEP_IN_IPTABLES_MODE`]); `--cleanup` keeps none.
    pub keep: Keep,
}

impl Options {
    /// From the configuration's `ipvs.excludeCIDRs` (validated already; an entry that
    /// does not parse is skipped with a warning naming it).
    pub fn new(exclude_cidrs: &[String], extra_ops: Vec<Op>) -> Options {
        let exclude_cidrs = exclude_cidrs
            .iter()
            .filter_map(|c| {
                let p = Cidr::parse(c);
                if p.is_none() {
                    warn!(cidr = %c, "ipvs.excludeCIDRs entry is not a CIDR; ignored");
                }
                p
            })
            .collect();
        Options {
            exclude_cidrs,
            extra_ops,
            keep: &[],
        }
    }
}

/// The IPVS state found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum IpvsFound {
    /// The kernel has no IPVS (`ip_vs` not loaded): no virtual service exists.
    #[default]
    Absent,
    Services {
        /// kube-proxy's (to delete).
        ours: Vec<VirtualService>,
        /// Kept, each with the reason.
        kept: Vec<(VirtualService, &'static str)>,
    },
}

/// Everything of kube-proxy's found on this node.
#[derive(Debug, Default)]
pub struct Found {
    pub nft: Leftovers,
    /// kube-proxy's ipsets that exist, with their type.
    pub ipsets: Vec<(String, String)>,
    pub link: Option<Link>,
    pub ipvs: IpvsFound,
    /// Errors while looking (each step that failed is skipped).
    pub errors: Vec<String>,
}

impl Found {
    /// Whether kube-proxy's IPVS mode ran here: its dummy link, one of its ipsets, or
    /// one of its IPVS-only chains.
    pub fn ipvs_mode_seen(&self) -> bool {
        self.link
            .as_ref()
            .is_some_and(|l| l.kind.as_deref() == Some("dummy"))
            || !self.ipsets.is_empty()
            || self.nft.has_ipvs_mode_chains()
    }

    /// The nftables ops of the batch (extra ops first).
    pub fn nft_ops(&self, opts: &Options) -> Vec<Op> {
        opts.extra_ops
            .iter()
            .cloned()
            .chain(plan(&self.nft, opts.keep).ops)
            .collect()
    }

    /// What [`remove`] would do, as an nft script (the batch) followed by `#` comments
    /// for the IPVS, link and ipset steps.
    pub fn describe(&self, opts: &Options) -> String {
        let mut out = nft_model::render::script(&self.nft_ops(opts));
        for (chain, by) in &plan(&self.nft, opts.keep).kept {
            let _ = writeln!(
                out,
                "# keep iptables chain {chain}: another program's chain jumps to it ({})",
                by.join(", ")
            );
        }
        match &self.ipvs {
            IpvsFound::Absent => out.push_str("# ipvs: not in this kernel (no virtual services)\n"),
            IpvsFound::Services { ours, kept } => {
                for s in ours {
                    let _ = writeln!(out, "# ipvs: delete virtual service {s}");
                }
                for (s, why) in kept {
                    let _ = writeln!(out, "# ipvs: keep virtual service {s} ({why})");
                }
            }
        }
        match &self.link {
            Some(l) if l.kind.as_deref() == Some("dummy") => {
                let _ = writeln!(out, "# link: delete {IPVS_LINK} (dummy)");
            }
            Some(l) => {
                let _ = writeln!(
                    out,
                    "# link: keep {IPVS_LINK} (kind {}, not kube-proxy's dummy)",
                    l.kind.as_deref().unwrap_or("none")
                );
            }
            None => {}
        }
        for (name, ty) in &self.ipsets {
            let _ = writeln!(out, "# ipset: destroy {name} ({ty})");
        }
        for e in &self.errors {
            let _ = writeln!(out, "# error: {e}");
        }
        out
    }
}

/// Look for kube-proxy's leftovers (nothing is changed).
pub fn scan(opts: &Options) -> Found {
    let mut f = Found::default();
    match nft_netlink::Nft::open().and_then(|mut n| n.scan_leftovers()) {
        Ok(l) => f.nft = l,
        Err(e) => f.errors.push(format!("reading nftables: {e}")),
    }
    match rt_netlink::link_by_name(IPVS_LINK) {
        Ok(l) => f.link = l,
        Err(e) => f.errors.push(format!("looking up link {IPVS_LINK}: {e}")),
    }
    match Ipset::open() {
        Ok(mut s) => {
            for name in kube_proxy_sets() {
                match s.find(&name) {
                    Ok(Some(ty)) => f.ipsets.push((name, ty)),
                    Ok(None) => {}
                    Err(e) => f.errors.push(e.to_string()),
                }
            }
        }
        Err(e) => f.errors.push(e.to_string()),
    }
    match Ipvs::open().and_then(|i| i.map(|mut i| i.services()).transpose()) {
        Ok(None) => f.ipvs = IpvsFound::Absent,
        Ok(Some(all)) => {
            let seen = f.ipvs_mode_seen();
            let (ours, others) = kube_proxy_services(&all, &opts.exclude_cidrs);
            let (ours, mut kept) = if seen {
                (ours, Vec::new())
            } else {
                (
                    Vec::new(),
                    ours.into_iter()
                        .map(|s| (s, "no sign of kube-proxy's IPVS mode on this node"))
                        .collect(),
                )
            };
            kept.extend(others.into_iter().map(|s| {
                let why = match s.key {
                    ipvs_netlink::ipvs::Key::Fwmark { .. } => "firewall-mark service",
                    _ => "inside ipvs.excludeCIDRs",
                };
                (s, why)
            }));
            f.ipvs = IpvsFound::Services { ours, kept };
        }
        Err(e) => f.errors.push(e.to_string()),
    }
    f
}

/// What [`remove`] did.
#[derive(Debug, Default)]
pub struct Removed {
    pub nft: Option<nft_netlink::migrate::MigrationReport>,
    pub ipvs_services: Vec<VirtualService>,
    pub link: bool,
    pub ipsets: Vec<String>,
    /// kube-proxy ipsets another program still uses.
    pub ipsets_busy: Vec<String>,
    pub errors: Vec<String>,
}

/// How long to wait for the kernel to release a set that the batch's deleted rules held:
/// nf_tables frees deleted rules (and so their set references) in a work item after the
/// commit. Not seen to matter on 6.18 (the test passes without retries), kept as a
/// bound: 5 tries, 20 ms apart, then the set counts as used by another program.
const BUSY_RETRIES: u32 = 5;
const BUSY_WAIT: Duration = Duration::from_millis(20);

/// Remove kube-proxy's leftovers (see the module docs). Never fails: errors are
/// collected in the report.
pub fn remove(opts: &Options) -> Removed {
    let found = scan(opts);
    let mut r = Removed {
        errors: found.errors.clone(),
        ..Removed::default()
    };
    if let IpvsFound::Services { ours, .. } = &found.ipvs {
        if !ours.is_empty() {
            match Ipvs::open() {
                Ok(Some(mut i)) => {
                    for s in ours {
                        match i.delete(s) {
                            Ok(true) => r.ipvs_services.push(s.clone()),
                            Ok(false) => {}
                            Err(e) => r.errors.push(e.to_string()),
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => r.errors.push(e.to_string()),
            }
        }
    }
    if found.link.is_some() {
        match rt_netlink::delete_link_of_kind(IPVS_LINK, "dummy") {
            Ok(LinkRemoval::Deleted(_)) => r.link = true,
            Ok(_) => {}
            Err(e) => r.errors.push(format!("deleting link {IPVS_LINK}: {e}")),
        }
    }
    match nft_netlink::Nft::open()
        .and_then(|mut n| n.remove_kube_proxy_leftovers(&opts.extra_ops, opts.keep))
    {
        Ok(rep) => r.nft = Some(rep),
        Err(e) => r
            .errors
            .push(format!("removing kube-proxy's nftables leftovers: {e}")),
    }
    if !found.ipsets.is_empty() {
        match Ipset::open() {
            Ok(mut s) => {
                for (name, _) in &found.ipsets {
                    match destroy_when_released(&mut s, name) {
                        Ok(SetRemoval::Destroyed) => r.ipsets.push(name.clone()),
                        Ok(SetRemoval::Busy) => r.ipsets_busy.push(name.clone()),
                        Ok(SetRemoval::Absent) => {}
                        Err(e) => r.errors.push(e.to_string()),
                    }
                }
            }
            Err(e) => r.errors.push(e.to_string()),
        }
    }
    r
}

fn destroy_when_released(s: &mut Ipset, name: &str) -> Result<SetRemoval, ipvs_netlink::Error> {
    for _ in 0..BUSY_RETRIES {
        match s.destroy(name)? {
            SetRemoval::Busy => std::thread::sleep(BUSY_WAIT),
            other => return Ok(other),
        }
    }
    s.destroy(name)
}

/// Log what [`remove`] did: one INFO line when something was removed, a WARN for each
/// thing kept because another program uses it, and one per error.
pub fn log(r: &Removed) {
    if let Some(n) = &r.nft {
        if n.removed_any() {
            info!(
                chains = n.chains_removed,
                jumps = n.jumps_removed,
                tables = %n.tables_removed.join(","),
                "removed kube-proxy's nftables leftovers (iptables-nft chains, nftables-mode tables)"
            );
        }
        for (chain, by) in &n.kept {
            warn!(
                chain = %chain,
                referenced_by = %by.join(","),
                "kept a kube-proxy iptables chain that another program's chain jumps to"
            );
        }
    }
    if !r.ipvs_services.is_empty() || r.link || !r.ipsets.is_empty() {
        let svcs: Vec<String> = r.ipvs_services.iter().map(|s| s.to_string()).collect();
        info!(
            ipvs_services = %svcs.join(","),
            link = r.link,
            ipsets = %r.ipsets.join(","),
            "removed kube-proxy's IPVS-mode leftovers"
        );
    }
    for s in &r.ipsets_busy {
        warn!(ipset = %s, "kept a kube-proxy ipset that another program's rule uses");
    }
    for e in &r.errors {
        warn!(error = %e, "could not remove some of kube-proxy's leftovers");
    }
}

/// Remove kube-proxy's leftovers of all its modes ([`remove`]), log what was done
/// ([`log`]), and report the legacy iptables tables we cannot edit. Failures are logged:
/// they never stop the proxy.
pub fn migrate(opts: &Options) -> Removed {
    let r = remove(opts);
    log(&r);
    let legacy = nft_netlink::migrate::legacy_iptables_tables(std::path::Path::new("/proc"));
    if !legacy.is_empty() {
        warn!("{}", nft_netlink::migrate::legacy_removal_hint(&legacy));
    }
    r
}
