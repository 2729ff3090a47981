//! Memory of the FlowIndex at 1,000,000 IPv4 UDP entries, measured with a counting
//! allocator (the bytes the index holds once filled), and the index's own estimate
//! checked against it. `cargo test -p ct-netlink --test index_memory -- --nocapture`
//! prints the figures (docs/conntrack.md, "The index").

use ct_netlink::{Flow, FlowIndex, IPPROTO_UDP};
use std::alloc::{GlobalAlloc, Layout, System};
use std::net::IpAddr;
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting the bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        // SAFETY: a pointer this allocator returned, with its layout.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

const N: u32 = 1_000_000;

/// The i-th flow: 1,000 service addresses x 4 ports, clients from 198.18.128.0/17,
/// every 4th DNAT'ed.
fn flow(i: u32) -> Flow {
    let svc = i % 1000;
    let client = 0xc612_8000u32 | (i / 4000);
    Flow {
        proto: IPPROTO_UDP,
        src: IpAddr::from(client.to_be_bytes()),
        dst: IpAddr::from((0xc612_0000u32 | svc).to_be_bytes()),
        sport: (1024 + (i / 1000) % 4000) as u16,
        dport: 53 + (i % 4) as u16,
        reply_src: IpAddr::from((0xc613_0000u32 | (i % 251)).to_be_bytes()),
        reply_sport: 5353,
        zone: 0,
        id: Some(i.wrapping_mul(2_654_435_761)),
    }
}

/// Fill an index with `order(k)` for k in 0..N; the bytes it holds.
fn measure(order: impl Fn(u32) -> u32) -> (usize, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    let mut ix = FlowIndex::new();
    for k in 0..N {
        ix.insert(flow(order(k)));
    }
    let held = (LIVE.load(Ordering::Relaxed) - before) as usize;
    assert_eq!(ix.len(), N as usize, "every flow is distinct");
    (held, ix.approx_bytes())
}

#[test]
fn an_ipv4_entry_costs_under_64_bytes_at_one_million() {
    // A dump returns entries in hash order: a permutation of 0..N (multiplication by
    // an odd constant modulo 2^20, keeping those below N).
    let hashed = |k: u32| {
        let mut x = k;
        loop {
            x = x.wrapping_mul(0x9e37_79b1) & 0xf_ffff;
            if x < N {
                return x;
            }
        }
    };
    // Check it is a permutation: distinct values (cheap for 1M with a bitmap).
    let mut seen = vec![false; N as usize];
    for k in 0..N {
        let v = hashed(k) as usize;
        assert!(!seen[v], "not a permutation at {k}");
        seen[v] = true;
    }
    drop(seen);
    let (v4, v6) = FlowIndex::entry_bytes();
    let runs = [
        ("hash order", measure(hashed)),
        ("ascending", measure(|k| k)),
    ];
    for (name, (held, est)) in runs {
        let per = held as f64 / f64::from(N);
        let est_per = est as f64 / f64::from(N);
        println!(
            "{name}: {held} bytes for {N} IPv4 entries = {per:.1} bytes/entry \
             (estimate {est_per:.1}; key+value {v4} bytes, IPv6 {v6})"
        );
        assert!(per <= 64.0, "{name}: {per:.1} bytes per entry");
        assert!(
            (est_per / per - 1.0).abs() <= 0.25,
            "{name}: estimate {est_per:.1} vs measured {per:.1}"
        );
    }
}
