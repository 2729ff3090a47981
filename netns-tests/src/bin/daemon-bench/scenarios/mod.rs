//! The scenarios, one module each, and what they share: the daemon run from the API
//! double, the spacing of measured changes.

pub mod change;
pub mod churn;
pub mod churn_attr;
pub mod churn_probes;
pub mod churn_prod;
pub mod churn_trace;
pub mod cold;
pub mod e2e;
pub mod first_packet;
pub mod fleet;
pub mod fleet_hosts;
pub mod idle;
pub mod neighbour;
pub mod peers;
pub mod prod;
pub mod prod_sample;
pub mod stale;

use std::path::{Path, PathBuf};
use std::time::Duration;

use integration::ApiServer;
use netns_tests::bench::Daemon;
use netns_tests::bench_cluster::{api_in, api_with, write_manifest, write_synced, NsApi, NODE};
use netns_tests::Netns;

use crate::options::Opts;
use crate::shape;

/// Spacing of measured changes: more than the default minSyncPeriod (1 s), so that no
/// measured change waits for the rate limit.
pub const SPACING: Duration = Duration::from_millis(1200);

pub fn api_args(o: &Opts, api: &ApiServer) -> Vec<String> {
    daemon_args(o, &api.url(), NODE)
}

/// The daemon's command line against the API at `url` as node `node`, with `-v=2` (its
/// `synced` lines) and the `--daemon-arg`s.
pub fn daemon_args(o: &Opts, url: &str, node: &str) -> Vec<String> {
    ["--master", url, "--hostname-override", node, "-v=2"]
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

/// The manifests file of the cluster of `n` services in the shape asked for (written
/// once per run of the bench).
pub fn manifest_for(o: &Opts, dir: &Path, n: u32) -> PathBuf {
    if o.shape != "prod" {
        return write_manifest(dir, n, o.endpoints);
    }
    let p = dir.join(format!("cluster-prod-{n}-seed{}.json", o.seed));
    if !p.exists() {
        let c = shape::cluster(n, o.seed);
        println!("   the production shape: {}", c.stats);
        write_synced(&p, shape::manifest(&c).as_bytes());
    }
    p
}

/// The API double in `ns` holding the cluster of `n` services in the shape asked for.
pub fn api_for(o: &Opts, ns: &Netns, n: u32) -> NsApi {
    if o.shape != "prod" {
        return api_in(ns, n, o.endpoints);
    }
    let c = shape::cluster(n, o.seed);
    println!("   the production shape: {}", c.stats);
    api_with(ns, |api| shape::load(api, c))
}

/// What a cold start's header says of the cluster.
pub fn what(o: &Opts, n: u32) -> String {
    if o.shape == "prod" {
        format!("{n} services of the production shape (seed {})", o.seed)
    } else {
        format!("{n} x {}", o.endpoints)
    }
}
