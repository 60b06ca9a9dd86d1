//! The entries of `ibv_context_ops` that the header's inline `ibv_post_send`, `ibv_post_recv`,
//! `ibv_poll_cq` and `ibv_req_notify_cq` call: straight from the C handle to the verbs object
//! (`handle` → `UQp`/`UCq` by a cast, the verbs object out of its cell) and into the verbs data
//! path, with the C work requests translated on the stack. No lock, no allocation, no system
//! call; no tag check either (the handle's own fields and the NULL and `num_sge` checks are all
//! a post reads before the verbs data path takes over).

use super::objects::{UAh, UCq, UQp, USrq, is_ud, uah};
use crate::abi::*;
use crate::convert::c_wc;
use libc::{EINVAL, EOPNOTSUPP, c_int};
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use umlx_verbs::{
    Cq, OneSgeOp as Op, Payload, Qp, RecvWr, Remote, SendFlags, SendOp, SendWr, Sge, SimpleWqeSource, UdDest, UdSendWr,
    Wc, WcEntry, WcOpcode,
};

/// SGEs per work request that a post translates on the stack; a QP is never created with
/// more (`ibv_create_qp` reports the device's limit, which is below this).
const MAX_SGE: usize = 64;
/// The most inline bytes gathered from several SGEs (one SGE is used in place).
const MAX_GATHERED_INLINE: usize = 4096;

/// The verbs QP behind a QP handle.
///
/// # Safety
///
/// `qp` is a live QP handle and no other call uses the QP's verbs object meanwhile.
#[inline(always)]
pub(super) unsafe fn qp_of<'a>(qp: *mut ibv_qp) -> &'a mut Qp {
    // SAFETY: the handle is the first field of a live UQp (see `objects::leak`); the verbs QP is
    // in a cell the data path alone borrows mutably, one call at a time (the crate's contract).
    unsafe { &mut *UnsafeCell::raw_get(&raw const (*qp.cast::<UQp>()).qp) }
}

/// The verbs CQ behind a CQ handle.
///
/// # Safety
///
/// As [`qp_of`], for a CQ.
#[inline(always)]
unsafe fn cq_of<'a>(cq: *mut ibv_cq) -> &'a mut Cq {
    // SAFETY: as `qp_of`.
    unsafe { &mut *UnsafeCell::raw_get(&raw const (*cq.cast::<UCq>()).cq) }
}

/// Records the failing work request for the caller.
///
/// # Safety
///
/// `bad` is NULL or points to a writable pointer.
#[inline(always)]
unsafe fn set_bad<T>(bad: *mut *mut T, wr: *mut T) {
    if !bad.is_null() {
        // SAFETY: the function's contract.
        unsafe { bad.write(wr) };
    }
}

/// Translates a C scatter/gather list into `out`.
///
/// # Safety
///
/// `sg` points to `n` elements (n checked against `out` and the QP's limit by the caller).
#[inline(always)]
unsafe fn sges(sg: *const ibv_sge, n: usize, out: &mut [Sge]) -> &[Sge] {
    for (i, o) in out.iter_mut().enumerate().take(n) {
        // SAFETY: i < n elements at `sg` (the function's contract).
        let s = unsafe { sg.add(i).read() };
        *o = Sge::new(s.addr, s.length, s.lkey);
    }
    &out[..n]
}

/// The number of SGEs of a work request, checked against the queue's limit.
#[inline(always)]
fn sge_count(num_sge: c_int, sg: *const ibv_sge, limit: u32) -> Result<usize, c_int> {
    let n = usize::try_from(num_sge).map_err(|_| EINVAL)?;
    if n > limit as usize || n > MAX_SGE || (n > 0 && sg.is_null()) {
        return Err(EINVAL);
    }
    Ok(n)
}

