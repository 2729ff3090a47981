//! Size hints for large sets (`NFTA_SET_DESC_SIZE`, `nft_model::Set::size`).
//!
//! Given a size, the kernel keeps a set that has no timeouts, intervals or dynamic
//! updates in its hash of fixed buckets, which never rehashes: a cold start of a set of
//! 1M elements takes 1.63 s instead of 3.38 s, of 200k 0.22 s instead of 0.48 s (the
//! resizable hash grows by rehashing from its minimum size). The size is also a hard
//! cap: the kernel refuses the element past it (`ENFILE`). So:
//! - a set gets a size when it is created with at least [`SIZE_MIN`] elements: the
//!   smallest three quarters of a power of two at or above one and a half times its
//!   elements ([`hint`]: the kernel then allocates that power of two of buckets, at least
//!   two per element and at most four); a smaller one gets none (and the kernel's
//!   resizable hash, for as long as it lives);
//! - a set whose elements would pass its size ([`needs_growth`]) is declared again in
//!   the same batch with the size its elements ask for now: the rules that look it up
//!   are flushed and added again around its deletion and creation, all in one
//!   transaction (`crate::diff`: a re-declared set), so no packet sees the table without
//!   its rules. A set grows after half again its elements (at most three elements per
//!   four buckets: the kernel's own bound for a size); a batch deletes elements before
//!   it adds any, so it never passes the size on its way;
//! - a size is never lowered, and a set whose size the kernel already holds keeps it
//!   while it is enough (after a restart or a configuration change: [`adopt`]).
//!
//! The buckets are zeroed pages the kernel takes at the set's creation: on this
//! project's test machine fresh kernel pages are a large part of a cold start's commit
//! (docs/benchmarks.md), so a set is given no more than the rule above.
//!
//! The decisions are the mirror's, which knows each set's elements and the size the
//! kernel holds (the declaration as last confirmed: the journal's); `crate::apply`
//! refuses a batch adding past a size as the kernel would.

use nft_model::{Set, Table};

use super::Mirror;

/// The fewest elements a set is created with to get a size.
pub const SIZE_MIN: usize = 1024;

/// Whether sets like `s` can take a size: the kernel's fixed-bucket hash holds neither
/// timeouts nor intervals, and the elements of a dynamic set are not the compiler's.
pub fn eligible(s: &Set) -> bool {
    !s.flags.dynamic && !s.flags.interval && !s.flags.timeout
}

/// The size a set created with `n` elements gets: none below [`SIZE_MIN`], else the
/// smallest three quarters of a power of two at or above `1.5 n`.
///
/// The kernel allocates (zeroed) `size * 4 / 3` rounded up to a power of two buckets of
/// 8 bytes (`nft_hash_buckets`): for a size of three quarters of a power of two that is
/// the power itself, for a power of two twice as many. Measured here (6.18, 40 sets):
/// size 2^20 took 18.5 MB each and 4.4 s to create, 3 * 2^18 10.3 MB and 0.76 s.
/// (Until 2026-12-06 the rule was `2 n`, with growth past three quarters of the size:
/// the same headroom, twice the buckets half the time.)
pub fn hint(n: usize) -> Option<u32> {
    if n < SIZE_MIN {
        return None;
    }
    let want = (n as u64).saturating_mul(3).div_ceil(2);
    // buckets: the power of two whose three quarters is at least `want`
    let buckets = want.saturating_mul(4).div_ceil(3).next_power_of_two();
    Some((buckets / 4 * 3).min(3 << 29) as u32)
}

/// Whether `n` elements are past `size` (the kernel would refuse the last ones).
pub fn needs_growth(size: u32, n: usize) -> bool {
    n as u64 > u64::from(size)
}

/// The size to keep for a set holding `n` elements when the kernel's set has `kernel`
/// (`None`: no size): the kernel's while it has room (no growth needed), none when it
/// has none (the kernel's resizable hash grows by itself), else a new hint.
pub fn adopt(kernel: Option<u32>, n: usize) -> Option<u32> {
    match kernel {
        Some(k) if !needs_growth(k, n) => Some(k),
        Some(_) => hint(n),
        None => None,
    }
}

impl Mirror {
    /// The elements a skeleton set holds (its own and the fragments').
    fn count(&self, s: &Set) -> usize {
        s.elements.len() + self.elements.get(&*s.name).map_or(0, |m| m.len())
    }

