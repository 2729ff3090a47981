//! Set elements as the compiler keeps them: packed into one shared byte string each
//! ([`nft_model::PackedElement`]), ordered in the mirror by their identity in their set.
//!
//! A large table holds a few elements per endpoint (its slot in an endpoint map, its
//! hairpin pair) and the compiler keeps every one of them for as long as it runs.
//! Packed, each costs ~50 bytes in one allocation, shared between the fragments, the
//! mirror and a batch creating the table ([`nft_model::Op::AddPackedElements`]). They
//! are unpacked only to build an incremental batch or a whole [`nft_model::Table`].

use std::cmp::Ordering;
use std::sync::Arc;

/// One element, packed (see [`nft_model::PackedElement`]).
pub type Packed = nft_model::PackedElement;

/// A set's name as fragments hold it (shared, not copied per element).
pub type SetName = Arc<str>;

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
