//! The one netlink socket: `netlink-sys` in the calling thread's network namespace,
//! forced buffers, a receive timeout, sequence numbers, and the read loops every
//! netlink user shares.

use crate::consts::*;
use crate::msg::{self, NlMsg, NlMsgIter};
use netlink_sys::{Socket, SocketAddr};
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// How a socket is set up.
#[derive(Debug, Clone)]
pub struct SockConfig {
    /// Receive buffer, forced with `SO_RCVBUFFORCE` (CAP_NET_ADMIN), else asked with
    /// `SO_RCVBUF` (capped by `net.core.rmem_max`).
    pub rcvbuf: Option<usize>,
    /// Send buffer, the same way (`SO_SNDBUFFORCE`, else `SO_SNDBUF`).
    pub sndbuf: Option<usize>,
    /// `SO_RCVTIMEO`: a read that gets nothing for this long fails with a timeout.
    pub recv_timeout: Option<Duration>,
    /// Multicast groups to join (event sockets).
    pub groups: Vec<u32>,
    /// Reads return `WouldBlock` instead of waiting (event sockets polled by a loop).
    pub nonblocking: bool,
    /// Connect to the kernel (sockets that send requests).
    pub connect: bool,
    /// The first sequence number (never 0).
    pub first_seq: u32,
    /// Capacity of the receive buffer: the largest datagram read whole.
    pub recv_buf_len: usize,
    /// Whether a failure to size the buffers is an error (else it is ignored: best
    /// effort, as for event sockets).
    pub strict_buffers: bool,
    /// Ask for extended acknowledgements (`NETLINK_EXT_ACK`: the kernel names the
    /// attribute it refused, [`NlMsg::error_offset`]) and capped error messages
    /// (`NETLINK_CAP_ACK`: an error does not echo the whole request). Best effort: a
    /// kernel without them answers as before.
    pub ext_ack: bool,
}

impl Default for SockConfig {
    fn default() -> Self {
        SockConfig {
            rcvbuf: None,
            sndbuf: None,
            recv_timeout: None,
            groups: Vec::new(),
            nonblocking: false,
            connect: true,
            first_seq: 1,
            recv_buf_len: 256 << 10,
            strict_buffers: true,
            ext_ack: false,
        }
    }
}

/// Setting up a socket failed: `op` names the step.
#[derive(Debug, thiserror::Error)]
#[error("netlink socket {op} failed: {source}")]
pub struct SockError {
    pub op: &'static str,
    pub source: io::Error,
}

/// A fault injected after each successful read (tests): gets the read's number (from 1)
/// and the datagram, may change the bytes (set `NLM_F_DUMP_INTR`, corrupt a message)
/// or return an error that replaces the read (e.g. `ENOBUFS`: the datagram is lost, as
/// when the kernel drops messages on a full buffer).
pub type RecvFault = Box<dyn FnMut(u64, &mut Vec<u8>) -> Option<io::Error> + Send>;

/// A netlink socket with its receive buffer and sequence numbers.
pub struct NlSocket {
    sock: Socket,
    seq: u32,
    rbuf: Vec<u8>,
    len: usize,
    recv_buf_len: usize,
    fault: Option<RecvFault>,
    reads: u64,
}

impl AsRawFd for NlSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.sock.as_raw_fd()
    }
}

fn setsockopt_int(fd: i32, name: libc::c_int, value: usize) -> io::Result<()> {
    let v = value.min(i32::MAX as usize / 2) as libc::c_int;
    // SAFETY: valid fd, pointer to a live c_int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            name,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Set a buffer size: forced when permitted, else the ordinary option.
fn set_buf(fd: i32, force: libc::c_int, plain: libc::c_int, value: usize) -> io::Result<()> {
    setsockopt_int(fd, force, value).or_else(|_| setsockopt_int(fd, plain, value))
}

/// Whether a read failed because the kernel dropped messages (`ENOBUFS`).
pub fn is_enobufs(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENOBUFS)
}

