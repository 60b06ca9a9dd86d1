//! Extended QPs (`ibv_create_qp_ex` with send-ops flags) and the new post-send API
//! (`ibv_wr_start`, `ibv_wr_rdma_write`, `ibv_wr_set_sge`, ..., `ibv_wr_complete`), which
//! perftest uses on ConnectX devices.
//!
//! Each work request is assembled from the builder (opcode, remote address, immediate or atomic
//! operands, with the `wr_id` and `wr_flags` the program set in `struct ibv_qp_ex`) and its
//! setters (UD address, data) into a `struct ibv_send_wr` on the stack and posted through the
//! same `ops.post_send` path as `ibv_post_send` once its last setter is called, inside the
//! verbs QP's batch (`Qp::start_batch`): as with rdma-core's mlx5, the WQEs are written as the
//! requests are built, and the device sees them only at `ibv_wr_complete`, with one doorbell for
//! the whole batch. `ibv_wr_abort` drops the whole batch, and so does `ibv_wr_complete` after a
//! failure, which it returns (the first one), as rdma-core does.

use super::datapath::{post_send, qp_of};
use super::objects::UQp;
use super::*;

/// SGEs (or inline buffers) a request keeps when its data comes before its UD address.
const KEPT_SGES: usize = 16;
/// Inline bytes a request keeps when its data comes before its UD address.
const KEPT_INLINE: usize = 1024;

/// The request being built on an extended QP.
pub(crate) struct WrBuilder {
    /// Opcode, flags, id and operands so far (`next`, `sg_list`, `num_sge` are set at post).
    wr: ibv_send_wr,
    /// A builder was called and the request is not posted yet.
    open: bool,
    /// UD: the address setter is still to come.
    need_addr: bool,
    /// The data setter came before the UD address: the data kept here.
    kept: Option<(usize, bool)>,
    kept_sges: [ibv_sge; KEPT_SGES],
    kept_inline: [u8; KEPT_INLINE],
    /// The first failure since `wr_start` (0: none).
    error: c_int,
}

impl WrBuilder {
    /// A builder for a QP of type `qp_type`.
    pub(crate) fn new(qp_type: u32) -> WrBuilder {
        WrBuilder {
            wr: ibv_send_wr {
                wr_id: 0,
                next: null_mut(),
                sg_list: null_mut(),
                num_sge: 0,
                opcode: 0,
                send_flags: 0,
                imm_data: 0,
                wr: send_wr_wr { rdma: wr_rdma { remote_addr: 0, rkey: 0 } },
                xrc_remote_srqn: 0,
                ext: send_wr_ext { tso: wr_tso { hdr: null_mut(), hdr_sz: 0, mss: 0 } },
            },
            open: false,
            need_addr: qp_type == qpt::UD,
            kept: None,
            kept_sges: [ibv_sge { addr: 0, length: 0, lkey: 0 }; KEPT_SGES],
            kept_inline: [0; KEPT_INLINE],
            error: 0,
        }
    }
}

/// The QP and its builder behind an extended QP handle.
///
/// # Safety
///
/// `qpx` is a live extended QP handle from this library, used by one thread at a time.
#[inline(always)]
unsafe fn parts<'a>(qpx: *mut ibv_qp_ex) -> (&'a mut ibv_qp_ex, &'a mut WrBuilder) {
    // SAFETY: the handle is the first field of a live UQp (see `objects::leak`); the builder is
    // in a cell only these entry points borrow, one call at a time (the crate's contract).
    unsafe { (&mut *qpx, &mut *UnsafeCell::raw_get(&raw const (*qpx.cast::<UQp>()).builder)) }
}

