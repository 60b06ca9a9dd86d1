//! Shared receive queues and address handles: `ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq`, `ibv_create_ah`, `ibv_destroy_ah`.

use super::*;

// ---------------------------------------------------------------------------------------------
// Shared receive queues.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_srq` and its verbs SRQ.
#[repr(C)]
pub(crate) struct USrq {
    ibv: UnsafeCell<ibv_srq>,
    tag: AtomicU64,
    /// Reached mutably by the data path only (`post_srq_recv`).
    pub(crate) srq: UnsafeCell<Srq>,
    /// The limit armed last (0: none; the limit event disarms it).
    limit: AtomicU32,
    pd: &'static UPd,
    /// QPs that take receives from it.
    pub(super) users: AtomicU32,
}
tagged!(USrq, ibv_srq, tag::SRQ);

/// `ibv_create_srq`: `init_attr.attr` gets what the SRQ got (`max_wr`, `max_sge`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_srq(pd: *mut ibv_pd, init_attr: *mut ibv_srq_init_attr) -> *mut ibv_srq {
    // SAFETY: the caller passes a PD handle (checked by tag).
    let Some(p) = (unsafe { object::<UPd>(pd) }) else { return fail(EINVAL) };
    if init_attr.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: `init_attr` points to a `struct ibv_srq_init_attr` (checked non-NULL).
    let a = unsafe { &mut *init_attr };
    let want = a.attr;
    if want.max_wr == 0 || want.max_sge == 0 {
        return fail(refuse(
            "ibv_create_srq",
            EINVAL,
            &format!("max_wr {} and max_sge {} must be at least 1", want.max_wr, want.max_sge),
        ));
    }
    guard("ibv_create_srq", null_mut(), || match p.pd.create_srq(want.max_wr, want.max_sge, want.srq_limit) {
        Ok(srq) => {
            a.attr = ibv_srq_attr { max_wr: srq.max_wr(), max_sge: srq.max_sge(), srq_limit: want.srq_limit };
            let (mutex, cond) = sync_pair();
            p.users.fetch_add(1, Ordering::AcqRel);
            let h = leak(USrq {
                ibv: UnsafeCell::new(ibv_srq {
                    context: p.ctx,
                    srq_context: a.srq_context,
                    pd,
                    handle: srq.srqn(),
                    mutex,
                    cond,
                    events_completed: 0,
                }),
                tag: AtomicU64::new(tag::SRQ),
                srq: UnsafeCell::new(srq),
                limit: AtomicU32::new(want.srq_limit),
                // The PD outlives its SRQs (EBUSY otherwise).
                pd: p,
                users: AtomicU32::new(0),
            });
            remember(h, Kind::Srq);
            h
        }
        Err(e) => fail(errno_of("ibv_create_srq", &e)),
    })
}

/// `ibv_modify_srq`: IBV_SRQ_LIMIT arms the limit event; resizing (IBV_SRQ_MAX_WR) is
/// refused with EINVAL, as mlx5 does.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr, mask: c_int) -> c_int {
    // SAFETY: the caller passes an SRQ handle (checked by tag).
    let Some(o) = (unsafe { object::<USrq>(srq) }) else { return EINVAL };
    if attr.is_null() {
        return EINVAL;
    }
    if mask & srq_attr_mask::MAX_WR != 0 {
        return refuse("ibv_modify_srq", EINVAL, "an SRQ cannot be resized (IBV_SRQ_MAX_WR)");
    }
    if mask & !srq_attr_mask::LIMIT != 0 {
        return refuse("ibv_modify_srq", EINVAL, &format!("unknown attribute mask bits {mask:#x}"));
    }
    if mask & srq_attr_mask::LIMIT == 0 {
        return 0;
    }
    // SAFETY: `attr` points to a `struct ibv_srq_attr` (checked non-NULL).
    let limit = unsafe { (*attr).srq_limit };
    guard("ibv_modify_srq", EIO, || {
        // SAFETY: a shared look at the SRQ; arming is a command, it touches no ring.
        match unsafe { &*o.srq.get() }.arm(limit) {
            Ok(()) => {
                o.limit.store(limit, Ordering::Relaxed);
                0
            }
            Err(e) => errno_of("ibv_modify_srq", &e),
        }
    })
}

