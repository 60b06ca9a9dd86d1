//! The verbs side of `umlx perf`: the resources (one MR, a send and a receive CQ, the RC QPs),
//! connecting the QPs with the peer's data, and the measurement loops (bandwidth as initiator,
//! bandwidth as SEND receiver, and the three latency ping-pongs).
//!
//! Buffer layout (as perftest's): one MR of `2 × QPs × BUFF` bytes, `BUFF = max(largest size,
//! page size)`; QP `i` sends from `i × BUFF` and is written / read / sent into at `(QPs + i) ×
//! BUFF`, the address it announces. Messages smaller than half a page walk through the page in
//! cache-line steps.

use super::Test;
use super::exchange::Dest;
use super::params::Params;
use crate::common::IdlePolls;
use std::io::Write;
use std::result::Result;
use std::time::{Duration, Instant};
use umlx_verbs::*;

/// A loop gives up when nothing happened for this long (the peer is gone).
const STALL: Duration = Duration::from_secs(120);

/// How long a wait for the peer has lasted, counted from the wait's first look at the clock: a
/// waiting loop looks only once every 1024 empty polls, so that a wait that ends sooner (every
/// wait of a latency test that goes well) reads no clock.
#[derive(Default)]
struct Stall {
    since: Option<Instant>,
}

impl Stall {
    /// Whether the wait has lasted longer than [`STALL`].
    fn over(&mut self) -> bool {
        let now = Instant::now();
        now.duration_since(*self.since.get_or_insert(now)) > STALL
    }
}

/// Which sends ask for a completion: every `every`-th, counted down, not found by a `%` a
/// message (a division is tens of cycles, and a latency test pays it between a message's
/// arrival and its reply).
#[derive(Clone, Copy)]
struct EveryNth {
    every: u64,
    left: u64,
}

impl EveryNth {
    /// Every `every`-th send (at least every one).
    fn new(every: u64) -> EveryNth {
        let every = every.max(1);
        EveryNth { every, left: every }
    }

    /// Whether the next send is an `every`-th one: the `every`-th, `2 * every`-th, ... call.
    fn next(&mut self) -> bool {
        self.left -= 1;
        let due = self.left == 0;
        if due {
            self.left = self.every;
        }
        due
    }
}

/// Page size and cache-line size both sides agreed on.
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// The "cycle buffer" (largest page size of the two sides).
    pub cycle_buffer: u64,
    /// Largest cache-line size of the two sides.
    pub cache_line: u64,
}

impl Geometry {
    /// The step between consecutive messages and the number of steps before wrapping, or
    /// `None` when messages do not walk (larger than half a page).
    fn walk(&self, size: u64) -> Option<(u64, u64)> {
        if size > self.cycle_buffer / 2 {
            return None;
        }
        let cl = self.cache_line.max(1);
        let inc = if size > cl { size.div_ceil(cl) * cl } else { cl };
        Some((inc, (self.cycle_buffer / inc).max(1)))
    }

    /// Offset of message `k` from its area's start.
    fn offset(&self, size: u64, k: u64) -> u64 {
        match self.walk(size) {
            Some((inc, slots)) => (k % slots) * inc,
            None => 0,
        }
    }
}

/// The state of a duration run (`-D`): warm-up margin, sampling, cool-down margin, end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Before the sampling window.
    Warmup,
    /// Messages are counted.
    Sample,
    /// After the sampling window.
    Cooldown,
    /// Done.
    End,
}

/// The clock of a duration run.
#[derive(Clone, Copy, Debug)]
pub struct DurationClock {
    start: Instant,
    margin: Duration,
    total: Duration,
}

impl DurationClock {
    /// Starts now.
    pub fn start(duration_s: u32, margin_s: u32) -> DurationClock {
        DurationClock {
            start: Instant::now(),
            margin: Duration::from_secs(margin_s as u64),
            total: Duration::from_secs(duration_s as u64),
        }
    }

    /// The phase at `now`.
    pub fn phase(&self, now: Instant) -> Phase {
        let t = now.saturating_duration_since(self.start);
        if t >= self.total {
            Phase::End
        } else if t >= self.total - self.margin {
            Phase::Cooldown
        } else if t >= self.margin {
            Phase::Sample
        } else {
            Phase::Warmup
        }
    }

