//! `rest_client_*` metrics for the API client, as client-go records them: a tower layer
//! on the kube client (inside the rate limiter, so latency excludes throttling) that
//! counts each request by status code (`<error>` when no answer came), method and host,
//! and observes its latency and sizes by verb and host. A list's latency and response
//! size are taken when its body has been read; a watch's latency at its response
//! headers, and its (endless) body is not sized, as client-go does for streams.
//!
//! The metrics live in the operator servers (`ops_server::restclient`); [`install`] hands
//! them to the layer as a [`RestObserver`].

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as HttpBody, Frame, SizeHint};
use proxy_status::RestObserver;

static REST: OnceLock<Arc<dyn RestObserver>> = OnceLock::new();

/// Where the layer records (the daemon's metrics); before this, nothing is recorded.
pub fn install(rest: Arc<dyn RestObserver>) {
    let _ = REST.set(rest);
}

fn rest() -> Option<&'static dyn RestObserver> {
    REST.get().map(|r| &**r)
}

/// The layer, for one API server (`host` as client-go labels it: the URL's host:port).
#[derive(Debug, Clone)]
pub struct RestMetricsLayer {
    host: String,
}

impl RestMetricsLayer {
    pub fn new(cluster_url: &http::Uri) -> RestMetricsLayer {
        RestMetricsLayer {
            host: host_of(cluster_url),
        }
    }
}

/// The URL's host and port (`198.18.0.1:6443`), as Go's `url.URL.Host` holds it.
pub fn host_of(url: &http::Uri) -> String {
    url.authority()
        .map(|a| a.as_str().rsplit('@').next().unwrap_or("").to_string())
        .unwrap_or_default()
}

impl<S> tower_layer::Layer<S> for RestMetricsLayer {
    type Service = RestMetrics<S>;
    fn layer(&self, inner: S) -> RestMetrics<S> {
        RestMetrics {
            inner,
            host: self.host.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RestMetrics<S> {
    inner: S,
    host: String,
}

fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|kv| matches!(kv, "watch=true" | "watch=1" | "watch=True" | "watch"))
    })
}

/// What to record when a response body ends (None: a watch, not recorded).
#[derive(Debug)]
struct OnEnd {
    verb: String,
    host: String,
    start: Instant,
}

impl<S, B> tower_service::Service<Request<kube::client::Body>> for RestMetrics<S>
where
    S: tower_service::Service<Request<kube::client::Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: 'static,
    B: HttpBody<Data = Bytes> + Unpin + Send + 'static,
{
    type Response = Response<Counted<B>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let verb = req.method().as_str().to_string();
        let watch = is_watch(req.uri());
        let host = self.host.clone();
        let size = req.body().size_hint();
        let throttled = req
            .extensions()
            .get::<crate::rate_limit::RateLimited>()
            .map(|w| w.0);
        if let Some(r) = rest() {
            r.request_size(&verb, &host, size.exact().unwrap_or(size.lower()));
            if let Some(waited) = throttled {
                r.rate_limiter(&verb, &host, waited);
            }
        }
        let start = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(resp) => {
                    if let Some(r) = rest() {
                        r.result(Some(resp.status().as_u16()), &verb, &host);
                        if watch {
                            r.latency(&verb, &host, start.elapsed());
                        }
                    }
                    let on_end = (!watch).then_some(OnEnd { verb, host, start });
                    Ok(resp.map(|inner| Counted {
                        inner,
                        bytes: 0,
                        on_end,
                    }))
                }
                Err(e) => {
                    if let Some(r) = rest() {
                        r.result(None, &verb, &host);
                        r.latency(&verb, &host, start.elapsed());
                    }
                    Err(e)
                }
            }
        })
    }
}

/// A response body that counts its bytes and records latency and size when it ends
/// (or is dropped).
pub struct Counted<B> {
    inner: B,
    bytes: u64,
    on_end: Option<OnEnd>,
}

impl<B> Counted<B> {
    fn finish(&mut self) {
        if let (Some(e), Some(r)) = (self.on_end.take(), rest()) {
            r.latency(&e.verb, &e.host, e.start.elapsed());
            r.response_size(&e.verb, &e.host, self.bytes);
        }
    }
}

impl<B> Drop for Counted<B> {
    fn drop(&mut self) {
        self.finish();
    }
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for Counted<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        match &r {
            Poll::Ready(Some(Ok(f))) => {
                if let Some(d) = f.data_ref() {
                    self.bytes += d.len() as u64;
                }
            }
            Poll::Ready(None) => self.finish(),
            _ => {}
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_watch_as_client_go_sees_them() {
        let u: http::Uri = "https://198.18.0.1:6443".parse().unwrap();
        assert_eq!(host_of(&u), "198.18.0.1:6443");
        let u: http::Uri = "http://user@[2001:db8::1]:8080/x".parse().unwrap();
        assert_eq!(host_of(&u), "[2001:db8::1]:8080");
        assert!(is_watch(
            &"/api/v1/services?watch=true&resourceVersion=5"
                .parse()
                .unwrap()
        ));
        assert!(!is_watch(&"/api/v1/services?limit=500".parse().unwrap()));
        assert!(!is_watch(&"/api/v1/services".parse().unwrap()));
    }
}
