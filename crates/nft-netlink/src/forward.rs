//! The one thing we write outside our own tables (iptables mode only): upstream's
//! `KUBE-FORWARD` chain in the iptables-nft `filter` tables of both families, and the
//! jump to it from `FORWARD`, as the iptables proxier writes them
//! (`pkg/proxy/iptables/proxier.go`):
//!
//! ```text
//! -A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD
//! -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP        (unless nf_conntrack_tcp_be_liberal)
//! -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
//! -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//! ```
//!
//! An accept in our own table cannot undo a drop in another table's base chain (every
//! base chain of a hook must accept), so on hosts whose `FORWARD` policy is DROP
//! (Docker) only an accept in that very chain lets forwarded service traffic pass.
//! The rules are encoded as iptables-nft 1.8 encodes them (x_tables `comment` and
//! `conntrack` matches through `nft_compat`, the mark match native, a counter), so
//! `iptables-nft -S` shows upstream's lines and kube-proxy's chain of a node we take
//! over is the same chain, adopted in place.
//!
//! Ours alone to change: the chain `KUBE-FORWARD` (its rules are rewritten, flush and
//! add in one batch, only when they differ) and our jump rule, found by its exact form
//! (inserted at the head of `FORWARD`, as upstream's `iptables -I`, when no rule of
//! that form is there). Another program's rules and the chain's policy are never
//! touched. A missing `filter` table or `FORWARD` chain is created as iptables-nft
//! creates it (policy accept), as upstream's `iptables -N`/`-I` would.
//!
//! Pure part: [`kube_forward_rules`], [`jump_rule`], [`plan_ensure`]; the socket side:
//! [`Nft::scan_filter_forward`], [`Nft::ensure_kube_forward`] (one guarded batch).

use crate::{Nft, NftError};
use nft_model::{
    BaseHook, ChainType, CmpOp, Expr, Family, Hook, Op, Policy, Rule, TableRef, Verdict,
};
use nft_wire::consts::{NFT_MSG_GETRULE, NFT_MSG_NEWRULE};
use nft_wire::encode::dump_request;
use nft_wire::{decode_object, scan_rule, Object, WireError};

/// iptables' filter table.
pub const FILTER_TABLE: &str = "filter";
/// iptables' built-in forward chain.
pub const FORWARD_CHAIN: &str = "FORWARD";
/// Upstream's chain (`kubeForwardChain`).
pub const KUBE_FORWARD_CHAIN: &str = "KUBE-FORWARD";
/// The comment of the jump and of the mark rule.
pub const FORWARDING_RULES_COMMENT: &str = "kubernetes forwarding rules";
/// The comment of the RELATED,ESTABLISHED rule.
pub const CONNTRACK_RULE_COMMENT: &str = "kubernetes forwarding conntrack rule";

/// What the chain's rules depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ForwardConfig {
    /// The masquerade mark (`1 << masqueradeBit`).
    pub mark: u32,
    /// Drop forwarded INVALID packets (`nf_conntrack_tcp_be_liberal` not set).
    pub drop_invalid: bool,
}

// x_tables' `struct xt_comment_info`: `char comment[256]`.
const XT_MAX_COMMENT_LEN: usize = 256;
// `struct xt_conntrack_mtinfo3` is 164 bytes; the kernel takes it padded to 8 (XT_ALIGN).
const CONNTRACK_INFO_LEN: usize = 168;
const CONNTRACK_MATCH_FLAGS_OFFSET: usize = 146;
const CONNTRACK_STATE_MASK_OFFSET: usize = 150;
const XT_CONNTRACK_STATE: u16 = 1;
/// `XT_CONNTRACK_STATE_INVALID` and `XT_STATE_BIT(IP_CT_ESTABLISHED / IP_CT_RELATED)`.
const XT_STATE_INVALID: u16 = 1;
const XT_STATE_ESTABLISHED: u16 = 1 << 1;
const XT_STATE_RELATED: u16 = 1 << 2;

/// `-m comment --comment c`.
fn comment_match(c: &str) -> Expr {
    let mut info = c.as_bytes().to_vec();
    info.truncate(XT_MAX_COMMENT_LEN - 1);
    info.resize(XT_MAX_COMMENT_LEN, 0);
    Expr::XtMatch {
        name: "comment".into(),
        rev: 0,
        info,
    }
}