    /// The sampling window, as instants.
    pub fn window(&self) -> (Instant, Instant) {
        (self.start + self.margin, self.start + self.total - self.margin)
    }

    /// The sampling window's length, ns.
    pub fn window_ns(&self) -> u64 {
        let (a, b) = self.window();
        b.duration_since(a).as_nanos() as u64
    }

    /// Whether `dur` is a duration run now in its sampling window (an iteration then counts).
    pub fn sampling(dur: Option<DurationClock>) -> bool {
        dur.is_some_and(|d| d.phase(Instant::now()) == Phase::Sample)
    }
}

/// The live progress line on stderr (overwritten with `\r`), shown once a run lasts a second.
pub struct Progress {
    enabled: bool,
    label: String,
    start: Instant,
    last: Instant,
    shown: bool,
}

impl Progress {
    /// A progress line for one run.
    pub fn new(enabled: bool, label: String) -> Progress {
        let now = Instant::now();
        Progress { enabled, label, start: now, last: now, shown: false }
    }

    /// [`Progress::tick`] at the time now, read only when the line is shown: a latency loop
    /// then reads the clock once per iteration, for its measurement, as perftest does.
    pub fn tick_now(&mut self, msgs: u64, size: u64) {
        if self.enabled {
            self.tick(Instant::now(), msgs, size);
        }
    }

    /// Updates the line at most once a second.
    pub fn tick(&mut self, now: Instant, msgs: u64, size: u64) {
        if !self.enabled || now.duration_since(self.last) < Duration::from_secs(1) {
            return;
        }
        self.last = now;
        let secs = now.duration_since(self.start).as_secs_f64();
        let mib = (msgs as f64 * size as f64) / secs / (1u64 << 20) as f64;
        let mut e = std::io::stderr().lock();
        let _ = write!(e, "\r{}: {secs:.0} s, {msgs} messages, {mib:.2} MiB/s   ", self.label);
        let _ = e.flush();
        self.shown = true;
    }

