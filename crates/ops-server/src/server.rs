//! Serving HTTP so that nobody who reaches a port can starve it, and binding like
//! kube-proxy.
//!
//! - **Connections**: each server holds at most `max_connections`; at the cap a new
//!   connection evicts the oldest one that is waiting for a request (idle keep-alive, or
//!   a request still being sent), so that a prober always gets through. A client has
//!   `header_read_timeout` to send its first request's headers (from the accept) and each
//!   later one's (from its first byte), and `idle_timeout` between requests.
//! - **Descriptors**: when `accept` fails for lack of descriptors the server evicts its
//!   oldest waiting connection; [`raise_fd_limit`] lifts the soft limit to the hard one
//!   at start.
//! - **Accept errors**: after a failed accept the loop waits ([`ACCEPT_BACKOFF`]: 10 ms
//!   doubling to 1 s, reset by a success) and logs the 1st, 2nd, 4th, ... failure of a
//!   run, so that an error storm neither spins nor floods the log.
//! - **Binding**: [`serve_forever`] binds, serves, and when binding fails logs and tries
//!   again every 5 s (kube-proxy's `wait.Until(..., 5*time.Second, ...)`), unless told to
//!   give up (kube-proxy's `bindAddressHardFail`). Each server is its own task: one that
//!   cannot bind holds no other back.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use proxy_status::Backoff;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// How long kube-proxy waits before trying to bind a server again.
pub const BIND_RETRY: Duration = Duration::from_secs(5);

/// Limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Limits {
    /// The default per server: a quarter of the descriptors the process may open
    /// (beyond a reserve of 128 for the rest of the daemon), between 16 and 1024
    /// connections; 5 s to send request headers, 60 s idle between requests.
    pub fn for_process() -> Limits {
        let soft = fd_limits().map_or(1024, |(s, _)| s);
        Limits {
            max_connections: (soft.saturating_sub(128) / 4).clamp(16, 1024) as usize,
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

/// (soft, hard) RLIMIT_NOFILE.
pub fn fd_limits() -> Option<(u64, u64)> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return None;
    }
    Some((r.rlim_cur, r.rlim_max))
}

/// Raise the soft descriptor limit to the hard one (as Go's runtime does at start since
/// Go 1.19, which kube-proxy relies on). Returns (old, new) soft limits.
pub fn raise_fd_limit() -> std::io::Result<(u64, u64)> {
    let (soft, hard) = fd_limits().ok_or_else(std::io::Error::last_os_error)?;
    if soft >= hard {
        return Ok((soft, soft));
    }
    let r = libc::rlimit {
        rlim_cur: hard,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((soft, hard))
}

fn clock_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    // +1 so that 0 means "never"
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

const WAITING: u8 = 0;
const BUSY: u8 = 1;

/// What the server knows of one connection.
#[derive(Debug, Default)]
struct ConnState {
    state: AtomicU8,
    /// When it started waiting for a request (ms of [`clock_ms`]).
    waiting_since: AtomicU64,
    /// The first byte of the next request, while waiting (0: none yet).
    first_byte: AtomicU64,
    /// Requests answered.
    served: AtomicU64,
}

impl ConnState {
    fn busy(&self) {
        self.state.store(BUSY, Ordering::SeqCst);
    }
    fn waiting(&self) {
        self.first_byte.store(0, Ordering::SeqCst);
        self.waiting_since.store(clock_ms(), Ordering::SeqCst);
        self.served.fetch_add(1, Ordering::SeqCst);
        self.state.store(WAITING, Ordering::SeqCst);
    }
    /// When the connection must be closed unless something happens (ms), or None while
    /// a request is being handled.
    fn deadline(&self, l: &Limits) -> Option<u64> {
        if self.state.load(Ordering::SeqCst) == BUSY {
            return None;
        }
        let first = self.first_byte.load(Ordering::SeqCst);
        let since = self.waiting_since.load(Ordering::SeqCst);
        let hrt = l.header_read_timeout.as_millis() as u64;
        Some(if first != 0 {
            first + hrt
        } else if self.served.load(Ordering::SeqCst) == 0 {
            since + hrt
        } else {
            since + l.idle_timeout.as_millis() as u64
        })
    }
}

/// The connections of one server.
#[derive(Default)]
struct Conns {
    next: u64,
    open: BTreeMap<u64, (Arc<ConnState>, AbortHandle)>,
}

impl Conns {
    /// Close the connection that has waited longest for a request. False if every
    /// connection is busy with a request.
    fn evict_oldest_waiting(&mut self) -> bool {
        let victim = self
            .open
            .iter()
            .filter(|(_, (s, _))| s.state.load(Ordering::SeqCst) == WAITING)
            .min_by_key(|(_, (s, _))| s.waiting_since.load(Ordering::SeqCst))
            .map(|(id, _)| *id);
        match victim.and_then(|id| self.open.remove(&id)) {
            Some((_, abort)) => {
                abort.abort();
                true
            }
            None => false,
        }
    }
}

/// Closes a server's connections when the server stops (its future is dropped), as Go's
/// `http.Server.Close` does for kube-proxy: a closed health-check port keeps answering
/// no one, not even on a kept-alive connection.
struct CloseAll(Arc<Mutex<Conns>>);

impl Drop for CloseAll {
    fn drop(&mut self) {
        let open = std::mem::take(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()).open);
        for (_, (_, abort)) in open {
            abort.abort();
        }
    }
}

