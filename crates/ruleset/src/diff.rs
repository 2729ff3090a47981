//! The minimal batch turning the last committed tables into the desired ones.
//!
//! Element changes are element adds and deletes; a chain is rewritten (flush + add rules)
//! only when its rules changed; sets and chains are created and deleted as they appear
//! and disappear. A sync with no change yields no operation. Because names derive from
//! object identity, a restarted daemon diffing against the kernel's dump gets the same
//! minimal batch.
//!
//! Order inside the batch, so that every reference is valid when the kernel checks it:
//! new counters, new sets, new chains, flushes (changed and removed chains), element deletes, set
//! deletes (removed or re-declared sets), re-declared sets, rules, element adds, chain
//! deletes, counter deletes. Rules before element adds: the kernel walks a map's elements for every rule
//! added that looks it up (see `nft_model::create_table_ops`).

use std::collections::{BTreeMap, BTreeSet};

use nft_model::*;

/// Key identity of an element.
type ElemKey = (Vec<Value>, Option<Vec<Value>>);

/// Whether two declarations of a set are the same for the kernel (what re-sending the
/// declaration must match exactly). `saddr_key` only changes how nft prints the set.
fn decl_eq(a: &Set, b: &Set) -> bool {
    a.key == b.key
        && a.data == b.data
        && a.flags == b.flags
        && a.timeout_ms == b.timeout_ms
        && a.size == b.size
        && a.comment == b.comment
}

/// Whether `els` is strictly increasing by element key (as the compiler emits them).
fn sorted_by_key(els: &[Element]) -> bool {
    els.windows(2)
        .all(|w| (&w[0].key, w[0].key_end()) < (&w[1].key, w[1].key_end()))
}