/// Whether a read timed out (`SO_RCVTIMEO`) or would block (non-blocking socket).
pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

impl NlSocket {
    /// Open a socket of netlink `protocol` in the calling thread's network namespace.
    pub fn open(protocol: isize, cfg: &SockConfig) -> Result<NlSocket, SockError> {
        let err = |op| move |source| SockError { op, source };
        let mut sock = Socket::new(protocol).map_err(err("create"))?;
        sock.bind_auto().map_err(err("bind"))?;
        if cfg.connect {
            sock.connect(&SocketAddr::new(0, 0))
                .map_err(err("connect"))?;
        }
        for &g in &cfg.groups {
            sock.add_membership(g).map_err(err("join group"))?;
        }
        let fd = sock.as_raw_fd();
        if let Some(n) = cfg.rcvbuf {
            let r = set_buf(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, n);
            if cfg.strict_buffers {
                r.map_err(err("set SO_RCVBUF"))?;
            }
        }
        if let Some(n) = cfg.sndbuf {
            let r = set_buf(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, n);
            if cfg.strict_buffers {
                r.map_err(err("set SO_SNDBUF"))?;
            }
        }
        if let Some(t) = cfg.recv_timeout {
            let tv = libc::timeval {
                tv_sec: t.as_secs() as libc::time_t,
                tv_usec: t.subsec_micros() as libc::suseconds_t,
            };
            // SAFETY: valid fd, pointer to a live timeval of the stated size.
            let rc = unsafe {
                libc::setsockopt(
                    fd,
                    libc::SOL_SOCKET,
                    libc::SO_RCVTIMEO,
                    &tv as *const libc::timeval as *const libc::c_void,
                    std::mem::size_of::<libc::timeval>() as libc::socklen_t,
                )
            };
            if rc != 0 {
                return Err(err("set SO_RCVTIMEO")(io::Error::last_os_error()));
            }
        }
        if cfg.ext_ack {
            for opt in [NETLINK_EXT_ACK, NETLINK_CAP_ACK] {
                let one: libc::c_int = 1;
                // SAFETY: valid fd, pointer to a live c_int of the stated size.
                unsafe {
                    libc::setsockopt(
                        fd,
                        SOL_NETLINK,
                        opt,
                        &one as *const libc::c_int as *const libc::c_void,
                        std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                    )
                };
            }
        }
        if cfg.nonblocking {
            sock.set_non_blocking(true)
                .map_err(err("set non-blocking"))?;
        }
        Ok(NlSocket {
            sock,
            seq: cfg.first_seq.max(1),
            rbuf: Vec::with_capacity(cfg.recv_buf_len),
            len: 0,
            recv_buf_len: cfg.recv_buf_len,
            fault: None,
            reads: 0,
        })
    }

    /// Install a fault injected into every following read (tests).
    pub fn inject_recv_fault(&mut self, f: Option<RecvFault>) {
        self.fault = f;
        self.reads = 0;
    }

    /// The next sequence number.
    pub fn next_seq(&mut self) -> u32 {
        self.reserve_seqs(1)
    }

    /// The next sequence number without taking it.
    pub fn peek_seq(&self) -> u32 {
        self.seq
    }

    /// Reserve `n` consecutive sequence numbers (never 0, never wrapping inside the
    /// range); returns the first.
    pub fn reserve_seqs(&mut self, n: u32) -> u32 {
        if self.seq.checked_add(n.max(1)).is_none() {
            self.seq = 1;
        }
        let s = self.seq;
        self.seq += n.max(1);
        s
    }

    /// Make the send buffer hold `bytes` in one `sendmsg` (forced; best effort). Small
    /// requests fit the default buffer and change nothing.
    pub fn grow_sndbuf(&self, bytes: usize) {
        let want = bytes + (64 << 10);
        if want > 200 << 10 {
            let _ = setsockopt_int(self.sock.as_raw_fd(), libc::SO_SNDBUFFORCE, want);
        }
    }

