//! engine-runner: the sync engine on real netlink sockets, fed from a manifest file, for
//! the netns tests (the real daemon is `kube-nlproxy`; this is a test tool).
//!
//! Usage: engine-runner MANIFEST [--no-cleanup] [--min-sync-ms N] [--sync-ms N]
//!                      [--reject-commits N] [--pause-before-cleanup-ms N]
//!                      [--corrupt-addr IP --corrupt-while PATH]
//!
//! MANIFEST is a fixture (multi-document YAML: one `kind: NlproxyConfig` document, a Node,
//! Services, EndpointSlices). It is re-read when its mtime or size changes (polled every
//! 100 ms); objects that appeared or changed are sent as applied, vanished ones as deleted.
//! Runs in the calling process's network namespace (start it with `ip netns exec`).
//! Prints one line per sync on stdout: `synced full=.. ops=.. targets=.. deleted=..
//! pending=..` (then `error: ..` for each error of the report), `failed: ..`, `repaired`,
//! `foreign pid=.. process=..` (another program's transaction on our tables), and one
//! per cleanup slice between syncs:
//! `cleaned targets=.. done=.. deleted=.. pending=..`.
//!
//! `--reject-commits N`: after the first successful commit, the next N rule batches get one
//! extra operation the kernel refuses (deleting a chain that does not exist), so the
//! kernel rejects each of them as a whole (a test-only fault injection).
//!
//! `--corrupt-addr IP --corrupt-while PATH`: while the file PATH exists, every set or map
//! element added whose key starts with address IP (a service's ClusterIP: its dispatch
//! and endpoint elements) gets one key field too many, which the kernel refuses
//! (EINVAL); in commits and in checks alike (a test-only fault injection: one service
//! port's elements are refused).
//!
//! `--pause-before-cleanup-ms N`: the first conntrack cleanup call prints
//! `cleanup-pause` and waits N ms first (the cleanup's thread waits; the engine goes on
//! committing; the call may be the index's seed listing, before the first commit), so a
//! test can kill the engine between the commit and the cleanup.
//!
//! After a failed sync it retries after 200 ms, doubling up to 2 s, both times
//! `NLP_TIME_SCALE` (see `netns_tests::time_scale`).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, SystemTime};
use sync_engine::EventSender as Sender;

use nft_model::{Family, Op, Table, TableRef, Value};
use sync_engine::k8s_openapi::api::core::v1::{Node, Service};
use sync_engine::k8s_openapi::api::discovery::v1::EndpointSlice;
use sync_engine::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sync_engine::*;

struct Print;

impl Observer for Print {
    fn synced(&self, r: &SyncReport) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(
            o,
            "synced full={} kind={} ops={} targets={} deleted={} pending={} errors={} compile_ms={} commit_ms={} conntrack_ms={}",
            r.full,
            r.kind,
            r.ops,
            r.conntrack_targets,
            r.conntrack_deleted,
            r.conntrack_pending,
            r.errors.len(),
            r.compile.as_millis(),
            r.commit.as_millis(),
            r.conntrack.as_millis()
        );
        for e in &r.errors {
            let _ = writeln!(o, "error: {e}");
        }
        let _ = o.flush();
    }
    fn failed(&self, e: &(dyn std::error::Error + 'static)) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "failed: {e}");
        let _ = o.flush();
    }
    fn repaired(&self) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "repaired");
        let _ = o.flush();
    }
    fn foreign_write(&self, w: &ForeignWriter) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(
            o,
            "foreign pid={} process={}",
            w.pid.unwrap_or(0),
            w.process.as_deref().unwrap_or("")
        );
        let _ = o.flush();
    }
    fn cleaned(&self, r: &CleanupReport) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(
            o,
            "cleaned targets={} done={} deleted={} pending={}",
            r.targets, r.done, r.deleted, r.pending
        );
        let _ = o.flush();
    }
}

/// Pauses before the first cleanup call: see the module docs.
struct Pausing {
    inner: ct_netlink::Conntrack,
    pause: Option<Duration>,
}

impl Pausing {
    fn pause(&mut self) {
        if let Some(d) = self.pause.take() {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "cleanup-pause");
            let _ = o.flush();
            drop(o);
            std::thread::sleep(d);
        }
    }
}

