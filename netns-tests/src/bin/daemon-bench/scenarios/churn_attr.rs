//! How `churn-prod` attributes each change to the kernel transaction that carries it,
//! from the bench's own nftables monitor: the first transaction after the change's
//! watch event was written whose set elements add, or delete, its witness address
//! ([`judge`]); whether it may have waited for the rate limit (minSyncPeriod, [`recent`]).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::churn_trace::Change;
use crate::observer::Note;
use crate::report::ms;

/// The daemon's minSyncPeriod (its default).
const MIN_SYNC: Duration = Duration::from_secs(1);

/// Per (add, IPv4 address as 4 bytes at a register boundary): when an element carrying
/// it arrived and the transaction (index into the commit times) that closed it.
pub type Index = HashMap<(bool, [u8; 4]), Vec<(Instant, usize)>>;

/// Index the notes by the addresses their elements carry; the commit (NEWGEN) times;
/// how many overflows were seen.
pub fn index(notes: &[(Instant, Note)]) -> (Index, Vec<Instant>, usize) {
    let (mut idx, mut commits, mut lost) = (Index::new(), Vec::new(), 0);
    let mut pending: Vec<((bool, [u8; 4]), Instant)> = Vec::new();
    for (t, n) in notes {
        match n {
            Note::Elements { add, values, .. } => {
                for v in values {
                    for w in v.chunks_exact(4) {
                        pending.push(((*add, [w[0], w[1], w[2], w[3]]), *t));
                    }
                }
            }
            Note::Gen(_) => {
                commits.push(*t);
                for (k, at) in pending.drain(..) {
                    idx.entry(k).or_default().push((at, commits.len() - 1));
                }
            }
            Note::Lost => {
                lost += 1;
                pending.clear();
            }
            Note::Other(_) => {}
        }
    }
    (idx, commits, lost)
}

/// The first transaction after `sent` carrying the change's witness (its index).
pub fn attribute(idx: &Index, add: bool, a: Ipv4Addr, sent: Instant) -> Option<usize> {
    let v = idx.get(&(add, a.octets()))?;
    let k = v.partition_point(|(t, _)| *t < sent);
    v.get(k).map(|(_, tx)| *tx)
}

/// Whether another change of the same address (`sents`, sorted) was sent after
/// `sent` and before `seen`: the transaction may be that change's.
fn ambiguous(sents: &[Instant], sent: Instant, seen: Instant) -> bool {
    let k = sents.partition_point(|t| *t <= sent);
    sents.get(k).is_some_and(|t| *t < seen)
}

/// Whether a change sent at `sent` and consumed by transaction `tx` may have waited for
/// the rate limit: the last transaction before it committed less than minSyncPeriod
/// before it, or another transaction (a sync under way when it came) closed first.
/// How much later than the kernel's commit the bench's monitor may see its NEWGEN (it
/// reads the transaction's element notes first: about 14k per sync in churn-prod at 10k).
pub const MONITOR_LAG: Duration = Duration::from_millis(50);

fn held(commits: &[Instant], sent: Instant, tx: usize) -> bool {
    recent(commits, sent) || tx > commits.partition_point(|t| *t < sent)
}

/// Whether the last transaction before `sent` committed less than minSyncPeriod before
/// it (how a change not attributed to a transaction is classed).
pub fn recent(commits: &[Instant], sent: Instant) -> bool {
    let k = commits.partition_point(|t| *t < sent);
    k > 0 && sent - commits[k - 1] < MIN_SYNC
}

/// What the kernel showed of one change.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Attr {
    /// Held this long (ms) after its event; whether it may have waited for the rate
    /// limit.
    Seen { kernel: f64, held: bool },
    /// Not seen within 10 s (coalesced, later, or lost).
    Unseen,
    /// Nothing to see (no address), or no event time.
    Blind,
    /// Another change of its address came between it and the transaction.
    Ambiguous,
}

/// Attribute change `c` sent at `sent` (`by_addr`: when each witness address was sent).
pub fn judge(
    idx: &Index,
    commits: &[Instant],
    by_addr: &HashMap<Ipv4Addr, Vec<Instant>>,
    c: &Change,
    sent: Option<Instant>,
) -> Attr {
    let (Some(w), Some(sent)) = (c.witness, sent) else {
        return Attr::Blind;
    };
    match attribute(idx, w.add, w.addr, sent).map(|tx| (tx, commits[tx])) {
        Some((_, t)) if by_addr.get(&w.addr).is_some_and(|v| ambiguous(v, sent, t)) => {
            Attr::Ambiguous
        }
        Some((tx, t)) if t - sent < Duration::from_secs(10) => Attr::Seen {
            kernel: ms(t - sent),
            held: held(commits, sent, tx),
        },
        _ => Attr::Unseen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_attributed_to_the_first_transaction_after_it_carrying_its_address() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let a = Ipv4Addr::new(198, 19, 240, 9);
        let el = |add, v: Vec<u8>| Note::Elements {
            add,
            table: "t".into(),
            set: "s".into(),
            values: vec![v],
        };
        let notes = vec![
            (t(1), el(true, vec![0, 0, 0, 1, 198, 19, 240, 9])),
            (t(2), Note::Gen(1)),
            (t(5), el(false, vec![198, 19, 240, 9])),
            (t(6), Note::Gen(2)),
            (t(9), el(true, vec![198, 19, 240, 9])),
            (t(10), Note::Lost),
            (t(12), el(true, vec![198, 19, 240, 10])),
            (t(13), Note::Gen(3)),
        ];
        let (idx, commits, lost) = index(&notes);
        assert_eq!((commits.len(), lost), (3, 1));
        assert_eq!(attribute(&idx, true, a, t0), Some(0));
        assert_eq!(attribute(&idx, false, a, t0), Some(1));
        // after the first addition: none (the next one was lost with the overflow, so
        // its transaction is not known), while the other address is seen
        assert_eq!(attribute(&idx, true, a, t(3)), None);
        let b = Ipv4Addr::new(198, 19, 240, 10);
        assert_eq!(attribute(&idx, true, b, t0), Some(2));
        assert_eq!(attribute(&idx, true, Ipv4Addr::new(1, 2, 3, 4), t0), None);
        // within minSyncPeriod of the last commit; or consumed by the second
        // transaction after it
        assert!(held(&commits, t(7), 2) && !held(&commits, t0, 0) && held(&commits, t0, 1));
    }

    #[test]
    fn a_transaction_after_another_change_of_the_address_is_not_credited() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let sents = [t(1), t(5)];
        assert!(!ambiguous(&sents, t(1), t(4)));
        assert!(ambiguous(&sents, t(1), t(6)));
        assert!(!ambiguous(&sents, t(5), t(9)));
    }
}
