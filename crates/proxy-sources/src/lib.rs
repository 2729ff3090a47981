//! The sources of desired state, turned into engine events: the Kubernetes API
//! ([`api_client`]: the vetted client and its time-bounded transport; [`kube_source`]:
//! the watchers, lists and watches in protobuf or JSON through [`list_watch`]; [`node_event`]: the node's start event; [`rest_metrics`]: the client's
//! `rest_client_*` metrics) or manifest files ([`manifests`]). Every event reaches the
//! engine through an [`events::EventSender`] ([`node_ip`]: the `bindAddress` override it
//! applies to Node events). Also the `--config` file's watch ([`config_watch`]: exit when
//! it changes, as upstream).
//!
//! Knows nothing of nftables: it sends the engine's `Event`s, and reads no table.

pub mod api_client;
pub mod config_watch;
pub mod events;
pub mod kube_source;
pub mod list_watch;
pub mod manifests;
pub mod node_event;
pub mod node_ip;
pub mod rest_metrics;