impl ConntrackKernel for Pausing {
    fn list_udp(
        &mut self,
        family: kube_model::IpFamily,
        out: &mut Vec<ct_netlink::Flow>,
    ) -> Result<bool, EngineError> {
        self.pause();
        self.inner.list_udp(family, out)
    }
    fn list(
        &mut self,
        scopes: &[sync_engine::cleanup::Scope],
        out: &mut Vec<ct_netlink::Flow>,
    ) -> Result<Vec<bool>, EngineError> {
        self.pause();
        ConntrackKernel::list(&mut self.inner, scopes, out)
    }
    fn delete(
        &mut self,
        flows: &[ct_netlink::Flow],
    ) -> Result<Vec<sync_engine::cleanup::Removal>, EngineError> {
        self.pause();
        ConntrackKernel::delete(&mut self.inner, flows)
    }
    fn events(&mut self) -> Option<Box<dyn FlowEvents>> {
        self.inner.events()
    }
    fn listing(&self) -> &'static str {
        self.inner.listing()
    }
}

/// Whether a batch is empty of rules (rejections are injected into rule batches only).
fn bookkeeping(ops: &[Op]) -> bool {
    ops.is_empty()
}

/// Injects kernel rejections: see the module docs.
struct Rejecting {
    inner: nft_netlink::Nft,
    remaining: u32,
    committed_once: bool,
    /// (address, marker file): see `--corrupt-addr`.
    corrupt: Option<(String, String)>,
}

impl Rejecting {
    fn corrupted(&self, ops: &[Op]) -> Option<Vec<Op>> {
        let (addr, marker) = self.corrupt.as_ref()?;
        if !std::path::Path::new(marker).exists() {
            return None;
        }
        let addr: std::net::IpAddr = addr.parse().ok()?;
        let first_is_addr = |v: Option<&Value>| match (v, addr) {
            (Some(Value::Ipv4(a)), std::net::IpAddr::V4(b)) => *a == b,
            (Some(Value::Ipv6(a)), std::net::IpAddr::V6(b)) => *a == b,
            _ => false,
        };
        let mut out = ops.to_vec();
        for op in &mut out {
            if let Op::AddElements { elements, .. } = op {
                for e in elements.iter_mut() {
                    if first_is_addr(e.key.first()) {
                        e.key.push(Value::Port(0));
                    }
                }
            }
        }
        Some(out)
    }
}

impl NftKernel for Rejecting {
    fn generation(&mut self) -> Result<u32, EngineError> {
        NftKernel::generation(&mut self.inner)
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        if let Some(bad) = self.corrupted(ops) {
            return NftKernel::commit(&mut self.inner, &bad, genid);
        }
        if self.committed_once && self.remaining > 0 && !ops.is_empty() && !bookkeeping(ops) {
            self.remaining -= 1;
            let mut bad = ops.to_vec();
            bad.push(Op::DeleteChain {
                table: TableRef::new(Family::Ip, ruleset::names::TABLE),
                chain: "injected-no-such-chain".into(),
            });
            return NftKernel::commit(&mut self.inner, &bad, genid);
        }
        let r = NftKernel::commit(&mut self.inner, ops, genid)?;
        self.committed_once = true;
        Ok(r)
    }
    fn dump_table(
        &mut self,
        t: &TableRef,
        others_only: &mut dyn FnMut(u32, u32) -> bool,
    ) -> Result<Option<Table>, EngineError> {
        NftKernel::dump_table(&mut self.inner, t, others_only)
    }
}

#[derive(Clone, PartialEq)]
enum Obj {
    Service(Box<Service>),
    Slice(Box<EndpointSlice>),
    Node(Box<Node>),
}

fn id(kind: &str, m: &ObjectMeta) -> String {
    format!("{kind}/{}", kube_model::ns_key(m))
}

fn objects(text: &str) -> Result<BTreeMap<String, Obj>, String> {
    let m = kube_model::manifest::parse(text).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for s in m.services {
        out.insert(id("service", &s.metadata), Obj::Service(Box::new(s)));
    }
    for s in m.slices {
        out.insert(id("slice", &s.metadata), Obj::Slice(Box::new(s)));
    }
    for n in m.nodes {
        out.insert(id("node", &n.metadata), Obj::Node(Box::new(n)));
    }
    Ok(out)
}