/// The payload of a SEND or WRITE: the gather list, or with `IBV_SEND_INLINE` the bytes it
/// names (one SGE used in place, several gathered into `gathered`).
///
/// # Safety
///
/// `w.sg_list` has `n` elements; with `IBV_SEND_INLINE` the memory they name is readable (the
/// ibverbs contract for inline data).
#[inline(always)]
unsafe fn payload<'a>(
    w: &ibv_send_wr,
    n: usize,
    store: &'a mut [Sge],
    gathered: &'a mut [u8],
) -> Result<Payload<'a>, c_int> {
    if w.send_flags & send_flags::INLINE == 0 {
        // SAFETY: the function's contract.
        return Ok(Payload::Sges(unsafe { sges(w.sg_list, n, store) }));
    }
    if n == 1 {
        // SAFETY: the one element, then the bytes it names (the function's contract).
        let s = unsafe { w.sg_list.read() };
        if s.length == 0 {
            return Ok(Payload::Inline(&[]));
        }
        if s.addr == 0 {
            return Err(EINVAL);
        }
        // SAFETY: as above: `length` readable bytes at `addr`, copied into the WQE by the post.
        return Ok(Payload::Inline(unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) }));
    }
    let mut len = 0usize;
    for i in 0..n {
        // SAFETY: i < n elements (the function's contract).
        let s = unsafe { w.sg_list.add(i).read() };
        let l = s.length as usize;
        if len + l > gathered.len() || (l > 0 && s.addr == 0) {
            return Err(EINVAL);
        }
        if l > 0 {
            // SAFETY: `l` readable bytes at `addr` (the function's contract) into our buffer,
            // in bounds (checked).
            unsafe { std::ptr::copy_nonoverlapping(s.addr as *const u8, gathered[len..].as_mut_ptr(), l) };
        }
        len += l;
    }
    Ok(Payload::Inline(&gathered[..len]))
}

/// The send flags a verbs work request takes; EOPNOTSUPP for IP checksum offload, EINVAL for
/// unknown bits.
#[inline(always)]
fn flags_of(f: u32) -> Result<SendFlags, c_int> {
    use send_flags::*;
    if f & !(FENCE | SIGNALED | SOLICITED | INLINE) != 0 {
        return Err(if f & IP_CSUM != 0 { EOPNOTSUPP } else { EINVAL });
    }
    Ok(SendFlags(f & (FENCE | SIGNALED | SOLICITED)))
}

/// One C work request for an RC QP as a verbs one.
///
/// # Safety
///
/// `w.sg_list` has `w.num_sge` elements, and inline data is readable.
#[inline(always)]
unsafe fn rc_wr<'a>(
    w: &ibv_send_wr,
    limit: u32,
    store: &'a mut [Sge],
    gathered: &'a mut [u8],
) -> Result<SendWr<'a>, c_int> {
    use wr_opcode::*;
    let n = sge_count(w.num_sge, w.sg_list, limit)?;
    let flags = flags_of(w.send_flags)?;
    let imm = u32::from_be(w.imm_data);
    let op = match w.opcode {
        SEND | SEND_WITH_IMM => SendOp::Send {
            // SAFETY: the function's contract.
            data: unsafe { payload(w, n, store, gathered)? },
            imm: (w.opcode == SEND_WITH_IMM).then_some(imm),
        },
        RDMA_WRITE | RDMA_WRITE_WITH_IMM => {
            // SAFETY: `wr.rdma` is the member an RDMA opcode uses (plain integers).
            let r = unsafe { w.wr.rdma };
            SendOp::Write {
                // SAFETY: the function's contract.
                data: unsafe { payload(w, n, store, gathered)? },
                remote: Remote { addr: r.remote_addr, rkey: r.rkey },
                imm: (w.opcode == RDMA_WRITE_WITH_IMM).then_some(imm),
            }
        }
        RDMA_READ => {
            if w.send_flags & send_flags::INLINE != 0 {
                return Err(EINVAL);
            }
            // SAFETY: as above.
            let r = unsafe { w.wr.rdma };
            SendOp::Read {
                // SAFETY: the function's contract.
                into: unsafe { sges(w.sg_list, n, store) },
                remote: Remote { addr: r.remote_addr, rkey: r.rkey },
            }
        }
        ATOMIC_CMP_AND_SWP | ATOMIC_FETCH_AND_ADD => {
            if n != 1 || w.send_flags & send_flags::INLINE != 0 {
                return Err(EINVAL);
            }
            // SAFETY: `wr.atomic` is the member an atomic opcode uses; one element (n == 1).
            let (a, s) = unsafe { (w.wr.atomic, w.sg_list.read()) };
            let result = Sge::new(s.addr, s.length, s.lkey);
            let remote = Remote { addr: a.remote_addr, rkey: a.rkey };
            if w.opcode == ATOMIC_CMP_AND_SWP {
                SendOp::CompareSwap { result, remote, compare: a.compare_add, swap: a.swap }
            } else {
                SendOp::FetchAdd { result, remote, add: a.compare_add }
            }
        }
        LOCAL_INV | BIND_MW | SEND_WITH_INV | TSO | DRIVER1 | ATOMIC_WRITE => return Err(EOPNOTSUPP),
        _ => return Err(EINVAL),
    };
    Ok(SendWr { wr_id: w.wr_id, op, flags })
}