/// `-m conntrack --ctstate <states>` (revision 3, as iptables 1.8 writes it).
fn ctstate_match(states: u16) -> Expr {
    let mut info = vec![0u8; CONNTRACK_INFO_LEN];
    info[CONNTRACK_MATCH_FLAGS_OFFSET..CONNTRACK_MATCH_FLAGS_OFFSET + 2]
        .copy_from_slice(&XT_CONNTRACK_STATE.to_ne_bytes());
    info[CONNTRACK_STATE_MASK_OFFSET..CONNTRACK_STATE_MASK_OFFSET + 2]
        .copy_from_slice(&states.to_ne_bytes());
    Expr::XtMatch {
        name: "conntrack".into(),
        rev: 3,
        info,
    }
}

/// iptables-nft puts a counter before the verdict of every rule.
fn with_verdict(mut exprs: Vec<Expr>, v: Verdict) -> Rule {
    exprs.push(Expr::Counter);
    exprs.push(Expr::Verdict(v));
    Rule::new(exprs)
}

/// `KUBE-FORWARD`'s rules, in upstream's order.
pub fn kube_forward_rules(cfg: ForwardConfig) -> Vec<Rule> {
    let mut rules = Vec::new();
    if cfg.drop_invalid {
        rules.push(with_verdict(
            vec![ctstate_match(XT_STATE_INVALID)],
            Verdict::Drop,
        ));
    }
    let mut marked = vec![comment_match(FORWARDING_RULES_COMMENT)];
    // `-m mark --mark m/m`, native as iptables-nft writes it
    marked.extend(nft_model::build::mark_cmp(cfg.mark, CmpOp::Eq, cfg.mark));
    rules.push(with_verdict(marked, Verdict::Accept));
    rules.push(with_verdict(
        vec![
            comment_match(CONNTRACK_RULE_COMMENT),
            ctstate_match(XT_STATE_RELATED | XT_STATE_ESTABLISHED),
        ],
        Verdict::Accept,
    ));
    rules
}

/// The jump from `FORWARD`, by which we recognise ours (and kube-proxy's, the same).
pub fn jump_rule() -> Rule {
    with_verdict(
        vec![comment_match(FORWARDING_RULES_COMMENT)],
        Verdict::Jump(KUBE_FORWARD_CHAIN.into()),
    )
}

/// One family's `filter` table as far as we care.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterScan {
    pub table_exists: bool,
    pub forward_exists: bool,
    /// `KUBE-FORWARD`'s rules if the chain exists (`None` for a rule the model cannot
    /// read: it is not ours, and the chain gets rewritten).
    pub kube_forward: Option<Vec<Option<Rule>>>,
    /// Handles of the rules in `FORWARD` of exactly [`jump_rule`]'s form.
    pub jumps: Vec<u64>,
}

/// The ops that make one family's `filter` table hold our chain and jump; empty when
/// it does already. Pure.
pub fn plan_ensure(family: Family, scan: &FilterScan, cfg: ForwardConfig) -> Vec<Op> {
    let table = TableRef::new(family, FILTER_TABLE);
    let want = kube_forward_rules(cfg);
    let mut ops = Vec::new();
    if !scan.table_exists {
        ops.push(Op::AddTable {
            table: table.clone(),
            comment: None,
        });
    }
    if !scan.forward_exists {
        // as iptables-nft creates its built-in chain: the policy is only ever set here
        ops.push(Op::AddChain {
            table: table.clone(),
            name: FORWARD_CHAIN.into(),
            base: Some(BaseHook {
                chain_type: ChainType::Filter,
                hook: Hook::Forward,
                priority: 0,
                policy: Policy::Accept,
            }),
            comment: None,
        });
    }
    let same = scan.kube_forward.as_ref().is_some_and(|have| {
        have.len() == want.len() && have.iter().zip(&want).all(|(h, w)| h.as_ref() == Some(w))
    });
    if !same {
        if scan.kube_forward.is_none() {
            ops.push(Op::AddChain {
                table: table.clone(),
                name: KUBE_FORWARD_CHAIN.into(),
                base: None,
                comment: None,
            });
        } else {
            ops.push(Op::FlushChain {
                table: table.clone(),
                chain: KUBE_FORWARD_CHAIN.into(),
            });
        }
        ops.extend(want.into_iter().map(|rule| Op::AddRule {
            table: table.clone(),
            chain: KUBE_FORWARD_CHAIN.into(),
            rule,
        }));
    }
    if scan.jumps.is_empty() {
        ops.push(Op::InsertRule {
            table,
            chain: FORWARD_CHAIN.into(),
            rule: jump_rule(),
        });
    }
    ops
}

