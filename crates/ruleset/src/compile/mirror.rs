//! The desired table of one family, kept up to date fragment by fragment: elements with
//! the number of fragments adding them, the claims on every destination (the first
//! claimant wins), the classes in use and the skeleton they imply. Every change is
//! journaled (the state before the first change of each object), so that the batch
//! turning the previous table into the new one is computed from the changed objects
//! only: work proportional to the change, not to the table.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use nft_model::*;

use super::classes::Class;
use super::fragment::{Claim, ClaimKey, Fragment, PortOrder};
use super::packed::{ByKey, Packed, SetName};
use super::skeleton::Skeleton;
use crate::error::RulesetError;
use crate::names::{PortId, TABLE};

mod sizing;
pub use sizing::{hint, needs_growth, SIZE_MIN};

/// A claimant of a destination.
#[derive(Debug, Clone)]
struct Claimant {
    order: PortOrder,
    id: PortId,
    claim: Arc<Claim>,
}

/// The state of objects before their first change since the last confirmed commit.
#[derive(Debug, Default)]
struct Journal {
    /// set -> element (by key) -> the element before (None: absent)
    elements: BTreeMap<SetName, BTreeMap<ByKey, Option<Packed>>>,
    /// skeleton sets whose declaration changed
    sets: BTreeMap<String, Option<Set>>,
    chains: BTreeMap<String, Option<Chain>>,
    /// the skeleton's named counters before they changed
    counters: Option<Vec<String>>,
    /// destinations whose winner or claimants changed
    claims: BTreeSet<ClaimKey>,
}

/// One family's desired table.
#[derive(Debug)]
pub struct Mirror {
    family: Family,
    skeleton: Skeleton,
    /// Elements added by fragments (winning claims and shared elements), counted.
    elements: BTreeMap<SetName, BTreeMap<ByKey, u32>>,
    /// Per-port chains (session affinity), counted.
    chains: BTreeMap<String, (Chain, u32)>,
    /// Fragments with per-port chains (session affinity): the skeleton has the
    /// `affinity` set while there is one.
    affinity_ports: u32,
    /// Per destination its claimants, first (winning) first: almost always one, so a
    /// small vector rather than a map (a map's node would cost ~1.5 KiB per claim).
    claims: BTreeMap<ClaimKey, Vec<Claimant>>,
    /// Destinations with more than one claimant (conflicts are listed from these only).
    contested: BTreeSet<ClaimKey>,
    classes: BTreeMap<Class, u32>,
    journal: Option<Journal>,
    /// While the table is built from scratch (before [`Mirror::start_journal`]): element
    /// additions (+1) and removals (-1) per set, in order, merged into `elements` at once
    /// when the build ends. Sorting each set once costs a fraction of inserting ~100k
    /// elements one by one into an ordered map (issue 11: the first sync's compile).
    staged: Option<BTreeMap<SetName, Vec<(Packed, bool)>>>,
}