fn stamp(path: &str) -> Option<(SystemTime, u64)> {
    let md = std::fs::metadata(path).ok()?;
    Some((md.modified().ok()?, md.len()))
}

/// Poll the manifest and send what changed; ends when the engine is gone.
fn feed(path: String, tx: Sender) {
    let mut last_stamp = None;
    let mut last: BTreeMap<String, Obj> = BTreeMap::new();
    let mut listed = false;
    loop {
        let st = stamp(&path);
        if st != last_stamp {
            last_stamp = st;
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            match objects(&text) {
                Err(e) => eprintln!("engine-runner: manifest: {e}"),
                Ok(now) => {
                    let mut evs = Vec::new();
                    for (k, o) in &now {
                        if last.get(k) != Some(o) {
                            evs.push(match o.clone() {
                                Obj::Service(s) => Event::ServiceApplied(*s),
                                Obj::Slice(s) => Event::SliceApplied(*s),
                                Obj::Node(n) => Event::NodeApplied(*n),
                            });
                        }
                    }
                    for (k, o) in &last {
                        if !now.contains_key(k) {
                            match o.clone() {
                                Obj::Service(s) => evs.push(Event::ServiceDeleted(*s)),
                                Obj::Slice(s) => evs.push(Event::SliceDeleted(*s)),
                                Obj::Node(_) => {}
                            }
                        }
                    }
                    if !listed {
                        evs.push(Event::ServicesListed);
                        evs.push(Event::SlicesListed);
                        listed = true;
                    }
                    for e in evs {
                        if tx.send(e).is_err() {
                            return;
                        }
                    }
                    last = now;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = None;
    let mut cfg = EngineConfig::default();
    let mut reject = 0u32;
    let mut pause = None;
    let (mut corrupt_service, mut corrupt_while) = (None, None);
    let mut it = args.iter();
    let num = |v: Option<&String>| -> u64 {
        v.and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            eprintln!("engine-runner: a number is expected");
            std::process::exit(2)
        })
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "--no-cleanup" => cfg.conntrack_cleanup = false,
            "--min-sync-ms" => cfg.min_sync_period = Duration::from_millis(num(it.next())),
            "--sync-ms" => cfg.sync_period = Duration::from_millis(num(it.next())),
            "--reject-commits" => reject = num(it.next()) as u32,
            "--pause-before-cleanup-ms" => pause = Some(Duration::from_millis(num(it.next()))),
            "--corrupt-addr" => corrupt_service = it.next().cloned(),
            "--corrupt-while" => corrupt_while = it.next().cloned(),
            p if path.is_none() && !p.starts_with('-') => path = Some(p.to_string()),
            other => {
                eprintln!("engine-runner: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("usage: engine-runner MANIFEST [--no-cleanup] [--min-sync-ms N] [--sync-ms N] [--reject-commits N] [--pause-before-cleanup-ms N] [--corrupt-addr IP --corrupt-while PATH]");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        eprintln!("engine-runner: {path}: {e}");
        std::process::exit(1)
    });
    cfg.ruleset = ruleset::fixture::parse(&text)
        .and_then(|f| f.config.parse())
        .unwrap_or_else(|e| {
            eprintln!("engine-runner: {path}: {e}");
            std::process::exit(1)
        });
    // Retry backoff stretched by NLP_TIME_SCALE like the tests' waits (see
    // netns_tests::time_scale), so that a slow machine still sees the failed state.
    cfg.retry_initial = netns_tests::scaled(Duration::from_millis(200));
    cfg.retry_max = netns_tests::scaled(Duration::from_secs(2));
    let nft = nft_netlink::Nft::open().expect("open nftables socket");
    let mut engine = Engine::with_conntrack_opener(
        cfg,
        Rejecting {
            inner: nft,
            remaining: reject,
            committed_once: false,
            corrupt: corrupt_service.zip(corrupt_while),
        },
        Box::new(move || {
            Ok(Pausing {
                inner: ct_netlink::Conntrack::open(ct_netlink::Config::default())?,
                pause,
            })
        }),
        SystemClock,
    );
    engine.set_observer(Box::new(Print));
    let (tx, rx) = sync_engine::channel(1024);
    std::thread::spawn(move || feed(path, tx));
    if let Err(e) = run(engine, rx) {
        eprintln!("engine-runner: {e}");
        std::process::exit(1);
    }
}
