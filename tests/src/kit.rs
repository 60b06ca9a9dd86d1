//! The scenario kit: how a scenario fails ([`Failure`], [`ensure!`](crate::ensure),
//! [`ensure_eq!`](crate::ensure_eq)), what it returns ([`Outcome`]), and the helpers every
//! scenario uses: work-request builders, completion waiting, byte-exact comparison, RC and UD
//! connection.

use crate::env::{Endpoint, Side};
use std::fmt;
use std::panic::Location;
use std::time::{Duration, Instant};
use umlx_verbs::*;

/// Why a scenario failed: a message and where in the scenario source it was raised.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong.
    pub message: String,
    /// The scenario line that raised it.
    pub at: &'static Location<'static>,
}

impl Failure {
    /// A failure raised at the caller's location.
    #[track_caller]
    pub fn new(message: impl Into<String>) -> Failure {
        Failure { message: message.into(), at: Location::caller() }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (at {}:{})", self.message, self.at.file(), self.at.line())
    }
}

impl std::error::Error for Failure {}

impl From<umlx_verbs::Error> for Failure {
    #[track_caller]
    fn from(e: umlx_verbs::Error) -> Failure {
        Failure::new(format!("verbs call failed: {e}"))
    }
}

impl From<String> for Failure {
    #[track_caller]
    fn from(message: String) -> Failure {
        Failure::new(message)
    }
}

/// The result of a scenario step.
pub type Result<T = ()> = std::result::Result<T, Failure>;

/// How a scenario ended when it did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every check held.
    Passed,
    /// The scenario cannot run in this environment (it says why: e.g. it needs the sim's fault
    /// injection).
    Skipped(String),
}

/// Returns a [`Failure`] from the enclosing scenario step unless `cond` holds.
#[macro_export]
macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::kit::Failure::new(format!($($arg)+)));
        }
    };
}

/// Returns a [`Failure`] from the enclosing scenario step unless `left == right`; the message
/// shows both values.
#[macro_export]
macro_rules! ensure_eq {
    ($left:expr, $right:expr, $($arg:tt)+) => {
        match (&$left, &$right) {
            (l, r) => {
                if *l != *r {
                    return Err($crate::kit::Failure::new(format!(
                        "{}: got {:?}, expected {:?}",
                        format!($($arg)+),
                        l,
                        r
                    )));
                }
            }
        }
    };
}

/// Every remote access right (with the LOCAL_WRITE they need).
pub fn all_access() -> AccessFlags {
    AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC
}

/// `len` bytes of a pattern that differs for each `seed` and never repeats with a short period.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed.wrapping_mul(97)).collect()
}

/// Compares bytes exactly; the failure names the first differing offset and the lengths.
#[track_caller]
pub fn same_bytes(what: &str, got: &[u8], want: &[u8]) -> Result {
    if got == want {
        return Ok(());
    }
    if got.len() != want.len() {
        return Err(Failure::new(format!("{what}: {} bytes, expected {}", got.len(), want.len())));
    }
    let i = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
    let diff = got.iter().zip(want).filter(|(a, b)| a != b).count();
    Err(Failure::new(format!(
        "{what}: {diff} of {} bytes differ, first at offset {i}: got {:#04x}, expected {:#04x}",
        want.len(),
        got[i],
        want[i]
    )))
}

/// Checks that `len` bytes of `mr` at `offset` all equal `byte` (memory nobody may touch).
#[track_caller]
pub fn untouched(what: &str, mr: &Mr, offset: usize, len: usize, byte: u8) -> Result {
    let got = mr.to_vec(offset, len)?;
    same_bytes(what, &got, &vec![byte; len])
}

