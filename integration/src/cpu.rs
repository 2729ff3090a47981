//! The CPU time the double's threads use (one per connection, and the acceptor), exact
//! at the moment it is read: a thread registers itself while it runs and, when it ends,
//! adds its own CPU time to the total of the ended ones (under the same lock, so it is
//! counted once: live or ended); a live thread's time is read from its CPU clock.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the double's threads used so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadsCpu {
    /// User + system CPU of every thread, the ended ones and the live ones.
    pub used: Duration,
    /// Threads running now.
    pub live: usize,
    /// Threads that ended.
    pub ended: u64,
}

#[derive(Default)]
struct Book {
    ended: Duration,
    ended_threads: u64,
    live: BTreeMap<u64, libc::pthread_t>,
    next: u64,
}

/// The meter every thread of a double registers with.
#[derive(Clone, Default)]
pub(crate) struct CpuMeter(Arc<Mutex<Book>>);

/// A registered thread: counted as live until dropped (at its end, on that thread).
pub(crate) struct Counted {
    meter: CpuMeter,
    id: u64,
}

impl CpuMeter {
    fn book(&self) -> std::sync::MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count the calling thread until the returned guard is dropped; the guard must be
    /// dropped on this thread (keep it for the thread's life).
    pub fn enter(&self) -> Counted {
        // SAFETY: pthread_self has no preconditions.
        let me = unsafe { libc::pthread_self() };
        let mut b = self.book();
        b.next += 1;
        let id = b.next;
        b.live.insert(id, me);
        Counted {
            meter: self.clone(),
            id,
        }
    }

    /// The CPU so far of the ended threads and of the live ones.
    pub fn read(&self) -> ThreadsCpu {
        let b = self.book();
        // a live thread unregisters under this lock before it ends: each one read here
        // is running
        let live: Duration = b.live.values().filter_map(|t| thread_cpu(*t)).sum();
        ThreadsCpu {
            used: b.ended + live,
            live: b.live.len(),
            ended: b.ended_threads,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let mut b = self.meter.book();
        b.ended += own_cpu().unwrap_or_default();
        b.ended_threads += 1;
        b.live.remove(&self.id);
    }
}

fn clock(id: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill; an invalid clock id is an error, not UB.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return None;
    }
    Some(Duration::new(
        u64::try_from(ts.tv_sec).ok()?,
        u32::try_from(ts.tv_nsec).ok()?,
    ))
}

/// The calling thread's CPU time.
fn own_cpu() -> Option<Duration> {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// A live thread's CPU time, from its CPU clock.
fn thread_cpu(t: libc::pthread_t) -> Option<Duration> {
    let mut id: libc::clockid_t = 0;
    // SAFETY: `t` is a thread that is running (see `CpuMeter::read`); `id` is filled.
    if unsafe { libc::pthread_getcpuclockid(t, &mut id) } != 0 {
        return None;
    }
    clock(id)
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;
    use std::time::Instant;

    use crate::scale::scale_service;
    use crate::{http_get, wait_for, ApiServer};

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);

    /// The figure grows while a connection works (a live thread is read), and does not
    /// drop when the connection's thread ends (its time is kept); lists, each on a
    /// thread that ends after its answer, add theirs.
    #[test]
    fn the_double_counts_its_threads_cpu_live_and_after_they_ended() {
        let api = ApiServer::start();
        let port: u16 = api.url().rsplit(':').next().unwrap().parse().unwrap();
        assert!(wait_for(WAIT, || api.cpu().live == 1), "{:?}", api.cpu());
        let mut watch = TcpStream::connect(("127.0.0.1", port)).unwrap();
        watch.set_read_timeout(Some(WAIT)).unwrap();
        write!(
            watch,
            "GET /api/v1/services?watch=true&allowWatchBookmarks=true&resourceVersion=100 HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        .unwrap();
        assert!(wait_for(WAIT, || api.cpu().live == 2), "{:?}", api.cpu());
        let idle = api.cpu();
        // events for the watch to write: its thread works while it stays open
        let n = 2000;
        for i in 0..n {
            api.apply(scale_service(i));
        }
        let (mut all, mut seen, t0) = (Vec::new(), 0, Instant::now());
        let mut buf = vec![0u8; 1 << 16];
        while seen < n as usize && t0.elapsed() < WAIT {
            let got = watch.read(&mut buf).unwrap();
            // the new bytes, and the 6 before them (a marker cut between two reads)
            let from = all.len().saturating_sub(6);
            all.extend_from_slice(&buf[..got]);
            seen += all[from..].windows(7).filter(|w| w == b"\"ADDED\"").count();
        }
        assert_eq!(seen, n as usize);
        let working = api.cpu();
        assert_eq!((working.live, working.ended), (2, 0), "{working:?}");
        assert!(
            working.used > idle.used,
            "the live watch's work is counted: {idle:?} -> {working:?}"
        );
        // the client goes: the watch's thread ends at its next write (a bookmark)
        drop(watch);
        assert!(wait_for(WAIT, || api.cpu().ended == 1), "{:?}", api.cpu());
        let gone = api.cpu();
        assert_eq!(gone.live, 1, "{gone:?}");
        assert!(
            gone.used >= working.used,
            "an ended thread's time is kept: {working:?} -> {gone:?}"
        );
        for _ in 0..3 {
            let (code, _, body) = http_get(port, "/api/v1/services").unwrap();
            assert_eq!(code, 200);
            assert!(body.len() > 100_000, "{}", body.len());
        }
        assert!(wait_for(WAIT, || api.cpu().ended == 4), "{:?}", api.cpu());
        let listed = api.cpu();
        assert!(listed.used > gone.used, "{gone:?} -> {listed:?}");
    }
}
