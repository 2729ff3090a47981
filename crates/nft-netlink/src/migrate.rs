//! Migration from kube-proxy: remove, over netlink and in one atomic batch, the nftables
//! state its three modes leave behind, leaving every other table, chain and rule untouched:
//!
//! - iptables mode and IPVS mode, programmed through iptables-nft: their chains in the
//!   ip/ip6 `nat`, `filter` and `mangle` tables and the jumps to them from the built-in
//!   chains;
//! - nftables mode: its tables `ip kube-proxy` and `ip6 kube-proxy` (upstream deletes them
//!   by name, nothing else).
//!
//! Only upstream's own chain names are removed (see [`is_kube_proxy_chain`]): the fixed
//! chains of each table as upstream's iptables and IPVS proxiers list them for cleanup,
//! and the per-service chains `KUBE-{SVC,SVL,EXT,FW,SEP,XLB}-` followed by exactly 16
//! characters of upstream's base32 hash. Never a prefix match on `KUBE-`: kubelet's
//! chains (`KUBE-FIREWALL`, `KUBE-KUBELET-CANARY`, `KUBE-IPTABLES-HINT`,
//! `KUBE-MARK-DROP`), kube-router's policy chains (`KUBE-ROUTER-*`, `KUBE-NWPLCY-*`,
//! `KUBE-POD-FW-*`) and anything a user named `KUBE-...` stay as they are.
//!
//! IPVS mode's other leftovers (virtual services, the `kube-ipvs0` link, ipsets) are not
//! nftables objects: `ipvs-netlink` and `rt-netlink` remove them.

use crate::{Nft, NftError};
use nft_model::{Family, Op, TableRef};
use nft_wire::consts::NFT_MSG_GETRULE;
use nft_wire::encode::dump_request;
use nft_wire::{scan_rule, ForeignRule};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The iptables tables kube-proxy's iptables mode writes to.
pub const IPTABLES_TABLES: [&str; 3] = ["nat", "filter", "mangle"];

/// kube-proxy's fixed chains per iptables table in iptables mode (upstream's cleanup
/// lists, `pkg/proxy/iptables`).
pub const FIXED_CHAINS: [(&str, &[&str]); 3] = [
    (
        "nat",
        &[
            "KUBE-SERVICES",
            "KUBE-NODEPORTS",
            "KUBE-POSTROUTING",
            "KUBE-MARK-MASQ",
            "KUBE-PROXY-CANARY",
        ],
    ),
    (
        "filter",
        &[
            "KUBE-SERVICES",
            "KUBE-EXTERNAL-SERVICES",
            "KUBE-FORWARD",
            "KUBE-NODEPORTS",
            "KUBE-PROXY-FIREWALL",
            "KUBE-PROXY-CANARY",
        ],
    ),
    ("mangle", &["KUBE-PROXY-CANARY"]),
];

/// kube-proxy's chains per iptables table in IPVS mode (upstream's
/// `iptablesCleanupChains`, `pkg/proxy/ipvs`). Several names are shared with iptables
/// mode; `KUBE-NODE-PORT` (IPVS) and `KUBE-NODEPORTS` (iptables) are different chains.
pub const IPVS_CHAINS: [(&str, &[&str]); 2] = [
    (
        "nat",
        &[
            "KUBE-SERVICES",
            "KUBE-POSTROUTING",
            "KUBE-NODE-PORT",
            "KUBE-LOAD-BALANCER",
            "KUBE-MARK-MASQ",
        ],
    ),
    (
        "filter",
        &[
            "KUBE-FORWARD",
            "KUBE-NODE-PORT",
            "KUBE-PROXY-FIREWALL",
            "KUBE-SOURCE-RANGES-FIREWALL",
            "KUBE-IPVS-FILTER",
            "KUBE-IPVS-OUT-FILTER",
        ],
    ),
];

/// The table kube-proxy's nftables mode creates in the `ip` and `ip6` families.
pub const NFTABLES_MODE_TABLE: &str = "kube-proxy";

/// Prefixes of kube-proxy's per-service chains (nat table), each followed by the first
/// 16 characters of a base32-encoded SHA-256 (`KUBE-XLB-` is the pre-1.24 name of `SVL`).
pub const SERVICE_CHAIN_PREFIXES: [&str; 6] = [
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
    "KUBE-XLB-",
];

