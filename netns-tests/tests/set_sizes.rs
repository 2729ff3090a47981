//! Size hints for large sets in the kernel (`ruleset::compile::mirror::sizing`): the
//! size is a hard cap (`ENFILE` past it), our batches never add past it, and a set
//! its elements would pass is declared again with the rules using it in
//! one transaction, under traffic. Root only (skipped otherwise). Topology: `Line`
//! (client - router - server); the router holds the table, every service's one endpoint
//! is the server, which answers UDP on 8080.

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube_model::{
    Cluster, Endpoint, EndpointSlice, IpFamily, Node, Protocol, Service, ServiceKey, ServicePort,
    SlicePort,
};
use netns_tests::{require_root, Line, Netns};
use nft_model::{DataType, Element, Family, Op, Set, Table, TableRef, Value};
use nft_netlink::{Nft, NftError};
use ruleset::{Changes, Compiler, Config, ParsedConfig};

fn cfg() -> ParsedConfig {
    Config {
        node_name: "node-a".into(),
        families: vec!["IPv4".into()],
        cluster_cidrs: vec!["198.18.0.0/23".into()],
        ..Default::default()
    }
    .parse()
    .expect("config")
}

fn cluster_ip(i: u32) -> IpAddr {
    IpAddr::from([198, 18, 16 + (i / 250) as u8, (i % 250) as u8 + 1])
}

/// Service `i`: a UDP ClusterIP (198.18.16.0/20) on port 80 whose one endpoint is the
/// server's 8080.
fn add(c: &mut Cluster, i: u32) {
    let key = ServiceKey::new("ns", format!("svc{i}"));
    let port = ServicePort {
        name: "dns".into(),
        protocol: Protocol::Udp,
        port: 80,
        node_port: None,
    };
    c.services.insert(
        key.clone(),
        Service::new_cluster_ip(key.clone(), cluster_ip(i), port),
    );
    c.insert_slice(EndpointSlice {
        key: ServiceKey::new("ns", format!("svc{i}-1")),
        service: key,
        family: IpFamily::V4,
        ports: vec![SlicePort {
            name: "dns".into(),
            protocol: Protocol::Udp,
            port: 8080,
        }],
        endpoints: vec![Endpoint::ready_on(
            Line::SERVER4.parse().unwrap(),
            Some("node-b"),
        )],
    });
}

fn remove(c: &mut Cluster, i: u32) {
    c.remove_service(&ServiceKey::new("ns", format!("svc{i}")));
    c.remove_slice(&ServiceKey::new("ns", format!("svc{i}-1")));
}

fn cluster(n: u32) -> Cluster {
    let mut c = Cluster::new();
    c.node = Some(Node {
        name: "node-a".into(),
        zone: None,
        pod_cidrs: vec![],
        primary_ips: vec![Line::ROUTER4_C.parse().unwrap()],
    });
    for i in 0..n {
        add(&mut c, i);
    }
    c
}

fn changes(range: std::ops::Range<u32>) -> Changes {
    Changes {
        services: range
            .map(|i| ServiceKey::new("ns", format!("svc{i}")))
            .collect(),
        node: false,
    }
}

fn commit(ns: &Netns, ops: &[Op]) -> Result<(), NftError> {
    let ops = ops.to_vec();
    ns.run(move || Nft::open().expect("open").commit(&ops, None).map(|_| ()))
}

fn dump(ns: &Netns) -> Table {
    let t = TableRef::new(Family::Ip, ruleset::names::TABLE);
    ns.run(move || Nft::open().unwrap().dump_table(&t).unwrap())
        .expect("our table")
}

/// Every set with a size: (name, size, elements).
fn sized(t: &Table) -> Vec<(String, u32, usize)> {
    t.sets
        .iter()
        .filter_map(|s| s.size.map(|n| (s.name.clone(), n, s.elements.len())))
        .collect()
}

/// A UDP server on the server's 8080 answering every datagram, until dropped.
struct Echo(Arc<AtomicBool>, Option<std::thread::JoinHandle<()>>);

impl Echo {
    fn start(ns: &Netns) -> Echo {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = ns.spawn(move || {
            let sock = UdpSocket::bind((Line::SERVER4, 8080)).unwrap();
            sock.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            tx.send(()).unwrap();
            let mut buf = [0u8; 64];
            let deadline = Instant::now() + Duration::from_secs(300);
            while !s.load(Ordering::SeqCst) && Instant::now() < deadline {
                if let Ok((n, from)) = sock.recv_from(&mut buf) {
                    let _ = sock.send_to(&buf[..n], from);
                }
            }
        });
        rx.recv_timeout(Duration::from_secs(5)).unwrap();
        Echo(stop, Some(h))
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
        if let Some(h) = self.1.take() {
            let _ = h.join();
        }
    }
}