/// The elements to delete from `old` and to add from `new` (an element whose data or
/// attributes changed is deleted and re-added). Linear merge when both lists are sorted
/// by key, as compiled tables are; a keyed comparison otherwise (e.g. a kernel dump).
fn element_changes(old: &[Element], new: &[Element]) -> (Vec<Element>, Vec<Element>) {
    if sorted_by_key(old) && sorted_by_key(new) {
        let (mut del, mut add) = (Vec::new(), Vec::new());
        let (mut i, mut j) = (0, 0);
        while i < old.len() || j < new.len() {
            let ord = match (old.get(i), new.get(j)) {
                (Some(a), Some(b)) => (&a.key, a.key_end()).cmp(&(&b.key, b.key_end())),
                (Some(_), None) => std::cmp::Ordering::Less,
                _ => std::cmp::Ordering::Greater,
            };
            match ord {
                std::cmp::Ordering::Less => {
                    del.push(old[i].clone());
                    i += 1;
                }
                std::cmp::Ordering::Greater => {
                    add.push(new[j].clone());
                    j += 1;
                }
                std::cmp::Ordering::Equal => {
                    if old[i] != new[j] {
                        del.push(old[i].clone());
                        add.push(new[j].clone());
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        return (del, add);
    }
    let ok: BTreeMap<ElemKey, &Element> = old
        .iter()
        .map(|e| ((e.key.clone(), e.key_end().map(<[Value]>::to_vec)), e))
        .collect();
    let nk: BTreeMap<ElemKey, &Element> = new
        .iter()
        .map(|e| ((e.key.clone(), e.key_end().map(<[Value]>::to_vec)), e))
        .collect();
    let del = ok
        .iter()
        .filter(|(k, e)| nk.get(*k).is_none_or(|ne| ne != *e))
        .map(|(_, e)| (*e).clone())
        .collect();
    let add = nk
        .iter()
        .filter(|(k, e)| ok.get(*k).is_none_or(|oe| oe != *e))
        .map(|(_, e)| (*e).clone())
        .collect();
    (del, add)
}

/// Diff whole rulesets: tables matched by family and name; a table only in `old` is
/// deleted, one only in `new` created.
pub fn diff(old: &[Table], new: &[Table]) -> Vec<Op> {
    let mut ops = Vec::new();
    for n in new {
        let o = old
            .iter()
            .find(|o| o.family == n.family && o.name == n.name);
        ops.extend(diff_tables(o, n));
    }
    for o in old {
        if !new.iter().any(|n| n.family == o.family && n.name == o.name) {
            ops.push(Op::DeleteTable {
                table: TableRef::new(o.family, o.name.clone()),
            });
        }
    }
    ops
}

/// [`diff_tables`] taking the new table: a table created from scratch moves its
/// elements into the operations instead of copying them.
pub fn diff_tables_into(old: Option<&Table>, new: Table) -> Vec<Op> {
    match old {
        None => nft_model::into_create_table_ops(new),
        Some(old) => diff_tables(Some(old), &new),
    }
}

/// [`diff_tables_into`] of a table whose large sets hold packed elements: a table
/// created from scratch is created from them as they are (no element unpacked); a diff
/// from an existing table unpacks them.
pub fn diff_packed_into(old: Option<&Table>, new: PackedTable) -> Vec<Op> {
    match old {
        None => nft_model::into_create_table_ops_packed(new),
        Some(old) => diff_tables(Some(old), &new.unpack()),
    }
}

/// Diff one table. `old == None`: the table does not exist yet.
pub fn diff_tables(old: Option<&Table>, new: &Table) -> Vec<Op> {
    let Some(old) = old else {
        return create_table_ops(new);
    };
    let t = TableRef::new(new.family, new.name.clone());
    let mut ops = Vec::new();
    if old.comment != new.comment {
        ops.push(Op::AddTable {
            table: t.clone(),
            comment: new.comment.clone(),
        });
    }

    let old_sets: BTreeMap<&str, &Set> = old.sets.iter().map(|s| (s.name.as_str(), s)).collect();
    let new_sets: BTreeMap<&str, &Set> = new.sets.iter().map(|s| (s.name.as_str(), s)).collect();
    let old_chains: BTreeMap<&str, &Chain> =
        old.chains.iter().map(|c| (c.name.as_str(), c)).collect();

    let added_sets: Vec<&Set> = new
        .sets
        .iter()
        .filter(|s| !old_sets.contains_key(s.name.as_str()))
        .collect();
    let removed_sets: Vec<&Set> = old
        .sets
        .iter()
        .filter(|s| !new_sets.contains_key(s.name.as_str()))
        .collect();
    let redeclared: BTreeSet<&str> = new
        .sets
        .iter()
        .filter(|s| {
            old_sets
                .get(s.name.as_str())
                .is_some_and(|o| !decl_eq(o, s))
        })
        .map(|s| s.name.as_str())
        .collect();

    let added_chains: Vec<&Chain> = new
        .chains
        .iter()
        .filter(|c| !old_chains.contains_key(c.name.as_str()))
        .collect();
    let new_names: BTreeSet<&str> = new.chains.iter().map(|c| c.name.as_str()).collect();
    let removed_chains: Vec<&Chain> = old
        .chains
        .iter()
        .filter(|c| !new_names.contains(c.name.as_str()))
        .collect();
    // Chains whose declaration changed are re-created (only base chains can differ so).
    let recreated: Vec<&Chain> = new
        .chains
        .iter()
        .filter(|c| {
            old_chains
                .get(c.name.as_str())
                .is_some_and(|o| o.base != c.base || o.comment != c.comment)
        })
        .collect();
    let recreated_names: BTreeSet<&str> = recreated.iter().map(|c| c.name.as_str()).collect();
    let rewritten: Vec<&Chain> = new
        .chains
        .iter()
        .filter(|c| !recreated_names.contains(c.name.as_str()))
        .filter(|c| {
            old_chains.get(c.name.as_str()).is_some_and(|o| {
                o.rules != c.rules
                    || o.rules
                        .iter()
                        .flat_map(|r| r.set_refs())
                        .any(|s| redeclared.contains(s))
            })
        })
        .collect();

    // 1. new counters, sets and chains (an existing counter is never re-created: its
    // values are the kernel's)
    for name in new.counters.iter().filter(|c| !old.counters.contains(c)) {
        ops.push(Op::AddCounter {
            table: t.clone(),
            name: name.clone(),
        });
    }
    for s in &added_sets {
        ops.push(Op::AddSet {
            table: t.clone(),
            set: Set {
                elements: Vec::new(),
                ..(*s).clone()
            },
        });
    }
    for c in &added_chains {
        ops.push(add_chain_op(&t, c));
    }
    // 2. flushes
    for c in rewritten
        .iter()
        .map(|c| old_chains[c.name.as_str()])
        .chain(removed_chains.iter().copied())
    {
        if !c.rules.is_empty() {
            ops.push(Op::FlushChain {
                table: t.clone(),
                chain: c.name.clone(),
            });
        }
    }
    for c in &recreated {
        let o = old_chains[c.name.as_str()];
        if !o.rules.is_empty() {
            ops.push(Op::FlushChain {
                table: t.clone(),
                chain: c.name.clone(),
            });
        }
        ops.push(Op::DeleteChain {
            table: t.clone(),
            chain: c.name.clone(),
        });
        ops.push(add_chain_op(&t, c));
    }
    // 3. element deletes (in sets kept as declared)
    let mut adds: Vec<(String, Vec<Element>)> = Vec::new();
    for n in &new.sets {
        let Some(o) = old_sets.get(n.name.as_str()) else {
            if !n.flags.dynamic && !n.elements.is_empty() {
                adds.push((n.name.clone(), n.elements.clone()));
            }
            continue;
        };
        if redeclared.contains(n.name.as_str()) {
            if !n.flags.dynamic && !n.elements.is_empty() {
                adds.push((n.name.clone(), n.elements.clone()));
            }
            continue;
        }
        // Unchanged sets (the common case: a sync touches a few of hundreds of maps)
        // cost one comparison, without building key maps.
        if n.flags.dynamic || o.elements == n.elements {
            continue;
        }
        let (del, add) = element_changes(&o.elements, &n.elements);
        if !del.is_empty() {
            ops.push(Op::DeleteElements {
                table: t.clone(),
                set: n.name.clone(),
                elements: del,
            });
        }
        if !add.is_empty() {
            adds.push((n.name.clone(), add));
        }
    }
    // 4. set deletes and re-declarations
    for s in &removed_sets {
        ops.push(Op::DeleteSet {
            table: t.clone(),
            set: s.name.clone(),
        });
    }
    for name in &redeclared {
        ops.push(Op::DeleteSet {
            table: t.clone(),
            set: name.to_string(),
        });
    }
    for name in &redeclared {
        ops.push(Op::AddSet {
            table: t.clone(),
            set: Set {
                elements: Vec::new(),
                ..new_sets[name].clone()
            },
        });
    }
    // constant sets take no element once a rule uses them: theirs go first
    let (constant, adds): (Vec<_>, Vec<_>) = adds
        .into_iter()
        .partition(|(set, _)| new_sets.get(set.as_str()).is_some_and(|s| s.flags.constant));
    for (set, elements) in constant {
        ops.push(Op::AddElements {
            table: t.clone(),
            set,
            elements,
        });
    }
    // 5. rules of new, rewritten and re-created chains, in table order
    let fill: BTreeSet<&str> = added_chains
        .iter()
        .chain(rewritten.iter())
        .chain(recreated.iter())
        .map(|c| c.name.as_str())
        .collect();
    for c in new.chains.iter().filter(|c| fill.contains(c.name.as_str())) {
        for r in &c.rules {
            ops.push(Op::AddRule {
                table: t.clone(),
                chain: c.name.clone(),
                rule: r.clone(),
            });
        }
    }
    // 6. element adds (after the rules: see nft_model::create_table_ops)
    for (set, elements) in adds {
        ops.push(Op::AddElements {
            table: t.clone(),
            set,
            elements,
        });
    }
    // 7. chain deletes, then counters no rule refers to any more (rules were flushed
    // in 2)
    for c in &removed_chains {
        ops.push(Op::DeleteChain {
            table: t.clone(),
            chain: c.name.clone(),
        });
    }
    for name in old.counters.iter().filter(|c| !new.counters.contains(c)) {
        ops.push(Op::DeleteCounter {
            table: t.clone(),
            name: name.clone(),
        });
    }
    ops
}
