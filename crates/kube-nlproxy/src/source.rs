//! The source of desired state: prepared (its configuration checked: the manifests
//! path, the API client and its credentials) before the daemon changes anything on the
//! host, then started on its own thread or task.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use proxy_config::flags::Flags;
use proxy_config::settings::Settings;
use proxy_sources::events::EventSender;
use proxy_sources::{api_client, kube_source, list_watch, manifests, node_event};

/// A source whose configuration was found usable.
pub enum Prepared {
    Manifests(Box<manifests::Reader>),
    Api {
        client: api_client::Client,
        timing: api_client::Timing,
        progress: Arc<api_client::Progress>,
    },
}

/// Check the source's configuration: the manifests path exists; or the API client's
/// configuration resolves (`--kubeconfig`, `--master`, else the in-cluster one) and a
/// client is built from it (kube-proxy's `createClient`). Nothing is sent anywhere yet.
pub fn prepare(
    flags: &Flags,
    settings: &Settings,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<Prepared> {
    match &flags.manifests {
        Some(path) => {
            let poll = flags.manifests_poll.std().max(Duration::from_millis(10));
            let reader = manifests::Reader::new(path, &settings.node_name, poll);
            reader.check()?;
            Ok(Prepared::Manifests(Box::new(reader)))
        }
        None => {
            let timing = api_client::Timing::from_watch(flags.api_watch_timeout.std());
            let progress = Arc::new(api_client::Progress::default());
            let kube = &settings.kube;
            let cfg = rt.block_on(api_client::config(
                kube.kubeconfig.as_deref(),
                kube.master.as_deref(),
            ))?;
            let client = {
                let _guard = rt.enter();
                api_client::client(cfg, kube.qps, kube.burst, timing, progress.clone())?
            };
            Ok(Prepared::Api {
                client,
                timing,
                progress,
            })
        }
    }
}

/// Start the prepared source on its own thread or task: it sends the objects, the
/// service CIDRs and the "listed" markers to `tx`.
pub fn start(
    flags: &Flags,
    settings: &Settings,
    rt: &tokio::runtime::Runtime,
    prepared: Prepared,
    tx: EventSender,
) -> anyhow::Result<()> {
    match prepared {
        Prepared::Manifests(reader) => {
            let poll = flags.manifests_poll.std().max(Duration::from_millis(10));
            let follow = manifests::Follow {
                poll: (!flags.once && !flags.dry_run).then_some(poll),
                inotify: flags.manifests_inotify,
            };
            std::thread::Builder::new()
                .name("manifests".into())
                .spawn(move || manifests::run(*reader, follow, tx))
                .context("starting the manifests watcher")?;
            Ok(())
        }
        Prepared::Api {
            client,
            timing,
            progress,
        } => {
            let node = settings.node_name.clone();
            if !flags.dry_run {
                rt.spawn(node_event::post(client.clone(), node.clone()));
            }
            let reading = list_watch::Reading {
                wire: list_watch::Wire::from_content_type(&settings.kube.content_type),
                // client-go's gate, registered into kube-proxy's (--feature-gates)
                streaming: settings
                    .gates
                    .enabled(proxy_config::gates::WATCH_LIST_CLIENT),
            };
            // kube-proxy waits for the node's podCIDRs with detect-local-mode NodeCIDR
            // and fails its start without them
            let wait = (settings.config.detect_local_mode == "NodeCIDR")
                .then(|| flags.pod_cidr_timeout.std());
            rt.spawn(async move {
                let run = kube_source::run_with(client, reading, node, wait, timing, progress, tx);
                if let Err(e) = run.await {
                    tracing::error!(err = %e, "Error running ProxyServer");
                    std::process::exit(1);
                }
            });
            Ok(())
        }
    }
}
