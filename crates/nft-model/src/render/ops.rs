//! nft commands performing [`Op`]s, and `nft -f` scripts of them.

use std::collections::HashSet;

use super::rule::rule;
use super::table::{base_hook, element, element_key, set_keyword, set_lines};
use super::text::quote;
use crate::object::*;
use crate::ops::*;

/// One nft command performing `op`. A flush of a set is spelled `flush set`, since the op
/// does not say whether it names a map; see [`op_with`].
pub fn op(op: &Op) -> String {
    op_with(op, |_| false)
}

/// Like [`op`], with `is_map` telling which set names are maps (`flush map` for those).
pub fn op_with(op: &Op, is_map: impl Fn(&str) -> bool) -> String {
    let tref = |t: &TableRef| format!("{} {}", t.family.nft_name(), t.name);
    match op {
        Op::AddTable {
            table,
            comment: None,
        } => format!("add table {}", tref(table)),
        Op::AddTable {
            table,
            comment: Some(c),
        } => {
            format!("add table {} {{ comment {}; }}", tref(table), quote(c))
        }
        Op::DeleteTable { table } => format!("delete table {}", tref(table)),
        Op::AddChain {
            table,
            name,
            base,
            comment,
        } => {
            let mut body = String::new();
            if let Some(b) = base {
                body.push_str(&format!(" {}", base_hook(table.family, b)));
            }
            if let Some(c) = comment {
                body.push_str(&format!(" comment {};", quote(c)));
            }
            if body.is_empty() {
                format!("add chain {} {name}", tref(table))
            } else {
                format!("add chain {} {name} {{{body} }}", tref(table))
            }
        }
        Op::FlushChain { table, chain } => format!("flush chain {} {chain}", tref(table)),
        Op::DeleteChain { table, chain } => format!("delete chain {} {chain}", tref(table)),
        Op::DeleteRule {
            table,
            chain,
            handle,
        } => format!("delete rule {} {chain} handle {handle}", tref(table)),
        Op::AddRule {
            table,
            chain,
            rule: r,
        } => {
            format!("add rule {} {chain} {}", tref(table), rule(table.family, r))
        }
        Op::InsertRule {
            table,
            chain,
            rule: r,
        } => {
            format!(
                "insert rule {} {chain} {}",
                tref(table),
                rule(table.family, r)
            )
        }
        Op::AddSet { table, set } => {
            let decl: Vec<String> = set_lines(set, None, false)
                .into_iter()
                .map(|l| format!("{l};"))
                .collect();
            format!(
                "add {} {} {} {{ {} }}",
                set_keyword(set),
                tref(table),
                set.name,
                decl.join(" ")
            )
        }
        Op::DeleteSet { table, set } => {
            let kw = if is_map(set) { "map" } else { "set" };
            format!("delete {kw} {} {set}", tref(table))
        }
        Op::FlushSet { table, set } => {
            let kw = if is_map(set) { "map" } else { "set" };
            format!("flush {kw} {} {set}", tref(table))
        }
        Op::AddCounter { table, name } => format!("add counter {} {name}", tref(table)),
        Op::DeleteCounter { table, name } => format!("delete counter {} {name}", tref(table)),
        Op::AddElements {
            table,
            set,
            elements,
        } => {
            // the set's declaration is not at hand: render every element timeout
            let decl = Set::set(set.clone(), Vec::new());
            let e: Vec<String> = elements.iter().map(|e| element(&decl, e, false)).collect();
            format!("add element {} {set} {{ {} }}", tref(table), e.join(", "))
        }
        Op::AddPackedElements { .. } => op_with(&op.unpacked(), is_map),
        Op::DeleteElements {
            table,
            set,
            elements,
        } => {
            let e: Vec<String> = elements.iter().map(element_key).collect();
            format!(
                "delete element {} {set} {{ {} }}",
                tref(table),
                e.join(", ")
            )
        }
    }
}

/// The ops as one `nft -f` script, one command per line. Maps are recognised from the
/// `AddSet` ops of the script (for `flush map`); element ops without elements, which nft
/// cannot spell and which do nothing, are left out.
pub fn script(ops: &[Op]) -> String {
    script_with(ops, |_| false)
}