/// Whether `name` in iptables table `table` is a chain kube-proxy's iptables or IPVS
/// mode creates.
pub fn is_kube_proxy_chain(table: &str, name: &str) -> bool {
    let fixed = FIXED_CHAINS
        .iter()
        .chain(IPVS_CHAINS.iter())
        .any(|(t, chains)| *t == table && chains.contains(&name));
    fixed || (table == "nat" && is_service_chain(name))
}

/// Whether `name` in iptables table `table` is a chain only kube-proxy's IPVS mode
/// creates (a sign that it ran on this node).
pub fn is_ipvs_mode_chain(table: &str, name: &str) -> bool {
    let listed = |l: &[(&str, &[&str])]| l.iter().any(|(t, c)| *t == table && c.contains(&name));
    listed(&IPVS_CHAINS) && !listed(&FIXED_CHAINS)
}

/// `KUBE-SVC-` etc. followed by exactly 16 characters of the base32 alphabet (A-Z, 2-7).
fn is_service_chain(name: &str) -> bool {
    SERVICE_CHAIN_PREFIXES.iter().any(|p| {
        name.strip_prefix(p).is_some_and(|hash| {
            hash.len() == 16
                && hash
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || (b'2'..=b'7').contains(&b))
        })
    })
}

/// The chains and rules of one iptables-nft table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableScan {
    pub table: TableRef,
    pub chains: Vec<String>,
    /// The chains attached to a hook (iptables' built-in chains).
    pub base_chains: BTreeSet<String>,
    pub rules: Vec<ForeignRule>,
}

/// kube-proxy's nftables state as found: the iptables-nft tables (chains and rules) and
/// the nftables-mode tables that exist.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leftovers {
    pub iptables: Vec<TableScan>,
    /// `ip kube-proxy` and/or `ip6 kube-proxy`, where present.
    pub nft_tables: Vec<TableRef>,
}

impl Leftovers {
    /// Whether one of the chains only kube-proxy's IPVS mode creates is present.
    pub fn has_ipvs_mode_chains(&self) -> bool {
        self.iptables.iter().any(|s| {
            s.chains
                .iter()
                .any(|c| is_ipvs_mode_chain(&s.table.name, c))
        })
    }
}

/// What a migration removed, and the kube-proxy chains it had to keep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationReport {
    pub chains_removed: usize,
    pub jumps_removed: usize,
    /// kube-proxy's nftables-mode tables deleted (`"ip kube-proxy"`, ...).
    pub tables_removed: Vec<String>,
    /// kube-proxy chains left in place because a chain of another program jumps to them
    /// (directly, or through other kept kube-proxy chains): `"<family> <table> <chain>"`
    /// and the referencing chains. Removing them would mean editing that program's rules.
    pub kept: Vec<(String, Vec<String>)>,
    /// The generation that guarded the committed batch (None: nothing was sent).
    pub guard: Option<u32>,
}

impl MigrationReport {
    /// Whether anything was removed.
    pub fn removed_any(&self) -> bool {
        self.chains_removed > 0 || self.jumps_removed > 0 || !self.tables_removed.is_empty()
    }
}

/// The removal plan: the ops of one batch and the kube-proxy chains kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub ops: Vec<Op>,
    pub kept: Vec<(String, Vec<String>)>,
}

impl Plan {
    /// What committing this plan removes.
    pub fn report(&self) -> MigrationReport {
        let count = |f: fn(&Op) -> bool| self.ops.iter().filter(|o| f(o)).count();
        MigrationReport {
            chains_removed: count(|o| matches!(o, Op::DeleteChain { .. })),
            jumps_removed: count(|o| matches!(o, Op::DeleteRule { .. })),
            tables_removed: self
                .ops
                .iter()
                .filter_map(|o| match o {
                    Op::DeleteTable { table } => {
                        Some(format!("{} {}", table.family.nft_name(), table.name))
                    }
                    _ => None,
                })
                .collect(),
            kept: self.kept.clone(),
            guard: None,
        }
    }
}

