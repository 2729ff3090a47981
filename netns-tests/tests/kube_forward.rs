//! What we write outside our tables (iptables mode): upstream's `KUBE-FORWARD` chain and
//! its jump from `FORWARD` in the iptables-nft `filter` tables (`nft_netlink::forward`).
//! Oracle: `iptables-nft-restore` of upstream's own lines; what we write must read back
//! as the same kernel objects and `iptables-nft -S` must print upstream's lines. Docker's
//! rules and its `FORWARD` policy DROP stay as they are; `--cleanup`'s batch removes
//! only the chain and the jump. Root only; every host is a namespace of the test's.

use netns_tests::host_firewalls::*;
use netns_tests::{require_root, Netns};
use nft_model::Family;
use nft_netlink::forward::{kube_forward_rules, plan_ensure, FilterScan, ForwardConfig};
use nft_netlink::Nft;

const CFG: ForwardConfig = ForwardConfig {
    mark: 0x4000,
    drop_invalid: true,
};
const FAMILIES: [Family; 2] = [Family::Ip, Family::Ip6];

fn scan(ns: &Netns, f: Family) -> FilterScan {
    ns.run(move || Nft::open().unwrap().scan_filter_forward(f).unwrap())
}

fn ensure(ns: &Netns, cfg: ForwardConfig) -> usize {
    let before = generation(ns);
    let done = ns.run(move || {
        Nft::open()
            .unwrap()
            .ensure_kube_forward(&FAMILIES, cfg)
            .expect("ensure commits")
    });
    // each committed batch was guarded by the generation before it (what the engine
    // takes into its trust)
    let mut g = before;
    for guard in &done.guards {
        assert_eq!(*guard, g, "{done:?}");
        g = sync_engine::next_generation(g);
    }
    assert_eq!(generation(ns), g, "{done:?}");
    done.ops
}

fn generation(ns: &Netns) -> u32 {
    ns.run(|| Nft::open().unwrap().generation().unwrap())
}

#[test]
fn upstreams_chain_written_by_iptables_nft_reads_back_as_ours() {
    require_root!();
    let ns = Netns::new("kfwd-oracle");
    restore(
        &ns,
        "iptables-nft-restore",
        &["--noflush"],
        UPSTREAM_KUBE_FORWARD,
    );
    restore(
        &ns,
        "ip6tables-nft-restore",
        &["--noflush"],
        UPSTREAM_KUBE_FORWARD,
    );
    for f in FAMILIES {
        let s = scan(&ns, f);
        let ours: Vec<_> = kube_forward_rules(CFG).into_iter().map(Some).collect();
        assert_eq!(
            s.kube_forward.as_ref(),
            Some(&ours),
            "{f:?}: iptables-nft's encoding of upstream's KUBE-FORWARD differs from ours"
        );
        assert_eq!(s.jumps.len(), 1, "{f:?}: upstream's jump is ours: {s:?}");
        assert_eq!(plan_ensure(f, &s, CFG), vec![], "{f:?}: adopted as it is");
    }
    // nothing to write: no batch is sent at all
    let before = generation(&ns);
    assert_eq!(ensure(&ns, CFG), 0);
    assert_eq!(
        generation(&ns),
        before,
        "no commit when everything is in place"
    );
}

#[test]
fn on_an_empty_host_iptables_nft_shows_upstreams_lines() {
    require_root!();
    let ns = Netns::new("kfwd-empty");
    assert!(ensure(&ns, CFG) > 0);
    for program in ["iptables-nft", "ip6tables-nft"] {
        let mut want = vec![
            "-P INPUT ACCEPT".to_string(),
            "-P FORWARD ACCEPT".to_string(),
            "-P OUTPUT ACCEPT".to_string(),
        ];
        want.extend(UPSTREAM_KUBE_FORWARD_S.iter().map(|s| s.to_string()));
        assert_eq!(rules_s(&ns, program), want, "{program} -S");
    }
    let listed = ns.exec_ok("nft", &["list", "table", "ip", "filter"]);
    assert!(
        listed.contains("type filter hook forward priority filter; policy accept;"),
        "created as iptables-nft creates FORWARD: {listed}"
    );
    // tcp_be_liberal set later: the INVALID rule goes, in place
    ensure(
        &ns,
        ForwardConfig {
            drop_invalid: false,
            ..CFG
        },
    );
    let s = rules_s(&ns, "iptables-nft");
    assert!(
        !s.iter().any(|l| l.contains("INVALID")),
        "no INVALID drop with nf_conntrack_tcp_be_liberal: {s:?}"
    );
    assert_eq!(
        s.iter().filter(|l| l.contains("KUBE-FORWARD")).count(),
        4,
        "{s:?}"
    );
}