/// `ops.post_send`: the chain `wr` on `qp`. A single one-SGE request (the common post) takes
/// verbs' short path (`Qp::try_post_send_one_from`, which reads the request in place); any
/// other chain, and a request the short path declines, goes to the general post (by a tail
/// call), which translates and posts one request at a time or gives the error. As ibverbs: the requests before a failing one are posted,
/// `*bad_wr` names it.
pub(super) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // The common post, on its own so that it needs no stack for the general one: one request
    // with one SGE, no inline data, an opcode of the verbs short path, on an RC QP.
    if !qp.is_null() && !wr.is_null() {
        // SAFETY: a non-NULL request of the caller's chain.
        let w = unsafe { &*wr };
        if w.next.is_null()
            && w.num_sge == 1
            && !w.sg_list.is_null()
            && w.send_flags & !(send_flags::FENCE | send_flags::SIGNALED | send_flags::SOLICITED) == 0
        {
            // SAFETY: a live QP handle used by one thread at a time (the crate's contract).
            let q = unsafe { qp_of(qp) };
            // SAFETY: one element at `sg_list` (num_sge == 1, non-NULL).
            let s = unsafe { w.sg_list.read() };
            let sge = Sge::new(s.addr, s.length, s.lkey);
            let flags = SendFlags(w.send_flags);
            // One arm per opcode, so that each posts with its opcode's WQE fields as constants.
            // Every QP takes one SGE (its `max_send_sge` is at least 1); a UD QP leaves at the
            // verbs short path (another QP type) for the general post.
            use wr_opcode::*;
            let posted = match w.opcode {
                RDMA_WRITE => q.try_post_send_one_from(Op::Write, flags, &sge, w),
                RDMA_WRITE_WITH_IMM => q.try_post_send_one_from(Op::WriteImm, flags, &sge, w),
                SEND => q.try_post_send_one_from(Op::Send, flags, &sge, w),
                SEND_WITH_IMM => q.try_post_send_one_from(Op::SendImm, flags, &sge, w),
                RDMA_READ => q.try_post_send_one_from(Op::Read, flags, &sge, w),
                _ => false,
            };
            if posted {
                return 0;
            }
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { post_send_general(qp, wr, bad_wr) }
}

/// A C send request as the WQE's source: its ID, immediate and remote address read in place,
/// where the WQE takes each.
impl SimpleWqeSource for ibv_send_wr {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    #[inline(always)]
    fn imm(&self) -> u32 {
        u32::from_be(self.imm_data)
    }
    #[inline(always)]
    fn remote(&self) -> Remote {
        // SAFETY: `wr.rdma` is plain integers (any bits are a value); the WQE reads it only
        // for the RDMA opcodes, whose member it is.
        let r = unsafe { self.wr.rdma };
        Remote { addr: r.remote_addr, rkey: r.rkey }
    }
}

/// `post_send` for every other chain: several requests, SGEs, inline data, atomics, UD.
#[inline(never)]
#[cold]
unsafe extern "C" fn post_send_general(qp: *mut ibv_qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int {
    if qp.is_null() {
        // SAFETY: `bad_wr` is NULL or writable (the ibverbs contract).
        unsafe { set_bad(bad_wr, wr) };
        return EINVAL;
    }
    // SAFETY: a live QP handle used by one thread at a time (the crate's contract).
    let q = unsafe { qp_of(qp) };
    if is_ud(q) {
        // SAFETY: as above.
        return unsafe { post_send_ud(q, wr, bad_wr) };
    }
    let limit = q.cap.max_send_sge;
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is a work request of the caller's chain (non-NULL).
        let w = unsafe { &*cur };
        let r = if w.num_sge == 1 && w.send_flags & send_flags::INLINE == 0 && limit >= 1 {
            // The common post: one SGE, on the stack.
            let mut one = [Sge::new(0, 0, 0)];
            // SAFETY: one element at `sg_list` (num_sge == 1).
            match unsafe { rc_wr(w, limit, &mut one, &mut []) } {
                Ok(v) => q.post_send(std::slice::from_ref(&v)).map_err(|e| e.errno()),
                Err(e) => Err(e),
            }
        } else {
            post_one_general(q, w, limit)
        };
        if let Err(e) = r {
            // SAFETY: as above.
            unsafe { set_bad(bad_wr, cur) };
            return e;
        }
        cur = w.next;
    }
    0
}

/// Any other RC request: several SGEs, inline data, atomics.
#[inline(never)]
fn post_one_general(q: &mut Qp, w: &ibv_send_wr, limit: u32) -> Result<(), c_int> {
    let mut store = [Sge::new(0, 0, 0); MAX_SGE];
    let mut gathered = [0u8; MAX_GATHERED_INLINE];
    // SAFETY: the caller's request: `num_sge` elements at `sg_list` (bounded by `sge_count`),
    // inline data readable (the ibverbs contract).
    let v = unsafe { rc_wr(w, limit, &mut store, &mut gathered)? };
    q.post_send(std::slice::from_ref(&v)).map_err(|e| e.errno())
}

/// `post_send` on a UD QP: SENDs to the address handles the requests name.
///
/// # Safety
///
/// `wr` is the caller's chain (NULL-terminated), `bad_wr` NULL or writable.
unsafe fn post_send_ud(q: &mut Qp, wr: *mut ibv_send_wr, bad_wr: *mut *mut ibv_send_wr) -> c_int {
    let limit = q.cap.max_send_sge;
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is a work request of the caller's chain (non-NULL).
        let w = unsafe { &*cur };
        let r = (|| {
            let n = sge_count(w.num_sge, w.sg_list, limit)?;
            let flags = flags_of(w.send_flags)?;
            let imm = match w.opcode {
                wr_opcode::SEND => None,
                wr_opcode::SEND_WITH_IMM => Some(u32::from_be(w.imm_data)),
                _ => return Err(EINVAL),
            };
            // SAFETY: `wr.ud` is the member a UD QP's request uses; its AH is NULL or a live
            // AH handle (checked by tag).
            let (ud, ah) = unsafe { (w.wr.ud, uah(w.wr.ud.ah)) };
            let Some(ah): Option<&UAh> = ah else { return Err(EINVAL) };
            let mut store = [Sge::new(0, 0, 0); MAX_SGE];
            let mut gathered = [0u8; MAX_GATHERED_INLINE];
            // SAFETY: `n` elements at `sg_list`, inline data readable (the ibverbs contract).
            let data = unsafe { payload(w, n, &mut store, &mut gathered)? };
            let v = UdSendWr {
                wr_id: w.wr_id,
                dest: UdDest { ah: &ah.ah, remote_qpn: ud.remote_qpn, remote_qkey: ud.remote_qkey },
                data,
                imm,
                flags,
            };
            q.post_send_ud(std::slice::from_ref(&v)).map_err(|e| e.errno())
        })();
        if let Err(e) = r {
            // SAFETY: the function's contract.
            unsafe { set_bad(bad_wr, cur) };
            return e;
        }
        cur = w.next;
    }
    0
}

