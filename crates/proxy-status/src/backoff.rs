//! Pacing a retry loop: delays that double per consecutive failure up to a bound, and
//! which failures of a run are worth a log line (a bounded number: the 1st, 2nd, 4th,
//! 8th, ...), so that a loop that keeps failing neither spins nor floods the log.

use std::time::Duration;

/// Delays from `initial`, doubled per consecutive failure, at most `max`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            failures: 0,
        }
    }

    /// One more failure: the delay before the next attempt.
    pub fn fail(&mut self) -> Duration {
        let d = self
            .initial
            .saturating_mul(1u32 << self.failures.min(31))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        d
    }

    /// A success ends the run of failures.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Failures in the current run.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Whether the last failure is one to log: the 1st, 2nd, 4th, 8th, ... of the run
    /// (about log2(n) lines for n failures).
    pub fn log_this_one(&self) -> bool {
        self.failures.is_power_of_two()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_to_the_bound_and_logs_a_bounded_number() {
        let ms = Duration::from_millis;
        let mut b = Backoff::new(ms(10), ms(1000));
        let delays: Vec<Duration> = (0..10).map(|_| b.fail()).collect();
        assert_eq!(
            delays,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000].map(ms)
        );
        let mut logged = 0;
        let mut b = Backoff::new(ms(10), ms(1000));
        for _ in 0..1000 {
            b.fail();
            logged += u32::from(b.log_this_one());
        }
        assert_eq!(logged, 10, "1, 2, 4, ... 512");
        b.reset();
        assert_eq!((b.failures(), b.fail()), (0, ms(10)));
        // no overflow however long it fails
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
        for _ in 0..100 {
            assert!(b.fail() <= Duration::from_secs(30));
        }
    }
}