/// kube-proxy chains (iptables table, chain) that a migration keeps because we write
/// them ourselves: in iptables mode `filter KUBE-FORWARD` ([`crate::forward`]), adopted
/// in place on takeover (never deleted and re-added). The jumps to a kept chain stay.
pub type Keep = &'static [(&'static str, &'static str)];

/// What iptables mode keeps: upstream's `KUBE-FORWARD` in both families' `filter`.
pub const KEEP_IN_IPTABLES_MODE: Keep = &[("filter", crate::forward::KUBE_FORWARD_CHAIN)];

/// The ops that remove kube-proxy's leftovers in one batch: the jumps to kube-proxy's
/// iptables-nft chains from built-in chains (by handle), those chains flushed, then
/// deleted, then kube-proxy's nftables-mode tables deleted. See [`plan_iptables`] for
/// the chains that are kept (also those in `keep`). Pure: the same state gives the same batch.
pub fn plan(l: &Leftovers, keep: Keep) -> Plan {
    let mut p = plan_iptables(&l.iptables, keep);
    p.ops.extend(
        l.nft_tables
            .iter()
            .filter(|t| t.name == NFTABLES_MODE_TABLE)
            .map(|t| Op::DeleteTable { table: t.clone() }),
    );
    p
}

/// The ops that remove kube-proxy's iptables-nft chains and the jumps to them from
/// built-in chains: those rules by handle first, then every removable kube-proxy chain
/// flushed, then deleted. A kube-proxy chain that a regular chain of another program
/// references is kept with everything it reaches (the other program's rules stay
/// byte-identical). Pure: the same scan gives the same batch.
pub fn plan_iptables(scans: &[TableScan], keep: Keep) -> Plan {
    let mut deletes = Vec::new();
    let mut flushes = Vec::new();
    let mut removes = Vec::new();
    let mut kept_out = Vec::new();
    for s in scans {
        let ours: BTreeSet<&str> = s
            .chains
            .iter()
            .map(String::as_str)
            .filter(|c| is_kube_proxy_chain(&s.table.name, c))
            .filter(|c| !keep.contains(&(s.table.name.as_str(), *c)))
            .collect();
        // kube-proxy chains referenced from another program's regular chains.
        let mut kept: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for r in &s.rules {
            let foreign_regular =
                !ours.contains(r.chain.as_str()) && !s.base_chains.contains(&r.chain);
            if foreign_regular {
                for t in r.targets.iter().filter(|t| ours.contains(t.as_str())) {
                    kept.entry(t.as_str()).or_default().insert(r.chain.as_str());
                }
            }
        }
        // ... and what those reach.
        let mut frontier: Vec<&str> = kept.keys().copied().collect();
        while let Some(c) = frontier.pop() {
            for r in s.rules.iter().filter(|r| r.chain == c) {
                for t in r.targets.iter().filter(|t| ours.contains(t.as_str())) {
                    if !kept.contains_key(t.as_str()) {
                        frontier.push(t.as_str());
                    }
                    kept.entry(t.as_str()).or_default().insert(c);
                }
            }
        }
        let removable: BTreeSet<&str> = ours
            .iter()
            .copied()
            .filter(|c| !kept.contains_key(c))
            .collect();
        for r in &s.rules {
            if s.base_chains.contains(&r.chain)
                && r.targets.iter().any(|t| removable.contains(t.as_str()))
            {
                deletes.push(Op::DeleteRule {
                    table: s.table.clone(),
                    chain: r.chain.clone(),
                    handle: r.handle,
                });
            }
        }
        for c in &removable {
            flushes.push(Op::FlushChain {
                table: s.table.clone(),
                chain: c.to_string(),
            });
            removes.push(Op::DeleteChain {
                table: s.table.clone(),
                chain: c.to_string(),
            });
        }
        for (c, by) in kept {
            kept_out.push((
                format!("{} {} {c}", s.table.family.nft_name(), s.table.name),
                by.into_iter().map(String::from).collect(),
            ));
        }
    }
    Plan {
        ops: deletes.into_iter().chain(flushes).chain(removes).collect(),
        kept: kept_out,
    }
}