impl Mirror {
    /// An empty table (no skeleton yet), being built: add the fragments, then call
    /// [`Mirror::start_journal`] before reading it.
    pub fn new(family: Family) -> Mirror {
        Mirror {
            family,
            skeleton: Skeleton::default(),
            elements: BTreeMap::new(),
            chains: BTreeMap::new(),
            affinity_ports: 0,
            claims: BTreeMap::new(),
            contested: BTreeSet::new(),
            classes: BTreeMap::new(),
            journal: None,
            staged: Some(BTreeMap::new()),
        }
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// End the build from scratch and record changes from now on (see
    /// [`Mirror::ops`]).
    pub fn start_journal(&mut self) {
        if let Some(staged) = self.staged.take() {
            for (set, ops) in staged {
                let merged = merge_staged(ops);
                if !merged.is_empty() {
                    self.elements.insert(set, merged);
                }
            }
            self.size_sets();
        }
        self.journal = Some(Journal::default());
    }

    /// The port owning a destination.
    pub fn owner(&self, key: &ClaimKey) -> Option<PortId> {
        self.claims
            .get(key)
            .and_then(|c| c.first())
            .map(|w| w.id.clone())
    }

    /// The classes in use.
    pub fn classes(&self) -> BTreeSet<Class> {
        self.classes.keys().copied().collect()
    }

    /// Whether a service port has session affinity (the skeleton's `affinity` set).
    pub fn affinity(&self) -> bool {
        self.affinity_ports > 0
    }

    // -- journaled primitives ---------------------------------------------------------

    fn note_element(&mut self, set: &SetName, key: &ByKey) {
        let Some(j) = self.journal.as_mut() else {
            return;
        };
        let per = match j.elements.get_mut(&**set) {
            Some(p) => p,
            None => j.elements.entry(set.clone()).or_default(),
        };
        if !per.contains_key(key) {
            let before = self
                .elements
                .get(&**set)
                .and_then(|m| m.get_key_value(key))
                .map(|(e, _)| e.0.clone());
            per.insert(key.clone(), before);
        }
    }

    fn add_element(&mut self, set: &SetName, e: &Packed) {
        if let Some(staged) = self.staged.as_mut() {
            stage(staged, set, e, true);
            return;
        }
        let k = ByKey(e.clone());
        if let Some(n) = self.elements.get_mut(&**set).and_then(|m| m.get_mut(&k)) {
            *n += 1;
            return;
        }
        self.note_element(set, &k);
        match self.elements.get_mut(&**set) {
            Some(m) => m,
            None => self.elements.entry(set.clone()).or_default(),
        }
        .insert(k, 1);
    }

    fn remove_element(&mut self, set: &SetName, e: &Packed) {
        if let Some(staged) = self.staged.as_mut() {
            stage(staged, set, e, false);
            return;
        }
        let k = ByKey(e.clone());
        let Some(n) = self.elements.get_mut(&**set).and_then(|m| m.get_mut(&k)) else {
            return;
        };
        if *n > 1 {
            *n -= 1;
            return;
        }
        self.note_element(set, &k);
        if let Some(m) = self.elements.get_mut(&**set) {
            m.remove(&k);
            if m.is_empty() {
                self.elements.remove(&**set);
            }
        }
    }

    /// Journal the declaration of the skeleton's `i`-th set before it changes.
    fn note_skeleton_set(&mut self, i: usize) {
        let before = decl(&self.skeleton.sets[i]);
        if let Some(j) = self.journal.as_mut() {
            j.sets.entry(before.name.clone()).or_insert(Some(before));
        }
    }

    fn note_chain(&mut self, name: &str) {
        let before = self.chain(name).cloned();
        if let Some(j) = self.journal.as_mut() {
            j.chains.entry(name.to_string()).or_insert(before);
        }
    }

    fn chain(&self, name: &str) -> Option<&Chain> {
        self.chains
            .get(name)
            .map(|(c, _)| c)
            .or_else(|| self.skeleton.chains.iter().find(|c| c.name == name))
    }

    fn activate(&mut self, c: &Claim) {
        for (set, e) in &c.elements {
            self.add_element(set, e);
        }
        for class in &c.classes {
            *self.classes.entry(*class).or_default() += 1;
        }
    }

    fn deactivate(&mut self, c: &Claim) {
        for (set, e) in &c.elements {
            self.remove_element(set, e);
        }
        for class in &c.classes {
            if let Some(n) = self.classes.get_mut(class) {
                *n -= 1;
                if *n == 0 {
                    self.classes.remove(class);
                }
            }
        }
    }

    // -- fragments ------------------------------------------------------------------

    /// Add a fragment's contributions.
    pub fn add(&mut self, f: &Fragment) {
        for (set, e) in &f.shared {
            self.add_element(set, e);
        }
        if !f.chains.is_empty() {
            self.affinity_ports += 1;
        }
        for c in &f.chains {
            match self.chains.get_mut(&c.name) {
                Some((_, n)) => *n += 1,
                None => {
                    self.note_chain(&c.name);
                    self.chains.insert(c.name.clone(), (c.clone(), 1));
                }
            }
        }
        for c in &f.claims {
            if let Some(j) = self.journal.as_mut() {
                j.claims.insert(c.key.clone());
            }
            let claimants = self
                .claims
                .entry(c.key.clone())
                .or_insert_with(|| Vec::with_capacity(1));
            let old_winner = claimants.first().map(|w| w.claim.clone());
            let at = match claimants.binary_search_by(|x| x.order.cmp(&f.order)) {
                Ok(i) => {
                    claimants.remove(i);
                    i
                }
                Err(i) => i,
            };
            claimants.insert(
                at,
                Claimant {
                    order: f.order.clone(),
                    id: f.id.clone(),
                    claim: Arc::clone(c),
                },
            );
            let wins = at == 0;
            if claimants.len() > 1 {
                self.contested.insert(c.key.clone());
            }
            if wins {
                if let Some(old) = old_winner {
                    self.deactivate(&old);
                }
                self.activate(c);
            }
        }
    }

    /// Remove a fragment's contributions (the fragment as it was added).
    pub fn remove(&mut self, f: &Fragment) {
        for c in &f.claims {
            if let Some(j) = self.journal.as_mut() {
                j.claims.insert(c.key.clone());
            }
            let Some(claimants) = self.claims.get_mut(&c.key) else {
                continue;
            };
            let Ok(at) = claimants.binary_search_by(|x| x.order.cmp(&f.order)) else {
                continue;
            };
            let was_winner = at == 0;
            claimants.remove(at);
            let next = claimants.first().map(|w| w.claim.clone());
            if claimants.len() <= 1 {
                self.contested.remove(&c.key);
            }
            if claimants.is_empty() {
                self.claims.remove(&c.key);
            }
            if was_winner {
                self.deactivate(c);
                if let Some(n) = next {
                    self.activate(&n);
                }
            }
        }
        for c in &f.chains {
            if let Some((_, n)) = self.chains.get_mut(&c.name) {
                if *n > 1 {
                    *n -= 1;
                } else {
                    self.note_chain(&c.name);
                    self.chains.remove(&c.name);
                }
            }
        }
        if !f.chains.is_empty() {
            self.affinity_ports = self.affinity_ports.saturating_sub(1);
        }
        for (set, e) in &f.shared {
            self.remove_element(set, e);
        }
    }

    /// Replace the skeleton (journaling the objects that differ). The sets it keeps keep
    /// their sizes.
    pub fn set_skeleton(&mut self, mut new: Skeleton) {
        self.carry_sizes(&mut new.sets);
        if self.journal.is_some() {
            let sets = changed(&self.skeleton.sets, &new.sets, |s| &s.name);
            let chains = changed(&self.skeleton.chains, &new.chains, |c| &c.name);
            let counters = self.skeleton.counters.clone();
            let counters_changed = counters != new.counters;
            if let Some(j) = self.journal.as_mut() {
                if counters_changed && j.counters.is_none() {
                    j.counters = Some(counters);
                }
                for (name, before) in sets {
                    j.sets.entry(name).or_insert(before);
                }
                for (name, before) in chains {
                    j.chains.entry(name).or_insert(before);
                }
            }
        }
        self.skeleton = new;
    }

    // -- reading ----------------------------------------------------------------------

    /// A set's declaration (no elements).
    fn decl_of(&self, name: &str) -> Option<Set> {
        self.skeleton.sets.iter().find(|s| s.name == name).map(decl)
    }

    /// A set as it is now: declaration and every element, sorted.
    fn set_now(&self, name: &str) -> Option<Set> {
        let decl = self.skeleton.sets.iter().find(|s| s.name == name)?;
        let mut s = decl.clone();
        if let Some(m) = self.elements.get(name) {
            s.elements.reserve(m.len());
            // in order already: packed identities order as (key, key end) do
            s.elements.extend(m.keys().map(|e| e.0.element()));
        }
        Some(s)
    }

    /// The whole table.
    pub fn table(&self) -> Table {
        self.packed_table().unpack()
    }

    /// The whole table, the elements of the skeleton's sets packed (shared with the
    /// mirror, not copied).
    pub fn packed_table(&self) -> PackedTable {
        let mut t = Table::new(self.family, TABLE);
        let mut packed = BTreeMap::new();
        t.counters = self.skeleton.counters.clone();
        for s in &self.skeleton.sets {
            t.sets.push(s.clone());
            if let Some(m) = self.elements.get(&*s.name) {
                // in order already: packed identities order as (key, key end) do
                packed.insert(s.name.clone(), m.keys().map(|e| e.0.clone()).collect());
            }
        }
        t.chains.extend(self.skeleton.chains.iter().cloned());
        t.chains
            .extend(self.chains.values().map(|(c, _)| c.clone()));
        PackedTable { table: t, packed }
    }

    /// Conflicts on these destinations (all of them with `None`, in work proportional to
    /// the conflicts): every claimant but the first, with the first.
    pub fn conflicts(&self, keys: Option<&BTreeSet<ClaimKey>>) -> Vec<Conflict> {
        let mut out = Vec::new();
        let mut check = |key: &ClaimKey, claimants: &Vec<Claimant>| {
            let mut it = claimants.iter();
            let Some(winner) = it.next() else { return };
            for loser in it {
                out.push(Conflict {
                    key: key.clone(),
                    winner: winner.id.clone(),
                    loser: loser.id.clone(),
                });
            }
        };
        match keys {
            None => {
                for k in &self.contested {
                    if let Some(c) = self.claims.get(k) {
                        check(k, c);
                    }
                }
            }
            Some(keys) => {
                for k in keys {
                    if let Some(c) = self.claims.get(k) {
                        check(k, c);
                    }
                }
            }
        }
        out
    }

    /// The winning claims among `keys` that send traffic to endpoints.
    pub fn served(&self, keys: &BTreeSet<ClaimKey>) -> BTreeSet<ClaimKey> {
        keys.iter()
            .filter(|k| {
                self.claims
                    .get(*k)
                    .and_then(|c| c.first())
                    .is_some_and(|w| w.claim.served)
            })
            .cloned()
            .collect()
    }

    /// The table as committed last is now the table as it is: changes are journaled
    /// from here (call it once the batch of [`Mirror::ops`] is committed).
    pub fn confirm(&mut self) {
        if self.journal.is_some() {
            self.journal = Some(Journal::default());
        }
    }

    /// Whether nothing changed since the last [`Mirror::confirm`].
    pub fn confirmed(&self) -> bool {
        self.journal.as_ref().is_none_or(|j| {
            j.elements.is_empty()
                && j.sets.is_empty()
                && j.chains.is_empty()
                && j.claims.is_empty()
                && j.counters.is_none()
        })
    }

    /// The port owning the destination of an element of one of the skeleton's sets
    /// (a claim's key is the element's key, or its first fields: endpoint maps add
    /// the slot, `firewall-allow` the source).
    pub fn owner_of_element(&self, key: &[Value]) -> Option<PortId> {
        [3, 2]
            .iter()
            .filter(|n| key.len() >= **n)
            .find_map(|n| self.owner(&key[..*n].to_vec()))
    }

    /// The batch turning the table as last confirmed ([`Mirror::confirm`]: as the
    /// kernel holds it, when every batch is committed) into the table as it is, and the
    /// destinations whose claims changed meanwhile. Work proportional to what changed
    /// since then. Empty without a journal.
    pub fn ops(&self) -> (Vec<Op>, BTreeSet<ClaimKey>) {
        let Some(j) = self.journal.as_ref() else {
            return (Vec::new(), BTreeSet::new());
        };
        let mut old = Table::new(self.family, TABLE);
        let mut new = Table::new(self.family, TABLE);
        let mut names: BTreeSet<&str> = j.elements.keys().map(|k| &**k).collect();
        names.extend(j.sets.keys().map(String::as_str));
        for name in names {
            let touched = j.elements.get(name);
            if !j.sets.contains_key(name) {
                // only elements changed: both views hold the changed elements only
                let Some(d) = self.decl_of(name) else {
                    continue;
                };
                let mut b = d.clone();
                let mut n = d;
                for (k, was) in touched.into_iter().flatten() {
                    b.elements.extend(was.iter().map(Packed::element));
                    if let Some((e, _)) = self.elements.get(name).and_then(|m| m.get_key_value(k)) {
                        n.elements.push(e.0.element());
                    }
                }
                old.sets.push(b);
                new.sets.push(n);
                continue;
            }
            // created, deleted or re-declared: whole in both views
            if let Some(mut b) = j.sets[name].clone() {
                let mut m: BTreeMap<ByKey, ()> = b
                    .elements
                    .drain(..)
                    .map(|e| (ByKey(Packed::new(&e)), ()))
                    .collect();
                if let Some(cur) = self.elements.get(name) {
                    for k in cur.keys() {
                        m.remove(k);
                        m.insert(k.clone(), ());
                    }
                }
                for (k, was) in touched.into_iter().flatten() {
                    m.remove(k);
                    if let Some(e) = was {
                        m.insert(ByKey(e.clone()), ());
                    }
                }
                b.elements = m.into_keys().map(|e| e.0.element()).collect();
                old.sets.push(b);
            }
            if let Some(n) = self.set_now(name) {
                new.sets.push(n);
            }
        }
        for (name, before) in &j.chains {
            if let Some(c) = before {
                old.chains.push(c.clone());
            }
            if let Some(c) = self.chain(name) {
                new.chains.push(c.clone());
            }
        }
        if let Some(before) = &j.counters {
            old.counters = before.clone();
            new.counters = self.skeleton.counters.clone();
        }
        let ops = crate::diff::diff_tables(Some(&old), &new);
        (ops, j.claims.clone())
    }
}

fn stage(
    staged: &mut BTreeMap<SetName, Vec<(Packed, bool)>>,
    set: &SetName,
    e: &Packed,
    add: bool,
) {
    let per = match staged.get_mut(&**set) {
        Some(p) => p,
        None => staged.entry(set.clone()).or_default(),
    };
    per.push((e.clone(), add));
}

/// One set's staged additions and removals as the counted elements that adding and
/// removing them one by one, in this order, would leave (a removal of an absent element
/// does nothing; an element keeps the version first added).
fn merge_staged(ops: Vec<(Packed, bool)>) -> BTreeMap<ByKey, u32> {
    // Sorted by identity, the operations on one element in their order (the index
    // breaks ties). Each entry is an index and the identity's first 16 bytes as two
    // numbers, which settle most comparisons (ordering by them first keeps the
    // identities' order; the whole key of an IPv4 endpoint map or of the hairpin set,
    // where 8 bytes left every endpoint of a service port to a comparison of the
    // identities themselves, reached through their elements): 24 bytes, not the
    // identity itself (a set holds up to millions).
    let mut order: Vec<(Prefix, u32)> = ops
        .iter()
        .enumerate()
        .map(|(i, (p, _))| (prefix(p.identity().0), i as u32))
        .collect();
    let id = |i: u32| ops[i as usize].0.identity();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| id(a.1).cmp(&id(b.1)))
            .then(a.1.cmp(&b.1))
    });
    let mut out: Vec<(ByKey, u32)> = Vec::with_capacity(ops.len());
    let mut cur: Option<(&Packed, u32)> = None;
    for (at, &(_, i)) in order.iter().enumerate() {
        let (e, add) = &ops[i as usize];
        cur = match (cur, add) {
            (None, true) => Some((e, 1)),
            (None, false) => None,
            (Some((p, n)), true) => Some((p, n + 1)),
            (Some((_, 1)), false) => None,
            (Some((p, n)), false) => Some((p, n - 1)),
        };
        let same_next = order
            .get(at + 1)
            .is_some_and(|&(pre, next)| pre == order[at].0 && id(next) == id(i));
        if !same_next {
            out.extend(cur.take().map(|(p, n)| (ByKey(p.clone()), n)));
        }
    }
    // the operations go before the map is built
    drop(order);
    drop(ops);
    // sorted and unique: built in one pass
    out.into_iter().collect()
}