/// `ops.post_recv`: the chain `wr` on `qp`'s receive queue (one request of one SGE by verbs'
/// `Qp::try_post_recv_one`, anything else and its errors by the general post).
pub(super) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // The common post, on its own: one request with one SGE.
    if !qp.is_null() && !wr.is_null() {
        // SAFETY: a non-NULL request of the caller's chain.
        let w = unsafe { &*wr };
        if w.next.is_null() && w.num_sge == 1 && !w.sg_list.is_null() {
            // SAFETY: a live QP handle used by one thread at a time (the crate's contract).
            let q = unsafe { qp_of(qp) };
            // SAFETY: one element at `sg_list` (num_sge == 1, non-NULL).
            let s = unsafe { w.sg_list.read() };
            // A receive queue takes at least one SGE; a QP on an SRQ has none, and the verbs
            // short path leaves it to the general post.
            if q.try_post_recv_one(w.wr_id, &Sge::new(s.addr, s.length, s.lkey)) {
                return 0;
            }
        }
    }
    // SAFETY: the caller's arguments, unchanged.
    unsafe { post_recv_general(qp, wr, bad_wr) }
}

/// `post_recv` for every other chain.
#[inline(never)]
#[cold]
unsafe extern "C" fn post_recv_general(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, bad_wr: *mut *mut ibv_recv_wr) -> c_int {
    if qp.is_null() {
        // SAFETY: `bad_wr` is NULL or writable (the ibverbs contract).
        unsafe { set_bad(bad_wr, wr) };
        return EINVAL;
    }
    // SAFETY: a live QP handle used by one thread at a time (the crate's contract).
    let q = unsafe { qp_of(qp) };
    let limit = q.cap.max_recv_sge;
    // SAFETY: the caller's chain and `bad_wr` (the ibverbs contract).
    unsafe { post_recv_chain(wr, bad_wr, limit, |r| q.post_recv(r).map_err(|e| e.errno())) }
}