impl Nft {
    /// Read the chains and rules of the ip/ip6 `nat`, `filter` and `mangle` tables that exist.
    pub fn scan_iptables_tables(&mut self) -> Result<Vec<TableScan>, NftError> {
        let mut out = Vec::new();
        for family in [Family::Ip, Family::Ip6] {
            for name in IPTABLES_TABLES {
                let t = TableRef::new(family, name);
                if !self.table_exists(&t)? {
                    continue;
                }
                let chains = self.table_chains(&t)?;
                let (rules, _) = self
                    .dump_with(
                        "rules",
                        |seq| dump_request(NFT_MSG_GETRULE, &t, seq),
                        |_, fam, attrs| scan_rule(fam, attrs),
                    )
                    .map_err(|e| e.into_nft(name))?;
                out.push(TableScan {
                    table: t.clone(),
                    base_chains: chains
                        .iter()
                        .filter(|(_, base)| *base)
                        .map(|(c, _)| c.clone())
                        .collect(),
                    chains: chains.into_iter().map(|(c, _)| c).collect(),
                    rules: rules.into_iter().filter(|r| r.table == t).collect(),
                });
            }
        }
        Ok(out)
    }

    /// kube-proxy's nftables-mode tables that exist (`ip kube-proxy`, `ip6 kube-proxy`).
    pub fn scan_nftables_mode_tables(&mut self) -> Result<Vec<TableRef>, NftError> {
        let mut out = Vec::new();
        for family in [Family::Ip, Family::Ip6] {
            let t = TableRef::new(family, NFTABLES_MODE_TABLE);
            if self.table_exists(&t)? {
                out.push(t);
            }
        }
        Ok(out)
    }

    /// Everything of kube-proxy's that [`plan`] may remove.
    pub fn scan_leftovers(&mut self) -> Result<Leftovers, NftError> {
        Ok(Leftovers {
            iptables: self.scan_iptables_tables()?,
            nft_tables: self.scan_nftables_mode_tables()?,
        })
    }

    /// Remove kube-proxy's nftables leftovers of all three modes in one atomic batch,
    /// guarded by the generation id so that a concurrent writer makes us re-read and
    /// re-plan. `extra` ops (e.g. deleting our own tables for `--cleanup`) go into the
    /// same batch, first.
    pub fn remove_kube_proxy_leftovers(
        &mut self,
        extra: &[Op],
        keep: Keep,
    ) -> Result<MigrationReport, NftError> {
        let mut report = MigrationReport::default();
        self.commit_guarded(5, |nft| {
            // the guard's generation (a later change fails the guarded commit)
            let base = nft.generation()?;
            let p = plan(&nft.scan_leftovers()?, keep);
            report = p.report();
            let ops: Vec<Op> = extra.iter().cloned().chain(p.ops).collect();
            report.guard = (!ops.is_empty()).then_some(base);
            Ok(ops)
        })?;
        Ok(report)
    }
}

/// Legacy (x_tables, non-nftables) iptables tables present in this network namespace,
/// read from `<proc>/net/ip_tables_names` and `ip6_tables_names`. Their rules cannot be
/// changed over nftables netlink.
pub fn legacy_iptables_tables(proc_root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for (file, fam) in [
        ("net/ip_tables_names", "ip"),
        ("net/ip6_tables_names", "ip6"),
    ] {
        if let Ok(text) = std::fs::read_to_string(proc_root.join(file)) {
            out.extend(text.split_whitespace().map(|t| format!("{fam} {t}")));
        }
    }
    out
}

