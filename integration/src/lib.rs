//! Daemon-level test support (no root needed):
//!
//! - [`ApiServer`]: an HTTP/1.1 Kubernetes API-server double on 127.0.0.1 that speaks the
//!   real list/watch wire protocol for services, endpointslices and nodes, in JSON or in
//!   protobuf (by the request's `Accept`, as the API server negotiates it): lists carry a
//!   `resourceVersion`; watches resume from one, stream chunked events
//!   (`ADDED`/`MODIFIED`/`DELETED`; JSON lines or length-delimited protobuf frames), send
//!   `BOOKMARK`s when asked, send initial events when asked (`sendInitialEvents`), answer
//!   a compacted resourceVersion with a `410 Expired` ERROR event, can drop every
//!   connection or refuse service for a while (an outage), and count the bytes each
//!   client received ([`ApiServer::traffic`]) and the CPU its threads used
//!   ([`ApiServer::cpu`]).
//! - [`daemon_binary!`] and [`Daemon`]: the `kube-nlproxy` binary cargo built for the
//!   test, run as a child process and killed on drop; [`ApiDaemon`]: the one command
//!   line of the daemon against the API double, which every API test starts it with.
//!
//! Modules: `store` (the state: objects, events, knobs), `api_server` (its handle),
//! `http` (requests, content negotiation, counted responses), `serve` (lists and
//! watches), `cpu` (its threads' CPU time), `daemon`, `objects`, [`proto`] (the protobuf
//! encoders), [`scale`] (synthetic clusters) and [`testdata`].

mod api_server;
mod cpu;
mod daemon;
mod http;
mod objects;
pub mod proto;
pub mod scale;
mod serve;
mod store;
pub mod testdata;

pub use api_server::ApiServer;
pub use cpu::ThreadsCpu;
pub use daemon::{
    content_type_args, free_port, http_get, read, wait_for, ApiDaemon, Daemon, TempDir,
};
pub use http::{Counts, Encoding, Traffic};
pub use objects::{node, service, slice};
pub use store::Res;