/// Like [`script`], with `is_map` naming maps the script itself does not declare.
pub fn script_with(ops: &[Op], is_map: impl Fn(&str) -> bool) -> String {
    let maps: HashSet<(&TableRef, &str)> = ops
        .iter()
        .filter_map(|o| match o {
            Op::AddSet { table, set } if set.is_map() => Some((table, set.name.as_str())),
            _ => None,
        })
        .collect();
    let mut out = String::new();
    for o in ops {
        if o.element_count() == 0
            && matches!(
                o,
                Op::AddElements { .. } | Op::DeleteElements { .. } | Op::AddPackedElements { .. }
            )
        {
            continue;
        }
        let t = o.table();
        out.push_str(&op_with(o, |s| maps.contains(&(t, s)) || is_map(s)));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expr::*;
    use crate::packed::PackedElement;
    use crate::render::test_util::*;

    #[test]
    fn ops_and_scripts() {
        let t = TableRef::new(Family::Ip, "t");
        assert_eq!(
            op(&Op::AddTable {
                table: t.clone(),
                comment: None
            }),
            "add table ip t"
        );
        assert_eq!(
            op(&Op::AddTable {
                table: t.clone(),
                comment: Some("x".into())
            }),
            r#"add table ip t { comment "x"; }"#
        );
        let base = BaseHook {
            chain_type: ChainType::Filter,
            hook: Hook::Forward,
            priority: 0,
            policy: Policy::Drop,
        };
        assert_eq!(
            op(&Op::AddChain {
                table: t.clone(),
                name: "f".into(),
                base: Some(base),
                comment: Some("c".into())
            }),
            r#"add chain ip t f { type filter hook forward priority filter; policy drop; comment "c"; }"#
        );
        assert_eq!(
            op(&Op::AddChain {
                table: t.clone(),
                name: "r".into(),
                base: None,
                comment: None
            }),
            "add chain ip t r"
        );
        let mut set = sample_set();
        set.flags.timeout = true;
        set.timeout_ms = Some(10_000);
        set.comment = Some("m".into());
        assert_eq!(
            op(&Op::AddSet {
                table: t.clone(),
                set: set.clone()
            }),
            "add map ip t service-ips { type ipv4_addr . inet_proto . inet_service : verdict; \
             timeout 10s; comment \"m\"; }"
        );
        assert_eq!(
            op(&Op::AddElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: set.elements.clone()
            }),
            "add element ip t service-ips { 198.18.0.1 . tcp . 80 comment \"web\" : goto svc, \
             198.18.0.2 . sctp . 9 : accept }"
        );
        // packed, the same command
        assert_eq!(
            op(&Op::AddPackedElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: set.elements.iter().map(PackedElement::new).collect()
            }),
            op(&Op::AddElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: set.elements.clone()
            })
        );
        assert_eq!(
            op(&Op::DeleteElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: set.elements.clone()
            }),
            "delete element ip t service-ips { 198.18.0.1 . tcp . 80, 198.18.0.2 . sctp . 9 }"
        );
        assert_eq!(
            op(&Op::FlushSet {
                table: t.clone(),
                set: "s".into()
            }),
            "flush set ip t s"
        );
        assert_eq!(
            op_with(
                &Op::FlushSet {
                    table: t.clone(),
                    set: "m".into()
                },
                |_| true
            ),
            "flush map ip t m"
        );
        assert_eq!(
            op(&Op::DeleteChain {
                table: t.clone(),
                chain: "c".into()
            }),
            "delete chain ip t c"
        );
        assert_eq!(
            op(&Op::FlushChain {
                table: t.clone(),
                chain: "c".into()
            }),
            "flush chain ip t c"
        );
        let ops = vec![
            Op::AddSet {
                table: t.clone(),
                set: set.clone(),
            },
            Op::FlushSet {
                table: t.clone(),
                set: "service-ips".into(),
            },
            Op::AddElements {
                table: t.clone(),
                set: "service-ips".into(),
                elements: vec![],
            },
            Op::DeleteSet {
                table: t.clone(),
                set: "service-ips".into(),
            },
            Op::DeleteTable { table: t },
        ];
        let s = script(&ops);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1], "flush map ip t service-ips");
        assert_eq!(lines[2], "delete map ip t service-ips");
        assert_eq!(lines[3], "delete table ip t");
    }
}
