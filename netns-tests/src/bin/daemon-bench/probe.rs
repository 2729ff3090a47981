//! "First packet": a prober in the client namespace that keeps opening new TCP
//! connections to a service (or keeps one UDP flow sending) in a bounded loop, and
//! records, for each attempt, when it started and which endpoint answered (the
//! endpoint namespaces answer with the address they were reached at). Pure functions
//! read the record: when a given endpoint first answered, when an endpoint (or the
//! service) last answered.

use std::io::Read;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use netns_tests::Netns;

/// One attempt: when it started and who answered (`None`: no answer).
pub type Shot = (Instant, Option<String>);

/// Pause between attempts: the prober shares the 2 cores with the daemon.
const PAUSE: Duration = Duration::from_micros(250);
/// At most this many attempts per run (a bound on the loop; `churn-prod`'s probe
/// service prober runs for the whole window and the wait after it, up to 2 minutes at
/// an attempt every ~0.3 ms).
const MAX_SHOTS: usize = 600_000;

/// A prober running until stopped (or `limit` passed).
pub struct Probe {
    /// For a UDP flow: who answered its first datagram, before the loop started (the
    /// endpoint conntrack pins the flow to).
    pub first: Option<String>,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<Shot>>,
}

impl Probe {
    /// New TCP connections to `dst`, one after the other.
    pub fn tcp(ns: &Netns, dst: SocketAddr, limit: Duration) -> Probe {
        Self::tcp_within(ns, dst, limit, Duration::from_millis(50))
    }

    /// As [`Probe::tcp`], each connection given up after `connect`: for a service
    /// that is not there yet, whose attempts are answered by the node's ICMP
    /// unreachable only about once a second (the kernel's `ip_error` rate limit, a
    /// global sysctl the bench leaves alone) and otherwise wait for the timeout.
    pub fn tcp_within(ns: &Netns, dst: SocketAddr, limit: Duration, connect: Duration) -> Probe {
        Self::start(ns, limit, move || {
            let mut s = TcpStream::connect_timeout(&dst, connect).ok()?;
            s.set_read_timeout(Some(Duration::from_millis(50))).ok()?;
            let mut out = String::new();
            s.read_to_string(&mut out).ok()?;
            Some(out)
        })
    }

    /// One UDP flow (one socket, one source port) to `dst`: a datagram per attempt,
    /// the answer awaited up to 5 ms. Conntrack keeps the flow on its endpoint until
    /// its entry is deleted.
    pub fn udp(ns: &Netns, dst: SocketAddr, limit: Duration) -> Probe {
        let sock = ns.run(|| {
            let s = UdpSocket::bind("0.0.0.0:0").expect("bind a UDP socket");
            s.connect(dst).expect("connect the UDP socket");
            s
        });
        let ask = move |s: &UdpSocket| {
            s.send(b"who").ok()?;
            let mut buf = [0u8; 64];
            let n = s.recv(&mut buf).ok()?;
            Some(String::from_utf8_lossy(&buf[..n]).to_string())
        };
        let _ = sock.set_read_timeout(Some(Duration::from_millis(200)));
        let first = ask(&sock);
        let _ = sock.set_read_timeout(Some(Duration::from_millis(5)));
        Probe {
            first,
            ..Self::start(ns, limit, move || ask(&sock))
        }
    }

    fn start(
        ns: &Netns,
        limit: Duration,
        mut shot: impl FnMut() -> Option<String> + Send + 'static,
    ) -> Probe {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = ns.spawn(move || {
            let end = Instant::now() + limit;
            let mut shots = Vec::new();
            while !s.load(Ordering::Relaxed) && Instant::now() < end && shots.len() < MAX_SHOTS {
                let t = Instant::now();
                let who = shot();
                shots.push((t, who));
                std::thread::sleep(PAUSE);
            }
            shots
        });
        Probe {
            first: None,
            stop,
            handle,
        }
    }

    /// Stop and return the record.
    pub fn finish(self) -> Vec<Shot> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// The start of the first attempt at or after `from` answered by `who`.
pub fn first_reaching(shots: &[Shot], from: Instant, who: &str) -> Option<Instant> {
    shots
        .iter()
        .find(|(t, w)| *t >= from && w.as_deref() == Some(who))
        .map(|(t, _)| *t)
}

/// The start of the first attempt at or after `from` after which `gone` (an endpoint;
/// `None`: any answer at all) never answers again, provided attempts went on for at
/// least `settle` after it (else `None`: not proven gone).
pub fn first_after_last(
    shots: &[Shot],
    from: Instant,
    gone: Option<&str>,
    settle: Duration,
) -> Option<Instant> {
    first_after_none(
        shots,
        from,
        |w| match gone {
            Some(g) => w == Some(g),
            None => w.is_some(),
        },
        settle,
    )
}

/// As [`first_after_last`] for any set of answers: the start of the first attempt at or
/// after `from` after which no attempt is answered as `hit` says, attempts going on for
/// at least `settle` after it.
pub fn first_after_none(
    shots: &[Shot],
    from: Instant,
    hit: impl Fn(Option<&str>) -> bool,
    settle: Duration,
) -> Option<Instant> {
    let after: Vec<&Shot> = shots.iter().filter(|(t, _)| *t >= from).collect();
    let last = after.iter().rposition(|(_, w)| hit(w.as_deref()));
    let first_clean = match last {
        Some(k) => after.get(k + 1)?.0,
        None => after.first()?.0,
    };
    let end = after.last()?.0;
    (end >= first_clean + settle).then_some(first_clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_says_when_an_endpoint_came_and_went() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let s = |x: &str| Some(x.to_string());
        let shots: Vec<Shot> = vec![
            (t(0), s("a")),
            (t(1), s("a")),
            (t(2), s("b")),
            (t(3), s("a")),
            (t(4), s("b")),
            (t(5), None),
            (t(6), None),
            (t(30), None),
        ];
        assert_eq!(first_reaching(&shots, t0, "b"), Some(t(2)));
        assert_eq!(first_reaching(&shots, t(3), "b"), Some(t(4)));
        assert_eq!(first_reaching(&shots, t0, "c"), None);
        let settle = Duration::from_millis(20);
        assert_eq!(first_after_last(&shots, t0, Some("a"), settle), Some(t(4)));
        assert_eq!(first_after_last(&shots, t0, None, settle), Some(t(5)));
        // not long enough after the last answer to say it is gone
        assert_eq!(
            first_after_last(&shots, t0, None, Duration::from_millis(30)),
            None
        );
    }
}
