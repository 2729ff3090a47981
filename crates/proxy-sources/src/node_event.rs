//! The event kube-proxy posts on its node when it starts (its "birth cry"), as upstream
//! writes it: an `events.k8s.io/v1` Event in namespace `default`, named
//! `<node>.<hex nanoseconds>`, type `Normal`, reason `Starting`, action `StartKubeProxy`,
//! no note, regarding `{kind: Node, name: <node>, uid: <node>}`, reporting controller
//! `kube-proxy`, reporting instance `kube-proxy-<host name>`. Only with the API source;
//! a failure is logged and the proxy goes on.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use tracing::{info, warn};

pub const REPORTING_CONTROLLER: &str = "kube-proxy";

/// The host name (the kernel's), as Go's `os.Hostname` gives it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The start event for `node` at `now`.
pub fn starting(node: &str, now: Timestamp) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{node}.{:x}", now.as_nanosecond())),
            namespace: Some("default".into()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(format!("{REPORTING_CONTROLLER}-{}", hostname())),
        action: Some("StartKubeProxy".into()),
        reason: Some("Starting".into()),
        regarding: Some(ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: Some(node.into()),
            ..ObjectReference::default()
        }),
        type_: Some("Normal".into()),
        ..Event::default()
    }
}

/// Post the start event once; log the outcome.
pub async fn post(client: Client, node: String) {
    let api: Api<Event> = Api::namespaced(client, "default");
    match api
        .create(&PostParams::default(), &starting(&node, Timestamp::now()))
        .await
    {
        Ok(_) => info!(node = %node, "posted the node's Starting event"),
        Err(e) => {
            warn!(node = %node, error = %e, "could not post the node's Starting event; going on")
        }
    }
}
