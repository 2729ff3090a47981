//! Another nftables writer on the node, as Docker, firewalld, a CNI or a host agent are:
//! a real `nft -i` in the node's namespace, adding one element to a set of its own table
//! (`inet nlp-neighbour`) `per_second` times a second, each line its own transaction.
//! Stopped (and its process reaped) when dropped.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::Netns;

pub struct Neighbour {
    child: Child,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    writer: Option<JoinHandle<()>>,
}

impl Neighbour {
    pub fn start(ns: &Netns, per_second: u32) -> Neighbour {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns.name(), "nft", "-i"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn nft -i");
        let mut stdin = child.stdin.take().expect("nft's stdin");
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (st, n) = (stop.clone(), sent.clone());
        let period = Duration::from_secs_f64(1.0 / f64::from(per_second.max(1)));
        let writer = std::thread::spawn(move || {
            let setup = "add table inet nlp-neighbour\n\
                         add set inet nlp-neighbour seen { type ipv4_addr; size 1048576; }\n";
            if stdin.write_all(setup.as_bytes()).is_err() {
                return;
            }
            let start = Instant::now();
            let mut k: u64 = 0;
            // bounded: at most an hour of commits
            while !st.load(Ordering::Relaxed) && k < u64::from(per_second) * 3600 {
                let a = 0xC613_0000u32 + (k % 65_536) as u32;
                let line = format!(
                    "add element inet nlp-neighbour seen {{ {} }}\n",
                    std::net::Ipv4Addr::from(a)
                );
                if stdin.write_all(line.as_bytes()).is_err() || stdin.flush().is_err() {
                    return;
                }
                k += 1;
                n.store(k, Ordering::Relaxed);
                let due = start + period * k as u32;
                if let Some(d) = due.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
            }
        });
        Neighbour {
            child,
            stop,
            sent,
            writer: Some(writer),
        }
    }

    /// Lines (transactions) sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
