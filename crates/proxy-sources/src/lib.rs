//! The sources of desired state, turned into engine events: the Kubernetes API
//! ([`api_client`]: the vetted client and its time-bounded transport; [`rate_limit`]:
//! its QPS and burst; [`rest_metrics`]: its `rest_client_*` metrics; [`kube_source`]:
//! the watchers, lists and watches in protobuf or JSON through [`list_watch`], each
//! object a [`lenient::Lenient`];
//! [`node_event`]: the node's start event) or manifest files ([`manifests`]). Every
//! event reaches the engine through an [`events::EventSender`] ([`node_ip`]: the
//! `bindAddress` override it applies to Node events). Also the `--config` file's watch
//! ([`config_watch`]: exit when it changes, as upstream).
//!
//! Knows nothing of nftables: it sends the engine's `Event`s, and reads no table.

pub mod api_client;
pub mod config_watch;
pub mod events;
pub mod kube_source;
pub mod lenient;
pub mod list_watch;
pub mod manifests;
pub mod node_event;
pub mod node_ip;
pub mod rate_limit;
pub mod rest_metrics;

/// An error and its causes, each once (`watch stream failed: ServiceError: client error
/// (Connect): tcp connect error: Connection refused (os error 111)`): kube-rs' errors
/// keep the reason in their sources, which `Display` alone leaves out.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let t = c.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        cause = c.source();
    }
    text
}