/// The first 16 bytes of a key as two big-endian numbers (zeros past its end).
type Prefix = (u64, u64);

/// A key's [`Prefix`]: a < b between two prefixes implies a < b between the keys.
fn prefix(key: &[u8]) -> Prefix {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    let (hi, lo) = b.split_at(8);
    let num = |x: &[u8]| u64::from_be_bytes(x.try_into().unwrap_or_default());
    (num(hi), num(lo))
}

/// The objects of `old` and `new` (by name) that differ, with their old version.
fn changed<T: Clone + PartialEq>(
    old: &[T],
    new: &[T],
    name: impl Fn(&T) -> &String,
) -> Vec<(String, Option<T>)> {
    let o: BTreeMap<&String, &T> = old.iter().map(|x| (name(x), x)).collect();
    let n: BTreeMap<&String, &T> = new.iter().map(|x| (name(x), x)).collect();
    let mut names: BTreeSet<&String> = o.keys().copied().collect();
    names.extend(n.keys().copied());
    names
        .into_iter()
        .filter(|k| o.get(k) != n.get(k))
        .map(|k| (k.clone(), o.get(k).map(|x| (*x).clone())))
        .collect()
}

/// A set's declaration without its elements.
fn decl(s: &Set) -> Set {
    Set {
        elements: Vec::new(),
        ..s.clone()
    }
}

