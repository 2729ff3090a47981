//! Play a batch onto in-memory tables, checking what the kernel checks (references to
//! chains and sets exist, nothing referenced is deleted, element keys exist or do not,
//! no set holds more elements than its size).
//! Used to test that [`crate::diff`] batches are valid and reach the desired state.

use nft_model::*;

/// Why the kernel would refuse a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("op {index}: {what} does not exist")]
    NotFound { index: usize, what: String },
    #[error("op {index}: {what} already exists differently")]
    Exists { index: usize, what: String },
    #[error("op {index}: {what} is still in use")]
    Busy { index: usize, what: String },
    #[error("op {index}: bad element for {set}: {reason}")]
    BadElement {
        index: usize,
        set: String,
        reason: String,
    },
    /// The kernel's `ENFILE`: an element past the set's size.
    #[error("op {index}: set {set} is full ({size} elements)")]
    Full {
        index: usize,
        set: String,
        size: u32,
    },
}

fn elem_key(e: &Element) -> (&[Value], Option<&[Value]>) {
    (&e.key, e.key_end())
}

fn chain_referenced(t: &Table, name: &str) -> bool {
    t.chains
        .iter()
        .flat_map(|c| c.rules.iter())
        .any(|r| r.verdict_targets().any(|x| x == name))
        || t.sets
            .iter()
            .flat_map(|s| s.elements.iter())
            .any(|e| matches!(&e.data, Some(ElemData::Verdict(v)) if v.chain() == Some(name)))
}

fn set_referenced(t: &Table, name: &str) -> bool {
    t.chains
        .iter()
        .flat_map(|c| c.rules.iter())
        .any(|r| r.set_refs().any(|x| x == name))
}

/// Apply `ops` to `tables` atomically: on error nothing changes.
pub fn apply(tables: &mut Vec<Table>, ops: &[Op]) -> Result<(), ApplyError> {
    let mut work = tables.clone();
    for (index, op) in ops.iter().enumerate() {
        apply_one(&mut work, index, op)?;
    }
    *tables = work;
    Ok(())
}