    /// Size the skeleton's sets from their elements, at the end of a build from scratch
    /// (before the journal starts).
    pub(super) fn size_sets(&mut self) {
        let sizes: Vec<Option<u32>> = self
            .skeleton
            .sets
            .iter()
            .map(|s| {
                if eligible(s) {
                    hint(self.count(s))
                } else {
                    s.size
                }
            })
            .collect();
        for (s, size) in self.skeleton.sets.iter_mut().zip(sizes) {
            s.size = size;
        }
    }

    /// Keep the sizes of the sets a new skeleton keeps (`set_skeleton`).
    pub(super) fn carry_sizes(&self, new: &mut [Set]) {
        for s in new.iter_mut().filter(|s| eligible(s)) {
            if let Some(old) = self.skeleton.sets.iter().find(|o| o.name == s.name) {
                s.size = old.size;
            }
        }
    }

    /// After a change: each skeleton set's size from the size the kernel holds (the
    /// declaration as last confirmed) and its elements now. A set its elements would
    /// pass is declared again, with the chains whose rules look it up (rewritten
    /// around it in the same batch); a set created since gets its hint; a set whose
    /// growth a later change undid (a trial taken back) is back at the kernel's size.
    pub fn resize(&mut self) {
        let Some(j) = self.journal.as_ref() else {
            return;
        };
        let mut changes: Vec<(usize, Option<u32>)> = Vec::new();
        for (i, s) in self.skeleton.sets.iter().enumerate() {
            if !eligible(s) {
                continue;
            }
            let n = self.count(s);
            let want = match j.sets.get(&s.name) {
                // created since the last confirmed batch
                Some(None) => hint(n),
                Some(Some(before)) => adopt(before.size, n),
                None => adopt(s.size, n),
            };
            if want != s.size {
                changes.push((i, want));
            }
        }
        for (i, size) in changes {
            // declared again: journal the declaration and the chains using it (both
            // idempotent: the first state journaled is the kernel's)
            self.note_skeleton_set(i);
            let name = self.skeleton.sets[i].name.clone();
            let users: Vec<String> = self
                .skeleton
                .chains
                .iter()
                .chain(self.chains.values().map(|(c, _)| c))
                .filter(|c| c.rules.iter().any(|r| r.set_refs().any(|x| x == name)))
                .map(|c| c.name.clone())
                .collect();
            for c in users {
                self.note_chain(&c);
            }
            self.skeleton.sets[i].size = size;
        }
    }

    /// Take the sizes the kernel's table holds (read back after a restart, or the
    /// previous tables of a configuration change) where they are still enough, so that
    /// the next diff declares none of its sets again for a size alone.
    pub fn adopt_sizes(&mut self, kernel: &Table) {
        let sizes: Vec<Option<u32>> = self
            .skeleton
            .sets
            .iter()
            .map(|s| match kernel.set(&s.name) {
                Some(k) if eligible(s) => adopt(k.size, self.count(s)),
                _ => s.size,
            })
            .collect();
        for (s, size) in self.skeleton.sets.iter_mut().zip(sizes) {
            s.size = size;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_take_half_again_to_three_quarters_of_a_power_of_two_and_growth_starts_past_the_size() {
        assert_eq!(hint(SIZE_MIN - 1), None);
        // 1,536 = 1.5 x 1,024: 2,048 buckets, two per element
        assert_eq!(hint(1024), Some(1536));
        assert_eq!(hint(1025), Some(3072));
        assert_eq!(hint(2048), Some(3072));
        assert_eq!(hint(2049), Some(6144));
        assert_eq!(hint(200_000), Some(393_216));
        assert!(!needs_growth(4096, 4096));
        assert!(needs_growth(4096, 4097));
        // a set just past its size takes the next hint: two thirds to a third full
        assert_eq!(hint(3073), Some(6144));
        assert_eq!(hint(6145), Some(12_288));
        assert_eq!(adopt(Some(8192), 8192), Some(8192));
        assert_eq!(adopt(Some(8192), 8193), Some(24_576));
        assert_eq!(adopt(None, 100_000), None);
        // a hint leaves room for half again the elements, and the kernel's buckets (size
        // * 4 / 3, rounded up) are exactly a power of two: two to four per element
        for n in [1024usize, 1500, 4095, 4097, 100_000, 1 << 20] {
            let h = hint(n).unwrap() as usize;
            assert!(2 * h >= 3 * n && !needs_growth(h as u32, n * 3 / 2), "{n}");
            assert!(
                (h * 4 / 3).is_power_of_two() && (h * 4).is_multiple_of(3),
                "{n}"
            );
            let buckets = h * 4 / 3;
            assert!(buckets >= 2 * n && buckets <= 4 * n, "{n}: {buckets}");
        }
    }
}