    /// Send `buf` in one `sendmsg`; a short send is an error.
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        loop {
            match self.sock.send(buf, 0) {
                Ok(n) if n == buf.len() => return Ok(()),
                Ok(n) => {
                    return Err(io::Error::other(format!(
                        "short netlink send: {n} of {} bytes",
                        buf.len()
                    )))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Send the acknowledgement sentinel with sequence number `seq`.
    pub fn send_sentinel(&self, seq: u32) -> io::Result<()> {
        let mut b = Vec::with_capacity(20);
        msg::push_sentinel(&mut b, seq);
        self.send(&b)
    }

    /// Receive one datagram; returns its length ([`NlSocket::data`] holds it). A
    /// datagram longer than the buffer is cut (the parser sees a malformed tail).
    pub fn recv(&mut self) -> io::Result<usize> {
        self.rbuf.clear();
        self.len = 0;
        if self.rbuf.capacity() < self.recv_buf_len {
            self.rbuf.reserve(self.recv_buf_len);
        }
        loop {
            match self.sock.recv(&mut self.rbuf, 0) {
                Ok(n) => {
                    self.len = n.min(self.rbuf.len());
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if let Some(f) = self.fault.as_mut() {
            self.reads += 1;
            self.rbuf.truncate(self.len);
            if let Some(e) = f(self.reads, &mut self.rbuf) {
                self.len = 0;
                return Err(e);
            }
            self.len = self.rbuf.len();
        }
        Ok(self.len)
    }

    /// Wait until a datagram (or an error such as `ENOBUFS`) can be read, at most
    /// `timeout` (`None`: without limit), without reading it: event sockets block here
    /// instead of polling. False when the time ran out.
    pub fn wait_readable(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut p = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // poll's milliseconds: -1 waits without limit; a wait below 1 ms is 1 ms
        let ms = match timeout {
            None => -1,
            Some(t) if t.is_zero() => 0,
            Some(t) => i32::try_from(t.as_millis().max(1)).unwrap_or(i32::MAX),
        };
        loop {
            // SAFETY: one valid pollfd, which poll writes `revents` of.
            let rc = unsafe { libc::poll(&mut p, 1, ms) };
            if rc >= 0 {
                return Ok(rc > 0);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// The datagram of the last successful [`NlSocket::recv`].
    pub fn data(&self) -> &[u8] {
        &self.rbuf[..self.len]
    }

    /// Read the answer to the request with sequence number `seq`: every data message
    /// with that number goes to `each` until `NLMSG_DONE`, an `NLMSG_ERROR` for it (an
    /// ACK ends the answer, an error is [`ReadError::Kernel`]), or `each` says
    /// [`Control::Stop`]. Messages with other sequence numbers (late answers to earlier
    /// requests) are skipped. `NLM_F_DUMP_INTR` on any message sets
    /// [`Answer::interrupted`]. Lost messages (`ENOBUFS`, `NLMSG_OVERRUN`) and malformed
    /// datagrams either fail the read or are noted and read past, per `opts.on_loss`.
    pub fn read_answer(
        &mut self,
        seq: u32,
        opts: &ReadOpts,
        mut each: impl FnMut(&NlMsg<'_>) -> Control,
    ) -> Result<Answer, ReadError> {
        let deadline = opts.limit.map(|d| Instant::now() + d);
        let mut ans = Answer::default();
        loop {
            if deadline.is_some_and(|d| Instant::now() > d) {
                return Err(ReadError::Deadline);
            }
            match self.recv() {
                Ok(_) => {}
                Err(e) if is_enobufs(&e) => match opts.on_loss {
                    OnLoss::Fail => return Err(ReadError::Overrun),
                    OnLoss::Drain => {
                        ans.lost = true;
                        continue;
                    }
                },
                Err(e) if is_timeout(&e) => return Err(ReadError::Timeout),
                Err(e) => return Err(ReadError::Io(e)),
            }
            let mut end: Option<i32> = None;
            let mut it = NlMsgIter::new(&self.rbuf[..self.len]);
            for m in it.by_ref() {
                if m.seq != seq {
                    continue;
                }
                if m.flags & NLM_F_DUMP_INTR != 0 {
                    ans.interrupted = true;
                }
                match m.kind {
                    NLMSG_DONE => {
                        end = Some(0);
                        break;
                    }
                    NLMSG_ERROR => {
                        end = Some(m.errno().unwrap_or(libc::EPROTO));
                        break;
                    }
                    NLMSG_NOOP => {}
                    NLMSG_OVERRUN => ans.lost = true,
                    _ => {
                        ans.messages += 1;
                        if let Control::Stop = each(&m) {
                            ans.stopped = true;
                            end = Some(0);
                            break;
                        }
                    }
                }
            }
            if it.malformed {
                match opts.on_loss {
                    OnLoss::Fail if end.is_none() => return Err(ReadError::Malformed),
                    OnLoss::Fail => {}
                    OnLoss::Drain => {
                        ans.malformed += 1;
                        ans.lost = true;
                    }
                }
            }
            match end {
                Some(0) => return Ok(ans),
                Some(errno) => return Err(ReadError::Kernel(errno)),
                None => {}
            }
        }
    }

    /// Send one request (built by `request` into an empty writer with the given
    /// sequence number) and read its answer with [`NlSocket::read_answer`].
    pub fn request(
        &mut self,
        opts: &ReadOpts,
        request: impl FnOnce(&mut crate::NlaWriter, u32),
        each: impl FnMut(&NlMsg<'_>) -> Control,
    ) -> Result<Answer, ReadError> {
        let seq = self.next_seq();
        let mut w = crate::NlaWriter::with_capacity(128);
        request(&mut w, seq);
        self.send(&w.buf).map_err(ReadError::Send)?;
        self.read_answer(seq, opts, each)
    }

    /// A dump, restarted when it was interrupted (`NLM_F_DUMP_INTR`) or lost messages
    /// (`ENOBUFS`, malformed datagrams), at most `max_retries` times. `each` sees the
    /// messages of every attempt (callers deduplicate); a dump still interrupted after
    /// the last retry is [`DumpRun::incomplete`]. `opts.on_loss` should be `Drain`.
    pub fn dump(
        &mut self,
        max_retries: u32,
        opts: &ReadOpts,
        mut request: impl FnMut(&mut crate::NlaWriter, u32),
        mut each: impl FnMut(&NlMsg<'_>) -> Control,
    ) -> Result<DumpRun, ReadError> {
        let mut run = DumpRun::default();
        loop {
            let ans = self.request(opts, &mut request, &mut each)?;
            run.malformed += ans.malformed;
            run.messages += ans.messages;
            if ans.stopped || (!ans.interrupted && !ans.lost) {
                return Ok(run);
            }
            if run.retries >= max_retries {
                run.incomplete = true;
                return Ok(run);
            }
            run.retries += 1;
        }
    }

    /// Collect the answers to `w.n` requests sent together with sequence numbers
    /// `w.base ..`: `on_answer(k, errno)` once per request `k` answered (errno 0 =
    /// ACK; `None` = an answer too short to read). Stops when every request is answered
    /// (only with `w.expect_all`: requests sent without `NLM_F_ACK` are answered only
    /// on error), when the sentinel's ACK arrives, or at the deadline. When answers are
    /// lost (`ENOBUFS`) or do not come in time, the sentinel is sent (once) to mark the
    /// end of what the kernel will answer. Returns which requests were answered.
    pub fn collect_acks(
        &mut self,
        w: AckWait,
        mut on_answer: impl FnMut(usize, Option<i32>),
    ) -> Result<AckRound, ReadError> {
        let deadline = Instant::now() + w.limit;
        let mut round = AckRound {
            answered: vec![false; w.n],
            saw_sentinel: false,
            sentinel_sent: w.sentinel_sent,
        };
        let mut remaining = w.n;
        loop {
            if (w.expect_all && remaining == 0) || Instant::now() > deadline {
                return Ok(round);
            }
            match self.recv() {
                Ok(_) => {}
                Err(e) if is_enobufs(&e) || is_timeout(&e) => {
                    if !round.sentinel_sent {
                        self.send_sentinel(w.sentinel).map_err(ReadError::Send)?;
                        round.sentinel_sent = true;
                        continue;
                    }
                    if is_timeout(&e) {
                        return Ok(round);
                    }
                    continue;
                }
                Err(e) => return Err(ReadError::Io(e)),
            }
            for m in NlMsgIter::new(&self.rbuf[..self.len]) {
                if m.kind != NLMSG_ERROR {
                    continue;
                }
                if m.seq == w.sentinel {
                    round.saw_sentinel = true;
                    continue;
                }
                let Some(k) = m.seq.checked_sub(w.base).map(|k| k as usize) else {
                    continue;
                };
                if k >= w.n || round.answered[k] {
                    continue;
                }
                round.answered[k] = true;
                remaining -= 1;
                on_answer(k, m.errno());
            }
            if round.saw_sentinel {
                return Ok(round);
            }
        }
    }
}

/// What to do when messages are lost or a datagram is malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLoss {
    /// Fail the read at once ([`ReadError::Overrun`], [`ReadError::Malformed`]): the
    /// caller retries the whole operation.
    Fail,
    /// Note it in the [`Answer`] and read on to the end of the answer (dumps that are
    /// restarted afterwards).
    Drain,
}

/// How to read an answer.
#[derive(Debug, Clone, Copy)]
pub struct ReadOpts {
    pub on_loss: OnLoss,
    /// Whole-answer deadline, counted from the start of the read ([`ReadError::Deadline`]).
    pub limit: Option<Duration>,
}

/// What a callback wants after a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Continue,
    /// Stop reading: the answer is complete for the caller (e.g. a GET answered by one
    /// object, without DONE or ACK).
    Stop,
}

/// How one answer went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Answer {
    /// Some message had `NLM_F_DUMP_INTR`: the dump may be inconsistent.
    pub interrupted: bool,
    /// Messages were lost (`ENOBUFS`, `NLMSG_OVERRUN`, a malformed datagram).
    pub lost: bool,
    /// Malformed datagrams read past.
    pub malformed: u64,
    /// The callback stopped the read.
    pub stopped: bool,
    /// Data messages handed to the callback.
    pub messages: u64,
}

/// How a retried dump went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DumpRun {
    /// Restarts.
    pub retries: u32,
    /// Still interrupted or lossy after the last retry: some entries may be missing.
    pub incomplete: bool,
    pub malformed: u64,
    pub messages: u64,
}

/// What [`NlSocket::collect_acks`] waits for.
#[derive(Debug, Clone, Copy)]
pub struct AckWait {
    pub base: u32,
    pub n: usize,
    pub sentinel: u32,
    /// The sentinel went out with the requests already.
    pub sentinel_sent: bool,
    /// Every request asked for an ACK.
    pub expect_all: bool,
    pub limit: Duration,
}

/// Which requests were answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRound {
    pub answered: Vec<bool>,
    pub saw_sentinel: bool,
    pub sentinel_sent: bool,
}

/// A read failed.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The kernel answered with this errno.
    #[error("kernel answered errno {0} ({msg})", msg = io::Error::from_raw_os_error(*.0))]
    Kernel(i32),
    /// Messages were lost (`ENOBUFS`) under [`OnLoss::Fail`].
    #[error("messages lost (ENOBUFS)")]
    Overrun,
    /// A malformed datagram under [`OnLoss::Fail`].
    #[error("malformed netlink datagram")]
    Malformed,
    /// Nothing came within the socket's receive timeout.
    #[error("receive timed out")]
    Timeout,
    /// The answer did not end within [`ReadOpts::limit`].
    #[error("answer not complete within its deadline")]
    Deadline,
    /// Sending the request failed.
    #[error("send: {0}")]
    Send(io::Error),
    #[error("recv: {0}")]
    Io(io::Error),
}
