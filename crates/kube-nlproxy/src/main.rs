//! kube-nlproxy: the node daemon. A drop-in replacement for kube-proxy's command line
//! and configuration file; desired state from the Kubernetes API (list and watch, `proxy-sources::list_watch`) or
//! from manifest files; the sync engine on its own thread. Never spawns a process.

#[cfg(test)]
mod deploy_tests;
mod heap;
mod host;
mod identity;
mod operate;
mod sink;
mod source;

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use sync_engine::{EventReceiver as Receiver, EventSender as SyncSender};

use anyhow::{anyhow, Context as _};
use nft_model::{Family, Op, TableRef};
use sync_engine::{
    Clock, ConntrackKernel, Engine, EngineConfig, Event, NftKernel, Observer, SyncReport,
};
use tracing::{error, info, warn};

use proxy_config::config;
use proxy_config::flags::{self, Flags, Parsed};
use proxy_config::settings::{self, Settings};
use proxy_sources::events::EventSender;
use proxy_sources::{config_watch, rest_metrics};

/// Our crates, by crate name: their DEBUG and TRACE lines are klog's verbosity 2 and 4,
/// a dependency's 6 and 9 (`klog::verbosity`).
const OUR_CRATES: &[&str] = &[
    "kube_nlproxy",
    "proxy_config",
    "proxy_sources",
    "leftovers",
    "klog",
    "sync_engine",
    "ops_server",
    "localhost_proxy",
    "proxy_status",
    "proxy_events",
    "ruleset",
    "kube_model",
    "kube_proto",
    "nft_netlink",
    "nft_wire",
    "nft_model",
    "ct_netlink",
    "rt_netlink",
    "ipvs_netlink",
    "nl_core",
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("explain") {
        return explain_main(args);
    }
    let flags = match Flags::parse_args(args) {
        Parsed::Run(f) => f,
        Parsed::Exit { text, code } => return print_and_exit(&text, code),
    };
    if let Some(req) = flags.version_request() {
        return print_and_exit(&identity::version_text(req), 0);
    }
    let mut settings = match settings::load(&flags) {
        Ok(s) => s,
        Err(e) => {
            // as kube-proxy (component-base's cli.Run): logged, exit 1
            klog::init(klog::Format::Text, 0, OUR_CRATES);
            error!(err = %e, "command failed");
            return ExitCode::FAILURE;
        }
    };
    let format = if settings.json_logs {
        klog::Format::Json
    } else {
        klog::Format::Text
    };
    klog::init(format, settings.verbosity, OUR_CRATES);
    for n in &settings.notices {
        n.log();
    }
    match run(&flags, &mut settings) {
        Ok(code) => code,
        Err(e) => {
            error!(err = error_text(&e), "Error running ProxyServer");
            ExitCode::FAILURE
        }
    }
}

/// An error with its causes, each cause once: many of our errors already name their
/// source in their own text (`manifests PATH: No such file or directory`), which
/// anyhow's `{:#}` would print a second time.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

/// Help, version or a flag error: to stdout (exit 0) or stderr (exit 1).
fn print_and_exit(text: &str, code: u8) -> ExitCode {
    if code == 0 {
        print!("{text}");
    } else {
        eprint!("{text}");
    }
    ExitCode::from(code)
}

/// Events in flight from the sources to the engine: a source that is faster than the
/// engine waits (an event holds a whole Kubernetes object).
const EVENT_QUEUE: usize = 256;

/// Whether this run talks to the kernel (not `--dry-run`, not `--render-to`).
fn touches_kernel(f: &Flags) -> bool {
    !f.dry_run && f.render_to.is_none()
}