/// `ibv_query_srq`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut ibv_srq, attr: *mut ibv_srq_attr) -> c_int {
    // SAFETY: the caller passes an SRQ handle (checked by tag).
    let Some(o) = (unsafe { object::<USrq>(srq) }) else { return EINVAL };
    if attr.is_null() {
        return EINVAL;
    }
    // SAFETY: a shared look at the SRQ's sizes; `attr` is writable (checked non-NULL).
    unsafe {
        let s = &*o.srq.get();
        attr.write(ibv_srq_attr {
            max_wr: s.max_wr(),
            max_sge: s.max_sge(),
            srq_limit: o.limit.load(Ordering::Relaxed),
        });
    }
    0
}

/// The limit event fired: the SRQ is disarmed (what `ibv_query_srq` reports).
pub(crate) fn srq_limit_reached(srq: &USrq) {
    srq.limit.store(0, Ordering::Relaxed);
}

/// `ibv_destroy_srq`: EBUSY while QPs take receives from it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    // SAFETY: the caller passes an SRQ handle (checked by tag).
    let Some(o) = (unsafe { object::<USrq>(srq) }) else { return EINVAL };
    if o.users.load(Ordering::Acquire) != 0 {
        return refuse("ibv_destroy_srq", EBUSY, "QPs still take receives from the SRQ");
    }
    guard("ibv_destroy_srq", EIO, || {
        let pd = o.pd;
        forget(o.handle(), Kind::Srq);
        // SAFETY: a live USrq that no QP uses, given up by the caller.
        unsafe { destroy::<USrq>(srq) };
        pd.users.fetch_sub(1, Ordering::AcqRel);
        0
    })
}

// ---------------------------------------------------------------------------------------------
// Address handles.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_ah` and its verbs AH.
#[repr(C)]
pub(crate) struct UAh {
    ibv: UnsafeCell<ibv_ah>,
    tag: AtomicU64,
    pub(crate) ah: Ah,
    pd: &'static UPd,
}
tagged!(UAh, ibv_ah, tag::AH);

/// The verbs AH behind a handle (the data path's UD sends).
///
/// # Safety
///
/// `ah` is NULL or an AH handle not yet destroyed.
pub(crate) unsafe fn uah<'a>(ah: *mut ibv_ah) -> Option<&'a UAh> {
    // SAFETY: the function's contract.
    unsafe { object::<UAh>(ah) }
}

/// `ibv_create_ah` (RoCE: `is_global` must be set).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: the caller passes a PD handle (checked by tag).
    let Some(p) = (unsafe { object::<UPd>(pd) }) else { return fail(EINVAL) };
    if attr.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: `attr` points to a `struct ibv_ah_attr` (checked non-NULL).
    let a = match convert::ah_attr(unsafe { &*attr }) {
        Ok(a) => a,
        Err(e) => return fail(refuse("ibv_create_ah", e, "a RoCE address needs is_global and a GRH")),
    };
    guard("ibv_create_ah", null_mut(), || match p.pd.create_ah(&a) {
        Ok(ah) => {
            p.users.fetch_add(1, Ordering::AcqRel);
            leak(UAh {
                ibv: UnsafeCell::new(ibv_ah { context: p.ctx, pd, handle: 0 }),
                tag: AtomicU64::new(tag::AH),
                ah,
                // The PD outlives its AHs (EBUSY otherwise).
                pd: p,
            })
        }
        Err(e) => fail(errno_of("ibv_create_ah", &e)),
    })
}

/// `ibv_destroy_ah`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    // SAFETY: the caller passes an AH handle (checked by tag).
    let Some(o) = (unsafe { object::<UAh>(ah) }) else { return EINVAL };
    guard("ibv_destroy_ah", EIO, || {
        let pd = o.pd;
        // SAFETY: a live UAh, given up by the caller.
        unsafe { destroy::<UAh>(ah) };
        pd.users.fetch_sub(1, Ordering::AcqRel);
        0
    })
}

/// `ibv_qp_type` of a QP, for the data path.
pub(crate) fn is_ud(q: &Qp) -> bool {
    q.qp_type() == QpType::Ud
}