/// Starts a request: the builder's common part.
///
/// # Safety
///
/// As [`parts`].
#[inline(always)]
unsafe fn begin<'a>(qpx: *mut ibv_qp_ex, opcode: u32) -> &'a mut WrBuilder {
    // SAFETY: the function's contract.
    let (x, b) = unsafe { parts(qpx) };
    if b.open && b.error == 0 {
        // The previous request never got its data.
        b.error = EINVAL;
    }
    b.open = true;
    b.kept = None;
    b.need_addr = x.qp_base.qp_type == qpt::UD;
    b.wr.wr_id = x.wr_id;
    b.wr.send_flags = x.wr_flags;
    b.wr.opcode = opcode;
    b.wr.imm_data = 0;
    b
}

/// Posts the request with the data `sg_list` (`num_sge` entries, inline when `inline`).
///
/// # Safety
///
/// As [`parts`]; `sg_list` holds `num_sge` readable entries.
unsafe fn post(qpx: *mut ibv_qp_ex, sg_list: *mut ibv_sge, num_sge: usize, inline: bool) {
    // SAFETY: the function's contract.
    let (_, b) = unsafe { parts(qpx) };
    if !b.open {
        if b.error == 0 {
            b.error = EINVAL;
        }
        return;
    }
    if b.need_addr {
        // Keep the data until the UD address comes.
        if num_sge > KEPT_SGES {
            b.error = EINVAL;
            b.open = false;
            return;
        }
        // SAFETY: `num_sge` entries at `sg_list` (the contract).
        let given = unsafe { std::slice::from_raw_parts(sg_list, num_sge) };
        if inline {
            let total: usize = given.iter().map(|s| s.length as usize).sum();
            if total > KEPT_INLINE {
                b.error = EINVAL;
                b.open = false;
                return;
            }
            let mut at = 0;
            for s in given {
                // SAFETY: inline data the program passed: `length` readable bytes at `addr`.
                let src = unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
                b.kept_inline[at..at + src.len()].copy_from_slice(src);
                at += src.len();
            }
            b.kept_sges[0] = ibv_sge { addr: b.kept_inline.as_ptr() as u64, length: total as u32, lkey: 0 };
            b.kept = Some((1, true));
        } else {
            b.kept_sges[..num_sge].copy_from_slice(given);
            b.kept = Some((num_sge, false));
        }
        return;
    }
    b.wr.sg_list = sg_list;
    b.wr.num_sge = num_sge as c_int;
    if inline {
        b.wr.send_flags |= send_flags::INLINE;
    }
    b.open = false;
    let mut bad = null_mut();
    let qp = qpx.cast::<ibv_qp>();
    // SAFETY: a live QP handle; the request is the builder's, its SGEs the caller's.
    let r = unsafe { post_send(qp, &mut b.wr, &mut bad) };
    if r != 0 && b.error == 0 {
        b.error = r;
    }
}

/// The verbs QP behind an extended QP handle.
///
/// # Safety
///
/// As [`parts`].
unsafe fn verbs_qp<'a>(qpx: *mut ibv_qp_ex) -> &'a mut umlx_verbs::Qp {
    // SAFETY: the function's contract; an extended QP handle is its QP handle.
    unsafe { qp_of(qpx.cast::<ibv_qp>()) }
}

/// `wr_start`: opens a batch (a batch left open before is dropped, as a new `ibv_wr_start`
/// on mlx5 starts over).
unsafe extern "C" fn wr_start(qpx: *mut ibv_qp_ex) {
    // SAFETY: the ibverbs contract: a live extended QP of this library.
    let (_, b) = unsafe { parts(qpx) };
    b.open = false;
    b.kept = None;
    b.error = 0;
    // SAFETY: as above.
    let q = unsafe { verbs_qp(qpx) };
    q.abort_batch();
    q.start_batch();
}