/// A signaled send work request.
pub fn wr(wr_id: u64, op: SendOp<'_>) -> SendWr<'_> {
    SendWr::new(wr_id, op).signaled()
}

/// `w` with its send flags replaced by `flags`.
pub fn with_flags(mut w: SendWr<'_>, flags: SendFlags) -> SendWr<'_> {
    w.flags = flags;
    w
}

/// A signaled UD SEND to `dest`.
pub fn ud_wr<'a>(wr_id: u64, dest: UdDest<'a>, data: Payload<'a>) -> UdSendWr<'a> {
    UdSendWr { wr_id, dest, data, imm: None, flags: SendFlags::SIGNALED }
}

/// A receive work request.
pub fn recv(wr_id: u64, sg_list: &[Sge]) -> RecvWr<'_> {
    RecvWr { wr_id, sg_list }
}

/// The remote buffer at `offset` of `mr`.
pub fn at(mr: &Mr, offset: usize) -> Remote {
    Remote { addr: mr.addr() + offset as u64, rkey: mr.rkey() }
}

/// SEND of the gather list `sgl`.
pub fn send(sgl: &[Sge]) -> SendOp<'_> {
    SendOp::Send { data: Payload::Sges(sgl), imm: None }
}

/// SEND with immediate `imm` of the gather list `sgl`.
pub fn send_imm(sgl: &[Sge], imm: u32) -> SendOp<'_> {
    SendOp::Send { data: Payload::Sges(sgl), imm: Some(imm) }
}

/// SEND of `data` inline.
pub fn send_inline(data: &[u8]) -> SendOp<'_> {
    SendOp::Send { data: Payload::Inline(data), imm: None }
}

/// RDMA WRITE of the gather list `sgl` to `offset` of the remote region.
pub fn write<'a>(sgl: &'a [Sge], remote: &Mr, offset: usize) -> SendOp<'a> {
    SendOp::Write { data: Payload::Sges(sgl), remote: at(remote, offset), imm: None }
}

/// RDMA WRITE of `data` inline to `offset` of the remote region.
pub fn write_inline<'a>(data: &'a [u8], remote: &Mr, offset: usize) -> SendOp<'a> {
    SendOp::Write { data: Payload::Inline(data), remote: at(remote, offset), imm: None }
}

/// RDMA READ of `offset` of the remote region into the scatter list `into`.
pub fn read<'a>(into: &'a [Sge], remote: &Mr, offset: usize) -> SendOp<'a> {
    SendOp::Read { into, remote: at(remote, offset) }
}

