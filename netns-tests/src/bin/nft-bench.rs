//! Benchmark: load a synthetic ruleset of K chains, R rules and E map elements through
//! our transport and, as the peer measured in the same run, through `nft -f` of our own
//! rendering of the same ruleset. Each run uses a fresh network namespace.
//!
//! Usage: nft-bench [--chains K] [--rules R] [--elements E] [--runs N]

use netns_tests::Netns;
use nft_model::build::{self, KeyField};
use nft_model::*;
use nft_netlink::Nft;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

fn synthetic(k: u32, r: u32, e: u32) -> Table {
    let mut t = Table::new(Family::Ip, "kube-nlproxy").with_comment("nft-bench synthetic ruleset");
    let mut map = Set::map(
        "service-ips",
        vec![
            DataType::Ipv4Addr,
            DataType::InetProto,
            DataType::InetService,
        ],
        SetData::Verdict,
    );
    let dispatch = Chain::base(
        "nat-prerouting",
        BaseHook {
            chain_type: ChainType::Nat,
            hook: Hook::Prerouting,
            priority: -100,
            policy: Policy::Accept,
        },
    )
    .with_rules(vec![Rule::new(build::vmap_lookup(
        Family::Ip,
        &[KeyField::Daddr, KeyField::L4proto, KeyField::Dport],
        "service-ips",
    ))]);
    let mut chains: Vec<Chain> = (0..k)
        .map(|i| Chain::regular(format!("svc-{i:05}")))
        .collect();
    for i in 0..r {
        let c = (i % k.max(1)) as usize;
        let addr = Value::Ipv4(Ipv4Addr::from(0xc613_0000 + i));
        let exprs = [
            build::l4proto_eq(6),
            build::addr_cmp(Family::Ip, true, CmpOp::Eq, &addr),
            vec![Expr::Counter, Expr::Verdict(Verdict::Accept)],
        ]
        .concat();
        chains[c].rules.push(Rule::new(exprs));
    }
    for i in 0..e {
        map.elements.push(Element::map(
            vec![
                Value::Ipv4(Ipv4Addr::from(0xc612_0000 + i / 4)),
                Value::Proto(6),
                Value::Port(80 + (i % 4) as u16),
            ],
            ElemData::Verdict(Verdict::Goto(format!("svc-{:05}", i % k.max(1)))),
        ));
    }
    t.sets.push(map);
    t.chains = std::iter::once(dispatch).chain(chains).collect();
    t
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn arg(args: &[String], name: &str, default: u32) -> u32 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.replace(['_', ','], "")
                .parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (k, r, e) = (
        arg(&args, "--chains", 1000),
        arg(&args, "--rules", 2000),
        arg(&args, "--elements", 10_000),
    );
    let runs = arg(&args, "--runs", 3).max(1);
    let table = synthetic(k, r, e);
    let t0 = Instant::now();
    let ops = create_table_ops(&table);
    let batch = nft_wire::encode_batch(&ops, 1, None).expect("encodes");
    let encode = t0.elapsed();
    let text = render::table(&table);
    let file = std::env::temp_dir().join(format!("nft-bench-{}.nft", std::process::id()));
    std::fs::write(&file, &text).expect("write nft file");
    println!(
        "ruleset: {k} chains, {r} rules, {e} elements -> {} ops, {} netlink messages, {} batch bytes, encoded in {encode:?}; nft text {} bytes",
        ops.len(),
        batch.seqs.len(),
        batch.bytes.len(),
        text.len()
    );
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for run in 0..runs {
        let ns = Netns::new("bench");
        let d = ns.run(|| {
            let start = Instant::now();
            let mut nft = Nft::open().expect("open netlink");
            nft.commit(&create_table_ops(&table), None).expect("commit");
            start.elapsed()
        });
        // sanity: the kernel holds what we sent
        let rules = ns.exec_ok(
            "nft",
            &["-a", "list", "chain", "ip", "kube-nlproxy", "svc-00000"],
        );
        assert!(rules.contains("accept") || r == 0, "ruleset not loaded");
        drop(ns);
        let ns = Netns::new("bench");
        let start = Instant::now();
        let out = ns.exec("nft", &["-f", file.to_str().expect("utf-8 path")]);
        let p = start.elapsed();
        assert!(
            out.status.success(),
            "nft -f failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(ns);
        println!("run {run}: ours {d:?}, nft -f {p:?}");
        ours.push(d);
        peer.push(p);
    }
    let _ = std::fs::remove_file(&file);
    let (o, p) = (median(ours), median(peer));
    println!(
        "median over {runs} runs: ours {:.3} s, nft -f {:.3} s, ratio nft/ours = {:.2}x",
        o.as_secs_f64(),
        p.as_secs_f64(),
        p.as_secs_f64() / o.as_secs_f64()
    );
}