/// `wr_complete`: publishes the batch with one doorbell and returns 0; after a failure since
/// `wr_start`, drops the whole batch and returns the first failure.
unsafe extern "C" fn wr_complete(qpx: *mut ibv_qp_ex) -> c_int {
    // SAFETY: as `wr_start`.
    let (_, b) = unsafe { parts(qpx) };
    if b.open && b.error == 0 {
        b.error = EINVAL;
    }
    b.open = false;
    let error = std::mem::take(&mut b.error);
    // SAFETY: as `wr_start`.
    let q = unsafe { verbs_qp(qpx) };
    if error == 0 {
        q.complete_batch();
    } else {
        q.abort_batch();
    }
    error
}

/// `wr_abort`: drops every request since `wr_start`; none of them executes.
unsafe extern "C" fn wr_abort(qpx: *mut ibv_qp_ex) {
    // SAFETY: as `wr_start`.
    let (_, b) = unsafe { parts(qpx) };
    b.open = false;
    b.kept = None;
    b.error = 0;
    // SAFETY: as `wr_start`.
    unsafe { verbs_qp(qpx) }.abort_batch();
}

unsafe extern "C" fn wr_rdma_write(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: as `wr_start`.
    let b = unsafe { begin(qpx, wr_opcode::RDMA_WRITE) };
    b.wr.wr = send_wr_wr { rdma: wr_rdma { remote_addr, rkey } };
}

unsafe extern "C" fn wr_rdma_write_imm(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, imm: u32) {
    // SAFETY: as `wr_start`.
    let b = unsafe { begin(qpx, wr_opcode::RDMA_WRITE_WITH_IMM) };
    b.wr.wr = send_wr_wr { rdma: wr_rdma { remote_addr, rkey } };
    b.wr.imm_data = imm;
}

unsafe extern "C" fn wr_rdma_read(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: as `wr_start`.
    let b = unsafe { begin(qpx, wr_opcode::RDMA_READ) };
    b.wr.wr = send_wr_wr { rdma: wr_rdma { remote_addr, rkey } };
}

unsafe extern "C" fn wr_send(qpx: *mut ibv_qp_ex) {
    // SAFETY: as `wr_start`.
    unsafe { begin(qpx, wr_opcode::SEND) };
}

unsafe extern "C" fn wr_send_imm(qpx: *mut ibv_qp_ex, imm: u32) {
    // SAFETY: as `wr_start`.
    let b = unsafe { begin(qpx, wr_opcode::SEND_WITH_IMM) };
    b.wr.imm_data = imm;
}

unsafe extern "C" fn wr_atomic_cmp_swp(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, compare: u64, swap: u64) {
    // SAFETY: as `wr_start`.
    let b = unsafe { begin(qpx, wr_opcode::ATOMIC_CMP_AND_SWP) };
    b.wr.wr = send_wr_wr { atomic: wr_atomic { remote_addr, compare_add: compare, swap, rkey } };
}

unsafe extern "C" fn wr_atomic_fetch_add(qpx: *mut ibv_qp_ex, rkey: u32, remote_addr: u64, add: u64) {
    // SAFETY: as `wr_start`.
    let b = unsafe { begin(qpx, wr_opcode::ATOMIC_FETCH_AND_ADD) };
    b.wr.wr = send_wr_wr { atomic: wr_atomic { remote_addr, compare_add: add, swap: 0, rkey } };
}

unsafe extern "C" fn wr_set_ud_addr(qpx: *mut ibv_qp_ex, ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32) {
    // SAFETY: as `wr_start`.
    let (_, b) = unsafe { parts(qpx) };
    if !b.open || !b.need_addr {
        if b.error == 0 {
            b.error = EINVAL;
        }
        return;
    }
    b.wr.wr = send_wr_wr { ud: wr_ud { ah, remote_qpn, remote_qkey } };
    b.need_addr = false;
    if let Some((n, inline)) = b.kept.take() {
        let sges = b.kept_sges.as_mut_ptr();
        // SAFETY: `n` kept entries in the builder, which lives as long as the QP.
        unsafe { post(qpx, sges, n, inline) };
    }
}