/// New UDP flows (a new socket, so a new conntrack entry that the nat chains see) from
/// the client to `dst`, one after the other, until stopped: (sent at, answered).
struct Prober {
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<Vec<(Instant, bool)>>>,
    handle: Option<std::thread::JoinHandle<()>>,
}

impl Prober {
    fn start(ns: &Netns, dst: SocketAddr) -> Prober {
        let stop = Arc::new(AtomicBool::new(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let (s, l) = (stop.clone(), log.clone());
        let handle = ns.spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(300);
            while !s.load(Ordering::SeqCst) && Instant::now() < deadline {
                let sock = UdpSocket::bind("0.0.0.0:0").unwrap();
                sock.set_read_timeout(Some(Duration::from_millis(300)))
                    .unwrap();
                let at = Instant::now();
                let ok = sock.send_to(b"probe", dst).is_ok() && {
                    let mut buf = [0u8; 16];
                    // An answer later than 300 ms (a busy machine) is waited for up to
                    // 2 s more: late is not lost.
                    matches!(sock.recv_from(&mut buf), Ok((5, _))) || {
                        let _ = sock.set_read_timeout(Some(Duration::from_secs(2)));
                        matches!(sock.recv_from(&mut buf), Ok((5, _)))
                    }
                };
                l.lock().unwrap().push((at, ok));
            }
        });
        Prober {
            stop,
            log,
            handle: Some(handle),
        }
    }

    fn stop(&mut self) -> Vec<(Instant, bool)> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
        self.log.lock().unwrap().clone()
    }
}

/// 3,000 services: the sets with an element per service (ClusterIPs, dispatch,
/// endpoint lists) are created with 6,144 (1.5 x 3,000, to three quarters of the next
/// power of two). 3,200 more come in one change: past the size, so the
/// batch declares each of them again (12,288) with the rules looking them up flushed and
/// added again. New UDP
/// flows to a service that is there all along, one after the other from before the
/// commit to after it, are every one answered: no moment without rules. The kernel
/// holds the new sizes afterwards.
///
/// Negative control (run by hand, fails): `SET_SIZES_CONTROL=split` commits the same
/// batch in two, the deletions first, 300 ms apart: the flows sent between them go
/// unanswered ("flows lost during the growth").
#[test]
fn a_set_grown_past_its_size_is_declared_again_in_one_batch_under_traffic() {
    require_root!();
    let split = std::env::var("SET_SIZES_CONTROL").as_deref() == Ok("split");
    let line = Line::new();
    let _echo = Echo::start(&line.server);
    let mut c = cluster(3000);
    let mut comp = Compiler::new(cfg(), &c);
    commit(&line.router, &ruleset::diff(&[], &comp.tables())).expect("cold start");
    comp.confirm();
    let before = sized(&dump(&line.router));
    for name in [
        "cluster-ips",
        "dispatch-cluster",
        "dests-cluster-1",
        "endpoints-cluster-1",
    ] {
        assert!(
            before.contains(&(name.to_string(), 6144, 3000)),
            "{name}: {before:?}"
        );
    }

    for i in 3000..6200 {
        add(&mut c, i);
    }
    let upd = comp.update(&c, &changes(3000..6200));
    let redeclared: Vec<&String> = upd
        .ops
        .iter()
        .filter_map(|o| match o {
            Op::DeleteSet { set, .. } => Some(set),
            _ => None,
        })
        .collect();
    assert!(redeclared.len() >= 4, "{redeclared:?}");
    let dst = SocketAddr::new(cluster_ip(17), 80);
    let mut prober = Prober::start(&line.client, dst);
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    if split {
        let cut = upd
            .ops
            .iter()
            .rposition(|o| matches!(o, Op::DeleteSet { .. }))
            .unwrap()
            + 1;
        commit(&line.router, &upd.ops[..cut]).expect("first half");
        std::thread::sleep(Duration::from_millis(300));
        commit(&line.router, &upd.ops[cut..]).expect("second half");
    } else {
        commit(&line.router, &upd.ops).expect("the growth batch");
    }
    let t1 = Instant::now();
    comp.confirm();
    std::thread::sleep(Duration::from_millis(300));
    let log = prober.stop();
    let during = log.iter().filter(|(at, _)| *at >= t0 && *at <= t1).count();
    let lost: Vec<Duration> = log
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(at, _)| at.saturating_duration_since(t0))
        .collect();
    eprintln!(
        "{} flows, {during} sent during the commit ({:?}), {} lost",
        log.len(),
        t1 - t0,
        lost.len()
    );
    assert!(log.len() > 100, "too few flows: {}", log.len());
    assert!(
        lost.is_empty(),
        "flows lost during the growth (at these times from the commit): {lost:?}"
    );
    let after = sized(&dump(&line.router));
    for name in [
        "cluster-ips",
        "dispatch-cluster",
        "dests-cluster-1",
        "endpoints-cluster-1",
    ] {
        assert!(
            after.contains(&(name.to_string(), 12_288, 6200)),
            "{name}: {after:?}"
        );
    }
}

