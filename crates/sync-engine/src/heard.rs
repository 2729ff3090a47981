//! What the nftables watcher heard: every committed transaction's generation and whether
//! it touched our tables. The watcher thread writes it; the engine asks it whether the
//! generations between two it knows were other programs' commits to their own tables
//! only (Docker, firewalld, a CNI, a host agent commit all the time). Then what the engine
//! believes of our tables still holds: no read-back, no repair, and a dump or a commit
//! the generation moved under is still good.
//!
//! The kernel queues a transaction's notifications before it answers anyone the new
//! generation, so a generation the engine reads is heard soon after: a question waits a
//! little for the watcher to catch up. Anything not heard (the watcher not yet
//! listening, its subscription dropped around a large commit of ours, lost
//! notifications) proves nothing: the engine then reads our tables back, as without it.

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::watch::Poll;

/// How many transactions are remembered (a question about more generations than this
/// proves nothing).
const KEEP: usize = 4096;

/// The transactions heard, shared by the watcher thread and the engine.
#[derive(Default)]
pub struct Heard {
    state: Mutex<State>,
    grew: Condvar,
}

#[derive(Default)]
struct State {
    /// By generation: whether the transaction touched our tables (or may have).
    ours: HashMap<u32, bool>,
    /// The generations in `ours`, oldest first (for forgetting).
    order: VecDeque<u32>,
}

impl Heard {
    pub fn new() -> Heard {
        Heard::default()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take in what one read of the watcher's socket found. Lost notifications make
    /// everything heard so far (and in this read) worthless: a transaction between may
    /// be missing.
    pub fn record(&self, p: &Poll) {
        let mut s = self.state();
        if p.overflow {
            s.ours.clear();
            s.order.clear();
        } else {
            for h in &p.heard {
                if s.ours.insert(h.genid, h.ours).is_none() {
                    s.order.push_back(h.genid);
                }
                while s.order.len() > KEEP {
                    if let Some(g) = s.order.pop_front() {
                        s.ours.remove(&g);
                    }
                }
            }
        }
        drop(s);
        self.grew.notify_all();
    }

    /// Whether every transaction after generation `from` up to `to` (generations count
    /// up and wrap) was heard and touched none of our tables, or is one of ours
    /// (`is_ours`: the engine's own commits, which it knows). Waits up to `wait` for
    /// the watcher to hear them. `from == to`: nothing happened, true.
    pub fn others_only(
        &self,
        from: u32,
        to: u32,
        is_ours: &dyn Fn(u32) -> bool,
        wait: Duration,
    ) -> bool {
        let n = to.wrapping_sub(from) as usize;
        if n > KEEP {
            return false;
        }
        let deadline = Instant::now() + wait;
        let mut s = self.state();
        loop {
            let mut missing = false;
            for k in 1..=n {
                let g = from.wrapping_add(k as u32);
                if is_ours(g) {
                    continue;
                }
                match s.ours.get(&g) {
                    Some(true) => return false,
                    Some(false) => {}
                    None => missing = true,
                }
            }
            if !missing {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = match self.grew.wait_timeout(s, deadline - now) {
                Ok((g, _)) => g,
                Err(e) => e.into_inner().0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::watch::Heard as Tx;
    use std::sync::Arc;

    fn poll(txs: &[(u32, bool)]) -> Poll {
        Poll {
            heard: txs
                .iter()
                .map(|&(genid, ours)| Tx { genid, ours })
                .collect(),
            ..Poll::default()
        }
    }

    const NONE: &dyn Fn(u32) -> bool = &|_| false;
    const NOW: Duration = Duration::ZERO;

    #[test]
    fn other_programs_commits_between_two_generations_are_proven() {
        let h = Heard::new();
        h.record(&poll(&[(11, false), (12, false), (13, false)]));
        assert!(h.others_only(10, 13, NONE, NOW));
        assert!(h.others_only(11, 12, NONE, NOW));
        assert!(h.others_only(13, 13, NONE, NOW), "nothing happened");
        // one not heard (10 itself is not asked about, 9 -> 10 is)
        assert!(!h.others_only(9, 13, NONE, NOW));
        // ... unless it is ours
        assert!(h.others_only(9, 13, &|g| g == 10, NOW));
        // further than heard
        assert!(!h.others_only(10, 14, NONE, NOW));
    }

    #[test]
    fn a_transaction_on_our_tables_proves_nothing_unless_ours() {
        let h = Heard::new();
        h.record(&poll(&[(11, false), (12, true), (13, false)]));
        assert!(!h.others_only(10, 13, NONE, NOW));
        assert!(h.others_only(10, 13, &|g| g == 12, NOW));
        assert!(h.others_only(12, 13, NONE, NOW));
    }

    #[test]
    fn lost_notifications_forget_everything_heard() {
        let h = Heard::new();
        h.record(&poll(&[(11, false), (12, false)]));
        let mut lost = poll(&[(13, false)]);
        lost.overflow = true;
        h.record(&lost);
        assert!(!h.others_only(10, 12, NONE, NOW));
        assert!(!h.others_only(12, 13, NONE, NOW));
        h.record(&poll(&[(14, false)]));
        assert!(h.others_only(13, 14, NONE, NOW));
        assert!(!h.others_only(12, 14, NONE, NOW));
    }

    #[test]
    fn generations_wrap() {
        let h = Heard::new();
        h.record(&poll(&[(u32::MAX, false), (0, false), (1, false)]));
        assert!(h.others_only(u32::MAX - 1, 1, NONE, NOW));
        // backwards (or more than remembered) proves nothing
        assert!(!h.others_only(1, u32::MAX, NONE, NOW));
    }

    #[test]
    fn only_the_newest_transactions_are_remembered() {
        let h = Heard::new();
        let txs: Vec<(u32, bool)> = (1..=(KEEP as u32 + 10)).map(|g| (g, false)).collect();
        h.record(&poll(&txs));
        assert!(!h.others_only(0, 20, NONE, NOW));
        assert!(h.others_only(20, KEEP as u32 + 10, NONE, NOW));
    }

    #[test]
    fn a_question_waits_for_the_watcher_to_catch_up() {
        let h = Arc::new(Heard::new());
        h.record(&poll(&[(11, false)]));
        let w = h.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.record(&poll(&[(12, false)]));
        });
        let started = Instant::now();
        assert!(h.others_only(10, 12, NONE, Duration::from_secs(5)));
        assert!(started.elapsed() < Duration::from_secs(4));
        t.join().unwrap();
        // and gives up at its bound
        let started = Instant::now();
        assert!(!h.others_only(10, 13, NONE, Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
    }
}
