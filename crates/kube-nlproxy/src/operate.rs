//! What operators see: the /healthz, /livez and metrics servers, health-check node
//! ports, the metrics and log hooks on the engine, the migration away from kube-proxy
//! (any mode, `leftovers`) after our first sync, and `explain`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
use ops_server::hcport::HealthCheckPorts;
use ops_server::observer::MetricsObserver;
use ops_server::server::{serve_forever, Limits, OnBindError, ServerKind};
use ops_server::{Metrics, ProxyInfo};
use ruleset::config::{NodePortAddrs, ParsedConfig};
use sync_engine::{CleanupReport, ForeignWriter, Observer, StatusHandle, SyncReport};
use tracing::{error, warn};

use proxy_config::settings::Settings;

/// Several observers behind one.
pub struct Observers(pub Vec<Box<dyn Observer>>);

impl Observer for Observers {
    fn synced(&self, r: &SyncReport) {
        self.0.iter().for_each(|o| o.synced(r));
    }
    fn cleaned(&self, r: &CleanupReport) {
        self.0.iter().for_each(|o| o.cleaned(r));
    }
    fn failed(&self, e: &(dyn std::error::Error + 'static)) {
        self.0.iter().for_each(|o| o.failed(e));
    }
    fn repaired(&self) {
        self.0.iter().for_each(|o| o.repaired());
    }
    fn foreign_write(&self, w: &ForeignWriter) {
        self.0.iter().for_each(|o| o.foreign_write(w));
    }
}

/// After the first successful sync (our rules are in), remove what kube-proxy left
/// behind, once: the engine's first sync step, which knows the nftables batch as its
/// own. Our rules handle every service before kube-proxy's go, so no packet meets
/// neither ruleset (see `docs/migration.md`).
pub struct Migrate(pub leftovers::Options);

impl sync_engine::FirstSyncStep for Migrate {
    fn run(self: Box<Self>) -> Vec<u32> {
        leftovers::migrate(&self.0)
            .nft
            .and_then(|r| r.guard)
            .into_iter()
            .collect()
    }
}

/// iptables mode's `KUBE-FORWARD` as the engine writes it after each sync
/// (`sync_engine::EngineConfig::forward`).
pub fn forward_config(cfg: &ParsedConfig) -> nft_netlink::forward::ForwardConfig {
    nft_netlink::forward::ForwardConfig {
        mark: cfg.masquerade_mark,
        drop_invalid: cfg.drops_invalid_forwarded(),
    }
}

/// The leftover options from the configuration (`ipvs.excludeCIDRs`), with `extra_ops`
/// for the nftables batch.
pub fn leftover_options(settings: &Settings, extra_ops: Vec<nft_model::Op>) -> leftovers::Options {
    let exclude = settings
        .config
        .ipvs
        .exclude_cidrs
        .clone()
        .unwrap_or_default();
    leftovers::Options::new(&exclude, extra_ops)
}

/// The migration's options when running: [`leftover_options`] keeping, in iptables
/// mode, the `KUBE-FORWARD` chain we write ourselves (the engine, [`forward_config`]).
pub fn migrate_options(settings: &Settings) -> leftovers::Options {
    let mut o = leftover_options(settings, Vec::new());
    if settings.ruleset.proxier == ruleset::config::Proxier::Iptables {
        o.keep = nft_netlink::migrate::KEEP_IN_IPTABLES_MODE;
    }
    o
}

/// The wildcard address: `[::]` (which also accepts IPv4) where IPv6 works, else
/// `0.0.0.0`.
fn any_address() -> IpAddr {
    match std::net::TcpListener::bind((Ipv6Addr::UNSPECIFIED, 0)) {
        Ok(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        Err(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    }
}

/// Where health-check node ports listen, as kube-proxy's service health server of each
/// family decides (`nodePortAddresses`): every address of a family whose NodePorts are
/// served on all of them (one wildcard when that is every family; else the family's
/// unspecified address, `[::]` then bound IPv6-only, where IPv6 works), else the node's
/// addresses they are served on (its primary IPs for `primary`, the local addresses
/// inside the CIDRs). Nothing while those are not known yet (`primary_ips`: `None`
/// until the Node arrives).
pub fn health_check_addresses(cfg: &ParsedConfig, primary_ips: Option<&[IpAddr]>) -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut everywhere = Vec::new();
    for family in &cfg.families {
        match cfg.node_port_addrs(*family, primary_ips) {
            NodePortAddrs::AllLocal => everywhere.push(*family),
            NodePortAddrs::Addrs(a) => out.extend(a),
        }
    }
    if !everywhere.is_empty() && everywhere.len() == cfg.families.len() {
        return vec![any_address()];
    }
    for family in everywhere {
        match family {
            kube_model::IpFamily::V4 => out.push(IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
            kube_model::IpFamily::V6 if any_address().is_ipv6() => {
                out.push(IpAddr::V6(Ipv6Addr::UNSPECIFIED))
            }
            kube_model::IpFamily::V6 => {}
        }
    }
    out.sort();
    out.dedup();
    out
}

/// What the operator servers need.
pub struct Servers {
    pub status: StatusHandle,
    pub metrics: Arc<Metrics>,
    pub families: Vec<&'static str>,
    pub healthz_addr: String,
    pub metrics_addr: String,
    /// `bindAddressHardFail`: a server that cannot bind ends the process.
    pub hard_fail: bool,
    pub info: ProxyInfo,
    /// The ruleset's configuration (nodePortAddresses, local addresses), for the
    /// health-check node ports.
    pub node_ports: ParsedConfig,
    /// The families whose TCP NodePorts nftables mode's localhost proxy serves.
    pub localhost: Vec<kube_model::IpFamily>,
}

/// Start the health and metrics servers and the health-check node port reconciler on
/// the runtime (woken by the engine's status changes, not polled), each on its own (a server that cannot bind is retried every 5 s and
/// holds no other back, or ends the process with `bindAddressHardFail`). An empty bind
/// address disables that server, as in kube-proxy.
pub fn start_servers(rt: &tokio::runtime::Runtime, s: Servers) {
    let limits = Limits::for_process();
    let on_error = if s.hard_fail {
        OnBindError::Fail(Arc::new(|msg: String| {
            error!(err = %msg, "Error running ProxyServer");
            std::process::exit(1);
        }))
    } else {
        OnBindError::Retry
    };
    if !s.healthz_addr.is_empty() {
        let router =
            ops_server::health_router(s.status.clone(), s.families, Some(s.metrics.clone()));
        rt.spawn(serve_forever(
            ServerKind::Healthz,
            s.healthz_addr,
            router,
            limits,
            on_error.clone(),
        ));
    }
    if !s.metrics_addr.is_empty() {
        let router = ops_server::metrics_router(s.metrics.clone(), s.info);
        rt.spawn(serve_forever(
            ServerKind::Metrics,
            s.metrics_addr,
            router,
            limits,
            on_error,
        ));
    }
    if [kube_model::IpFamily::V4, kube_model::IpFamily::V6]
        .iter()
        .any(|f| !s.node_ports.localhost_rejects(*f).is_empty())
    {
        let cfg = s.node_ports.clone();
        s.metrics
            .localhost_rejected(move || localhost_rejected_packets(&cfg));
    }
    if s.node_ports.localhost_node_ports_v4() {
        s.metrics.localhost_accepted(localhost_accepted_packets);
    }
    let cfg = s.node_ports;
    let mut ports = HealthCheckPorts::new(
        s.status.clone(),
        Box::new(move |st| {
            let primary = st.node.as_ref().map(|_| st.node_primary_ips.as_slice());
            health_check_addresses(&cfg, primary)
        }),
        limits,
    );
    let (status, metrics) = (s.status, s.metrics);
    // The engine's status changes wake the reconcilers (a thread of its own waits for
    // them: a blocking wait on the runtime would hold its shutdown back).
    let changed = Arc::new(tokio::sync::Notify::new());
    let localhost_changed = Arc::new(tokio::sync::Notify::new());
    if !s.localhost.is_empty() {
        start_localhost_proxy(
            rt,
            &s.localhost,
            &status,
            &metrics,
            localhost_changed.clone(),
        );
    }
    {
        let (status, changed) = (status.clone(), changed.clone());
        let localhost_changed = localhost_changed.clone();
        let spawned = std::thread::Builder::new()
            .name("status-follow".into())
            .spawn(move || {
                let mut seen = status.changes();
                loop {
                    seen = status.wait_change(seen, IDLE_RECHECK);
                    changed.notify_one();
                    localhost_changed.notify_one();
                }
            });
        if let Err(e) = spawned {
            warn!(err = %e, "cannot follow the status; health-check ports follow it every 60 s");
        }
    }
    rt.spawn(async move {
        loop {
            ports.reconcile().await;
            // (read in place: no copy of the whole status on every change)
            let pending = status.read(|now| {
                metrics.update_from_status(now);
                now.cleanup_pending
            });
            // Until the status changes, a port is due for another bind, or (while
            // cleanup targets wait) the oldest target's age gauge is due.
            let mut wait = IDLE_RECHECK;
            if pending > 0 {
                wait = wait.min(Duration::from_millis(500));
            }
            if let Some(t) = ports.next_retry() {
                wait = wait.min(t.saturating_duration_since(std::time::Instant::now()));
            }
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    });
}

/// nftables mode's localhost NodePorts: the userspace proxy's listeners follow the
/// NodePorts the engine's status lists, reconciled at each status change (`changed`).
fn start_localhost_proxy(
    rt: &tokio::runtime::Runtime,
    families: &[kube_model::IpFamily],
    status: &StatusHandle,
    metrics: &Arc<Metrics>,
    changed: Arc<tokio::sync::Notify>,
) {
    let observer: Arc<dyn proxy_status::LocalhostObserver> = metrics.clone();
    let mut proxies = localhost_proxy::LocalhostProxies::new(families, observer);
    let status = status.clone();
    rt.spawn(async move {
        loop {
            // only the NodePorts are copied (sockets are opened outside the status's
            // lock), not the status's maps of every service
            let ports = status.read(|s| s.localhost_node_ports.clone());
            proxies.sync_ports(&ports);
            // a port another program holds is tried again at the next change, or soon
            tokio::select! {
                _ = changed.notified() => {}
                _ = tokio::time::sleep(LOCALHOST_RETRY) => {}
            }
        }
    });
}

/// The named counters of nftables mode's localhost NodePort reject rules, read from
/// our tables at scrape time (a socket per scrape, as upstream lists them with `nft`);
/// a failure is logged and yields no series.
fn localhost_rejected_packets(cfg: &ParsedConfig) -> Vec<ops_server::RejectedPackets> {
    let mut nft = match nft_netlink::Nft::open() {
        Ok(n) => n,
        Err(e) => {
            warn!(err = %e, "failed to list nftables counters");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for family in [kube_model::IpFamily::V4, kube_model::IpFamily::V6] {
        let protocols = cfg.localhost_rejects(family);
        if protocols.is_empty() {
            continue;
        }
        let table = nft_model::TableRef::new(ruleset::nft_family(family), ruleset::names::TABLE);
        let counters = match nft.read_counters(&table) {
            Ok(c) => c,
            Err(e) => {
                warn!(err = %e, ip_family = family.k8s_name(), "failed to list nftables counters");
                continue;
            }
        };
        for proto in protocols {
            let name = ruleset::names::localhost_reject(proto).1;
            if let Some(c) = counters.iter().find(|c| c.name == name) {
                out.push(ops_server::RejectedPackets {
                    family,
                    protocol: match proto {
                        6 => "TCP",
                        132 => "SCTP",
                        _ => "UDP",
                    },
                    packets: c.packets,
                });
            }
        }
    }
    out
}

/// iptables mode's localhost NodePort accept counter, read from our IPv4 table at
/// scrape time; `None` when it cannot be read (logged).
fn localhost_accepted_packets() -> Option<u64> {
    let table = nft_model::TableRef::new(nft_model::Family::Ip, ruleset::names::TABLE);
    let counters = nft_netlink::Nft::open().and_then(|mut nft| nft.read_counters(&table));
    match counters {
        Ok(c) => c
            .iter()
            .find(|c| c.name == ruleset::names::LOCALHOST_ACCEPTED)
            .map(|c| c.packets),
        Err(e) => {
            warn!(err = %e, "failed to collect nftables counter");
            None
        }
    }
}

/// How often the localhost proxy tries again without a status change (a port that could
/// not be bound; upstream tries at its next sync).
const LOCALHOST_RETRY: Duration = Duration::from_secs(30);

/// The longest the health-check ports and the status gauges wait for a change.
const IDLE_RECHECK: Duration = Duration::from_secs(60);

/// The metrics hook for the engine.
pub fn metrics_observer(m: &Arc<Metrics>) -> Box<dyn Observer> {
    Box::new(MetricsObserver(m.clone()))
}

/// `explain` arguments, taken out of the command line before the daemon flags are parsed.
#[derive(Debug, Default)]
pub struct ExplainArgs {
    pub src: Option<String>,
    pub dst: Option<String>,
    pub iif: Option<String>,
    pub from_host: bool,
}

/// Split `kube-nlproxy explain ...` into the explain arguments and the daemon flags.
pub fn split_explain(args: Vec<String>) -> (ExplainArgs, Vec<String>) {
    let mut e = ExplainArgs::default();
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let slot = match name.as_str() {
            "--src" => &mut e.src,
            "--dst" => &mut e.dst,
            "--iif" => &mut e.iif,
            "--from-host" => {
                e.from_host = true;
                continue;
            }
            "explain" if rest.len() == 1 => continue,
            _ => {
                rest.push(a);
                continue;
            }
        };
        *slot = inline.or_else(|| it.next());
    }
    (e, rest)
}

fn parse_endpoint(s: &str, what: &str) -> anyhow::Result<(IpAddr, Option<u16>)> {
    let s = s.trim();
    if let Ok(sa) = s.parse::<std::net::SocketAddr>() {
        return Ok((sa.ip(), Some(sa.port())));
    }
    let ip = s.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>()
        .map(|ip| (ip, None))
        .map_err(|_| anyhow!("{what} {s:?}: expected IP or IP:PORT ([IPv6]:PORT)"))
}

/// Build the packet `explain` traces from `--src IP[:PORT] --dst IP:PORT/PROTO`.
pub fn explain_packet(a: &ExplainArgs) -> anyhow::Result<ruleset::Packet> {
    let src = a
        .src
        .as_deref()
        .ok_or_else(|| anyhow!("explain needs --src IP[:PORT]"))?;
    let dst = a
        .dst
        .as_deref()
        .ok_or_else(|| anyhow!("explain needs --dst IP:PORT/PROTO"))?;
    let (dst, proto) = dst.rsplit_once('/').unwrap_or((dst, "tcp"));
    let proto = match proto.to_ascii_lowercase().as_str() {
        "tcp" => 6,
        "udp" => 17,
        "sctp" => 132,
        p => return Err(anyhow!("--dst protocol {p:?}: expected tcp, udp or sctp")),
    };
    let (src, sport) = parse_endpoint(src, "--src")?;
    let (dst, dport) = parse_endpoint(dst, "--dst")?;
    let dport = dport.ok_or_else(|| anyhow!("--dst needs a port: IP:PORT/PROTO"))?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(anyhow!("--src and --dst are of different IP families"));
    }
    Ok(ruleset::Packet {
        src,
        dst,
        proto,
        sport: sport.unwrap_or(40000),
        dport,
        iif: a.iif.clone(),
        local_origin: a.from_host,
        mark: 0,
    })
}

/// Our tables as the kernel holds them now.
pub fn kernel_tables() -> anyhow::Result<Vec<nft_model::Table>> {
    let mut nft = nft_netlink::Nft::open().context("opening the nftables netlink socket")?;
    let mut out = Vec::new();
    for t in sync_engine::our_tables() {
        if let Some(table) = nft
            .dump_table(&t)
            .with_context(|| format!("reading table {} {}", t.family.nft_name(), t.name))?
        {
            out.push(table);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    /// nodePortAddresses with CIDRs of one family: health-check ports on that family's
    /// matching addresses and on every address of the other family (as upstream's
    /// per-family service health servers); both families everywhere: one wildcard.
    #[test]
    fn health_check_ports_listen_on_every_address_of_a_family_without_cidrs() {
        let cfg = |np: &[&str]| {
            ruleset::Config {
                node_port_addresses: v(np),
                local_addresses: v(&["198.18.50.1", "198.18.10.1", "2001:db8:50::1"]),
                ..Default::default()
            }
            .parse()
            .unwrap()
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let v6 = any_address().is_ipv6();
        let mut want = vec![ip("198.18.50.1")];
        if v6 {
            want.push(ip("::"));
        }
        assert_eq!(
            health_check_addresses(&cfg(&["198.18.50.0/24"]), None),
            want
        );
        assert_eq!(
            health_check_addresses(&cfg(&["2001:db8:50::/64"]), None),
            vec![ip("0.0.0.0"), ip("2001:db8:50::1")]
        );
        assert_eq!(
            health_check_addresses(&cfg(&["0.0.0.0/0", "::/0"]), None),
            vec![any_address()]
        );
        // primary, the node without an IPv6 address: IPv6 everywhere
        let node = [ip("198.18.50.1")];
        assert_eq!(
            health_check_addresses(&cfg(&["primary"]), Some(&node)),
            want
        );
        assert!(health_check_addresses(&cfg(&["primary"]), None).is_empty());
    }

    #[test]
    fn explain_arguments_are_split_from_daemon_flags() {
        let (e, rest) = split_explain(v(&[
            "kube-nlproxy",
            "explain",
            "--src",
            "198.18.66.9",
            "--dst=198.18.100.41:80/udp",
            "--manifests",
            "x.yaml",
            "--iif",
            "eth0",
            "--dry-run",
        ]));
        assert_eq!(
            rest,
            v(&["kube-nlproxy", "--manifests", "x.yaml", "--dry-run"])
        );
        let p = explain_packet(&e).unwrap();
        assert_eq!(
            (p.proto, p.dport, p.sport, p.iif.as_deref()),
            (17, 80, 40000, Some("eth0"))
        );
        let (e, _) = split_explain(v(&[
            "k",
            "explain",
            "--src",
            "[2001:db8::1]:5",
            "--dst",
            "[2001:db8::2]:53/sctp",
        ]));
        let p = explain_packet(&e).unwrap();
        assert_eq!((p.proto, p.sport), (132, 5));
        let (e, _) = split_explain(v(&[
            "k",
            "explain",
            "--src",
            "198.18.0.1",
            "--dst",
            "2001:db8::2:53",
        ]));
        assert!(explain_packet(&e).is_err());
        let (e, _) = split_explain(v(&[
            "k",
            "explain",
            "--src",
            "198.18.0.1",
            "--dst",
            "198.18.0.2/tcp",
        ]));
        assert!(explain_packet(&e)
            .unwrap_err()
            .to_string()
            .contains("needs a port"));
    }
}