/// The stream, noting when a waiting connection's next request starts to arrive.
struct Tracked {
    inner: TcpStream,
    state: Arc<ConnState>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before
            && self.state.state.load(Ordering::SeqCst) == WAITING
            && self.state.first_byte.load(Ordering::SeqCst) == 0
        {
            self.state.first_byte.store(clock_ms(), Ordering::SeqCst);
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Close the connection when its deadline passes.
async fn watchdog(state: Arc<ConnState>, limits: Limits) {
    loop {
        let wait = match state.deadline(&limits) {
            Some(d) => {
                let now = clock_ms();
                if now >= d {
                    return;
                }
                d - now
            }
            // busy: look again later
            None => limits.header_read_timeout.as_millis() as u64,
        };
        tokio::time::sleep(Duration::from_millis(wait.max(1))).await;
    }
}

async fn serve_connection(
    stream: TcpStream,
    state: Arc<ConnState>,
    router: Router,
    limits: Limits,
) {
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(Tracked {
        inner: stream,
        state: state.clone(),
    });
    let st = state.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        st.busy();
        let st = st.clone();
        let mut router = router.clone();
        async move {
            let r = tower_service::Service::call(&mut router, req).await;
            st.waiting();
            r
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(64 * 1024)
        .serve_connection(io, svc);
    tokio::select! {
        _ = conn => {}
        _ = watchdog(state, limits) => {}
    }
}

fn is_fd_exhaustion(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    )
}

/// The accept loop's pacing after failed accepts: 10 ms doubling to 1 s (Go's
/// `http.Server` backs off 5 ms doubling to 1 s), back to none after a success.
pub const ACCEPT_BACKOFF: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(1));

/// Serve `router` on `listener` with `limits` until the task is dropped.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits) {
    let conns = Arc::new(Mutex::new(Conns::default()));
    let _close = CloseAll(conns.clone());
    let mut failing = Backoff::new(ACCEPT_BACKOFF.0, ACCEPT_BACKOFF.1);
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => {
                failing.reset();
                s
            }
            // A connection that ended before it was accepted: the next one is fine (Go's
            // accept skips these too).
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
            Err(e) => {
                // Out of descriptors: close the oldest idle connection to make room. Any
                // failure: wait before the next accept (a failing accept is ready at
                // once, so retrying at once would spin), logged a bounded number of times.
                let exhausted = is_fd_exhaustion(&e);
                if exhausted {
                    conns
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .evict_oldest_waiting();
                }
                let delay = failing.fail();
                if failing.log_this_one() {
                    let addr = listener
                        .local_addr()
                        .map(|a| a.to_string())
                        .unwrap_or_default();
                    let what = if exhausted {
                        "out of descriptors accepting a connection; closing the oldest idle ones"
                    } else {
                        "accepting a connection failed"
                    };
                    tracing::warn!(address = %addr, err = %e, failures = failing.failures(),
                        retry_ms = delay.as_millis() as u64, "{what}");
                }
                tokio::time::sleep(delay).await;
                continue;
            }
        };
        let mut c = conns.lock().unwrap_or_else(|e| e.into_inner());
        if c.open.len() >= limits.max_connections && !c.evict_oldest_waiting() {
            // every connection is busy with a request: refuse this one
            drop(stream);
            continue;
        }
        let state = Arc::new(ConnState::default());
        state.waiting_since.store(clock_ms(), Ordering::SeqCst);
        let id = c.next;
        c.next += 1;
        let (st, router, conns2) = (state.clone(), router.clone(), conns.clone());
        let task = tokio::spawn(async move {
            serve_connection(stream, st, router, limits).await;
            conns2
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .open
                .remove(&id);
        });
        c.open.insert(id, (state, task.abort_handle()));
    }
}

