//! A token bucket in front of the API client (client-go's QPS and burst): each request
//! waits for a token, and carries how long it waited ([`RateLimited`], a request
//! extension) to the metrics layer inside it (`rest_client_rate_limiter_duration_seconds`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// A token bucket in front of the API client (client-go's QPS and burst).
#[derive(Debug, Clone)]
pub struct RateLimitLayer {
    qps: f64,
    burst: u32,
}

impl RateLimitLayer {
    pub fn new(qps: f64, burst: u32) -> Self {
        RateLimitLayer {
            qps,
            burst: burst.max(1),
        }
    }
}

impl<S> tower_layer::Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;
    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            qps: self.qps,
            burst: f64::from(self.burst),
            tokens: f64::from(self.burst),
            last: Instant::now(),
            ready: false,
            sleep: None,
            waiting_since: None,
        }
    }
}

pub struct RateLimit<S> {
    inner: S,
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
    ready: bool,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    /// When the current request started waiting for a token.
    waiting_since: Option<Instant>,
}

/// How long a request waited for a token (a request extension, for the metrics layer
/// inside: `rest_client_rate_limiter_duration_seconds`).
#[derive(Debug, Clone, Copy)]
pub struct RateLimited(pub Duration);

impl<S, B> tower_service::Service<http::Request<B>> for RateLimit<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        if !self.ready && self.waiting_since.is_none() {
            self.waiting_since = Some(Instant::now());
        }
        while !self.ready {
            if let Some(s) = self.sleep.as_mut() {
                if s.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            let now = Instant::now();
            let refill = now.duration_since(self.last).as_secs_f64() * self.qps;
            self.tokens = (self.tokens + refill).min(self.burst);
            self.last = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                self.ready = true;
            } else {
                let wait = (1.0 - self.tokens) / self.qps;
                self.sleep = Some(Box::pin(tokio::time::sleep(Duration::from_secs_f64(
                    wait.clamp(0.001, 3600.0),
                ))));
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        self.ready = false;
        let waited = self
            .waiting_since
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed());
        req.extensions_mut().insert(RateLimited(waited));
        self.inner.call(req)
    }
}