/// Two service ports claiming one destination: `winner` keeps it, `loser` is skipped
/// for it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Conflict {
    pub key: ClaimKey,
    pub winner: PortId,
    pub loser: PortId,
}

impl Conflict {
    pub fn error(&self) -> RulesetError {
        RulesetError::Conflict {
            service: self.loser.service.to_string(),
            port: self.loser.port_name.to_string(),
            other: self.winner.service.to_string(),
            what: self
                .key
                .iter()
                .map(nft_model::render::value)
                .collect::<Vec<_>>()
                .join(" . "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys of several lengths, some alike in more than their first 8 bytes, two alike
    /// in their first 16 (the prefix sorted on; the rest settled by the identities).
    fn elem(key: u8, data: u8) -> Packed {
        let a = Value::Ipv4([198, 18, 0, 1].into());
        let (p0, p1, p2) = (Value::Port(0), Value::Port(1), Value::Port(2));
        let (i0, i1) = (Value::Int(0), Value::Int(1));
        let key: Vec<&Value> = match key {
            0 => vec![&p1],
            1 => vec![&p1, &p2],
            2 => vec![&a, &p1],
            3 => vec![&a, &p1, &i0],
            4 => vec![&a, &p1, &i1],
            5 => vec![&a, &p1, &a, &p1, &i0],
            6 => vec![&a, &p1, &a, &p1, &i1],
            _ => vec![&p0],
        };
        Packed::values(&key, Some(&[&Value::Int(u32::from(data))]))
    }

    /// The counted elements of every set, each with its full version (data included).
    fn contents(m: &Mirror) -> Vec<(String, Vec<(Packed, u32)>)> {
        m.elements
            .iter()
            .map(|(s, es)| {
                let es = es.iter().map(|(k, n)| (k.0.clone(), *n)).collect();
                (s.to_string(), es)
            })
            .collect()
    }

    proptest! {
        /// Building from scratch (staged, merged once) leaves exactly what adding and
        /// removing the same elements one by one leaves: counts, absent elements and
        /// which version of an element (same key, other data) is kept.
        #[test]
        fn a_staged_build_equals_one_by_one(
            ops in prop::collection::vec((0..3u8, 0..8u8, 0..3u8, any::<bool>()), 0..60)
        ) {
            let sets: Vec<SetName> = ["a", "b", "c"].iter().map(|s| (*s).into()).collect();
            let mut staged = Mirror::new(Family::Ip);
            let mut direct = Mirror::new(Family::Ip);
            direct.start_journal();
            for (set, key, data, add) in &ops {
                let (set, e) = (&sets[usize::from(*set)], elem(*key, *data));
                if *add {
                    staged.add_element(set, &e);
                    direct.add_element(set, &e);
                } else {
                    staged.remove_element(set, &e);
                    direct.remove_element(set, &e);
                }
            }
            staged.start_journal();
            prop_assert_eq!(contents(&staged), contents(&direct));
        }

        /// A prefix orders as its key does (keys of one length: one set's).
        #[test]
        fn prefixes_order_as_their_keys(
            len in 1..40usize,
            a in prop::collection::vec(0..3u8, 40),
            b in prop::collection::vec(0..3u8, 40),
        ) {
            let (a, b) = (&a[..len], &b[..len]);
            if prefix(a) != prefix(b) {
                prop_assert_eq!(prefix(a).cmp(&prefix(b)), a.cmp(b));
            } else {
                prop_assert_eq!(&a[..len.min(16)], &b[..len.min(16)]);
            }
        }
    }
}