    /// Clears the line.
    pub fn finish(&mut self) {
        if self.shown {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r{}\r", " ".repeat(self.label.len() + 60));
            let _ = e.flush();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What a bandwidth loop measured (times in ns from the loop's clock).
#[derive(Clone, Debug, Default)]
pub struct BwRun {
    /// Messages counted (all of them, or those in the sampling window of a duration run).
    pub msgs: u64,
    /// Post time of every message (empty without peak measurement).
    pub tposted: Vec<u64>,
    /// Completion time at the index of the last message each completion covers
    /// (`u64::MAX` where no completion landed; empty without peak measurement).
    pub tcompleted: Vec<u64>,
    /// Start of the measured interval.
    pub start_ns: u64,
    /// End of the measured interval.
    pub end_ns: u64,
}

/// What a latency loop measured.
#[derive(Clone, Debug, Default)]
pub struct LatRun {
    /// Post time of every iteration (iterations mode), ns.
    pub tposted: Vec<u64>,
    /// Iterations counted in the sampling window (duration mode).
    pub msgs: u64,
    /// Sampling window length (duration mode), ns.
    pub window_ns: u64,
}

/// The test's resources on one device.
pub struct Resources {
    /// The RC QPs (dropped first).
    pub qps: Vec<Qp>,
    /// Send completions.
    pub send_cq: Cq,
    /// Receive completions.
    pub recv_cq: Cq,
    /// The buffer of every QP.
    pub mr: Mr,
    /// The protection domain (kept for the objects' lifetime).
    _pd: Pd,
    /// Bytes of one area (send or receive) of one QP.
    pub buff: u64,
    /// A copy of the send data for inline posts.
    pub inline_buf: Vec<u8>,
    test: Test,
    inline_size: u32,
    fetch_add: bool,
    idle: IdlePolls,
}

fn ns(t0: Instant, now: Instant) -> u64 {
    now.duration_since(t0).as_nanos() as u64
}

/// The post times of a latency run's iterations, kept as the clock gave them until the run is
/// over: a conversion to nanoseconds (about 13 ns here) costs a third of the read (about 24 ns),
/// and each iteration's post waits for both.
struct PostTimes {
    t0: Instant,
    at: Vec<Instant>,
}

impl PostTimes {
    /// Room for `iters` iterations, timed from now.
    fn new(iters: u64) -> PostTimes {
        let t0 = Instant::now();
        PostTimes { t0, at: vec![t0; iters as usize] }
    }

    /// Iteration `i` posts now.
    #[inline]
    fn mark(&mut self, i: u64) {
        if let Some(t) = self.at.get_mut(i as usize) {
            *t = Instant::now();
        }
    }

    /// The post times in nanoseconds from the run's start ([`LatRun::tposted`]).
    fn into_ns(self) -> Vec<u64> {
        self.at.iter().map(|&t| ns(self.t0, t)).collect()
    }
}

fn wc_error(what: &str, qpn: u32, w: &Wc, done: u64, total: u64) -> String {
    let total = if total == 0 { "?".to_string() } else { total.to_string() };
    format!(
        "{what} completion on QP {qpn:#x} failed: {} (vendor syndrome {:#x}) after {done} of {total} messages",
        w.status, w.vendor_err
    )
}

impl Resources {
    /// Creates the PD, the MR (all sizes up to `max_size`), the CQs and `p.qps` RC QPs (RESET).
    pub fn new(ctx: &Context, p: &Params, max_size: u64, geo: Geometry) -> Result<Resources, String> {
        let qps = p.qps as u64;
        let buff = max_size.max(geo.cycle_buffer);
        let len = 2 * qps * buff;
        if len > (16u64 << 30) {
            return Err(format!("{qps} QPs of {buff} bytes need {len} bytes of registered memory: too much"));
        }
        let pd = ctx.alloc_pd().map_err(|e| format!("ibv_alloc_pd: {e}"))?;
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let mr = pd.alloc_mr(len as usize, all).map_err(|e| format!("ibv_reg_mr of {len} bytes: {e}"))?;
        let tx = p.tx_depth.max(1);
        let rx = if p.test.has_recv() { p.rx_depth.max(1) } else { 1 };
        let send_cq =
            ctx.create_cq(tx * p.qps, None).map_err(|e| format!("ibv_create_cq ({} entries): {e}", tx * p.qps))?;
        let recv_cq =
            ctx.create_cq(rx * p.qps, None).map_err(|e| format!("ibv_create_cq ({} entries): {e}", rx * p.qps))?;
        let inline_size = p.inline_size();
        let cap =
            QpCap { max_send_wr: tx, max_recv_wr: rx, max_send_sge: 1, max_recv_sge: 1, max_inline_data: inline_size };
        let mut list = Vec::new();
        for _ in 0..p.qps {
            let qp = pd
                .create_qp(QpType::Rc, &send_cq)
                .recv_cq(&recv_cq)
                .cap(cap)
                .build()
                .map_err(|e| format!("ibv_create_qp (tx depth {tx}, rx depth {rx}, inline {inline_size}): {e}"))?;
            list.push(qp);
        }
        Ok(Resources {
            qps: list,
            send_cq,
            recv_cq,
            mr,
            _pd: pd,
            buff,
            inline_buf: vec![0u8; inline_size as usize],
            test: p.test,
            inline_size,
            fetch_add: p.fetch_add,
            idle: IdlePolls::new(false),
        })
    }

    /// How an empty poll waits: for the software ConnectX, whose threads (and the peer process)
    /// may share the CPU with the polling loop, see [`IdlePolls`]; on an adapter it spins.
    pub fn set_sim_polling(&mut self, sim: bool) {
        self.idle = IdlePolls::new(sim);
    }

    fn idle(&self) {
        self.idle.idle();
    }

    /// Offset of QP `q`'s send area.
    pub fn send_base(&self, q: usize) -> u64 {
        q as u64 * self.buff
    }

    /// Offset of QP `q`'s receive area (the address it announces).
    pub fn recv_base(&self, q: usize) -> u64 {
        (self.qps.len() + q) as u64 * self.buff
    }

    /// Connects every QP to the peer's `rem`, RESET to RTS (perftest's attributes: min RNR
    /// timer 12, retry 7, RNR retry 7, hop limit 255, the ACK timeout of `--qp-timeout`).
    ///
    /// perftest leaves the passive side of a bandwidth test (the server of WRITE, READ and
    /// atomic bandwidth) in RTR; umlx takes it to RTS as well, which changes nothing on the wire:
    /// that side never posts a send, and RTS only adds the send queue to what RTR has (it
    /// answers requests the same way in both states).
    ///
    /// perftest sets the responder depth (`max_dest_rd_atomic`) to this side's `out_reads` and
    /// the initiator depth (`max_rd_atomic`) to the peer's; `connect` sets both to one value.
    /// Only the client ever issues READs or atomics, so the client takes the peer's `out_reads`
    /// (its initiator depth, as perftest) and the server its own (its responder depth, as
    /// perftest): the depth each side actually uses is perftest's.
    pub fn connect(&mut self, my: &[Dest], rem: &[Dest], gid_index: u32, mtu: Mtu, p: &Params) -> Result<(), String> {
        let access = match self.test {
            Test::AtomicBw => AccessFlags::REMOTE_ATOMIC,
            Test::ReadBw | Test::ReadLat => AccessFlags::REMOTE_READ,
            Test::WriteBw | Test::WriteLat => AccessFlags::REMOTE_WRITE,
            Test::SendBw | Test::SendLat => AccessFlags::REMOTE_WRITE | AccessFlags::LOCAL_WRITE,
        };
        let sgid_index =
            u8::try_from(gid_index).map_err(|_| format!("GID index {gid_index} does not fit an address vector"))?;
        for (i, qp) in self.qps.iter_mut().enumerate() {
            let qpn = qp.qp_num();
            let rd_atomic = if p.is_client() { rem[i].out_reads } else { my[i].out_reads };
            let params = ConnectParams {
                sq_psn: my[i].psn,
                path_mtu: Some(mtu),
                sgid_index: Some(sgid_index),
                port_num: p.ib_port,
                pkey_index: 0,
                access,
                rd_atomic: Some(rd_atomic.clamp(1, 255) as u8),
                min_rnr_timer: 12,
                timeout: p.qp_timeout,
                retry_cnt: 7,
                rnr_retry: 7,
                hop_limit: 0xff,
                ..Default::default()
            };
            let peer = RcPeer { qp_num: rem[i].qpn, psn: rem[i].psn, gid: Gid(rem[i].gid) };
            qp.connect(&peer, &params).map_err(|e| match qp.state() {
                QpState::Reset => format!("QP {qpn:#x} to INIT: {e}"),
                QpState::Init => {
                    format!("QP {qpn:#x} to RTR (peer QP {:#x}, GID {}): {e}", rem[i].qpn, Gid(rem[i].gid).to_ip())
                }
                _ => format!("QP {qpn:#x} to RTS: {e}"),
            })?;
        }
        Ok(())
    }

    /// Posts one work request of the test's opcode from QP `q`: message `k` of `size` bytes.
    fn post(
        &mut self,
        q: usize,
        size: u64,
        local_off: u64,
        remote: Option<(u64, u32)>,
        signaled: bool,
        wr_id: u64,
    ) -> Result<(), String> {
        let sge = [Sge::new(self.mr.addr() + local_off, size as u32, self.mr.lkey())];
        let (addr, rkey) = remote.unwrap_or((0, 0));
        let remote = Remote { addr, rkey };
        let data = if size <= self.inline_size as u64 {
            Payload::Inline(&self.inline_buf[..size as usize])
        } else {
            Payload::Sges(&sge)
        };
        let op = match self.test {
            Test::WriteBw | Test::WriteLat => SendOp::Write { data, remote, imm: None },
            Test::ReadBw | Test::ReadLat => SendOp::Read { into: &sge, remote },
            Test::SendBw | Test::SendLat => SendOp::Send { data, imm: None },
            Test::AtomicBw if self.fetch_add => SendOp::FetchAdd { result: sge[0], remote, add: 1 },
            Test::AtomicBw => SendOp::CompareSwap { result: sge[0], remote, compare: 0, swap: 0 },
        };
        let flags = if signaled { SendFlags::SIGNALED } else { SendFlags(0) };
        let wr = SendWr { wr_id, op, flags };
        let qp = &mut self.qps[q];
        qp.post_send(&[wr]).map_err(|e| format!("ibv_post_send on QP {:#x}: {e}", qp.qp_num()))
    }

    /// Posts `count` receives of `size` bytes on QP `q`, starting at receive slot `first`.
    fn post_recvs(
        &mut self,
        q: usize,
        size: u64,
        first: u64,
        count: u64,
        geo: Geometry,
        walk: bool,
    ) -> Result<(), String> {
        let base = self.mr.addr() + self.recv_base(q);
        for k in first..first + count {
            let off = if walk { geo.offset(size, k) } else { 0 };
            let sge = [Sge::new(base + off, size as u32, self.mr.lkey())];
            let qp = &mut self.qps[q];
            qp.post_recv(&[RecvWr { wr_id: q as u64, sg_list: &sge }])
                .map_err(|e| format!("ibv_post_recv on QP {:#x}: {e}", qp.qp_num()))?;
        }
        Ok(())
    }

    /// The receives a SEND test's receiver posts before a size: `rx_depth` per QP.
    pub fn post_initial_recvs(&mut self, p: &Params, size: u64, geo: Geometry) -> Result<(), String> {
        let walk = p.test.is_bw();
        for q in 0..self.qps.len() {
            self.post_recvs(q, size, 0, p.rx_depth as u64, geo, walk)?;
        }
        Ok(())
    }

    /// Bandwidth as initiator (RDMA WRITE / READ / atomic / SEND): keeps `tx_depth` messages
    /// in flight per QP, asks for a completion every `cq_mod` messages.
    pub fn run_bw_client(
        &mut self,
        p: &Params,
        rem: &[Dest],
        size: u64,
        geo: Geometry,
        progress: &mut Progress,
    ) -> Result<BwRun, String> {
        let nq = self.qps.len();
        let iters = p.iters;
        let tot = iters * nq as u64;
        let track = !p.no_peak;
        let cq_mod = p.cq_mod.max(1) as u64;
        let tx_depth = p.tx_depth as u64;
        let mut run = BwRun::default();
        if track {
            run.tposted = vec![0; tot as usize];
            run.tcompleted = vec![u64::MAX; tot as usize];
        }
        let (mut scnt, mut ccnt) = (vec![0u64; nq], vec![0u64; nq]);
        // Per QP: message `k` is signaled when `k % cq_mod == cq_mod - 1`.
        let mut to_signal = vec![EveryNth::new(cq_mod); nq];
        let (mut totscnt, mut totccnt) = (0u64, 0u64);
        let mut wc = [Wc::default(); 64];
        let t0 = Instant::now();
        let dur = p.duration.map(|d| DurationClock::start(d, p.margin));
        let mut last_progress = t0;
        loop {
            let now = Instant::now();
            let phase = dur.map(|d| d.phase(now));
            let ended = phase == Some(Phase::End);
            if ended || (totscnt >= tot && totccnt >= tot && dur.is_none()) {
                break;
            }
            for q in 0..nq {
                while (scnt[q] < iters || dur.is_some()) && scnt[q] < tx_depth + ccnt[q] {
                    let k = scnt[q];
                    let signaled = to_signal[q].next() || (dur.is_none() && k == iters - 1);
                    if track {
                        run.tposted[totscnt as usize] = ns(t0, Instant::now());
                    }
                    let off = geo.offset(size, k);
                    let remote = match p.test {
                        Test::SendBw => None,
                        _ => Some((rem[q].vaddr + off, rem[q].rkey)),
                    };
                    self.post(q, size, self.send_base(q) + off, remote, signaled, q as u64)?;
                    scnt[q] += 1;
                    totscnt += 1;
                }
            }
            if totccnt < tot || (dur.is_some() && totccnt < totscnt) {
                let n = self.send_cq.poll(&mut wc);
                if n > 0 {
                    last_progress = Instant::now();
                }
                for w in &wc[..n] {
                    if w.status != WcStatus::Success {
                        return Err(wc_error(p.test.opcode_name(), w.qp_num, w, totccnt, tot));
                    }
                    let q = (w.wr_id as usize).min(nq - 1);
                    let fill = if dur.is_some() { cq_mod } else { cq_mod.min(iters.saturating_sub(ccnt[q])) };
                    ccnt[q] += fill;
                    totccnt += fill;
                    if track {
                        run.tcompleted[totccnt.clamp(1, tot) as usize - 1] = ns(t0, Instant::now());
                    }
                    if phase == Some(Phase::Sample) {
                        run.msgs += cq_mod;
                    }
                }
                if n == 0 {
                    self.idle();
                }
                if n == 0 && now.duration_since(last_progress) > STALL {
                    return Err(format!(
                        "no {} completion for {} s ({totccnt} of {tot} messages done)",
                        p.test.opcode_name(),
                        STALL.as_secs()
                    ));
                }
            }
            progress.tick(now, totccnt, size);
        }
        let end = Instant::now();
        progress.finish();
        match dur {
            Some(d) => {
                let (a, b) = d.window();
                run.start_ns = ns(t0, a);
                run.end_ns = ns(t0, b.min(end));
            }
            None => {
                run.msgs = tot;
                if track && tot > 0 {
                    run.start_ns = run.tposted[0];
                    run.end_ns = run.tcompleted[tot as usize - 1];
                } else {
                    run.start_ns = 0;
                    run.end_ns = ns(t0, end);
                }
            }
        }
        Ok(run)
    }

    /// Bandwidth as SEND receiver: counts receives, reposts them, times from the first one.
    pub fn run_bw_server(
        &mut self,
        p: &Params,
        size: u64,
        geo: Geometry,
        progress: &mut Progress,
    ) -> Result<BwRun, String> {
        let nq = self.qps.len();
        let iters = p.iters;
        let tot = iters * nq as u64;
        let mut posted = vec![p.rx_depth as u64; nq];
        let mut rcnt = 0u64;
        let mut wc = [Wc::default(); 64];
        let t0 = Instant::now();
        let mut first: Option<Instant> = None;
        let mut dur: Option<DurationClock> = None;
        let mut run = BwRun::default();
        let mut last_progress = t0;
        loop {
            let now = Instant::now();
            let mut phase = dur.map(|d| d.phase(now));
            if phase == Some(Phase::End) || !(rcnt < tot || p.duration.is_some()) {
                break;
            }
            let n = self.recv_cq.poll(&mut wc);
            if n > 0 {
                last_progress = Instant::now();
                if first.is_none() {
                    // The clock starts with the first message (which counts).
                    first = Some(last_progress);
                    dur = p.duration.map(|d| DurationClock::start(d, p.margin));
                    phase = dur.map(|d| d.phase(last_progress));
                }
            } else if now.duration_since(last_progress) > STALL {
                return Err(format!("no message received for {} s ({rcnt} of {tot} received)", STALL.as_secs()));
            } else {
                self.idle();
            }
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    return Err(wc_error("receive", w.qp_num, w, rcnt, tot));
                }
                let q = (w.wr_id as usize).min(nq - 1);
                rcnt += 1;
                if phase == Some(Phase::Sample) {
                    run.msgs += 1;
                }
                if p.duration.is_some() || posted[q] < iters {
                    self.post_recvs(q, size, posted[q], 1, geo, true)?;
                    posted[q] += 1;
                }
            }
            progress.tick(now, rcnt, size);
        }
        let end = Instant::now();
        progress.finish();
        match dur {
            Some(d) => {
                let (a, b) = d.window();
                run.start_ns = ns(t0, a);
                run.end_ns = ns(t0, b.min(end));
            }
            None => {
                run.msgs = tot;
                run.start_ns = first.map(|f| ns(t0, f)).unwrap_or(0);
                run.end_ns = ns(t0, end);
            }
        }
        Ok(run)
    }

    fn poll_one_send(&mut self, what: &str, done: u64, total: u64, stop: &dyn Fn() -> bool) -> Result<bool, String> {
        let mut stall = Stall::default();
        let mut spins = 0u32;
        loop {
            if self.try_poll_send(what, done, total)?.is_some() {
                return Ok(true);
            }
            spins = spins.wrapping_add(1);
            self.idle();
            if spins.is_multiple_of(1024) {
                if stop() {
                    return Ok(false);
                }
                if stall.over() {
                    return Err(format!("no {what} completion for {} s", STALL.as_secs()));
                }
            }
        }
    }

    /// RDMA WRITE latency ping-pong: each side writes the peer's buffer when the last byte of
    /// its own buffer shows the peer's count (the server writes first).
    pub fn run_write_lat(
        &mut self,
        p: &Params,
        rem: &[Dest],
        size: u64,
        progress: &mut Progress,
    ) -> Result<LatRun, String> {
        let iters = p.iters;
        let server = !p.is_client();
        let post_off = self.send_base(0) + size - 1;
        let poll_off = self.recv_base(0) + size - 1;
        let (mut scnt, mut ccnt, mut rcnt) = (0u64, 0u64, 0u64);
        let mut run = LatRun::default();
        let mut posted = PostTimes::new(iters);
        let dur = p.duration.map(|d| DurationClock::start(d, p.margin));
        let ended = || dur.map(|d| d.phase(Instant::now()) == Phase::End).unwrap_or(false);
        let in_dur = dur.is_some();
        while scnt < iters || ccnt < iters || rcnt < iters || (in_dur && !ended()) {
            if (rcnt < iters || in_dur) && !(scnt < 1 && server) {
                rcnt += 1;
                let want = rcnt as u8;
                let mut b = [0u8; 1];
                let mut stall = Stall::default();
                let mut spins = 0u32;
                loop {
                    self.mr.read(poll_off as usize, &mut b).map_err(|e| e.to_string())?;
                    if b[0] == want {
                        break;
                    }
                    // Reap the last WRITE's completion while waiting. A look at an empty CQ
                    // also lets a software ConnectX take the peer's WRITE off its wire in this
                    // thread (as a DPDK program runs its NIC), instead of waiting for its
                    // wire's receive thread to get a core.
                    if let Some(w) = self.try_poll_send("RDMA WRITE", ccnt, scnt)? {
                        if ccnt >= scnt {
                            return Err(format!("RDMA WRITE: a completion (wr_id {}) with none outstanding", w.wr_id));
                        }
                        ccnt += 1;
                        if DurationClock::sampling(dur) {
                            run.msgs += 1;
                        }
                    }
                    spins = spins.wrapping_add(1);
                    self.idle();
                    if spins.is_multiple_of(1024) {
                        if ended() {
                            break;
                        }
                        if stall.over() {
                            return Err(format!(
                                "RDMA WRITE ping-pong: no write from the peer for {} s",
                                STALL.as_secs()
                            ));
                        }
                    }
                }
            }
            if scnt < iters || in_dur {
                if !in_dur {
                    posted.mark(scnt);
                }
                scnt += 1;
                let mark = scnt as u8;
                self.mr.write(post_off as usize, &[mark]).map_err(|e| e.to_string())?;
                if let Some(b) = self.inline_buf.get_mut(size as usize - 1) {
                    *b = mark;
                }
                self.post(0, size, self.send_base(0), Some((rem[0].vaddr, rem[0].rkey)), true, 0)?;
                progress.tick_now(scnt, size);
            }
            if in_dur && ended() {
                break;
            }
            if (ccnt < iters || in_dur) && ccnt < scnt {
                if !self.poll_one_send("RDMA WRITE", ccnt, iters, &ended)? {
                    break;
                }
                ccnt += 1;
                if DurationClock::sampling(dur) {
                    run.msgs += 1;
                }
            }
        }
        progress.finish();
        if let Some(d) = dur {
            run.window_ns = d.window_ns();
        }
        run.tposted = posted.into_ns();
        Ok(run)
    }

    /// One look at the send CQ: the successful completion it held, if any (an error completion
    /// is an error, reported after `done` of `total` messages).
    fn try_poll_send(&mut self, what: &str, done: u64, total: u64) -> Result<Option<Wc>, String> {
        let mut wc = [Wc::default(); 1];
        if self.send_cq.poll(&mut wc) == 0 {
            return Ok(None);
        }
        let w = wc[0];
        if w.status != WcStatus::Success {
            return Err(wc_error(what, w.qp_num, &w, done, total));
        }
        Ok(Some(w))
    }

    /// SEND latency ping-pong: the client sends first, each side answers a receive with a send.
    pub fn run_send_lat(&mut self, p: &Params, size: u64, progress: &mut Progress) -> Result<LatRun, String> {
        let iters = p.iters;
        let client = p.is_client();
        let rx_depth = p.rx_depth as u64;
        let cq_mod = p.cq_mod.max(1) as u64;
        let (mut scnt, mut rcnt) = (0u64, 0u64);
        // SEND `scnt` (counted from 1) is signaled when `scnt % cq_mod == 0`.
        let mut to_signal = EveryNth::new(cq_mod);
        let mut run = LatRun::default();
        let mut posted = PostTimes::new(iters);
        let in_dur = p.duration.is_some();
        let mut dur: Option<DurationClock> = None;
        let ended = |dur: &Option<DurationClock>| dur.map(|d| d.phase(Instant::now()) == Phase::End).unwrap_or(false);
        let mut wc = [Wc::default(); 1];
        while scnt < iters || rcnt < iters || (in_dur && !ended(&dur)) {
            if (rcnt < iters || in_dur) && !(scnt < 1 && client) {
                let mut stall = Stall::default();
                let mut spins = 0u32;
                let mut got = false;
                loop {
                    if self.recv_cq.poll(&mut wc) == 1 {
                        got = true;
                        break;
                    }
                    spins = spins.wrapping_add(1);
                    self.idle();
                    if spins.is_multiple_of(1024) {
                        if in_dur && ended(&dur) {
                            break;
                        }
                        if stall.over() {
                            return Err(format!("SEND ping-pong: no message from the peer for {} s", STALL.as_secs()));
                        }
                    }
                }
                if got {
                    let w = wc[0];
                    if dur.is_none() && in_dur {
                        dur = p.duration.map(|d| DurationClock::start(d, p.margin));
                    }
                    if w.status != WcStatus::Success {
                        return Err(wc_error("receive", w.qp_num, &w, rcnt, iters));
                    }
                    rcnt += 1;
                    if DurationClock::sampling(dur) {
                        run.msgs += 1;
                    }
                    if in_dur || rcnt + rx_depth <= iters {
                        self.post_recvs(0, size, 0, 1, Geometry { cycle_buffer: 0, cache_line: 1 }, false)?;
                    }
                }
            }
            if scnt < iters || (in_dur && !ended(&dur)) {
                if !in_dur {
                    posted.mark(scnt);
                }
                scnt += 1;
                let signaled = to_signal.next() || (!in_dur && scnt == iters);
                if in_dur && ended(&dur) {
                    break;
                }
                self.post(0, size, self.send_base(0), None, signaled, 0)?;
                progress.tick_now(scnt, size);
                if signaled {
                    let d = dur;
                    let stop = move || ended(&d);
                    if !self.poll_one_send("SEND", scnt, iters, &stop)? {
                        break;
                    }
                }
            }
        }
        progress.finish();
        if let Some(d) = dur {
            run.window_ns = d.window_ns();
        }
        run.tposted = posted.into_ns();
        Ok(run)
    }

    /// RDMA READ latency: one READ at a time from the peer's buffer (client only).
    pub fn run_read_lat(
        &mut self,
        p: &Params,
        rem: &[Dest],
        size: u64,
        progress: &mut Progress,
    ) -> Result<LatRun, String> {
        let iters = p.iters;
        let mut scnt = 0u64;
        let mut run = LatRun::default();
        let mut posted = PostTimes::new(iters);
        let dur = p.duration.map(|d| DurationClock::start(d, p.margin));
        let ended = || dur.map(|d| d.phase(Instant::now()) == Phase::End).unwrap_or(false);
        let in_dur = dur.is_some();
        while scnt < iters || (in_dur && !ended()) {
            if !in_dur {
                posted.mark(scnt);
            }
            scnt += 1;
            self.post(0, size, self.send_base(0), Some((rem[0].vaddr, rem[0].rkey)), true, 0)?;
            progress.tick_now(scnt, size);
            if in_dur && ended() {
                break;
            }
            if !self.poll_one_send("RDMA READ", scnt - 1, iters, &ended)? {
                break;
            }
            if DurationClock::sampling(dur) {
                run.msgs += 1;
            }
        }
        progress.finish();
        if let Some(d) = dur {
            run.window_ns = d.window_ns();
        }
        run.tposted = posted.into_ns();
        Ok(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nth_is_due_at_the_nth_call_and_each_nth_after_as_a_modulo_says() {
        for every in [0u64, 1, 2, 7, 100] {
            let mut n = EveryNth::new(every);
            for call in 1..=1000u64 {
                assert_eq!(n.next(), call % every.max(1) == 0, "every {every}, call {call}");
            }
        }
    }
}