/// What to do when a server cannot bind.
#[derive(Clone)]
pub enum OnBindError {
    /// Log and try again every [`BIND_RETRY`] (kube-proxy's default).
    Retry,
    /// Report it once and stop (kube-proxy with `bindAddressHardFail`: fatal).
    Fail(Arc<dyn Fn(String) + Send + Sync>),
}

/// kube-proxy's two servers, for its log lines and errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    Healthz,
    Metrics,
}

impl ServerKind {
    /// The log message and the error kube-proxy reports when the server cannot bind
    /// (`"Healthz server failed"`, and the metrics server's `utilruntime.HandleError`).
    fn failure(self, addr: &str, e: &std::io::Error) -> (&'static str, String) {
        match self {
            ServerKind::Healthz => (
                "Healthz server failed",
                format!("failed to start proxy healthz on {addr}: {e}"),
            ),
            ServerKind::Metrics => (
                "Unhandled Error",
                format!("starting metrics server failed: listen tcp {addr}: {e}"),
            ),
        }
    }
    fn name(self) -> &'static str {
        match self {
            ServerKind::Healthz => "healthz",
            ServerKind::Metrics => "metrics",
        }
    }
}

/// Bind `addr` and serve `router`, as kube-proxy runs each of its servers: when binding
/// (or serving) fails, log it and try again after [`BIND_RETRY`] (the first failure at
/// error level, the following ones at debug level). Never returns unless `on_error` is
/// [`OnBindError::Fail`], which gets kube-proxy's error text.
pub async fn serve_forever(
    kind: ServerKind,
    addr: String,
    router: Router,
    limits: Limits,
    on_error: OnBindError,
) {
    let mut failed_before = false;
    loop {
        match TcpListener::bind(&addr).await {
            Ok(l) => {
                tracing::info!(address = %addr, "Starting {} server", kind.name());
                failed_before = false;
                serve(l, router.clone(), limits).await;
            }
            Err(e) => {
                let (msg, err) = kind.failure(&addr, &e);
                match &on_error {
                    OnBindError::Fail(f) => {
                        let err = match kind {
                            ServerKind::Healthz => format!("healthz server failed: {err}"),
                            ServerKind::Metrics => err,
                        };
                        f(err);
                        return;
                    }
                    OnBindError::Retry => {
                        if failed_before {
                            tracing::debug!(err = %err, "{msg}");
                        } else {
                            tracing::error!(err = %err, retry_s = BIND_RETRY.as_secs(), "{msg}");
                        }
                        failed_before = true;
                    }
                }
            }
        }
        tokio::time::sleep(BIND_RETRY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_follow_the_request_cycle() {
        let l = Limits {
            max_connections: 4,
            header_read_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(60),
        };
        let s = ConnState::default();
        s.waiting_since.store(1000, Ordering::SeqCst);
        // a new connection: its first request's headers within 5 s of the accept
        assert_eq!(s.deadline(&l), Some(6000));
        s.busy();
        assert_eq!(s.deadline(&l), None);
        s.waiting();
        let since = s.waiting_since.load(Ordering::SeqCst);
        // idle between requests: 60 s
        assert_eq!(s.deadline(&l), Some(since + 60_000));
        // a request started arriving: 5 s from its first byte
        s.first_byte.store(since + 10, Ordering::SeqCst);
        assert_eq!(s.deadline(&l), Some(since + 5010));
    }

    #[test]
    fn limits_follow_the_descriptor_limit() {
        let l = Limits::for_process();
        assert!((16..=1024).contains(&l.max_connections));
    }
}
