//! engine-runner: the sync engine on real netlink sockets, fed from a manifest file, for
//! the netns tests (the real daemon is `kube-nlproxy`; this is a test tool).
//!
//! Usage: engine-runner MANIFEST [--no-cleanup] [--min-sync-ms N] [--sync-ms N]
//!                      [--reject-commits N]
//!
//! MANIFEST is a fixture (multi-document YAML: one `kind: NlproxyConfig` document, a Node,
//! Services, EndpointSlices). It is re-read when its mtime or size changes (polled every
//! 100 ms); objects that appeared or changed are sent as applied, vanished ones as deleted.
//! Runs in the calling process's network namespace (start it with `ip netns exec`).
//! Prints one line per sync on stdout: `synced full=.. ops=.. targets=.. deleted=..`,
//! `failed: ..`, `repaired`.
//!
//! `--reject-commits N`: after the first successful commit, the next N batches get one
//! extra operation the kernel refuses (deleting a chain that does not exist), so the
//! kernel rejects each of them as a whole (a test-only fault injection).

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::mpsc::{channel, Sender};
use std::time::{Duration, SystemTime};

use nft_model::{Family, Op, Table, TableRef};
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
            "synced full={} ops={} targets={} deleted={} errors={} compile_ms={} commit_ms={} conntrack_ms={}",
            r.full,
            r.ops,
            r.conntrack_targets,
            r.conntrack_deleted,
            r.errors.len(),
            r.compile.as_millis(),
            r.commit.as_millis(),
            r.conntrack.as_millis()
        );
        let _ = o.flush();
    }
    fn failed(&self, e: &EngineError) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "failed: {e}");
        let _ = o.flush();
    }
    fn repaired(&self) {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "repaired");
        let _ = o.flush();
    }
}

/// Injects kernel rejections: see the module docs.
struct Rejecting {
    inner: nft_netlink::Nft,
    remaining: u32,
    committed_once: bool,
}

impl NftKernel for Rejecting {
    fn generation(&mut self) -> Result<u32, EngineError> {
        NftKernel::generation(&mut self.inner)
    }
    fn commit(&mut self, ops: &[Op], genid: Option<u32>) -> Result<CommitStats, EngineError> {
        if self.committed_once && self.remaining > 0 && !ops.is_empty() {
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
    fn dump_table(&mut self, t: &TableRef) -> Result<Option<Table>, EngineError> {
        NftKernel::dump_table(&mut self.inner, t)
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
fn feed(path: String, tx: Sender<Event>) {
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
            p if path.is_none() && !p.starts_with('-') => path = Some(p.to_string()),
            other => {
                eprintln!("engine-runner: unknown argument {other}");
                std::process::exit(2);
            }
        }
    }
    let Some(path) = path else {
        eprintln!("usage: engine-runner MANIFEST [--no-cleanup] [--min-sync-ms N] [--sync-ms N] [--reject-commits N]");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        eprintln!("engine-runner: {path}: {e}");
        std::process::exit(1)
    });
    cfg.ruleset = ruleset::fixture::parse(&text)
        .unwrap_or_else(|e| {
            eprintln!("engine-runner: {path}: {e}");
            std::process::exit(1)
        })
        .config;
    cfg.retry_initial = Duration::from_millis(200);
    cfg.retry_max = Duration::from_secs(2);
    let nft = nft_netlink::Nft::open().expect("open nftables socket");
    let ct = ct_netlink::Conntrack::open(ct_netlink::Config::default()).expect("open ctnetlink");
    let mut engine = Engine::new(
        cfg,
        Rejecting {
            inner: nft,
            remaining: reject,
            committed_once: false,
        },
        ct,
        SystemClock,
    );
    engine.set_observer(Box::new(Print));
    let (tx, rx) = channel();
    std::thread::spawn(move || feed(path, tx));
    if let Err(e) = run(engine, rx) {
        eprintln!("engine-runner: {e}");
        std::process::exit(1);
    }
}
