//! The one backoff rule of the engine: a delay that starts at `initial` and doubles per
//! attempt, never above `max` (failed syncs, tamper repairs, cleanup retries, skipped
//! service ports).

use std::time::Duration;

/// `initial` doubled `doublings` times, at most `max` (no overflow: at most 2^16 x).
pub fn doubling(initial: Duration, doublings: u32, max: Duration) -> Duration {
    initial.saturating_mul(1u32 << doublings.min(16)).min(max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_within_bounds() {
        let (i, m) = (Duration::from_millis(500), Duration::from_secs(30));
        assert_eq!(doubling(i, 0, m), i);
        assert_eq!(doubling(i, 1, m), Duration::from_secs(1));
        assert_eq!(doubling(i, 5, m), Duration::from_secs(16));
        assert_eq!(doubling(i, 6, m), m);
        assert_eq!(doubling(i, u32::MAX, m), m);
        assert_eq!(
            doubling(Duration::MAX, 3, Duration::MAX),
            Duration::MAX,
            "saturates"
        );
    }
}