/// Polls `cq` until `n` completions arrived; fails after `timeout`, listing what came.
#[track_caller]
pub fn wait_wcs(cq: &mut Cq, n: usize, timeout: Duration) -> Result<Vec<Wc>> {
    let mut out = Vec::with_capacity(n);
    let mut wc = [Wc::default(); 16];
    let start = Instant::now();
    while out.len() < n {
        let want = (n - out.len()).min(wc.len());
        let k = cq.poll(&mut wc[..want]);
        out.extend_from_slice(&wc[..k]);
        if k == 0 {
            if start.elapsed() > timeout {
                return Err(Failure::new(format!(
                    "CQ {:#x}: {} of {n} completions within {timeout:?}: {out:?}",
                    cq.cqn(),
                    out.len()
                )));
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
    Ok(out)
}

/// Polls `cq` for `quiet` and fails if any completion arrives.
#[track_caller]
pub fn expect_no_wc(cq: &mut Cq, quiet: Duration, why: &str) -> Result {
    let start = Instant::now();
    let mut wc = [Wc::default(); 4];
    while start.elapsed() < quiet {
        let k = cq.poll(&mut wc);
        if k > 0 {
            return Err(Failure::new(format!("CQ {:#x}: unexpected completion ({why}): {:?}", cq.cqn(), &wc[..k])));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

/// Checks a completion's wr_id, status and opcode (the opcode only for successful ones, as
/// ibverbs defines it only then).
#[track_caller]
pub fn expect_wc(w: &Wc, wr_id: u64, status: WcStatus, opcode: WcOpcode) -> Result {
    if w.wr_id != wr_id || w.status != status || (status == WcStatus::Success && w.opcode != opcode) {
        return Err(Failure::new(format!(
            "completion {w:?}: expected wr_id {wr_id}, status {status} ({}), opcode {opcode}",
            status as u32
        )));
    }
    Ok(())
}

/// A QP's capabilities request.
pub fn caps(send_wr: u32, recv_wr: u32, send_sge: u32, recv_sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: send_wr,
        max_recv_wr: recv_wr,
        max_send_sge: send_sge,
        max_recv_sge: recv_sge,
        max_inline_data: inline,
    }
}

/// The capabilities most scenarios use: 64 WRs each way, 4 SGEs each way, 128 inline bytes.
pub fn default_caps() -> QpCap {
    caps(64, 64, 4, 4, 128)
}

/// RC connection attributes.
#[derive(Clone, Copy, Debug)]
pub struct RcOpts {
    /// Local ACK timeout code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: forever).
    pub rnr_retry: u8,
    /// RNR NAK timer code the responder asks for.
    pub min_rnr_timer: u8,
    /// Remote access the responders allow.
    pub access: AccessFlags,
    /// First PSN of A's requests (B's expected PSN).
    pub psn_a: u32,
    /// First PSN of B's requests (A's expected PSN).
    pub psn_b: u32,
    /// Outstanding READ/atomic, both as initiator and responder.
    pub rd_atomic: u8,
}

impl Default for RcOpts {
    fn default() -> RcOpts {
        RcOpts {
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 1,
            access: all_access(),
            psn_a: 0x1000,
            psn_b: 0x2000,
            rd_atomic: 4,
        }
    }
}

/// The path MTU two endpoints can both use.
pub fn path_mtu(a: &Endpoint, b: &Endpoint) -> Mtu {
    let (x, y) = (a.ctx.active_mtu(), b.ctx.active_mtu());
    if (x as u32) <= (y as u32) { x } else { y }
}

impl RcOpts {
    /// How `local` connects to `remote`, sending from PSN `sq_psn`.
    pub fn params(&self, local: &Endpoint, remote: &Endpoint, sq_psn: u32) -> ConnectParams {
        ConnectParams {
            sq_psn,
            path_mtu: Some(path_mtu(local, remote)),
            sgid_index: Some(local.sgid_index),
            access: self.access,
            rd_atomic: Some(self.rd_atomic),
            min_rnr_timer: self.min_rnr_timer,
            timeout: self.timeout,
            retry_cnt: self.retry_cnt,
            rnr_retry: self.rnr_retry,
            ..ConnectParams::default()
        }
    }
}

/// The RESET→INIT attributes of an RC QP granting `access` (for scenarios that walk the state
/// machine one transition at a time; [`connect_pair`] otherwise).
pub fn init_attrs(access: AccessFlags) -> ModifyQp {
    ModifyQp::to(QpState::Init).port_num(1).pkey_index(0).qp_access_flags(access)
}

/// The peer's address as `local` reaches `remote`.
pub fn address(local: &Endpoint, remote: &Endpoint) -> AhAttr {
    AhAttr {
        grh: GlobalRoute { dgid: remote.gid, sgid_index: local.sgid_index, hop_limit: 64, ..Default::default() },
        port_num: 1,
        ..Default::default()
    }
}

/// The INIT→RTR attributes towards `remote`'s QP `dest_qpn`, expecting PSN `rq_psn`.
pub fn rtr_attrs(local: &Endpoint, remote: &Endpoint, dest_qpn: u32, rq_psn: u32, o: &RcOpts) -> ModifyQp {
    ModifyQp::to(QpState::Rtr)
        .path_mtu(path_mtu(local, remote))
        .dest_qp_num(dest_qpn)
        .rq_psn(rq_psn)
        .max_dest_rd_atomic(o.rd_atomic)
        .min_rnr_timer(o.min_rnr_timer)
        .ah_attr(address(local, remote))
}

/// The RTR→RTS attributes with first PSN `sq_psn`.
pub fn rts_attrs(sq_psn: u32, o: &RcOpts) -> ModifyQp {
    ModifyQp::to(QpState::Rts)
        .sq_psn(sq_psn)
        .timeout(o.timeout)
        .retry_cnt(o.retry_cnt)
        .rnr_retry(o.rnr_retry)
        .max_rd_atomic(o.rd_atomic)
}

/// Connects `qa` (on `a`) and `qb` (on `b`) to each other.
pub fn connect_pair(a: &Endpoint, qa: &mut Qp, b: &Endpoint, qb: &mut Qp, o: &RcOpts) -> Result {
    let peer_of_a = RcPeer { qp_num: qb.qp_num(), psn: o.psn_b, gid: b.gid };
    let peer_of_b = RcPeer { qp_num: qa.qp_num(), psn: o.psn_a, gid: a.gid };
    qa.connect(&peer_of_a, &o.params(a, b, o.psn_a))?;
    qb.connect(&peer_of_b, &o.params(b, a, o.psn_b))?;
    Ok(())
}

/// Creates an RC QP on each side (on the side's CQ) and connects them.
pub fn rc_pair(a: &Side, b: &Side, cap: QpCap, o: &RcOpts) -> Result<(Qp, Qp)> {
    let mut qa = a.pd.create_qp(QpType::Rc, &a.cq).cap(cap).build()?;
    let mut qb = b.pd.create_qp(QpType::Rc, &b.cq).cap(cap).build()?;
    connect_pair(&a.ep, &mut qa, &b.ep, &mut qb, o)?;
    Ok((qa, qb))
}

/// Moves both QPs of a pair back to RESET.
pub fn reset(qp: &mut Qp) -> Result {
    qp.modify(&ModifyQp::to(QpState::Reset))?;
    Ok(())
}

/// Moves a QP to ERR.
pub fn to_error(qp: &mut Qp) -> Result {
    qp.modify(&ModifyQp::to(QpState::Err))?;
    Ok(())
}

/// An address handle on `from`'s PD towards `to`'s GID (MAC from the neighbour table).
pub fn ah_to(from: &Side, to: &Endpoint) -> Result<Ah> {
    Ok(from.pd.create_ah(&AhAttr {
        grh: GlobalRoute { dgid: to.gid, sgid_index: from.ep.sgid_index, hop_limit: 64, ..Default::default() },
        port_num: 1,
        ..Default::default()
    })?)
}

/// Drains the context's async events (so that a scenario sees only its own).
pub fn drain_async_events(ctx: &Context) -> Result<Vec<AsyncEvent>> {
    let mut v = Vec::new();
    while let Some(e) = ctx.get_async_event()? {
        v.push(e);
    }
    Ok(v)
}

/// Waits up to `timeout` for an async event of `event_type` naming `object`; returns the events
/// seen before it (or fails, listing them).
#[track_caller]
pub fn wait_async_event(
    ctx: &Context,
    event_type: umlx_hwdesc::enums::EventType,
    object: u32,
    timeout: Duration,
) -> Result<Vec<AsyncEvent>> {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        while let Some(e) = ctx.get_async_event()? {
            if e.event_type == event_type && e.object == object {
                return Ok(seen);
            }
            seen.push(e);
        }
        if start.elapsed() > timeout {
            return Err(Failure::new(format!(
                "no {event_type} event for {object:#x} within {timeout:?}; events seen: {seen:?}"
            )));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Fails if an async event of `event_type` naming `object` arrives within `quiet`.
#[track_caller]
pub fn expect_no_async_event(
    ctx: &Context,
    event_type: umlx_hwdesc::enums::EventType,
    object: u32,
    quiet: Duration,
) -> Result {
    let start = Instant::now();
    while start.elapsed() < quiet {
        while let Some(e) = ctx.get_async_event()? {
            if e.event_type == event_type && e.object == object {
                return Err(Failure::new(format!("unexpected {event_type} event for {object:#x}: {e:?}")));
            }
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}