/// `ops.post_srq_recv`: the chain `wr` on the SRQ.
pub(super) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    if srq.is_null() {
        // SAFETY: `bad_wr` is NULL or writable (the ibverbs contract).
        unsafe { set_bad(bad_wr, wr) };
        return EINVAL;
    }
    // SAFETY: the handle is the first field of a live USrq (see `objects::leak`); the verbs
    // SRQ is in a cell the data path alone borrows mutably, one call at a time (the crate's
    // contract).
    let s = unsafe { &mut *UnsafeCell::raw_get(&raw const (*srq.cast::<USrq>()).srq) };
    let limit = s.max_sge();
    // SAFETY: the caller's chain and `bad_wr` (the ibverbs contract).
    unsafe { post_recv_chain(wr, bad_wr, limit, |r| s.post_recv(r).map_err(|e| e.errno())) }
}

/// Posts each receive work request of the chain `wr` with `post`, stopping at the first
/// failure (recorded in `bad_wr`).
///
/// # Safety
///
/// `wr` is NULL or a chain of valid `struct ibv_recv_wr` whose `sg_list` holds `num_sge`
/// entries; `bad_wr` is NULL or writable.
#[inline(always)]
unsafe fn post_recv_chain(
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    limit: u32,
    mut post: impl FnMut(&[RecvWr<'_>]) -> Result<(), c_int>,
) -> c_int {
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: `cur` is a work request of the caller's chain (non-NULL).
        let w = unsafe { &*cur };
        let r = match sge_count(w.num_sge, w.sg_list, limit) {
            Ok(n) if n <= 1 => {
                let mut one = [Sge::new(0, 0, 0)];
                // SAFETY: `n` (0 or 1) elements at `sg_list`.
                let sg_list = unsafe { sges(w.sg_list, n, &mut one) };
                post(&[RecvWr { wr_id: w.wr_id, sg_list }])
            }
            Ok(n) => {
                let mut store = [Sge::new(0, 0, 0); MAX_SGE];
                // SAFETY: `n` elements at `sg_list` (bounded by `sge_count`).
                let sg_list = unsafe { sges(w.sg_list, n, &mut store) };
                post(&[RecvWr { wr_id: w.wr_id, sg_list }])
            }
            Err(e) => Err(e),
        };
        if let Err(e) = r {
            // SAFETY: as above.
            unsafe { set_bad(bad_wr, cur) };
            return e;
        }
        cur = w.next;
    }
    0
}

/// One entry of the array a C program hands `ibv_poll_cq`, possibly uninitialised: a poll
/// writes each completion into it whole, as a `struct ibv_wc` (the fields its kind of
/// completion does not carry are 0).
#[repr(transparent)]
struct CWc(MaybeUninit<ibv_wc>);

impl WcEntry for CWc {
    #[inline(always)]
    fn send_success(&mut self, wr_id: u64, opcode: WcOpcode, qp_num: u32) {
        self.0.write(ibv_wc { wr_id, opcode: opcode as u32, qp_num, ..ibv_wc::default() });
    }

    #[inline(always)]
    fn set_byte_len(&mut self, byte_len: u32) {
        // SAFETY: called right after `send_success`, which initialised the entry.
        unsafe { self.0.assume_init_mut().byte_len = byte_len };
    }

    #[inline(always)]
    fn recv_success(&mut self, wc: &Wc) {
        self.0.write(c_wc(wc));
    }

    #[inline(always)]
    fn error(&mut self, wc: &Wc) {
        self.0.write(c_wc(wc));
    }
}

/// `ops.poll_cq`: up to `ne` completions into `wc`; how many, or a negative errno. The poll
/// writes each completion straight into the caller's array.
pub(super) unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, ne: c_int, wc: *mut ibv_wc) -> c_int {
    if cq.is_null() || ne <= 0 || wc.is_null() || !wc.is_aligned() {
        return if ne == 0 && !cq.is_null() { 0 } else { -EINVAL };
    }
    // SAFETY: a live CQ handle polled by one thread at a time (the crate's contract); `wc` is
    // the caller's array of `ne` entries (the ibverbs contract; non-NULL and aligned, checked),
    // seen as possibly uninitialised entries (`CWc` is a transparent `MaybeUninit<ibv_wc>`).
    let (c, out) = unsafe { (cq_of(cq), std::slice::from_raw_parts_mut(wc.cast::<CWc>(), ne as usize)) };
    c.poll_into(out) as c_int
}

/// `ops.req_notify_cq`: arms the CQ for its channel's next event (a CQ without a channel has
/// nothing to signal: nothing to do, as with rdma-core).
pub(super) unsafe extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    if cq.is_null() {
        return EINVAL;
    }
    // SAFETY: a live CQ handle used by one thread at a time (the crate's contract).
    let c = unsafe { cq_of(cq) };
    if c.channel().is_none() {
        return 0;
    }
    match c.req_notify(solicited_only != 0) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}