/// The size is a hard cap: the kernel refuses an element past it (`ENFILE`). Our
/// batches never add past it: services added and removed in steps of 700 between 1,100
/// and 7,400 and back (each set growing twice), every batch committed and accepted, and
/// after each the kernel's sets hold at most their size, which is the size the compiler
/// has for them.
///
/// Negative control (run by hand, fails): `SET_SIZES_CONTROL=no-growth` commits the same
/// steps with every set's size pinned at its first one (the sets never declared again,
/// the checks after each step skipped): the kernel refuses the step to 3,200 services,
/// past 3,072 ("Too many open files in system", ENFILE).
#[test]
fn adding_past_a_size_is_refused_by_the_kernel_and_never_attempted() {
    require_root!();
    let no_growth = std::env::var("SET_SIZES_CONTROL").as_deref() == Ok("no-growth");
    let ns = Netns::new("sizes");
    // the cap itself
    let tr = TableRef::new(Family::Ip, "capped");
    let mut s = Set::set("s", vec![DataType::Ipv4Addr]);
    s.size = Some(4);
    let e = |i: u8| Element::key(vec![Value::Ipv4([198, 18, 0, i].into())]);
    let mut ops = nft_model::create_table_ops(&Table::new(Family::Ip, "capped"));
    ops.push(Op::AddSet {
        table: tr.clone(),
        set: s,
    });
    ops.push(Op::AddElements {
        table: tr.clone(),
        set: "s".into(),
        elements: (1..=4).map(e).collect(),
    });
    commit(&ns, &ops).expect("4 elements in a set of size 4");
    let past = commit(
        &ns,
        &[Op::AddElements {
            table: tr,
            set: "s".into(),
            elements: vec![e(5)],
        }],
    );
    match past {
        Err(NftError::Rejected(errs)) => {
            assert!(errs.iter().any(|x| x.errno == libc::ENFILE), "{errs:?}")
        }
        other => panic!("an element past the size: {other:?}"),
    }

    // our batches
    let mut c = cluster(1100);
    let mut comp = Compiler::new(cfg(), &c);
    let mut pinned = comp.tables();
    commit(&ns, &ruleset::diff(&[], &comp.tables())).expect("cold start");
    comp.confirm();
    let mut n = 1100u32;
    let mut steps: Vec<u32> = (1..=9).map(|k| 1100 + 700 * k).collect();
    steps.extend((0..9).rev().map(|k| 1100 + 700 * k));
    for to in steps {
        let range = if to > n { n..to } else { to..n };
        for i in range.clone() {
            if to > n {
                add(&mut c, i);
            } else {
                remove(&mut c, i);
            }
        }
        n = to;
        let upd = comp.update(&c, &changes(range));
        comp.confirm();
        let ops = if no_growth {
            // the same change with the sizes of the cold start
            let mut want = comp.tables();
            for (t, p) in want.iter_mut().zip(&pinned) {
                for s in &mut t.sets {
                    s.size = p.set(&s.name).and_then(|x| x.size);
                }
            }
            let ops = ruleset::diff(&pinned, &want);
            pinned = want;
            ops
        } else {
            upd.ops
        };
        commit(&ns, &ops).unwrap_or_else(|e| panic!("{n} services: {e}"));
        if no_growth {
            continue;
        }
        let t = dump(&ns);
        for (set, size, count) in sized(&t) {
            assert!(
                count <= size as usize,
                "{n} services: {set} holds {count} of {size}"
            );
            let want = comp.tables()[0].set(&set).and_then(|s| s.size);
            assert_eq!(want, Some(size), "{n} services: {set}");
        }
    }
}
