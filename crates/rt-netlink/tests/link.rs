//! Links by name against the kernel, in a namespace of the test's own: only a link of
//! the asked name **and** kind is deleted. kube-proxy's `kube-ipvs0` is a dummy link; this
//! kernel may lack the dummy driver (then that case is reported as not tested), so the
//! deletion itself is also exercised with a bridge, asked for as kind `bridge`.

use netns_tests::{require_root, Netns};
use rt_netlink::{delete_link_of_kind, link_by_name, LinkRemoval};

fn has_link(ns: &Netns, name: &str) -> bool {
    ns.exec("ip", &["link", "show", "dev", name])
        .status
        .success()
}

#[test]
fn only_a_link_of_the_asked_name_and_kind_is_deleted() {
    require_root!();
    let ns = Netns::new("links");
    ns.ip(&["link", "add", "kube-ipvs0", "type", "bridge"]);
    // kube-router's bridge and a foreign link stay whatever happens
    ns.ip(&["link", "add", "kube-bridge", "type", "bridge"]);
    let before = ns.ip(&["-d", "link", "show", "dev", "kube-bridge"]);

    let l = ns.run(|| link_by_name("kube-ipvs0").unwrap()).unwrap();
    assert_eq!(
        (l.name.as_str(), l.kind.as_deref()),
        ("kube-ipvs0", Some("bridge"))
    );
    assert_eq!(ns.run(|| link_by_name("no-such-link").unwrap()), None);

    // a kube-ipvs0 that is not a dummy is not kube-proxy's: kept
    let r = ns.run(|| delete_link_of_kind("kube-ipvs0", "dummy").unwrap());
    assert!(matches!(r, LinkRemoval::OtherKind(_)), "{r:?}");
    assert!(has_link(&ns, "kube-ipvs0"));

    // the delete path itself (RTM_DELLINK), with the kind it has
    let r = ns.run(|| delete_link_of_kind("kube-ipvs0", "bridge").unwrap());
    assert!(matches!(r, LinkRemoval::Deleted(_)), "{r:?}");
    assert!(!has_link(&ns, "kube-ipvs0"));
    assert_eq!(
        ns.run(|| delete_link_of_kind("kube-ipvs0", "dummy").unwrap()),
        LinkRemoval::Absent
    );
    assert_eq!(ns.ip(&["-d", "link", "show", "dev", "kube-bridge"]), before);

    // a real dummy, where the kernel has the driver
    if ns
        .exec("ip", &["link", "add", "kube-ipvs0", "type", "dummy"])
        .status
        .success()
    {
        let r = ns.run(|| delete_link_of_kind("kube-ipvs0", "dummy").unwrap());
        assert!(matches!(r, LinkRemoval::Deleted(_)), "{r:?}");
        assert!(!has_link(&ns, "kube-ipvs0"));
    } else {
        eprintln!("NOT TESTED: deleting a dummy link (this kernel has no dummy driver)");
    }
}
