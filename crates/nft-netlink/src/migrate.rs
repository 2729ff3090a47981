//! Migration from kube-proxy's iptables mode: remove, over netlink, the chains it left
//! behind when programmed through iptables-nft, and every rule elsewhere that jumps to
//! them, in one atomic batch, leaving every other rule untouched.
//!
//! kube-proxy's chains are the `KUBE-*` chains of the ip/ip6 `nat`, `filter` and
//! `mangle` tables, except the ones kubelet owns (`KUBE-FIREWALL`,
//! `KUBE-KUBELET-CANARY`, `KUBE-IPTABLES-HINT`): removing those would break the node's
//! kubelet, which re-creates and relies on them.

use crate::{Nft, NftError};
use nft_model::{Family, Op, TableRef};
use nft_wire::consts::{NFT_MSG_GETCHAIN, NFT_MSG_GETRULE, NFT_MSG_NEWCHAIN};
use nft_wire::encode::dump_request;
use nft_wire::{decode_object, scan_rule, ForeignRule, Object, WireError};
use std::collections::BTreeSet;
use std::path::Path;

/// The iptables tables kube-proxy's iptables mode writes to.
pub const IPTABLES_TABLES: [&str; 3] = ["nat", "filter", "mangle"];

/// `KUBE-*` chains that belong to kubelet, not kube-proxy.
pub const KUBELET_CHAINS: [&str; 3] =
    ["KUBE-FIREWALL", "KUBE-KUBELET-CANARY", "KUBE-IPTABLES-HINT"];

/// Whether a chain was created by kube-proxy's iptables mode.
pub fn is_kube_proxy_chain(name: &str) -> bool {
    name.starts_with("KUBE-") && !KUBELET_CHAINS.contains(&name)
}

/// The chains and rules of one iptables-nft table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableScan {
    pub table: TableRef,
    pub chains: Vec<String>,
    pub rules: Vec<ForeignRule>,
}

/// What a migration removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationReport {
    pub chains_removed: usize,
    pub jumps_removed: usize,
}

/// The ops that remove kube-proxy's chains and the rules of other chains that jump or go
/// to them: those rules by handle first, then every kube-proxy chain flushed, then deleted.
/// Pure: the same scan gives the same batch.
pub fn plan(scans: &[TableScan]) -> Vec<Op> {
    let mut deletes = Vec::new();
    let mut flushes = Vec::new();
    let mut removes = Vec::new();
    for s in scans {
        let ours: BTreeSet<&str> = s
            .chains
            .iter()
            .map(String::as_str)
            .filter(|c| is_kube_proxy_chain(c))
            .collect();
        for r in &s.rules {
            if !ours.contains(r.chain.as_str())
                && r.targets.iter().any(|t| ours.contains(t.as_str()))
            {
                deletes.push(Op::DeleteRule {
                    table: s.table.clone(),
                    chain: r.chain.clone(),
                    handle: r.handle,
                });
            }
        }
        for c in &ours {
            flushes.push(Op::FlushChain {
                table: s.table.clone(),
                chain: c.to_string(),
            });
            removes.push(Op::DeleteChain {
                table: s.table.clone(),
                chain: c.to_string(),
            });
        }
    }
    deletes.into_iter().chain(flushes).chain(removes).collect()
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
                let chain_name =
                    |kind: u16, fam: u8, attrs: &[u8]| -> Result<Option<String>, WireError> {
                        if kind != NFT_MSG_NEWCHAIN {
                            return Ok(None);
                        }
                        match decode_object(kind, fam, attrs)? {
                            Object::Chain { table, chain } if table.name == name => {
                                Ok(Some(chain.name))
                            }
                            _ => Ok(None),
                        }
                    };
                let (chains, _) = self
                    .dump_with(
                        "chains",
                        |seq| dump_request(NFT_MSG_GETCHAIN, &t, seq),
                        chain_name,
                    )
                    .map_err(|e| e.into_nft(name))?;
                let (rules, _) = self
                    .dump_with(
                        "rules",
                        |seq| dump_request(NFT_MSG_GETRULE, &t, seq),
                        |_, fam, attrs| scan_rule(fam, attrs),
                    )
                    .map_err(|e| e.into_nft(name))?;
                out.push(TableScan {
                    table: t.clone(),
                    chains: chains.into_iter().flatten().collect(),
                    rules: rules.into_iter().filter(|r| r.table == t).collect(),
                });
            }
        }
        Ok(out)
    }

    /// Remove kube-proxy's iptables-nft leftovers in one atomic batch, guarded by the
    /// generation id so that a concurrent writer makes us re-read and re-plan.
    pub fn remove_kube_proxy_iptables(&mut self) -> Result<MigrationReport, NftError> {
        let mut report = MigrationReport::default();
        self.commit_guarded(5, |nft| {
            let ops = plan(&nft.scan_iptables_tables()?);
            report.jumps_removed = ops
                .iter()
                .filter(|o| matches!(o, Op::DeleteRule { .. }))
                .count();
            report.chains_removed = ops
                .iter()
                .filter(|o| matches!(o, Op::DeleteChain { .. }))
                .count();
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
         (or `iptables-legacy-save | grep -v KUBE- | iptables-legacy-restore`, and the same with ip6tables-legacy)",
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

    #[test]
    fn plan_removes_kube_proxy_chains_and_jumps_but_not_kubelet_or_others() {
        let nat = TableRef::new(Family::Ip, "nat");
        let scan = TableScan {
            table: nat.clone(),
            chains: [
                "PREROUTING",
                "OUTPUT",
                "KUBE-SERVICES",
                "KUBE-SVC-ABC",
                "KUBE-FIREWALL",
                "DOCKER",
            ]
            .map(String::from)
            .to_vec(),
            rules: vec![
                rule(&nat, "PREROUTING", 4, &["KUBE-SERVICES"]),
                rule(&nat, "PREROUTING", 5, &["DOCKER"]),
                rule(&nat, "OUTPUT", 7, &[]),
                rule(&nat, "OUTPUT", 8, &["KUBE-FIREWALL"]),
                rule(&nat, "KUBE-SERVICES", 9, &["KUBE-SVC-ABC"]),
            ],
        };
        let ops = plan(&[scan]);
        assert_eq!(
            ops,
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
                    chain: "KUBE-SVC-ABC".into()
                },
                Op::DeleteChain {
                    table: nat.clone(),
                    chain: "KUBE-SERVICES".into()
                },
                Op::DeleteChain {
                    table: nat.clone(),
                    chain: "KUBE-SVC-ABC".into()
                },
            ]
        );
        assert!(plan(&[]).is_empty());
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