fn run(flags: &Flags, settings: &mut Settings) -> anyhow::Result<ExitCode> {
    if let Some(path) = &flags.write_config_to {
        std::fs::write(path, config::to_yaml(&settings.config))
            .with_context(|| format!("open {path}"))?;
        info!(file = %path, "Wrote configuration");
        return Ok(ExitCode::SUCCESS);
    }
    if flags.cleanup == Some(true) {
        if flags.dry_run {
            return cleanup_dry_run(settings);
        }
        cleanup(settings)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The source of desired state is checked before the host is changed, as kube-proxy
    // creates its API client before it writes a sysctl: a daemon that cannot run (no
    // credentials, a missing manifests path) exits without having changed anything.
    let prepared = source::prepare(flags, settings, &rt)?;
    if touches_kernel(flags) {
        host::apply_conntrack(&settings.conntrack);
        if settings.ruleset.localhost_node_ports_v4() {
            host::apply_route_localnet();
        } else {
            settings.ruleset.route_localnet = host::route_localnet_set();
        }
        settings.ruleset.conntrack_tcp_be_liberal |= host::tcp_be_liberal();
        if let Some(v) = settings.oom_score_adj {
            host::apply_oom_score_adj(v);
        }
    }
    if flags.init_only == Some(true) {
        info!("initialisation done (--init-only)");
        return Ok(ExitCode::SUCCESS);
    }
    // as Go's runtime does for kube-proxy: room for every connection the servers allow
    match ops_server::server::raise_fd_limit() {
        Ok((old, new)) if old != new => {
            info!(
                from = old,
                to = new,
                "Raised the soft limit of open files to the hard limit"
            )
        }
        Ok(_) => {}
        Err(e) => warn!(err = %e, "Cannot raise the soft limit of open files"),
    }
    match host::local_addresses() {
        Ok(a) => settings.ruleset.local_addresses = a,
        Err(e) => warn!(err = %e, "Cannot list the host's addresses"),
    }
    info!(version = %identity::git_version(), "Version info");
    info!(
        node = %settings.node_name,
        source = flags.manifests.as_deref().unwrap_or("kubernetes"),
        mode = %settings.config.mode,
        "Starting kube-nlproxy (nftables over netlink)"
    );
    if let Some(path) = flags.config.as_deref().filter(|p| !p.is_empty()) {
        if !flags.once && !flags.dry_run {
            config_watch::spawn(std::path::Path::new(path), || {
                error!(err = config_watch::CHANGED, "Error running ProxyServer");
                std::process::exit(1);
            })
            .with_context(|| format!("watching {path}"))?;
        }
    }

    let families: Vec<&'static str> = settings
        .ruleset
        .families
        .iter()
        .map(|f| f.k8s_name())
        .collect();
    let metrics = ops_server::Metrics::new(&families, &identity::build_info());
    metrics.record_feature_gates(settings.gates.all());
    rest_metrics::install(Arc::new(metrics.rest_client().clone()));
    let (tx, rx) = sync_engine::channel(EVENT_QUEUE);
    let mut sender = EventSender::new(tx.clone(), settings.node_ip_override);
    if !flags.dry_run {
        sender = sender.counting(metrics.clone());
    }
    source::start(flags, settings, &rt, prepared, sender)?;

    if flags.dry_run {
        return dry_run(settings, rx);
    }
    if !flags.once {
        host::follow_addresses(tx.clone(), settings.ruleset.local_addresses.clone());
    }
    let ops = Operate {
        metrics,
        families,
        healthz: settings.healthz_bind_address.clone(),
        metrics_addr: settings.metrics_bind_address.clone(),
        hard_fail: settings.bind_address_hard_fail,
        info: proxy_info(settings, flags),
        node_ports: settings.ruleset.clone(),
        localhost: settings.localhost_proxy_families.clone(),
        migrate: touches_kernel(flags).then(|| operate::migrate_options(settings)),
    };
    let cfg = EngineConfig {
        ruleset: settings.ruleset.clone(),
        min_sync_period: settings.min_sync_period,
        sync_period: settings.sync_period,
        watch_tamper: touches_kernel(flags),
        conntrack_cleanup: touches_kernel(flags),
        localhost_node_port_families: settings.localhost_proxy_families.clone(),
        forward: (touches_kernel(flags)
            && settings.ruleset.proxier == ruleset::config::Proxier::Iptables)
            .then(|| operate::forward_config(&settings.ruleset)),
        ..EngineConfig::default()
    };
    match &flags.render_to {
        Some(path) => {
            let engine = Engine::new(
                cfg,
                sink::FileSink::new(path),
                sink::NoConntrack,
                sync_engine::SystemClock,
            );
            drive(engine, flags, &rt, tx, rx, ops)
        }
        None => {
            let engine = sync_engine::real_engine(cfg).context("opening netlink sockets")?;
            drive(engine, flags, &rt, tx, rx, ops)
        }
    }
}

/// Logs one line per sync at verbosity 2, as kube-proxy logs its syncs. (The engine
/// itself logs each invalid object when it arrives, failed syncs and repairs.)
struct LogObserver {
    synced: Arc<AtomicBool>,
}

impl Observer for LogObserver {
    fn synced(&self, r: &SyncReport) {
        // the engine logs the sync itself (one DEBUG line)
        let _ = r;
        self.synced.store(true, Ordering::SeqCst);
    }
}

/// The operator side of a running daemon (see `operate`).
struct Operate {
    metrics: Arc<ops_server::Metrics>,
    families: Vec<&'static str>,
    healthz: String,
    metrics_addr: String,
    hard_fail: bool,
    info: ops_server::ProxyInfo,
    node_ports: ruleset::config::ParsedConfig,
    /// The families of nftables mode's localhost NodePort proxy.
    localhost: Vec<kube_model::IpFamily>,
    /// Remove kube-proxy's leftovers after our first sync (with these options).
    migrate: Option<leftovers::Options>,
}

/// `/proxyMode` and `/configz`: the mode and the effective configuration (v1alpha1, as
/// JSON).
fn proxy_info(settings: &Settings, flags: &Flags) -> ops_server::ProxyInfo {
    let yaml = config::to_yaml(&settings.config);
    let config_json = kube_model::manifest::single_document(&yaml)
        .ok()
        .and_then(|v| serde_json::to_string(&v).ok())
        .unwrap_or_default();
    use proxy_config::gates::{COMPONENT_FLAGZ, COMPONENT_STATUSZ, EMULATED_VERSION};
    let statusz = settings
        .gates
        .enabled(COMPONENT_STATUSZ)
        .then(|| ops_server::zpages::Statusz {
            component: "kube-proxy".into(),
            started: std::time::SystemTime::now(),
            go_version: "n/a (kube-nlproxy is written in Rust)".into(),
            binary_version: identity::git_version().trim_start_matches('v').to_string(),
            emulation_version: Some(EMULATED_VERSION.into()),
        });
    let flagz = settings
        .gates
        .enabled(COMPONENT_FLAGZ)
        .then(|| proxy_config::flagz::all(flags));
    // kube-proxy installs its debug paths with enableProfiling
    let debug = settings
        .config
        .enable_profiling
        .then_some(ops_server::debug::DebugHandlers {
            set_verbosity: klog::set_verbosity,
            heap_stats: heap::stats,
        });
    ops_server::ProxyInfo {
        mode: settings.config.mode.clone(),
        config_json,
        statusz,
        flagz,
        debug,
    }
}

fn drive<N, C, K>(
    mut engine: Engine<N, C, K>,
    flags: &Flags,
    rt: &tokio::runtime::Runtime,
    tx: SyncSender,
    rx: Receiver,
    ops: Operate,
) -> anyhow::Result<ExitCode>
where
    N: NftKernel,
    C: ConntrackKernel + Send + 'static,
    K: Clock,
{
    let synced = Arc::new(AtomicBool::new(false));
    let observers: Vec<Box<dyn Observer>> = vec![
        Box::new(LogObserver {
            synced: synced.clone(),
        }),
        operate::metrics_observer(&ops.metrics),
    ];
    if let Some(opts) = ops.migrate {
        engine.after_first_sync(Box::new(operate::Migrate(opts)));
    }
    engine.set_observer(Box::new(operate::Observers(observers)));
    if !flags.once {
        operate::start_servers(
            rt,
            operate::Servers {
                status: engine.status(),
                metrics: ops.metrics.clone(),
                families: ops.families.clone(),
                healthz_addr: ops.healthz.clone(),
                metrics_addr: ops.metrics_addr.clone(),
                hard_fail: ops.hard_fail,
                info: ops.info.clone(),
                node_ports: ops.node_ports.clone(),
                localhost: ops.localhost.clone(),
            },
        );
    }
    rt.spawn(async move {
        shutdown_signal().await;
        info!("shutting down");
        let _ = tokio::task::spawn_blocking(move || tx.send(Event::Shutdown).is_ok()).await;
    });
    if flags.once {
        let (mut services, mut slices) = (false, false);
        while !(services && slices) {
            match rx.recv() {
                Ok(Event::ServicesListed) => {
                    services = true;
                    engine.handle(Event::ServicesListed);
                }
                Ok(Event::SlicesListed) => {
                    slices = true;
                    engine.handle(Event::SlicesListed);
                }
                Ok(Event::Shutdown) | Err(_) => {
                    error!("stopped before the initial lists were complete");
                    return Ok(ExitCode::FAILURE);
                }
                Ok(ev) => {
                    engine.handle(ev);
                    if rx.is_empty() {
                        engine.build_ahead();
                    }
                }
            }
        }
        return match engine.sync() {
            Ok(_) => {
                // The rest of a large cleanup backlog, before exiting.
                engine.drain_cleanup();
                // Exiting: the kernel frees the model and the compiler at once (freeing
                // them piece by piece takes a tenth of a second at 10,000 services).
                std::mem::forget(engine);
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                error!(err = %e, "Sync failed");
                Ok(ExitCode::FAILURE)
            }
        };
    }
    sync_engine::run(engine, rx).context("sync engine")?;
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// `--cleanup`: delete our tables (`ip kube-nlproxy`, `ip6 kube-nlproxy`) and what
/// kube-proxy left behind in any of its modes (see `leftovers`), over netlink; our tables
/// and kube-proxy's nftables state go in one batch. Absent objects are fine.
fn cleanup(settings: &Settings) -> anyhow::Result<()> {
    let ours = our_tables_present()?;
    let opts = operate::leftover_options(settings, ours.clone());
    let r = leftovers::migrate(&opts);
    if r.nft.is_some() {
        if ours.is_empty() {
            info!("cleanup: no kube-nlproxy table present");
        } else {
            info!(tables = ours.len(), "cleanup: kube-nlproxy tables deleted");
        }
    }
    if r.errors.is_empty() {
        Ok(())
    } else {
        Err(anyhow!(
            "cleanup incomplete: {} step(s) failed (see the warnings above)",
            r.errors.len()
        ))
    }
}

/// Deletes of our tables that exist.
fn our_tables_present() -> anyhow::Result<Vec<Op>> {
    let mut nft = nft_netlink::Nft::open().context("opening the nftables netlink socket")?;
    let mut ops = Vec::new();
    for family in [Family::Ip, Family::Ip6] {
        let t = TableRef::new(family, ruleset::names::TABLE);
        if nft.table_exists(&t).context("checking our tables")? {
            ops.push(Op::DeleteTable { table: t });
        }
    }
    Ok(ops)
}

/// `--cleanup --dry-run`: what `--cleanup` would delete, printed on stdout as an nft
/// script (the batch) with `#` lines for IPVS services, the link and ipsets; nothing is
/// changed.
fn cleanup_dry_run(settings: &Settings) -> anyhow::Result<ExitCode> {
    let ours = our_tables_present()?;
    let opts = operate::leftover_options(settings, ours.clone());
    let found = leftovers::scan(&opts);
    use std::io::Write;
    std::io::stdout()
        .write_all(found.describe(&opts).as_bytes())
        .context("writing to stdout")?;
    info!(
        tables = ours.len(),
        nft_ops = found.nft_ops(&opts).len() - ours.len(),
        ipsets = found.ipsets.len(),
        errors = found.errors.len(),
        "dry run: cleanup printed, nothing deleted"
    );
    Ok(ExitCode::SUCCESS)
}

/// `kube-nlproxy explain --src IP[:PORT] --dst IP:PORT/PROTO [--iif NAME] [--from-host]`:
/// the packet's path through our ruleset as the kernel holds it, or, with `--manifests
/// PATH --dry-run`, as it would be compiled from those manifests.
fn explain_main(args: Vec<String>) -> ExitCode {
    if args.iter().skip(2).any(|a| a == "--help" || a == "-h") {
        return print_and_exit(&flags::explain_help(), 0);
    }
    let (eargs, rest) = operate::split_explain(args);
    let flags = match Flags::parse_args(rest) {
        Parsed::Run(f) => f,
        Parsed::Exit { text, code } => return print_and_exit(&text, code),
    };
    let settings = match settings::load(&flags) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-nlproxy explain: {e}");
            return ExitCode::from(2);
        }
    };
    let format = if settings.json_logs {
        klog::Format::Json
    } else {
        klog::Format::Text
    };
    klog::init(format, settings.verbosity, OUR_CRATES);
    match explain(&flags, &eargs, settings) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kube-nlproxy explain: {}", error_text(&e));
            ExitCode::FAILURE
        }
    }
}