/// What [`Nft::ensure_kube_forward`] committed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ensured {
    /// Ops committed (0: everything was in place).
    pub ops: usize,
    /// The generation that guarded each committed batch, in order (each produced the
    /// next generation).
    pub guards: Vec<u32>,
}

/// A rule of the filter table: where it is, and the rule if the model can read it.
type ScannedRule = (String, u64, Option<Rule>);

fn scanned_rule(kind: u16, family: u8, attrs: &[u8]) -> Result<Option<ScannedRule>, WireError> {
    if kind != NFT_MSG_NEWRULE {
        return Ok(None);
    }
    let r = scan_rule(family, attrs)?;
    if r.table.name != FILTER_TABLE {
        return Ok(None);
    }
    let rule = match decode_object(kind, family, attrs) {
        Ok(Object::Rule { rule, .. }) => Some(rule),
        _ => None,
    };
    Ok(Some((r.chain, r.handle, rule)))
}

impl Nft {
    /// Read one family's `filter` table: does it and `FORWARD` exist, `KUBE-FORWARD`'s
    /// rules, our jumps.
    pub fn scan_filter_forward(&mut self, family: Family) -> Result<FilterScan, NftError> {
        let t = TableRef::new(family, FILTER_TABLE);
        let mut scan = FilterScan::default();
        if !self.table_exists(&t)? {
            return Ok(scan);
        }
        scan.table_exists = true;
        // each chain by name: a chain dump would walk and send every chain of the
        // family, ours included (tens of thousands), after every sync
        scan.forward_exists = self.chain_exists(&t, FORWARD_CHAIN)?;
        if self.chain_exists(&t, KUBE_FORWARD_CHAIN)? {
            scan.kube_forward = Some(Vec::new());
        }
        let (rules, _) = self
            .dump_with(
                "rules",
                |seq| dump_request(NFT_MSG_GETRULE, &t, seq),
                scanned_rule,
            )
            .map_err(|e| e.into_nft(FILTER_TABLE))?;
        let jump = jump_rule();
        for (chain, handle, rule) in rules.into_iter().flatten() {
            if chain == FORWARD_CHAIN && rule.as_ref() == Some(&jump) {
                scan.jumps.push(handle);
            } else if chain == KUBE_FORWARD_CHAIN {
                if let Some(k) = scan.kube_forward.as_mut() {
                    k.push(rule);
                }
            }
        }
        Ok(scan)
    }

