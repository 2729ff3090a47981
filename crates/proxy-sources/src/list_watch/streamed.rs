//! The streamed list (`sendInitialEvents=true`): a watch whose first objects are the
//! list's, ended by the `k8s.io/initial-events-end` bookmark; client-go's `watchList`.

use std::fmt::Debug;

use kube::client::Body;
use kube::core::Request;
use kube::runtime::watcher::{self, Event as WEvent};
use kube::Resource;
use kube_model::lean::Decode;
use kube_proto::FromProto;
use serde::de::DeserializeOwned;
use tracing::{debug, info};

use super::{
    answer_of, send, unavailable_version, Decoded, Frames, ListWatchError, Machine, Phase, Synced,
};

impl<K> Machine<K>
where
    K: FromProto + Resource<DynamicType = ()> + Decode + DeserializeOwned,
    K: Clone + Debug + Send + 'static,
{
    /// A streamed list requested: a watch with `sendInitialEvents=true` from the last
    /// synced version (the most recent state first, or when it is unavailable). A
    /// refusal falls back to list + watch for this round, as client-go does.
    pub(super) async fn start_stream(&mut self) -> Phase<K> {
        let rv = match self.memory.synced() {
            Synced {
                rv: Some(rv),
                unavailable: false,
            } => rv,
            _ => String::new(),
        };
        let req = Request::new(&self.path).watch(&self.watch_params(true), &rv);
        let resp = match send(self.client.clone(), self.accept(), req).await {
            Ok(r) => r,
            Err(e) if unavailable_version(&e) && !rv.is_empty() => {
                debug!(path = %self.path, error = %e, "streamed list from {rv} refused; from the most recent state");
                self.unavailable();
                return Phase::Stream;
            }
            // the server answered with an error status (no WatchList: 422, ...)
            Err(kube::Error::Api(status)) => {
                info!(path = %self.path, code = status.code, reason = %status.reason, message = %status.message,
                    "the server refused the streamed list; listing instead");
                return Phase::List { r#continue: None };
            }
            // no answer (connection refused, timeout, reset): not a refusal
            Err(e) => {
                info!(path = %self.path, error = %crate::error_chain(&e), "the streamed list request failed; listing instead");
                return Phase::List { r#continue: None };
            }
        };
        match answer_of(&resp, &self.path) {
            Ok(answer) => {
                self.answered(answer);
                Phase::Streaming {
                    body: resp.into_body(),
                    frames: Frames::of(answer),
                    rv,
                }
            }
            Err(e) => {
                self.push(Err(watcher::Error::WatchStartFailed(e.into_kube())));
                Phase::Empty
            }
        }
    }

    /// The events of a streamed list's bytes: its objects as the list's, until the
    /// bookmark that ends them; the rest as the watch's.
    pub(super) fn streamed(
        &mut self,
        body: Body,
        events: Result<Vec<Decoded<K>>, ListWatchError>,
        frames: Frames<K>,
        mut rv: String,
    ) -> Phase<K> {
        let events = match events {
            Ok(ev) => ev,
            Err(e) => {
                self.push(Err(watcher::Error::WatchFailed(e.into_kube())));
                return Phase::Empty;
            }
        };
        let mut rest = events.into_iter();
        for ev in rest.by_ref() {
            match ev {
                // a deletion before the end names an object the snapshot does not hold
                Decoded::Object { deleted: true, .. } => {}
                Decoded::Object { object, .. } => self.push(Ok(WEvent::InitApply(object))),
                Decoded::Bookmark(v, end) => {
                    if let Some(v) = v.filter(|v| !v.is_empty()) {
                        rv = v;
                    }
                    if end {
                        self.synced(&rv);
                        self.push(Ok(WEvent::InitDone));
                        let rest: Vec<Decoded<K>> = rest.collect();
                        return self.watched(body, Ok(rest), frames, rv);
                    }
                }
                Decoded::Error(status) => {
                    debug!(path = %self.path, code = status.code, reason = %status.reason, "streamed list error event");
                    if status.code == 410 {
                        self.unavailable();
                    }
                    self.push(Err(watcher::Error::WatchError(status)));
                    return Phase::Empty;
                }
            }
        }
        Phase::Streaming { body, frames, rv }
    }
}
