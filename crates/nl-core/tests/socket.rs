//! The socket part against the running kernel: an rtnetlink link dump (read-only, any
//! namespace, no privilege needed), the sentinel, and the read loops under injected
//! faults.

use nl_core::{
    AckWait, Control, NlSocket, OnLoss, ReadError, ReadOpts, SockConfig, NETLINK_ROUTE, NLM_F_ACK,
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use std::time::Duration;

const RTM_GETLINK: u16 = 18;
const RTM_NEWLINK: u16 = 16;

fn sock() -> NlSocket {
    NlSocket::open(
        NETLINK_ROUTE,
        &SockConfig {
            rcvbuf: Some(1 << 20),
            recv_timeout: Some(Duration::from_secs(2)),
            ..SockConfig::default()
        },
    )
    .expect("open rtnetlink socket")
}

fn link_dump(w: &mut nl_core::NlaWriter, seq: u32) {
    let s = w.begin_msg(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, seq);
    w.buf.extend_from_slice(&[0u8; 16]); // ifinfomsg, AF_UNSPEC
    w.end_msg(s);
}

const DRAIN: ReadOpts = ReadOpts {
    on_loss: OnLoss::Drain,
    limit: Some(Duration::from_secs(5)),
};

const FAIL: ReadOpts = ReadOpts {
    on_loss: OnLoss::Fail,
    limit: None,
};

fn set_intr(buf: &mut [u8]) {
    if buf.len() >= 8 {
        let f = u16::from_ne_bytes([buf[6], buf[7]]) | NLM_F_DUMP_INTR;
        buf[6..8].copy_from_slice(&f.to_ne_bytes());
    }
}

#[test]
fn dump_reads_every_link_until_done() {
    let mut s = sock();
    let mut links = 0;
    let run = s
        .dump(3, &DRAIN, link_dump, |m| {
            assert_eq!(m.kind, RTM_NEWLINK);
            links += 1;
            Control::Continue
        })
        .unwrap();
    assert!(links >= 1, "at least loopback");
    assert_eq!((run.retries, run.incomplete), (0, false));
}

#[test]
fn interrupted_dump_is_retried_then_reported_incomplete() {
    let mut s = sock();
    // Every datagram says the dump was interrupted.
    s.inject_recv_fault(Some(Box::new(|_, buf: &mut Vec<u8>| {
        set_intr(buf);
        None
    })));
    let run = s.dump(2, &DRAIN, link_dump, |_| Control::Continue).unwrap();
    assert_eq!((run.retries, run.incomplete), (2, true));
    // Interrupted once only: the retry is clean.
    s.inject_recv_fault(Some(Box::new(|n, buf: &mut Vec<u8>| {
        if n == 1 {
            set_intr(buf);
        }
        None
    })));
    let run = s.dump(2, &DRAIN, link_dump, |_| Control::Continue).unwrap();
    assert_eq!((run.retries, run.incomplete), (1, false));
}

#[test]
fn lost_messages_fail_the_read_when_asked() {
    let mut s = sock();
    s.inject_recv_fault(Some(Box::new(|n, _: &mut Vec<u8>| {
        (n == 1).then(|| std::io::Error::from_raw_os_error(libc::ENOBUFS))
    })));
    let err = s
        .request(&FAIL, link_dump, |_| Control::Continue)
        .unwrap_err();
    assert!(matches!(err, ReadError::Overrun), "{err}");
    // (The failed dump is still running on that socket: a new one would get EBUSY.)
    let mut s = sock();
    let ans = s.request(&DRAIN, link_dump, |_| Control::Continue).unwrap();
    assert!(!ans.lost && ans.messages >= 1, "{ans:?}");
}

#[test]
fn a_malformed_datagram_fails_or_is_counted() {
    let mut s = sock();
    // Cut the first datagram in the middle of its last message.
    s.inject_recv_fault(Some(Box::new(|n, buf: &mut Vec<u8>| {
        let len = buf.len();
        if n == 1 && len > 20 {
            buf.truncate(len - 3);
        }
        None
    })));
    let err = s
        .request(&FAIL, link_dump, |_| Control::Continue)
        .unwrap_err();
    assert!(matches!(err, ReadError::Malformed), "{err}");
}

#[test]
fn sentinel_marks_the_end_of_the_answers() {
    let mut s = sock();
    let base = s.reserve_seqs(3);
    let sentinel = base + 2;
    // Two GETLINK requests: ifindex 1 (loopback, answered by the object) and an index
    // that does not exist (answered ENODEV).
    let mut w = nl_core::NlaWriter::new();
    for (k, index) in [1i32, 1_000_000].into_iter().enumerate() {
        let st = w.begin_msg(RTM_GETLINK, NLM_F_REQUEST | NLM_F_ACK, base + k as u32);
        let mut ifi = [0u8; 16];
        ifi[4..8].copy_from_slice(&index.to_ne_bytes());
        w.buf.extend_from_slice(&ifi);
        w.end_msg(st);
    }
    nl_core::msg::push_sentinel(&mut w.buf, sentinel);
    s.send(&w.buf).unwrap();
    let mut errs = Vec::new();
    let round = s
        .collect_acks(
            AckWait {
                base,
                n: 2,
                sentinel,
                sentinel_sent: true,
                expect_all: false,
                limit: Duration::from_secs(5),
            },
            |k, e| errs.push((k, e)),
        )
        .unwrap();
    assert!(round.saw_sentinel);
    assert!(errs.contains(&(1, Some(libc::ENODEV))), "{errs:?}");
    assert!(round.answered[1]);
}