#[test]
fn on_a_docker_host_only_our_chain_and_jump_are_added_and_cleanup_removes_only_them() {
    require_root!();
    let ns = Netns::new("kfwd-docker");
    load_docker(&ns);
    let before4 = rules_s(&ns, "iptables-nft");
    let before6 = rules_s(&ns, "ip6tables-nft");
    assert!(
        before4.contains(&"-P FORWARD DROP".to_string()),
        "{before4:?}"
    );

    assert!(ensure(&ns, CFG) > 0);
    for (program, before) in [("iptables-nft", &before4), ("ip6tables-nft", &before6)] {
        let after = rules_s(&ns, program);
        let theirs: Vec<String> = after
            .iter()
            .filter(|l| !l.contains("KUBE-FORWARD"))
            .cloned()
            .collect();
        assert_eq!(
            &theirs, before,
            "{program}: Docker's rules and policy unchanged"
        );
        let ours: Vec<&str> = after
            .iter()
            .filter(|l| l.contains("KUBE-FORWARD"))
            .map(String::as_str)
            .collect();
        assert_eq!(ours, UPSTREAM_KUBE_FORWARD_S, "{program}");
        let forward: Vec<&String> = after
            .iter()
            .filter(|l| l.starts_with("-A FORWARD"))
            .collect();
        assert_eq!(
            forward[0], UPSTREAM_KUBE_FORWARD_S[1],
            "{program}: our jump first, as upstream's iptables -I"
        );
    }
    // steady state: nothing sent
    let g = generation(&ns);
    assert_eq!(ensure(&ns, CFG), 0);
    assert_eq!(generation(&ns), g);

    // Docker re-inserts its DOCKER-USER jump at the top (as it does when a network is
    // created): our jump is found by its form wherever it is, not re-added
    ns.exec_ok("iptables-nft", &["-D", "FORWARD", "-j", "DOCKER-USER"]);
    ns.exec_ok("iptables-nft", &["-I", "FORWARD", "-j", "DOCKER-USER"]);
    assert_eq!(ensure(&ns, CFG), 0);

    // --cleanup's batch: the chain and the jump go, Docker's rules stay as they were
    ns.run(|| {
        Nft::open()
            .unwrap()
            .remove_kube_proxy_leftovers(&[], &[])
            .expect("cleanup commits")
    });
    let mut after4 = rules_s(&ns, "iptables-nft");
    // the DOCKER-USER jump was moved to the top above; it was first before too
    after4.sort();
    let mut b4 = before4.clone();
    b4.sort();
    assert_eq!(after4, b4, "cleanup leaves Docker's rules intact");
    assert_eq!(rules_s(&ns, "ip6tables-nft"), before6);
}

/// Our write to the filter tables does not overflow the tamper watcher's socket (every
/// notification of the batch can be built and read).
#[test]
fn the_tamper_watcher_reads_the_notifications_of_our_write() {
    require_root!();
    let ns = Netns::new("kfwd-watch");
    load_docker(&ns);
    let poll = ns.run(|| {
        let mut w = nft_netlink::watch::Watcher::open(vec![nft_model::TableRef::new(
            Family::Ip,
            "kube-nlproxy",
        )])
        .unwrap();
        Nft::open()
            .unwrap()
            .ensure_kube_forward(&FAMILIES, CFG)
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        w.poll()
    });
    assert!(!poll.overflow, "{poll:?}");
}