fn apply_one(tables: &mut Vec<Table>, index: usize, op: &Op) -> Result<(), ApplyError> {
    // packed elements are the same op as unpacked ones
    let op = &*op.unpacked();
    let tr = op.table();
    let pos = tables
        .iter()
        .position(|t| t.family == tr.family && t.name == tr.name);
    let nf = |what: String| ApplyError::NotFound { index, what };
    if let Op::AddTable { table, comment } = op {
        match pos {
            Some(p) => tables[p].comment = comment.clone().or(tables[p].comment.take()),
            None => {
                let mut t = Table::new(table.family, table.name.clone());
                t.comment = comment.clone();
                tables.push(t);
            }
        }
        return Ok(());
    }
    let p = pos.ok_or_else(|| nf(format!("table {} {}", tr.family.nft_name(), tr.name)))?;
    if let Op::DeleteTable { .. } = op {
        tables.remove(p);
        return Ok(());
    }
    let t = &mut tables[p];
    match op {
        Op::AddTable { .. } | Op::DeleteTable { .. } | Op::AddPackedElements { .. } => {
            unreachable!()
        }
        Op::AddChain {
            name,
            base,
            comment,
            ..
        } => match t.chains.iter().find(|c| &c.name == name) {
            Some(c) if c.base != *base => {
                return Err(ApplyError::Exists {
                    index,
                    what: format!("chain {name}"),
                })
            }
            Some(_) => {}
            None => {
                let mut c = Chain::regular(name.clone());
                c.base = *base;
                c.comment = comment.clone();
                t.chains.push(c);
            }
        },
        // The in-memory model carries no kernel handles: rules deleted by handle are
        // never ours, so the model cannot play them.
        Op::DeleteRule { chain, handle, .. } => {
            return Err(nf(format!("rule handle {handle} in chain {chain}")));
        }
        Op::FlushChain { chain, .. } => {
            t.chains
                .iter_mut()
                .find(|c| &c.name == chain)
                .ok_or_else(|| nf(format!("chain {chain}")))?
                .rules
                .clear();
        }
        Op::DeleteChain { chain, .. } => {
            let i = t
                .chains
                .iter()
                .position(|c| &c.name == chain)
                .ok_or_else(|| nf(format!("chain {chain}")))?;
            if !t.chains[i].rules.is_empty() || chain_referenced(t, chain) {
                return Err(ApplyError::Busy {
                    index,
                    what: format!("chain {chain}"),
                });
            }
            t.chains.remove(i);
        }
        Op::AddRule { chain, rule, .. } | Op::InsertRule { chain, rule, .. } => {
            for target in rule.verdict_targets() {
                if t.chain(target).is_none() {
                    return Err(nf(format!("chain {target}")));
                }
            }
            for s in rule.set_refs() {
                if t.set(s).is_none() {
                    return Err(nf(format!("set {s}")));
                }
            }
            for c in rule.counter_refs() {
                if !t.counters.iter().any(|n| n == c) {
                    return Err(nf(format!("counter {c}")));
                }
            }
            let rules = &mut t
                .chains
                .iter_mut()
                .find(|c| &c.name == chain)
                .ok_or_else(|| nf(format!("chain {chain}")))?
                .rules;
            if matches!(op, Op::InsertRule { .. }) {
                rules.insert(0, rule.clone());
            } else {
                rules.push(rule.clone());
            }
        }
        Op::AddCounter { name, .. } => {
            if !t.counters.contains(name) {
                t.counters.push(name.clone());
            }
        }
        Op::DeleteCounter { name, .. } => {
            let i = t
                .counters
                .iter()
                .position(|c| c == name)
                .ok_or_else(|| nf(format!("counter {name}")))?;
            let used = t
                .chains
                .iter()
                .flat_map(|c| c.rules.iter())
                .any(|r| r.counter_refs().any(|c| c == name));
            if used {
                return Err(ApplyError::Busy {
                    index,
                    what: format!("counter {name}"),
                });
            }
            t.counters.remove(i);
        }
        Op::AddSet { set, .. } => match t.set(&set.name) {
            Some(s) => {
                let same = s.key == set.key
                    && s.data == set.data
                    && s.flags == set.flags
                    && s.timeout_ms == set.timeout_ms
                    && s.size == set.size;
                if !same {
                    return Err(ApplyError::Exists {
                        index,
                        what: format!("set {}", set.name),
                    });
                }
            }
            None => t.sets.push(Set {
                elements: Vec::new(),
                ..set.clone()
            }),
        },
        Op::DeleteSet { set, .. } => {
            let i = t
                .sets
                .iter()
                .position(|s| &s.name == set)
                .ok_or_else(|| nf(format!("set {set}")))?;
            if set_referenced(t, set) {
                return Err(ApplyError::Busy {
                    index,
                    what: format!("set {set}"),
                });
            }
            t.sets.remove(i);
        }
        Op::FlushSet { set, .. } => {
            t.sets
                .iter_mut()
                .find(|s| &s.name == set)
                .ok_or_else(|| nf(format!("set {set}")))?
                .elements
                .clear();
        }
        Op::AddElements { set, elements, .. } => {
            for e in elements {
                if let Some(ElemData::Verdict(v)) = &e.data {
                    if let Some(c) = v.chain() {
                        if t.chain(c).is_none() {
                            return Err(nf(format!("chain {c}")));
                        }
                    }
                }
            }
            let s = t
                .sets
                .iter_mut()
                .find(|s| &s.name == set)
                .ok_or_else(|| nf(format!("set {set}")))?;
            let mut check = Set {
                elements: elements.clone(),
                ..s.clone()
            };
            check.name = "check".into();
            check.validate().map_err(|e| ApplyError::BadElement {
                index,
                set: set.clone(),
                reason: e.to_string(),
            })?;
            for e in elements {
                match s.elements.iter().find(|x| elem_key(x) == elem_key(e)) {
                    Some(x) if x.data != e.data => {
                        return Err(ApplyError::Exists {
                            index,
                            what: format!("element of {set}"),
                        })
                    }
                    Some(_) => {}
                    None => s.elements.push(e.clone()),
                }
            }
            // past its size, the kernel refuses an element (ENFILE)
            if let Some(size) = s.size.filter(|n| s.elements.len() > *n as usize) {
                return Err(ApplyError::Full {
                    index,
                    set: set.clone(),
                    size,
                });
            }
            // the kernel refuses an element overlapping another one of an interval set
            if s.overlap().is_some() {
                return Err(ApplyError::Exists {
                    index,
                    what: format!("overlapping interval in {set}"),
                });
            }
        }
        Op::DeleteElements { set, elements, .. } => {
            let s = t
                .sets
                .iter_mut()
                .find(|s| &s.name == set)
                .ok_or_else(|| nf(format!("set {set}")))?;
            for e in elements {
                let i = s
                    .elements
                    .iter()
                    .position(|x| elem_key(x) == elem_key(e))
                    .ok_or_else(|| nf(format!("element {:?} of {set}", e.key)))?;
                s.elements.remove(i);
            }
        }
    }
    Ok(())
}
