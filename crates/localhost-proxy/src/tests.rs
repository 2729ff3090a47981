use super::*;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicUsize, Ordering};

fn np(port: u16, eps: &[SocketAddr], affinity: Option<u32>) -> LocalhostNodePort {
    LocalhostNodePort {
        family: IpFamily::V4,
        node_port: port,
        service_port: "ns/svc:p".into(),
        endpoints: eps.to_vec(),
        affinity_timeout: affinity,
    }
}

fn ep(n: u16) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, 1], n))
}

#[test]
fn affinity_pins_one_endpoint_for_its_window_renewed_by_each_use() {
    let mut p = Pick::new(&np(1, &[ep(1), ep(2), ep(3)], Some(10)));
    let t = Instant::now();
    assert_eq!(p.pick(t, |_| 1), Some(ep(2)));
    // within the window: the pin wins over the random pick, and is renewed
    assert_eq!(p.pick(t + Duration::from_secs(9), |_| 0), Some(ep(2)));
    assert_eq!(p.pick(t + Duration::from_secs(18), |_| 0), Some(ep(2)));
    // unused for longer than the window: a new pick
    assert_eq!(p.pick(t + Duration::from_secs(29), |_| 0), Some(ep(1)));
    // the pinned endpoint gone: a new pick at once
    p.update(&np(1, &[ep(3)], Some(10)));
    assert_eq!(p.pick(t + Duration::from_secs(30), |_| 0), Some(ep(3)));
    // no affinity: every connection picks
    let mut p = Pick::new(&np(1, &[ep(1), ep(2)], None));
    assert_eq!(p.pick(t, |_| 0), Some(ep(1)));
    assert_eq!(p.pick(t, |_| 1), Some(ep(2)));
    assert_eq!(Pick::new(&np(1, &[], None)).pick(t, |_| 0), None);
}

#[derive(Default)]
struct Counts {
    listeners: AtomicUsize,
    failed: AtomicUsize,
}

impl LocalhostObserver for Counts {
    fn listeners(&self, _f: IpFamily, n: usize) {
        self.listeners.store(n, Ordering::SeqCst);
    }
    fn listener_failed(&self, _f: IpFamily) {
        self.failed.fetch_add(1, Ordering::SeqCst);
    }
}

/// An echo server on loopback that prefixes its answers with `tag`.
fn echo(tag: &'static str) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            std::thread::spawn(move || {
                let mut c = c;
                let mut buf = [0u8; 64];
                if let Ok(n) = c.read(&mut buf) {
                    let _ = c.write_all(tag.as_bytes());
                    let _ = c.write_all(&buf[..n]);
                }
            });
        }
    });
    a
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn ask(port: u16) -> std::io::Result<String> {
    let mut c = std::net::TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.write_all(b"hi")?;
    let mut s = String::new();
    c.read_to_string(&mut s)?;
    Ok(s)
}

#[test]
fn listeners_follow_the_node_ports_and_their_endpoints() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _g = rt.enter();
    let counts = Arc::new(Counts::default());
    let mut p = LocalhostProxy::new(IpFamily::V4, counts.clone());
    let (a, b) = (echo("a:"), echo("b:"));
    let port = free_port();
    p.sync([&np(port, &[a], None)]);
    assert_eq!(p.ports(), vec![port]);
    assert_eq!(counts.listeners.load(Ordering::SeqCst), 1);
    assert_eq!(ask(port).unwrap(), "a:hi");
    // new endpoints, same listener
    p.sync([&np(port, &[b], None)]);
    assert_eq!(ask(port).unwrap(), "b:hi");
    // another family's entry and an entry without endpoints are not served
    let mut v6 = np(port, &[a], None);
    v6.family = IpFamily::V6;
    p.sync([&v6, &np(port + 1, &[], None)]);
    assert!(p.ports().is_empty());
    assert_eq!(counts.listeners.load(Ordering::SeqCst), 0);
    let refused = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        ask(port).is_err()
    });
    assert!(refused, "the listener of a removed NodePort still accepts");
}

#[test]
fn a_port_taken_by_another_program_is_counted_and_tried_again() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _g = rt.enter();
    let counts = Arc::new(Counts::default());
    let mut p = LocalhostProxy::new(IpFamily::V4, counts.clone());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let want = np(port, &[echo("a:")], None);
    p.sync([&want]);
    assert!(p.ports().is_empty());
    assert_eq!(counts.failed.load(Ordering::SeqCst), 1);
    drop(taken);
    p.sync([&want]);
    assert_eq!(p.ports(), vec![port]);
    assert_eq!(ask(port).unwrap(), "a:hi");
}

#[test]
fn an_endpoint_that_refuses_closes_the_client_connection() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _g = rt.enter();
    let mut p = LocalhostProxy::new(IpFamily::V4, Arc::new(Counts::default()));
    let dead = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let port = free_port();
    p.sync([&np(port, &[dead], None)]);
    // accepted, then closed without an answer
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut s = String::new();
    assert_eq!(c.read_to_string(&mut s).unwrap(), 0);
}

#[test]
fn shutdown_closes_connections_in_flight() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _g = rt.enter();
    let mut p = LocalhostProxy::new(IpFamily::V4, Arc::new(Counts::default()));
    // an endpoint that accepts and never answers
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free_port();
    p.sync([&np(port, &[silent.local_addr().unwrap()], None)]);
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (_held, _) = silent.accept().unwrap();
    p.shutdown();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut buf = [0u8; 1];
    let r = c.read(&mut buf);
    assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    if let Err(e) = r {
        assert!(
            !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        );
    }
}
