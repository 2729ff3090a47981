//! Set elements as the compiler keeps them: packed into one shared byte string each
//! ([`nft_model::PackedElement`]), ordered in the mirror by their identity in their set.
//!
//! A large table holds a few elements per endpoint (its slot in an endpoint map, its
//! hairpin pair) and the compiler keeps every one of them for as long as it runs.
//! Packed, each costs ~50 bytes in one allocation, shared between the fragments, the
//! mirror and a batch creating the table ([`nft_model::Op::AddPackedElements`]). They
//! are unpacked only to build an incremental batch or a whole [`nft_model::Table`].

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One element, packed (see [`nft_model::PackedElement`]).
pub type Packed = nft_model::PackedElement;

/// A set's name as fragments hold it: one pointer wide (a fragment holds one beside
/// each of its elements: an `Arc<str>` would take twice that), and one allocation per
/// distinct name (names are interned: the skeleton's sets, a few dozen, are named by
/// every fragment). Together ~20 MiB at 50,000 services x 10 endpoints.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SetName(Arc<String>);

/// The interned names; past this many, names are allocated each time (no growth
/// without bound, whatever names come).
const INTERNED_MAX: usize = 1024;
static NAMES: Mutex<BTreeMap<String, SetName>> = Mutex::new(BTreeMap::new());

impl SetName {
    fn intern(s: &str) -> SetName {
        let fresh = || SetName(Arc::new(s.to_string()));
        let Ok(mut names) = NAMES.lock() else {
            return fresh();
        };
        if let Some(n) = names.get(s) {
            return n.clone();
        }
        let n = fresh();
        if names.len() < INTERNED_MAX {
            names.insert(s.to_string(), n.clone());
        }
        n
    }
}

impl std::ops::Deref for SetName {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SetName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for SetName {
    fn from(s: &str) -> SetName {
        SetName::intern(s)
    }
}

impl From<String> for SetName {
    fn from(s: String) -> SetName {
        SetName::intern(&s)
    }
}

impl std::fmt::Debug for SetName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", &**self.0)
    }
}

impl std::fmt::Display for SetName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A packed element ordered and compared by its identity in its set (key and key end),
/// not its data.
#[derive(Debug, Clone)]
pub struct ByKey(pub Packed);

impl PartialEq for ByKey {
    fn eq(&self, other: &ByKey) -> bool {
        self.0.identity() == other.0.identity()
    }
}
impl Eq for ByKey {}
impl PartialOrd for ByKey {
    fn partial_cmp(&self, other: &ByKey) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for ByKey {
    fn cmp(&self, other: &ByKey) -> Ordering {
        self.0.identity().cmp(&other.0.identity())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_names_are_interned_and_thin() {
        assert_eq!(std::mem::size_of::<SetName>(), 8);
        let (a, b) = (
            SetName::from("hairpin"),
            SetName::from("hairpin".to_string()),
        );
        assert!(Arc::ptr_eq(&a.0, &b.0), "one allocation per name");
        assert_eq!(&*a, "hairpin");
        let mut m = BTreeMap::new();
        m.insert(a, 1);
        assert_eq!(m.get("hairpin"), Some(&1), "looked up by str");
    }
}
