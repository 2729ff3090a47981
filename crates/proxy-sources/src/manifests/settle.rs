//! When a new version of a manifest file may be taken (pure): never while a writer may be
//! half-way through it.
//!
//! - **Renamed into place** (seen over inotify: `IN_MOVED_TO`), or **replaced** (another
//!   inode at the name, no writer seen): taken at once. A rename cannot be torn.
//! - **Open for writing** (modified over inotify, not closed since): not taken until its
//!   writer closes it; a writer that keeps it open is waited for [`Timing::open_hold`]
//!   without a change.
//! - **Closed by its writer** (`IN_CLOSE_WRITE` after its last modification): taken at
//!   once.
//! - **Nothing known** (the poll fallback, or a change from before the watch): taken once
//!   its size, times and inode have stayed the same for [`Timing::settle`], seen by two
//!   looks; on the first read of a file its modification time counts as the first look
//!   (a file last written a settle window ago is taken at once, one written just now is
//!   waited for).
//!
//! A version that parses but lost objects sharply ([`sharp_drop`]: all of them, or at
//! least a quarter and at least 4) is held back until it has stayed the same for
//! [`Timing::hold`], unless it was renamed into place: a prefix of a multi-document file
//! parses, and removing objects from a file is an edit rare enough to wait for. Removing
//! the file itself takes its objects at once (that is a deletion by name).

use std::time::{Duration, Instant};

/// What inotify saw of a file since its version in use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Writes {
    /// Whether the file is watched at all (false: nothing below is known).
    pub watched: bool,
    /// Modified, and not closed since: a writer holds it open.
    pub open: bool,
    /// Closed by a writer after its last modification.
    pub closed: bool,
    /// Renamed into place.
    pub moved_in: bool,
}

/// The windows of the rules above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub settle: Duration,
    pub hold: Duration,
    pub open_hold: Duration,
}

/// A version of a file, as the reader has seen it.
#[derive(Debug, Clone, Copy)]
pub struct Version {
    /// When the reader first saw this version.
    pub since: Instant,
    /// Whether it saw it at an earlier look too.
    pub seen_before: bool,
    /// How old its modification time is (None: in the future, or unknown).
    pub age: Option<Duration>,
    /// No version of this file has been taken yet.
    pub first_read: bool,
    /// Another inode than the version in use.
    pub replaced: bool,
}

/// Whether a version may be taken now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ready {
    /// Yes; `whole`: it cannot be torn (renamed into place), so no drop is held back.
    Now { whole: bool },
    /// Not before this instant (look again then, or at the next event).
    At(Instant),
}

/// Whether `v` may be taken now, given what inotify saw of it.
pub fn ready(v: &Version, w: &Writes, t: &Timing, now: Instant) -> Ready {
    if w.moved_in {
        return Ready::Now { whole: true };
    }
    if w.open {
        return stable_for(v, t.open_hold, now);
    }
    if w.closed || v.replaced {
        return Ready::Now { whole: false };
    }
    stable_for(v, t.settle, now)
}

/// Now if `v` has stayed the same for `d` (two looks, or on a first read its
/// modification time and one look), else when it will have.
pub fn stable_for(v: &Version, d: Duration, now: Instant) -> Ready {
    let written = v
        .age
        .filter(|_| v.first_read)
        .and_then(|a| now.checked_sub(a))
        .filter(|w| *w < v.since);
    let (since, evidence) = match written {
        Some(w) => (w, true),
        None => (v.since, v.seen_before),
    };
    match since.checked_add(d) {
        Some(at) if evidence && now >= at => Ready::Now { whole: false },
        Some(at) => Ready::At(at.max(now)),
        None => Ready::At(now + d),
    }
}

/// Whether a version holding `new` objects lost those of `old` sharply: all of them, or
/// at least a quarter and at least 4.
pub fn sharp_drop(old: usize, new: usize) -> bool {
    if new >= old {
        return false;
    }
    let lost = old - new;
    new == 0 || (lost >= 4 && lost * 4 >= old)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Timing = Timing {
        settle: Duration::from_secs(2),
        hold: Duration::from_secs(5),
        open_hold: Duration::from_secs(30),
    };

    fn version(now: Instant, since_ago: u64, seen_before: bool) -> Version {
        Version {
            since: now - Duration::from_millis(since_ago),
            seen_before,
            age: Some(Duration::from_millis(since_ago)),
            first_read: false,
            replaced: false,
        }
    }

    #[test]
    fn a_rename_or_a_close_is_taken_at_once_an_open_file_is_not() {
        let now = Instant::now();
        let v = version(now, 0, false);
        let watched = Writes {
            watched: true,
            ..Writes::default()
        };
        let moved = Writes {
            moved_in: true,
            ..watched
        };
        assert_eq!(ready(&v, &moved, &T, now), Ready::Now { whole: true });
        let closed = Writes {
            closed: true,
            ..watched
        };
        assert_eq!(ready(&v, &closed, &T, now), Ready::Now { whole: false });
        // Open for writing: not after a 1.5 s pause, nor after the settle window.
        let open = Writes {
            open: true,
            ..watched
        };
        let paused = version(now, 2500, true);
        assert_eq!(
            ready(&paused, &open, &T, now),
            Ready::At(paused.since + T.open_hold)
        );
        // Replaced by another inode, no writer seen: at once.
        let replaced = Version {
            replaced: true,
            ..v
        };
        assert_eq!(
            ready(&replaced, &watched, &T, now),
            Ready::Now { whole: false }
        );
        assert!(matches!(ready(&replaced, &open, &T, now), Ready::At(_)));
    }

    #[test]
    fn nothing_known_waits_for_the_settle_window_also_on_the_first_read() {
        let now = Instant::now();
        let none = Writes::default();
        // First look at a change: wait, even with a zero window (two looks).
        let v = version(now, 0, false);
        assert_eq!(ready(&v, &none, &T, now), Ready::At(now + T.settle));
        let zero = Timing {
            settle: Duration::ZERO,
            ..T
        };
        assert_eq!(ready(&v, &none, &zero, now), Ready::At(now));
        // Seen before and unchanged for the window: taken.
        let v = version(now, 2000, true);
        assert_eq!(ready(&v, &none, &T, now), Ready::Now { whole: false });
        // The first read of a file written 0.4 s ago waits 1.6 s more; one written long
        // ago is taken at once.
        let fresh = Version {
            first_read: true,
            age: Some(Duration::from_millis(400)),
            ..version(now, 0, false)
        };
        assert_eq!(
            ready(&fresh, &none, &T, now),
            Ready::At(now - Duration::from_millis(400) + T.settle)
        );
        let old = Version {
            age: Some(Duration::from_secs(3600)),
            ..fresh
        };
        assert_eq!(ready(&old, &none, &T, now), Ready::Now { whole: false });
        // A modification time in the future tells nothing.
        let future = Version { age: None, ..fresh };
        assert_eq!(ready(&future, &none, &T, now), Ready::At(now + T.settle));
    }

    #[test]
    fn sharp_drops() {
        assert!(sharp_drop(41, 21), "half of a file: 20 of 41 objects lost");
        assert!(sharp_drop(3, 0), "emptied");
        assert!(sharp_drop(16, 12), "a quarter, 4 objects");
        assert!(!sharp_drop(41, 39), "one service and its slice deleted");
        assert!(!sharp_drop(12, 9), "a quarter, but only 3 objects");
        assert!(!sharp_drop(100, 80), "a fifth");
        assert!(!sharp_drop(5, 5) && !sharp_drop(5, 9) && !sharp_drop(0, 0));
    }
}