fn explain(
    flags: &Flags,
    eargs: &operate::ExplainArgs,
    mut settings: Settings,
) -> anyhow::Result<String> {
    let pkt = operate::explain_packet(eargs)?;
    let mut local: Vec<std::net::IpAddr> = host::local_addresses().unwrap_or_default();
    settings.ruleset.local_addresses = local.clone();
    let tables = if flags.manifests.is_some() {
        if !flags.dry_run {
            return Err(anyhow!(
                "explain with --manifests needs --dry-run (the kernel is not read then)"
            ));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let (tx, rx) = sync_engine::channel(EVENT_QUEUE);
        let prepared = source::prepare(flags, &settings, &rt)?;
        source::start(
            flags,
            &settings,
            &rt,
            prepared,
            EventSender::new(tx, settings.node_ip_override),
        )?;
        let (cluster, compiled, _) = collect_and_compile(&settings, rx)?
            .ok_or_else(|| anyhow!("the manifests source stopped before its initial lists"))?;
        if let Some(n) = &cluster.node {
            local.extend(n.primary_ips.iter().copied());
        }
        compiled.tables
    } else {
        operate::kernel_tables()?
    };
    if tables.is_empty() {
        return Err(anyhow!(
            "no kube-nlproxy table to explain (is the proxy running here?)"
        ));
    }
    Ok(ruleset::explain(&tables, &local, &pkt).to_string())
}

/// The initial lists from `rx`, compiled exactly as the engine compiles them, with the
/// problems found (sorted). `None` if the source stopped first. Objects are converted
/// as they arrive (no Kubernetes object is kept).
fn collect_and_compile(
    settings: &Settings,
    rx: Receiver,
) -> anyhow::Result<Option<(kube_model::Cluster, ruleset::Compiled, Vec<String>)>> {
    let mut cluster = kube_model::Cluster::new();
    let mut config = settings.ruleset.clone();
    // The latest problems per object, as the engine keeps them.
    let mut errors: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut note = |object: String,
                    mut w: Vec<kube_model::ObjectError>,
                    r: Option<kube_model::ObjectError>| {
        w.extend(r);
        errors.insert(object, w.iter().map(ToString::to_string).collect());
    };
    let (mut services, mut slices) = (false, false);
    while !(services && slices) {
        let mut w = Vec::new();
        match rx.recv() {
            Ok(Event::ServiceApplied(s)) => {
                let r = cluster.upsert_service(&s, &mut w).err();
                note(format!("service {}", kube_model::ns_key(&s.metadata)), w, r);
            }
            Ok(Event::ServiceDeleted(s)) => {
                let key = kube_model::ns_key(&s.metadata);
                cluster.remove_service(&key);
                note(format!("service {key}"), w, None);
            }
            Ok(Event::SliceApplied(s)) => {
                let r = cluster.upsert_slice(&s, &mut w).err();
                note(
                    format!("endpointslice {}", kube_model::ns_key(&s.metadata)),
                    w,
                    r,
                );
            }
            Ok(Event::SliceDeleted(s)) => {
                let key = kube_model::ns_key(&s.metadata);
                cluster.remove_slice(&key);
                note(format!("endpointslice {key}"), w, None);
            }
            Ok(Event::NodeApplied(n)) => {
                let r = cluster.set_node(&n, &mut w).err();
                note(
                    format!("node {}", n.metadata.name.as_deref().unwrap_or("")),
                    w,
                    r,
                );
            }
            Ok(Event::ServiceCidrs(c)) => config.service_cidrs = c,
            Ok(Event::HostAddresses(a)) => config.local_addresses = a,
            Ok(Event::ServicesListed) => services = true,
            Ok(Event::SlicesListed) => slices = true,
            Ok(Event::Resync | Event::SourceStalled { .. } | Event::SourceRecovered { .. }) => {}
            Ok(Event::Shutdown) | Err(_) => return Ok(None),
        }
    }
    let compiled = ruleset::compile_parsed(&cluster, &config);
    let mut problems: Vec<String> = errors.into_values().flatten().collect();
    problems.extend(
        cluster
            .orphan_slice_errors()
            .iter()
            .map(ToString::to_string),
    );
    problems.extend(compiled.errors.iter().map(ToString::to_string));
    problems.sort();
    problems.dedup();
    Ok(Some((cluster, compiled, problems)))
}

/// `--dry-run`: the initial lists, compiled exactly as the engine compiles them, printed
/// as nft text to stdout. Touches nothing.
fn dry_run(settings: &Settings, rx: Receiver) -> anyhow::Result<ExitCode> {
    let Some((cluster, compiled, problems)) = collect_and_compile(settings, rx)? else {
        error!("stopped before the initial lists were complete");
        return Ok(ExitCode::FAILURE);
    };
    for p in &problems {
        warn!(problem = %p, "Invalid object skipped");
    }
    let mut out = String::new();
    for t in &compiled.tables {
        out.push_str(&nft_model::render::table(t));
    }
    use std::io::Write;
    std::io::stdout()
        .write_all(out.as_bytes())
        .context("writing to stdout")?;
    info!(
        services = cluster.services.len(),
        slices = cluster.slices().len(),
        tables = compiled.tables.len(),
        invalid = problems.len(),
        "dry run: ruleset printed, nothing changed"
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    /// Crates under `crates/` the daemon never links (test support): they log nothing
    /// of the daemon's.
    const TEST_SUPPORT: &[&str] = &["kube_reference"];

    /// Every crate of the workspace under `crates/` the daemon links logs at our
    /// verbosities.
    #[test]
    fn every_crate_of_ours_is_listed() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let mut missing = Vec::new();
        for dir in workspace
            .lines()
            .filter_map(|l| l.trim().strip_prefix("\"crates/"))
            .filter_map(|l| l.strip_suffix("\","))
        {
            let name = dir.replace('-', "_");
            if !super::OUR_CRATES.contains(&name.as_str()) && !TEST_SUPPORT.contains(&name.as_str())
            {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "not in OUR_CRATES: {missing:?}");
    }
}