unsafe extern "C" fn wr_set_sge(qpx: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    let mut sge = ibv_sge { addr, length, lkey };
    // SAFETY: as `wr_start`; one SGE on this frame.
    unsafe { post(qpx, &mut sge, 1, false) };
}

unsafe extern "C" fn wr_set_sge_list(qpx: *mut ibv_qp_ex, num_sge: size_t, sg_list: *const ibv_sge) {
    if num_sge > 0 && sg_list.is_null() {
        // SAFETY: as `wr_start`.
        let (_, b) = unsafe { parts(qpx) };
        b.error = EINVAL;
        b.open = false;
        return;
    }
    // SAFETY: as `wr_start`; `num_sge` entries at `sg_list` (the ibverbs contract), only read.
    unsafe { post(qpx, sg_list.cast_mut(), num_sge, false) };
}

unsafe extern "C" fn wr_set_inline_data(qpx: *mut ibv_qp_ex, addr: *mut c_void, length: size_t) {
    let mut sge = ibv_sge { addr: addr as u64, length: length as u32, lkey: 0 };
    // SAFETY: as `wr_start`; one buffer on this frame.
    unsafe { post(qpx, &mut sge, 1, true) };
}

unsafe extern "C" fn wr_set_inline_data_list(qpx: *mut ibv_qp_ex, num_buf: size_t, bufs: *const ibv_data_buf) {
    let mut sges = [ibv_sge { addr: 0, length: 0, lkey: 0 }; KEPT_SGES];
    if num_buf > KEPT_SGES || (num_buf > 0 && bufs.is_null()) {
        // SAFETY: as `wr_start`.
        let (_, b) = unsafe { parts(qpx) };
        b.error = EINVAL;
        b.open = false;
        return;
    }
    for (i, s) in sges.iter_mut().enumerate().take(num_buf) {
        // SAFETY: `num_buf` entries at `bufs` (the ibverbs contract).
        let d = unsafe { *bufs.add(i) };
        *s = ibv_sge { addr: d.addr as u64, length: d.length as u32, lkey: 0 };
    }
    // SAFETY: as `wr_start`; `num_buf` entries on this frame.
    unsafe { post(qpx, sges.as_mut_ptr(), num_buf, true) };
}

/// The builders and setters of an extended QP created with `send_ops` (`ibv_qp_ex`'s function
/// pointers; those of operations not asked for stay NULL, as the program may not call them).
pub(crate) fn fill_ops(x: &mut ibv_qp_ex, send_ops_flags: u64) {
    let has = |f: u64| send_ops_flags & f != 0;
    x.wr_start = Some(wr_start);
    x.wr_complete = Some(wr_complete);
    x.wr_abort = Some(wr_abort);
    x.wr_rdma_write = has(send_ops::RDMA_WRITE).then_some(wr_rdma_write as _);
    x.wr_rdma_write_imm = has(send_ops::RDMA_WRITE_WITH_IMM).then_some(wr_rdma_write_imm as _);
    x.wr_rdma_read = has(send_ops::RDMA_READ).then_some(wr_rdma_read as _);
    x.wr_send = has(send_ops::SEND).then_some(wr_send as _);
    x.wr_send_imm = has(send_ops::SEND_WITH_IMM).then_some(wr_send_imm as _);
    x.wr_atomic_cmp_swp = has(send_ops::ATOMIC_CMP_AND_SWP).then_some(wr_atomic_cmp_swp as _);
    x.wr_atomic_fetch_add = has(send_ops::ATOMIC_FETCH_AND_ADD).then_some(wr_atomic_fetch_add as _);
    if x.qp_base.qp_type == qpt::UD {
        x.wr_set_ud_addr = Some(wr_set_ud_addr);
    }
    x.wr_set_sge = Some(wr_set_sge);
    x.wr_set_sge_list = Some(wr_set_sge_list);
    x.wr_set_inline_data = Some(wr_set_inline_data);
    x.wr_set_inline_data_list = Some(wr_set_inline_data_list);
}
