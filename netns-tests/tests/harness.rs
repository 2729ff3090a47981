//! The harness itself: namespaces are isolated, connected and removed.

use netns_tests::{require_root, wait_until, Line, Netns};
use std::net::UdpSocket;
use std::time::Duration;

#[test]
fn namespaces_are_removed_on_drop_and_on_panic() {
    require_root!();
    let name = {
        let ns = Netns::new("drop");
        ns.name().to_string()
    };
    assert!(!std::path::Path::new(&format!("/run/netns/{name}")).exists());
    let mut leaked = String::new();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let ns = Netns::new("panic");
        leaked = ns.name().to_string();
        panic!("boom");
    }));
    assert!(r.is_err());
    assert!(!std::path::Path::new(&format!("/run/netns/{leaked}")).exists());
}

#[test]
fn line_forwards_udp_both_families() {
    require_root!();
    let line = Line::new();
    for (srv, cli_bind) in [
        (Line::SERVER4, "198.18.1.2:0"),
        (Line::SERVER6, "[2001:db8:1::2]:0"),
    ] {
        let target = if srv.contains(':') {
            format!("[{srv}]:4000")
        } else {
            format!("{srv}:4000")
        };
        let t2 = target.clone();
        let rx = line
            .server
            .run(move || UdpSocket::bind(&t2).expect("bind server"));
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let tx = line
            .client
            .run(|| UdpSocket::bind(cli_bind).expect("bind client"));
        let mut buf = [0u8; 16];
        let mut got = false;
        assert!(wait_until(Duration::from_secs(5), || {
            tx.send_to(b"ping", &target).unwrap();
            got = rx.recv_from(&mut buf).is_ok();
            got
        }));
        assert_eq!(&buf[..4], b"ping");
    }
}

#[test]
fn kernel_versions_parse() {
    use netns_tests::kernel_version;
    assert_eq!(kernel_version("6.1.0-57-cloud-amd64"), Some((6, 1)));
    assert_eq!(kernel_version("6.12.118+deb13-cloud-amd64"), Some((6, 12)));
    assert_eq!(kernel_version("6.18.44-fc-v669"), Some((6, 18)));
    assert_eq!(kernel_version("5.10"), Some((5, 10)));
    assert_eq!(kernel_version("6"), None);
    assert_eq!(kernel_version("linux"), None);
    assert!(kernel_version(&netns_tests::kernel_release()).is_some());
}

#[test]
fn conntrack_strategy_expected_per_kernel() {
    use ct_netlink::Strategy;
    use netns_tests::ct::expected_strategy;
    assert_eq!(expected_strategy((6, 18)), Strategy::FilteredFlush);
    assert_eq!(expected_strategy((6, 12)), Strategy::FilteredFlush);
    assert_eq!(expected_strategy((6, 11)), Strategy::FilteredDump);
    assert_eq!(expected_strategy((6, 1)), Strategy::FilteredDump);
    assert_eq!(expected_strategy((5, 8)), Strategy::FilteredDump);
    assert_eq!(expected_strategy((5, 4)), Strategy::FullDump);
}
