//! When the next sync is due: the loop's state machine (pure; time is passed in).
//!
//! States ([`State`]) and what moves between them:
//!
//! ```text
//!  AwaitingLists --both lists in--> Starting --sync ok--> Idle
//!  Idle   --change-->  Queued   --sync ok--> Idle
//!  Idle | Queued --foreign change/resync--> Repair --sync ok--> Idle
//!  any listed state --sync failed--> Backoff --sync ok--> Idle
//! ```
//!
//! Due time per state (the earliest wins where several apply):
//! - `AwaitingLists`: never (no sync before both sources listed);
//! - `Starting`: now (the first sync);
//! - `Idle`: the periodic full resync, last full sync + syncPeriod;
//! - `Queued`: last attempt + minSyncPeriod (changes arriving meanwhile join that sync);
//! - `Repair`: bypassing minSyncPeriod: at once for an explicit resync and for the first
//!   change by another program after a quiet time; while our tables are fought over,
//!   each repair waits longer after the previous one (`repair_initial` doubled per
//!   repair, at most `repair_max`), until no foreign change was seen for
//!   `repair_quiet`;
//! - `Backoff`: last attempt + retry delay (retry_initial doubled per consecutive failure,
//!   capped at retry_max, never below minSyncPeriod); the retry is a full sync.
//!
//! (Service ports skipped because the kernel refused their rules are checked between
//! syncs, not by one: a port found acceptable is a queued change.)
//!
//! A change or a repair request during `Backoff` or `Starting` is remembered (the flags
//! `dirty` and `force_full`) and served by the sync that ends that state.

use std::time::{Duration, Instant};

/// The phase of the loop (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    AwaitingLists,
    Starting,
    Idle,
    Queued,
    Repair,
    Backoff,
}

/// The periods the schedule needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    pub min_sync: Duration,
    pub sync: Duration,
    pub retry_initial: Duration,
    pub retry_max: Duration,
    /// Tamper repair backoff: the second repair of a fight waits this long after the
    /// first, doubled per repair, at most `repair_max`; reset after `repair_quiet` without
    /// a foreign change.
    pub repair_initial: Duration,
    pub repair_max: Duration,
    pub repair_quiet: Duration,
}

/// The schedule: state, the times it depends on, and what the next sync must do.
#[derive(Debug, Clone)]
pub struct Schedule {
    periods: Periods,
    state: State,
    services_listed: bool,
    slices_listed: bool,
    /// A change was queued since the last successful sync.
    dirty: bool,
    queued_since: Option<Instant>,
    /// The next sync must read the kernel (a full sync).
    force_full: bool,
    last_attempt: Option<Instant>,
    last_success: Option<Instant>,
    last_full: Option<Instant>,
    consecutive_failures: u32,
    /// When the repair is due (state `Repair`).
    repair_at: Option<Instant>,
    /// Repairs scheduled since our tables were last left alone for `repair_quiet`.
    repair_streak: u32,
    last_foreign: Option<Instant>,
    last_repair: Option<Instant>,
}