/// What to tell an operator whose node still has legacy iptables tables.
pub fn legacy_removal_hint(tables: &[String]) -> String {
    format!(
        "legacy (non-nftables) iptables tables are present ({}); kube-nlproxy cannot edit them over netlink. \
         If they hold kube-proxy rules, remove them once with the old image: `kube-proxy --cleanup` \
         (it removes only kube-proxy's own chains)",
        tables.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(table: &TableRef, chain: &str, handle: u64, targets: &[&str]) -> ForeignRule {
        ForeignRule {
            table: table.clone(),
            chain: chain.into(),
            handle,
            targets: targets.iter().map(|s| s.to_string()).collect(),
        }
    }

    const SVC: &str = "KUBE-SVC-4N57TFCL4MD7ZTDA";
    const SEP: &str = "KUBE-SEP-WXWGHGKZOCNYRYI7";

    #[test]
    fn only_upstream_chain_names_are_kube_proxys() {
        let yes = [
            ("nat", "KUBE-SERVICES"),
            ("nat", "KUBE-NODEPORTS"),
            ("nat", "KUBE-POSTROUTING"),
            ("nat", "KUBE-MARK-MASQ"),
            ("nat", "KUBE-PROXY-CANARY"),
            ("nat", SVC),
            ("nat", SEP),
            ("nat", "KUBE-SVL-AAAAAAAAAAAAAAAA"),
            ("nat", "KUBE-EXT-ABCDEFGHIJKLMN23"),
            ("nat", "KUBE-FW-ZZZZZZZZZZZZZZZZ"),
            ("nat", "KUBE-XLB-7777777777777777"),
            ("filter", "KUBE-SERVICES"),
            ("filter", "KUBE-EXTERNAL-SERVICES"),
            ("filter", "KUBE-FORWARD"),
            ("filter", "KUBE-NODEPORTS"),
            ("filter", "KUBE-PROXY-FIREWALL"),
            ("filter", "KUBE-PROXY-CANARY"),
            ("mangle", "KUBE-PROXY-CANARY"),
            // IPVS mode
            ("nat", "KUBE-NODE-PORT"),
            ("nat", "KUBE-LOAD-BALANCER"),
            ("filter", "KUBE-NODE-PORT"),
            ("filter", "KUBE-SOURCE-RANGES-FIREWALL"),
            ("filter", "KUBE-IPVS-FILTER"),
            ("filter", "KUBE-IPVS-OUT-FILTER"),
        ];
        let no = [
            // kubelet
            ("filter", "KUBE-FIREWALL"),
            ("nat", "KUBE-KUBELET-CANARY"),
            ("filter", "KUBE-KUBELET-CANARY"),
            ("mangle", "KUBE-IPTABLES-HINT"),
            ("nat", "KUBE-MARK-DROP"),
            // kube-router (also embedded in k3s)
            ("filter", "KUBE-ROUTER-INPUT"),
            ("filter", "KUBE-ROUTER-FORWARD"),
            ("filter", "KUBE-NWPLCY-4N57TFCL4MD7ZTDA"),
            ("filter", "KUBE-POD-FW-4N57TFCL4MD7ZTDA"),
            ("nat", "KUBE-ROUTER-SERVICES"),
            // a user's chains, near misses of upstream's names
            ("filter", "KUBE-MY-ALLOWLIST"),
            ("nat", "KUBE-SVC-mine"),
            ("nat", "KUBE-SVC-4N57TFCL4MD7ZTD"),
            ("nat", "KUBE-SVC-4N57TFCL4MD7ZTDAX"),
            ("nat", "KUBE-SVC-4N57TFCL4MD7ZTD1"),
            ("nat", "KUBE-SVC-4n57tfcl4md7ztda"),
            ("nat", "KUBE-SERVICES-BACKUP"),
            ("nat", "KUBE-FORWARD"),
            ("filter", "KUBE-MARK-MASQ"),
            ("filter", SVC),
            ("mangle", "KUBE-SERVICES"),
            ("raw", "KUBE-PROXY-CANARY"),
            // IPVS-mode names in a table IPVS mode does not use them in
            ("nat", "KUBE-IPVS-FILTER"),
            ("nat", "KUBE-SOURCE-RANGES-FIREWALL"),
            ("filter", "KUBE-LOAD-BALANCER"),
            ("mangle", "KUBE-NODE-PORT"),
            // ipset names of IPVS mode and kube-router are not chains of kube-proxy's
            ("nat", "KUBE-CLUSTER-IP"),
            ("filter", "KUBE-LOAD-BALANCER-FW"),
            ("filter", "KUBE-SRC-4N57TFCL4MD7ZTDA"),
            ("filter", "KUBE-DST-4N57TFCL4MD7ZTDA"),
            // pre-1.19 IPVS mode's nat chain of the same name as kubelet's filter chain
            ("nat", "KUBE-FIREWALL"),
        ];
        for (t, c) in yes {
            assert!(is_kube_proxy_chain(t, c), "{t} {c} is kube-proxy's");
        }
        for (t, c) in no {
            assert!(!is_kube_proxy_chain(t, c), "{t} {c} is not kube-proxy's");
        }
    }

    fn scan(
        table: &TableRef,
        base: &[&str],
        chains: &[&str],
        rules: Vec<ForeignRule>,
    ) -> TableScan {
        TableScan {
            table: table.clone(),
            chains: base.iter().chain(chains).map(|c| c.to_string()).collect(),
            base_chains: base.iter().map(|c| c.to_string()).collect(),
            rules,
        }
    }

    #[test]
    fn plan_removes_kube_proxy_chains_and_jumps_but_not_kubelet_router_or_user_chains() {
        let nat = TableRef::new(Family::Ip, "nat");
        let s = scan(
            &nat,
            &["PREROUTING", "OUTPUT"],
            &[
                "KUBE-SERVICES",
                SVC,
                "KUBE-FIREWALL",
                "KUBE-ROUTER-SERVICES",
                "KUBE-SVC-mine",
                "DOCKER",
            ],
            vec![
                rule(&nat, "PREROUTING", 4, &["KUBE-SERVICES"]),
                rule(&nat, "PREROUTING", 5, &["DOCKER"]),
                rule(&nat, "PREROUTING", 6, &["KUBE-ROUTER-SERVICES"]),
                rule(&nat, "OUTPUT", 7, &[]),
                rule(&nat, "OUTPUT", 8, &["KUBE-FIREWALL"]),
                rule(&nat, "OUTPUT", 9, &["KUBE-SVC-mine"]),
                rule(&nat, "KUBE-SERVICES", 10, &[SVC]),
            ],
        );
        let p = plan_iptables(&[s], &[]);
        assert_eq!(
            p.ops,
            vec![
                Op::DeleteRule {
                    table: nat.clone(),
                    chain: "PREROUTING".into(),
                    handle: 4
                },
                Op::FlushChain {
                    table: nat.clone(),
                    chain: "KUBE-SERVICES".into()
                },
                Op::FlushChain {
                    table: nat.clone(),
                    chain: SVC.into()
                },
                Op::DeleteChain {
                    table: nat.clone(),
                    chain: "KUBE-SERVICES".into()
                },
                Op::DeleteChain {
                    table: nat.clone(),
                    chain: SVC.into()
                },
            ]
        );
        assert!(p.kept.is_empty());
        assert_eq!(plan(&Leftovers::default(), &[]), Plan::default());
    }

    #[test]
    fn iptables_mode_keeps_kube_forward_and_its_jump_and_removes_the_rest() {
        let filter = TableRef::new(Family::Ip6, "filter");
        let s = scan(
            &filter,
            &["FORWARD"],
            &["KUBE-FORWARD", "KUBE-SERVICES", "DOCKER-USER"],
            vec![
                rule(&filter, "FORWARD", 2, &["KUBE-FORWARD"]),
                rule(&filter, "FORWARD", 3, &["KUBE-SERVICES"]),
                rule(&filter, "FORWARD", 4, &["DOCKER-USER"]),
            ],
        );
        let ops = |keep| plan_iptables(std::slice::from_ref(&s), keep).ops;
        let kept = ops(KEEP_IN_IPTABLES_MODE);
        assert_eq!(
            kept,
            vec![
                Op::DeleteRule {
                    table: filter.clone(),
                    chain: "FORWARD".into(),
                    handle: 3
                },
                Op::FlushChain {
                    table: filter.clone(),
                    chain: "KUBE-SERVICES".into()
                },
                Op::DeleteChain {
                    table: filter.clone(),
                    chain: "KUBE-SERVICES".into()
                },
            ]
        );
        // --cleanup (nothing kept) and nftables mode remove it with its jump
        let all = ops(&[]);
        assert!(all.contains(&Op::DeleteChain {
            table: filter.clone(),
            chain: "KUBE-FORWARD".into()
        }));
        assert!(all.contains(&Op::DeleteRule {
            table: filter.clone(),
            chain: "FORWARD".into(),
            handle: 2
        }));
        assert_eq!(all.len(), kept.len() + 3);
    }

    #[test]
    fn a_kube_proxy_chain_another_program_jumps_to_is_kept_with_what_it_reaches() {
        let nat = TableRef::new(Family::Ip, "nat");
        let s = scan(
            &nat,
            &["POSTROUTING"],
            &[
                "KUBE-POSTROUTING",
                "KUBE-MARK-MASQ",
                "KUBE-SERVICES",
                "CNI-NAT",
            ],
            vec![
                rule(&nat, "POSTROUTING", 1, &["KUBE-POSTROUTING"]),
                rule(&nat, "POSTROUTING", 2, &["CNI-NAT"]),
                // another program's chain uses kube-proxy's masquerade chain
                rule(&nat, "CNI-NAT", 3, &["KUBE-POSTROUTING"]),
                rule(&nat, "KUBE-POSTROUTING", 4, &["KUBE-MARK-MASQ"]),
            ],
        );
        let p = plan_iptables(&[s], &[]);
        assert_eq!(
            p.ops,
            vec![
                Op::FlushChain {
                    table: nat.clone(),
                    chain: "KUBE-SERVICES".into()
                },
                Op::DeleteChain {
                    table: nat.clone(),
                    chain: "KUBE-SERVICES".into()
                },
            ],
            "the jump from POSTROUTING stays with the chain it reaches"
        );
        assert_eq!(
            p.kept,
            vec![
                (
                    "ip nat KUBE-MARK-MASQ".to_string(),
                    vec!["KUBE-POSTROUTING".to_string()]
                ),
                (
                    "ip nat KUBE-POSTROUTING".to_string(),
                    vec!["CNI-NAT".to_string()]
                ),
            ]
        );
    }

    #[test]
    fn nftables_mode_tables_go_into_the_same_batch_after_the_chains() {
        let nat = TableRef::new(Family::Ip, "nat");
        let l = Leftovers {
            iptables: vec![scan(
                &nat,
                &["PREROUTING"],
                &["KUBE-SERVICES", "KUBE-LOAD-BALANCER"],
                vec![
                    rule(&nat, "PREROUTING", 2, &["KUBE-SERVICES"]),
                    rule(&nat, "KUBE-SERVICES", 3, &["KUBE-LOAD-BALANCER"]),
                ],
            )],
            nft_tables: vec![
                TableRef::new(Family::Ip, NFTABLES_MODE_TABLE),
                TableRef::new(Family::Ip6, NFTABLES_MODE_TABLE),
                // never a table of another name, even if handed in
                TableRef::new(Family::Ip, "kube-router"),
            ],
        };
        let p = plan(&l, &[]);
        assert_eq!(
            p.ops.last(),
            Some(&Op::DeleteTable {
                table: TableRef::new(Family::Ip6, NFTABLES_MODE_TABLE)
            })
        );
        assert!(
            l.has_ipvs_mode_chains(),
            "KUBE-LOAD-BALANCER is IPVS mode's"
        );
        assert!(is_ipvs_mode_chain("filter", "KUBE-IPVS-FILTER"));
        assert!(
            !is_ipvs_mode_chain("nat", "KUBE-SERVICES"),
            "shared with iptables mode"
        );
        assert!(!is_ipvs_mode_chain("filter", "KUBE-NODEPORTS"));
        let r = p.report();
        assert_eq!((r.jumps_removed, r.chains_removed), (1, 2), "{:?}", p.ops);
        assert_eq!(r.tables_removed, vec!["ip kube-proxy", "ip6 kube-proxy"]);
        assert!(r.removed_any());
        assert!(!MigrationReport::default().removed_any());
    }

    #[test]
    fn legacy_tables_are_read_from_proc() {
        let dir = std::env::temp_dir().join(format!("nlp-proc-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("net")).unwrap();
        std::fs::write(dir.join("net/ip_tables_names"), "nat\nfilter\n").unwrap();
        assert_eq!(
            legacy_iptables_tables(&dir),
            vec!["ip nat".to_string(), "ip filter".to_string()]
        );
        assert!(legacy_removal_hint(&legacy_iptables_tables(&dir)).contains("ip nat, ip filter"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
