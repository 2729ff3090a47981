//! `gen-manifest N M [NODE]`: print a JSON `kind: List` of a node, N ClusterIP services
//! and N EndpointSlices of M endpoints (see `integration::scale`), for measuring the
//! daemon at scale:
//!
//! ```sh
//! cargo run --release -p integration --bin gen-manifest 10000 10 > /tmp/10k.json
//! /usr/bin/time -v kube-nlproxy --manifests /tmp/10k.json --hostname-override node-a --dry-run --once
//! ```

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: u32| {
        args.get(i)
            .map(|s| s.parse().unwrap_or_else(|_| panic!("not a number: {s}")))
            .unwrap_or(d)
    };
    let (n, m) = (num(1, 10_000), num(2, 10));
    let node = args.get(3).map(String::as_str).unwrap_or("node-a");
    println!("{}", integration::scale::scale_manifest(node, n, m));
}