impl Schedule {
    pub fn new(periods: Periods) -> Schedule {
        Schedule {
            periods,
            state: State::AwaitingLists,
            services_listed: false,
            slices_listed: false,
            dirty: false,
            queued_since: None,
            force_full: false,
            last_attempt: None,
            last_success: None,
            last_full: None,
            consecutive_failures: 0,
            repair_at: None,
            repair_streak: 0,
            last_foreign: None,
            last_repair: None,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }
    pub fn periods(&self) -> &Periods {
        &self.periods
    }
    /// Whether both sources delivered their initial list.
    pub fn listed(&self) -> bool {
        self.services_listed && self.slices_listed
    }
    pub fn dirty(&self) -> bool {
        self.dirty
    }
    /// When the oldest change not yet applied was queued.
    pub fn queued_since(&self) -> Option<Instant> {
        self.queued_since
    }
    pub fn consecutive_failures(&self) -> u32 {
        self.consecutive_failures
    }
    pub fn last_full(&self) -> Option<Instant> {
        self.last_full
    }

    fn lists_done(&mut self) {
        if self.state == State::AwaitingLists && self.listed() {
            self.state = State::Starting;
        }
    }

    /// The services source listed.
    pub fn services_listed(&mut self) {
        self.services_listed = true;
        self.lists_done();
    }

    /// The endpoint slices source listed.
    pub fn slices_listed(&mut self) {
        self.slices_listed = true;
        self.lists_done();
    }

    /// A real change of the model. Returns true when it is the first change queued since
    /// the last successful sync (the time it was queued is `now`).
    pub fn changed(&mut self, now: Instant) -> bool {
        self.dirty = true;
        if self.state == State::Idle {
            self.state = State::Queued;
        }
        if self.queued_since.is_none() {
            self.queued_since = Some(now);
            return true;
        }
        false
    }

    /// A resync was asked for: a full sync at once.
    pub fn repair_requested(&mut self) {
        self.force_full = true;
        if matches!(self.state, State::Idle | State::Queued | State::Repair) {
            self.state = State::Repair;
            self.repair_at = None;
        }
    }

    /// Another program changed our tables (or changes may have been missed): a full
    /// sync that repairs them, at once after a quiet time, later and later while the
    /// tables are fought over. Returns the delay the repair waits for.
    pub fn foreign_change(&mut self, now: Instant) -> Duration {
        let p = self.periods;
        if self
            .last_foreign
            .is_some_and(|t| now.saturating_duration_since(t) > p.repair_quiet)
        {
            self.repair_streak = 0;
        }
        self.last_foreign = Some(now);
        self.force_full = true;
        match self.state {
            State::Idle | State::Queued => {
                self.repair_streak = self.repair_streak.saturating_add(1);
                let delay = self.repair_delay();
                let at = self.last_repair.map_or(now, |t| (t + delay).max(now));
                self.repair_at = Some(at);
                self.state = State::Repair;
                at - now
            }
            State::Repair => self
                .repair_at
                .map_or(Duration::ZERO, |t| t.saturating_duration_since(now)),
            // The sync ending these states reads the kernel anyway.
            State::AwaitingLists | State::Starting | State::Backoff => Duration::ZERO,
        }
    }

    /// The wait between the previous repair and the next one in the current streak:
    /// none for the first, then `repair_initial` doubled per repair, at most `repair_max`.
    fn repair_delay(&self) -> Duration {
        match self.repair_streak {
            0 | 1 => Duration::ZERO,
            n => crate::backoff::doubling(
                self.periods.repair_initial,
                n - 2,
                self.periods.repair_max,
            ),
        }
    }

    /// The current repair streak (repairs scheduled since the last quiet time).
    pub fn repair_streak(&self) -> u32 {
        self.repair_streak
    }

    /// The next sync must be a full one, at the normal pace (minSyncPeriod).
    pub fn verify_requested(&mut self) {
        self.force_full = true;
        if self.state == State::Idle {
            self.state = State::Queued;
        }
    }

    fn retry_delay(&self) -> Duration {
        let p = &self.periods;
        let d = crate::backoff::doubling(
            p.retry_initial,
            self.consecutive_failures.saturating_sub(1),
            p.retry_max,
        );
        d.max(p.min_sync)
    }

    /// When the next sync is due (None: not before the initial lists).
    pub fn due(&self, now: Instant) -> Option<Instant> {
        let p = &self.periods;
        let periodic = self.last_full.map(|t| t + p.sync);
        let soon = self.last_attempt.map_or(now, |t| t + p.min_sync);
        match self.state {
            State::AwaitingLists => None,
            State::Starting => Some(now),
            // (a change queued meanwhile is not held back by the repair's backoff)
            State::Repair => {
                let at = self.repair_at.unwrap_or(now);
                Some(if self.dirty { at.min(soon) } else { at })
            }
            State::Backoff => Some(self.last_attempt.map_or(now, |t| t + self.retry_delay())),
            State::Idle => Some(periodic.unwrap_or(now)),
            State::Queued => Some(periodic.map_or(soon, |at| at.min(soon))),
        }
    }

    /// Whether the sync starting at `now` must read the kernel: asked for, or the
    /// periodic full resync is due (or there never was a full sync).
    pub fn full_due(&self, now: Instant) -> bool {
        self.force_full
            || self
                .last_full
                .filter(|t| now < *t + self.periods.sync)
                .is_none()
    }

    /// A sync starts now.
    pub fn attempt(&mut self, now: Instant) {
        self.last_attempt = Some(now);
    }

    /// The sync that started at `at` succeeded.
    pub fn succeeded(&mut self, at: Instant, full: bool) {
        if self.state == State::Repair {
            self.last_repair = Some(at);
        }
        self.repair_at = None;
        self.state = State::Idle;
        self.consecutive_failures = 0;
        self.force_full = false;
        self.dirty = false;
        self.queued_since = None;
        self.last_success = Some(at);
        if full {
            self.last_full = Some(at);
        }
    }

    /// The sync failed: back off, and make the retry a full sync.
    pub fn failed(&mut self) {
        self.repair_at = None;
        self.state = State::Backoff;
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.force_full = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn periods() -> Periods {
        Periods {
            min_sync: Duration::from_secs(1),
            sync: Duration::from_secs(30),
            retry_initial: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            repair_initial: Duration::from_millis(250),
            repair_max: Duration::from_secs(8),
            repair_quiet: Duration::from_secs(10),
        }
    }

    fn listed(t0: Instant) -> Schedule {
        let mut s = Schedule::new(periods());
        assert_eq!(s.due(t0), None);
        s.services_listed();
        assert_eq!((s.state(), s.due(t0)), (State::AwaitingLists, None));
        s.slices_listed();
        assert_eq!((s.state(), s.due(t0)), (State::Starting, Some(t0)));
        s
    }

    #[test]
    fn starting_then_idle_then_periodic() {
        let t0 = Instant::now();
        let mut s = listed(t0);
        assert!(s.full_due(t0), "the first sync reads the kernel");
        s.attempt(t0);
        s.succeeded(t0, true);
        assert_eq!(s.state(), State::Idle);
        assert_eq!(s.due(t0), Some(t0 + Duration::from_secs(30)));
        assert!(!s.full_due(t0 + Duration::from_secs(29)));
        assert!(s.full_due(t0 + Duration::from_secs(30)));
    }

    #[test]
    fn a_change_waits_for_min_sync_period_and_joins_later_changes() {
        let t0 = Instant::now();
        let mut s = listed(t0);
        s.attempt(t0);
        s.succeeded(t0, true);
        let t1 = t0 + Duration::from_millis(200);
        assert!(s.changed(t1), "first change queued");
        assert!(!s.changed(t1 + Duration::from_millis(100)));
        assert_eq!(s.state(), State::Queued);
        assert_eq!(s.queued_since(), Some(t1));
        assert_eq!(s.due(t1), Some(t0 + Duration::from_secs(1)));
        let t2 = t0 + Duration::from_secs(1);
        s.attempt(t2);
        s.succeeded(t2, false);
        assert_eq!(
            (s.state(), s.queued_since(), s.dirty()),
            (State::Idle, None, false)
        );
        assert_eq!(
            s.due(t2),
            Some(t0 + Duration::from_secs(30)),
            "periodic follows the last full sync"
        );
    }

    #[test]
    fn repair_bypasses_min_sync_period_and_is_full() {
        let t0 = Instant::now();
        let mut s = listed(t0);
        s.attempt(t0);
        s.succeeded(t0, true);
        let t1 = t0 + Duration::from_millis(10);
        s.repair_requested();
        assert_eq!((s.state(), s.due(t1)), (State::Repair, Some(t1)));
        assert!(s.full_due(t1));
    }

    #[test]
    fn repairs_of_a_fought_over_table_slow_down_and_reset_after_quiet() {
        let t0 = Instant::now();
        let mut s = listed(t0);
        s.attempt(t0);
        s.succeeded(t0, true);
        // Another writer changes our table every 50 ms for 20 s; we repair whenever due.
        let mut now = t0;
        let mut repairs = Vec::new();
        let end = t0 + Duration::from_secs(20);
        while now < end {
            now += Duration::from_millis(50);
            s.foreign_change(now);
            if s.due(now).is_some_and(|at| at <= now) {
                s.attempt(now);
                s.succeeded(now, true);
                repairs.push((now - t0).as_millis());
            }
        }
        // Gaps: 0 (the first at once), then 250 ms doubled per repair, at most 8 s.
        assert_eq!(repairs, [50, 300, 800, 1800, 3800, 7800, 15800]);
        // The writer stops: the change it made last is repaired at the next due time.
        let at = s.due(now).unwrap();
        assert_eq!((at - t0).as_millis(), 23800);
        s.attempt(at);
        s.succeeded(at, true);
        assert_eq!(s.due(at), Some(at + Duration::from_secs(30)), "idle again");
        // After a quiet time the next foreign change is repaired at once.
        let later = at + Duration::from_secs(11);
        assert_eq!(s.foreign_change(later), Duration::ZERO);
        assert_eq!((s.state(), s.due(later)), (State::Repair, Some(later)));
        assert_eq!(s.repair_streak(), 1);
        // An explicit resync never waits.
        s.attempt(later);
        s.succeeded(later, true);
        s.foreign_change(later + Duration::from_millis(10));
        assert!(s.due(later).unwrap() > later + Duration::from_millis(10));
        s.repair_requested();
        assert_eq!(s.due(later), Some(later));
    }

    #[test]
    fn failures_back_off_exponentially_within_bounds() {
        let t0 = Instant::now();
        let mut s = listed(t0);
        let mut now = t0;
        let mut delays = Vec::new();
        for _ in 0..10 {
            s.attempt(now);
            s.failed();
            assert_eq!(s.state(), State::Backoff);
            assert!(s.full_due(now), "a retry is a full sync");
            let at = s.due(now).unwrap();
            delays.push((at - now).as_millis());
            now = at;
        }
        assert_eq!(
            delays,
            [1000, 1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000, 30000],
            "retry_initial doubled, never below minSyncPeriod, capped at retry_max"
        );
        // A change or a repair during the backoff does not shorten it.
        s.attempt(now);
        s.failed();
        let at = s.due(now);
        s.changed(now);
        s.repair_requested();
        assert_eq!(s.state(), State::Backoff);
        assert_eq!(s.due(now), at);
        assert_eq!(at, Some(now + Duration::from_secs(30)));
        s.attempt(now);
        s.succeeded(now, true);
        assert_eq!((s.state(), s.consecutive_failures()), (State::Idle, 0));
    }
}
