//! The scenarios, one module each, and what they share: the daemon run from the API
//! double, the spacing of measured changes.

pub mod change;
pub mod churn;
pub mod cold;
pub mod e2e;
pub mod idle;
pub mod peers;

use std::time::Duration;

use integration::ApiServer;
use netns_tests::bench::Daemon;
use netns_tests::bench_cluster::NODE;
use netns_tests::Netns;

use crate::options::Opts;

/// Spacing of measured changes: more than the default minSyncPeriod (1 s), so that no
/// measured change waits for the rate limit.
pub const SPACING: Duration = Duration::from_millis(1200);

pub fn api_args(o: &Opts, api: &ApiServer) -> Vec<String> {
    ["--master", &api.url(), "--hostname-override", NODE, "-v=2"]
        .iter()
        .map(|s| s.to_string())
        .chain(o.daemon_args.iter().cloned())
        .collect()
}

/// Start the daemon against `api` in `ns` and wait for its first sync.
pub fn running_daemon(o: &Opts, ns: &Netns, api: &ApiServer) -> Option<(Daemon, Duration)> {
    let d = Daemon::start(ns, &o.bin, &api_args(o, api)).expect("start the daemon");
    match d.wait_sync(0, Duration::from_secs(600)) {
        Some((_, t, _)) => {
            let first = t - d.started;
            Some((d, first))
        }
        None => {
            eprintln!("   no first sync:\n{}", d.tail(20));
            None
        }
    }
}
