//! An accept error storm makes the accept loop back off. Its own test process: it lowers
//! the process's descriptor limit so that every `accept` fails with EMFILE while
//! connections wait in the listener's queue (the listener stays readable: without a
//! backoff the loop retries as fast as it can wake up).

use std::io::{Read, Seek, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use ops_server::server::{serve, Limits};

fn rlimit() -> libc::rlimit {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we pass.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    r
}

fn set_soft_limit(soft: u64) {
    let r = libc::rlimit {
        rlim_cur: soft,
        rlim_max: rlimit().rlim_max,
    };
    // SAFETY: setrlimit reads the struct we pass.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) }, 0);
}

/// The voluntary context switches in a thread's `/proc` status (opened before the
/// descriptors ran out: read again from the start).
fn wakeups(status: &mut std::fs::File) -> u64 {
    let mut text = String::new();
    status.rewind().unwrap();
    status.read_to_string(&mut text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("voluntary_ctxt_switches")
}

#[test]
fn an_accept_error_storm_backs_off() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    // Connections the kernel completes into the accept queue, before the server runs.
    let mut clients: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();

    // The server's thread builds its runtime (its descriptors) now, and starts serving
    // once the limit is lowered.
    let (ready_tx, ready_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let server = std::thread::Builder::new()
        .name("accept-loop".into())
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            // SAFETY: gettid has no preconditions.
            ready_tx.send(unsafe { libc::gettid() }).unwrap();
            go_rx.recv().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
                let limits = Limits {
                    max_connections: 16,
                    header_read_timeout: Duration::from_secs(5),
                    idle_timeout: Duration::from_secs(60),
                };
                let _ =
                    tokio::time::timeout(Duration::from_secs(20), serve(listener, router, limits))
                        .await;
            });
        })
        .unwrap();
    let tid = ready_rx.recv().unwrap();
    let mut status = std::fs::File::open(format!("/proc/self/task/{tid}/status")).unwrap();

    // No descriptor left: the lowest free number is the limit.
    let saved = rlimit().rlim_cur;
    let free = std::fs::File::open("/dev/null").unwrap();
    let lowest = {
        use std::os::fd::AsRawFd;
        free.as_raw_fd() as u64
    };
    drop(free);
    set_soft_limit(lowest);
    go_tx.send(()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let before = wakeups(&mut status);
    std::thread::sleep(Duration::from_secs(2));
    let storm = wakeups(&mut status) - before;
    set_soft_limit(saved);

    // The queued connections are served once descriptors are back (within the longest
    // backoff).
    let t = Instant::now();
    clients[0]
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    clients[0]
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut answer = String::new();
    let _ = clients[0].read_to_string(&mut answer);
    let served_after = t.elapsed();
    clients.clear();
    drop(server);

    eprintln!("accept loop wakeups in 2 s of EMFILE: {storm}; served {served_after:?} after the limit came back");
    assert!(
        storm <= 15,
        "the accept loop woke {storm} times in 2 s of accept errors"
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer:?}");
    assert!(
        served_after < Duration::from_millis(2500),
        "{served_after:?}"
    );
}