    /// Make each family's `filter` table hold `KUBE-FORWARD` and our jump: one batch per
    /// family (a family the kernel cannot serve, e.g. IPv6 disabled, does not keep the
    /// other one from being written), guarded by the generation (re-read on a
    /// concurrent change). Returns the number of ops committed (0: everything was in
    /// place, nothing was sent) and the generation that guarded each committed batch;
    /// after a failure, the other families are still tried and the first error is
    /// returned.
    pub fn ensure_kube_forward(
        &mut self,
        families: &[Family],
        cfg: ForwardConfig,
    ) -> Result<Ensured, NftError> {
        let mut done = Ensured::default();
        let mut first_err = None;
        for f in families {
            let (mut n, mut base) = (0, 0);
            let r = self.commit_guarded(5, |nft| {
                // the guard's generation (a later change fails the guarded commit)
                base = nft.generation()?;
                let ops = plan_ensure(*f, &nft.scan_filter_forward(*f)?, cfg);
                n = ops.len();
                Ok(ops)
            });
            match r {
                Ok(_) if n > 0 => {
                    done.ops += n;
                    done.guards.push(base);
                }
                Ok(_) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nft_model::render;

    const CFG: ForwardConfig = ForwardConfig {
        mark: 0x4000,
        drop_invalid: true,
    };

    fn present(cfg: ForwardConfig) -> FilterScan {
        FilterScan {
            table_exists: true,
            forward_exists: true,
            kube_forward: Some(kube_forward_rules(cfg).into_iter().map(Some).collect()),
            jumps: vec![7],
        }
    }

    #[test]
    fn the_rules_are_upstreams_in_upstreams_order() {
        let text: Vec<String> = kube_forward_rules(CFG)
            .iter()
            .map(|r| render::rule(Family::Ip, r))
            .collect();
        assert_eq!(
            text,
            vec![
                r#"xt match "conntrack" counter packets 0 bytes 0 drop"#,
                r#"xt match "comment" meta mark & 0x00004000 == 0x00004000 counter packets 0 bytes 0 accept"#,
                r#"xt match "comment" xt match "conntrack" counter packets 0 bytes 0 accept"#,
            ]
        );
        let liberal = kube_forward_rules(ForwardConfig {
            drop_invalid: false,
            ..CFG
        });
        assert_eq!(liberal.len(), 2, "no INVALID drop with tcp_be_liberal");
        assert_eq!(liberal[..], kube_forward_rules(CFG)[1..]);
    }

    #[test]
    fn nothing_to_do_when_everything_is_in_place() {
        assert_eq!(plan_ensure(Family::Ip, &present(CFG), CFG), vec![]);
    }

    #[test]
    fn an_empty_host_gets_table_chain_rules_and_jump_and_the_policy_only_then() {
        let ops = plan_ensure(Family::Ip6, &FilterScan::default(), CFG);
        let script = render::script(&ops);
        assert!(script.starts_with("add table ip6 filter\n"), "{script}");
        assert!(
            script.contains("add chain ip6 filter FORWARD { type filter hook forward priority filter; policy accept; }"),
            "{script}"
        );
        assert!(
            script.contains("add chain ip6 filter KUBE-FORWARD\n"),
            "{script}"
        );
        assert!(script.ends_with(
            "insert rule ip6 filter FORWARD xt match \"comment\" counter packets 0 bytes 0 jump KUBE-FORWARD\n"
        ), "{script}");
        assert_eq!(ops.len(), 7);
    }

    #[test]
    fn a_docker_host_keeps_its_table_and_policy_and_gets_chain_and_jump() {
        let scan = FilterScan {
            table_exists: true,
            forward_exists: true,
            kube_forward: None,
            jumps: vec![],
        };
        let ops = plan_ensure(Family::Ip, &scan, CFG);
        assert!(
            !ops.iter()
                .any(|o| matches!(o, Op::AddTable { .. } | Op::AddChain { base: Some(_), .. })),
            "the table and FORWARD (its DROP policy) are never re-declared: {ops:?}"
        );
        assert!(matches!(ops.last(), Some(Op::InsertRule { .. })));
    }

    #[test]
    fn kube_proxys_chain_is_adopted_in_place_and_rewritten_only_if_it_differs() {
        // kube-proxy's chain of the same rules: nothing (not even a flush)
        assert_eq!(plan_ensure(Family::Ip, &present(CFG), CFG), vec![]);
        // with tcp_be_liberal now set, or an unreadable rule: flushed and rewritten,
        // never deleted
        for scan in [
            present(CFG),
            FilterScan {
                kube_forward: Some(vec![None]),
                ..present(CFG)
            },
        ] {
            let cfg = if scan == present(CFG) {
                ForwardConfig {
                    drop_invalid: false,
                    ..CFG
                }
            } else {
                CFG
            };
            let ops = plan_ensure(Family::Ip, &scan, cfg);
            assert!(
                matches!(&ops[0], Op::FlushChain { chain, .. } if chain == KUBE_FORWARD_CHAIN),
                "{ops:?}"
            );
            assert!(!ops.iter().any(|o| matches!(
                o,
                Op::DeleteChain { .. } | Op::DeleteRule { .. } | Op::InsertRule { .. }
            )));
        }
    }
}
