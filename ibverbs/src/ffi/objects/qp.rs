//! Queue pairs: `ibv_create_qp` (and the extended create), `ibv_modify_qp`, `ibv_query_qp`,
//! `ibv_destroy_qp`, `ibv_qp_to_qp_ex`.

use super::*;

// ---------------------------------------------------------------------------------------------
// Queue pairs.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_qp` (inside the `struct ibv_qp_ex` every QP has, used when it was created
/// extended) and its verbs QP.
#[repr(C)]
pub(crate) struct UQp {
    ibv: UnsafeCell<ibv_qp_ex>,
    tag: AtomicU64,
    /// Reached mutably by the data path (posts) and by `ibv_modify_qp`.
    pub(crate) qp: UnsafeCell<Qp>,
    /// Created by `ibv_create_qp_ex` with send-ops flags: `ibv_qp_to_qp_ex` gives the
    /// `ibv_qp_ex` and its builders.
    extended: bool,
    /// The request the new post-send API is building.
    pub(crate) builder: UnsafeCell<WrBuilder>,
    pd: &'static UPd,
    send_cq: &'static UCq,
    recv_cq: &'static UCq,
    srq: Option<&'static USrq>,
}
tagged!(UQp, ibv_qp, tag::QP);

/// `ibv_create_qp`: an RC or UD QP (other types: EOPNOTSUPP); `attr.cap` gets what the QP got.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_qp(pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr) -> *mut ibv_qp {
    // SAFETY: the caller's arguments, as `create_qp` takes them.
    unsafe { create_qp("ibv_create_qp", pd, attr, None) }
}

/// `verbs_context.create_qp_ex` (`ibv_create_qp_ex`): a QP with a PD and, with send-ops flags,
/// the new post-send API (`ibv_qp_to_qp_ex`). XRC, TSO, RSS, create flags: EOPNOTSUPP.
pub(crate) unsafe extern "C" fn create_qp_ex(_ctx: *mut ibv_context, attr: *mut ibv_qp_init_attr_ex) -> *mut ibv_qp {
    if attr.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: `attr` points to a `struct ibv_qp_init_attr_ex` (checked non-NULL).
    let a = unsafe { &*attr };
    let known = qp_init_attr_mask::PD | qp_init_attr_mask::SEND_OPS_FLAGS | qp_init_attr_mask::CREATE_FLAGS;
    if a.comp_mask & !known != 0 || (a.comp_mask & qp_init_attr_mask::CREATE_FLAGS != 0 && a.create_flags != 0) {
        return fail(unsupported(
            "ibv_create_qp_ex",
            &format!("comp_mask {:#x} (XRC, TSO, RSS or create flags)", a.comp_mask),
        ));
    }
    if a.comp_mask & qp_init_attr_mask::PD == 0 {
        return fail(refuse("ibv_create_qp_ex", EINVAL, "IBV_QP_INIT_ATTR_PD is required"));
    }
    let send_ops = (a.comp_mask & qp_init_attr_mask::SEND_OPS_FLAGS != 0).then_some(a.send_ops_flags);
    if let Some(f) = send_ops
        && f & !send_ops::SUPPORTED != 0
    {
        return fail(unsupported("ibv_create_qp_ex", &format!("send_ops_flags {:#x}", f & !send_ops::SUPPORTED)));
    }
    // SAFETY: `struct ibv_qp_init_attr_ex` starts with `struct ibv_qp_init_attr`'s fields (as
    // rdma-core reads it); the PD is checked by tag.
    unsafe { create_qp("ibv_create_qp_ex", a.pd, attr.cast(), send_ops) }
}

/// A QP from the creation attributes; `send_ops`: an extended QP with those builders.
///
/// # Safety
///
/// `pd` is NULL or a PD handle; `attr` is NULL or points to the attributes (their `cap` is
/// written back).
unsafe fn create_qp(call: &str, pd: *mut ibv_pd, attr: *mut ibv_qp_init_attr, send_ops: Option<u64>) -> *mut ibv_qp {
    // SAFETY: the caller passes a PD handle (checked by tag).
    let Some(p) = (unsafe { object::<UPd>(pd) }) else { return fail(EINVAL) };
    if attr.is_null() {
        return fail(EINVAL);
    }
    // SAFETY: `attr` points to a `struct ibv_qp_init_attr` (checked non-NULL).
    let a = unsafe { &mut *attr };
    let qp_type = match convert::qp_type(a.qp_type) {
        Ok(t) => t,
        Err(e) => return fail(refuse(call, e, &convert::qp_type_refusal(a.qp_type, e))),
    };
    // SAFETY: a non-NULL SRQ pointer is an SRQ handle (checked by tag); an SRQ lives while QPs
    // take receives from it (EBUSY otherwise), so the reference is good for the QP's life.
    let srq = match unsafe { object::<USrq>(a.srq) } {
        Some(s) => Some(s),
        None if a.srq.is_null() => None,
        None => return fail(refuse(call, EINVAL, "srq is not an SRQ")),
    };
    // SAFETY: non-NULL CQ pointers are CQ handles (checked by tag); a CQ lives while QPs
    // complete on it (EBUSY otherwise), so the references are good for the QP's life.
    let (Some(scq), Some(rcq)) = (unsafe { object::<UCq>(a.send_cq) }, unsafe { object::<UCq>(a.recv_cq) }) else {
        return fail(refuse(call, EINVAL, "send_cq and recv_cq must be CQs"));
    };
    guard(call, null_mut(), || {
        // SAFETY: shared looks at the CQs to build the QP on them (QP creation does not race
        // with polling those CQs, per the crate's contract).
        let (sc, rc) = unsafe { (&*scq.cq.get(), &*rcq.cq.get()) };
        let mut builder =
            p.pd.create_qp(qp_type, sc).recv_cq(rc).cap(convert::qp_cap(&a.cap)).sq_sig_all(a.sq_sig_all != 0);
        if let Some(s) = srq {
            // SAFETY: a shared look at the SRQ (QP creation does not race with posts to it,
            // per the crate's contract).
            builder = builder.srq(unsafe { &*s.srq.get() });
        }
        let built = builder.build();
        match built {
            Ok(qp) => {
                a.cap = convert::c_qp_cap(&qp.cap);
                let (mutex, cond) = sync_pair();
                let qpn = qp.qp_num();
                for u in [&p.users, &scq.users, &rcq.users] {
                    u.fetch_add(1, Ordering::AcqRel);
                }
                if let Some(s) = srq {
                    s.users.fetch_add(1, Ordering::AcqRel);
                }
                let mut x = ibv_qp_ex {
                    qp_base: ibv_qp {
                        context: p.ctx,
                        qp_context: a.qp_context,
                        pd,
                        send_cq: a.send_cq,
                        recv_cq: a.recv_cq,
                        srq: a.srq,
                        handle: qpn,
                        qp_num: qpn,
                        state: qp.state() as u32,
                        qp_type: a.qp_type,
                        mutex,
                        cond,
                        events_completed: 0,
                    },
                    comp_mask: 0,
                    wr_id: 0,
                    wr_flags: 0,
                    wr_atomic_cmp_swp: None,
                    wr_atomic_fetch_add: None,
                    wr_bind_mw: None,
                    wr_local_inv: None,
                    wr_rdma_read: None,
                    wr_rdma_write: None,
                    wr_rdma_write_imm: None,
                    wr_send: None,
                    wr_send_imm: None,
                    wr_send_inv: None,
                    wr_send_tso: None,
                    wr_set_ud_addr: None,
                    wr_set_xrc_srqn: None,
                    wr_set_inline_data: None,
                    wr_set_inline_data_list: None,
                    wr_set_sge: None,
                    wr_set_sge_list: None,
                    wr_start: None,
                    wr_complete: None,
                    wr_abort: None,
                    wr_atomic_write: None,
                };
                if let Some(f) = send_ops {
                    fill_ops(&mut x, f);
                }
                let h = leak(UQp {
                    ibv: UnsafeCell::new(x),
                    tag: AtomicU64::new(tag::QP),
                    qp: UnsafeCell::new(qp),
                    extended: send_ops.is_some(),
                    builder: UnsafeCell::new(WrBuilder::new(a.qp_type)),
                    // These outlive the QP (EBUSY otherwise).
                    pd: p,
                    send_cq: scq,
                    recv_cq: rcq,
                    srq,
                });
                remember(h, Kind::Qp);
                h
            }
            Err(e) => fail(errno_of(call, &e)),
        }
    })
}

/// `ibv_modify_qp`: the attributes `mask` names, checked against the transition.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    // SAFETY: the caller passes a QP handle (checked by tag).
    let Some(o) = (unsafe { object::<UQp>(qp) }) else { return EINVAL };
    if attr.is_null() {
        return EINVAL;
    }
    guard("ibv_modify_qp", EIO, || {
        // SAFETY: the QP's verbs object; modify does not race with posts to the same QP (the
        // crate's contract). `attr` points to a `struct ibv_qp_attr` (checked non-NULL).
        let (q, a) = unsafe { (&mut *o.qp.get(), &*attr) };
        let m = match convert::modify_qp(a, mask, q.state()) {
            Ok(m) => m,
            Err(e) => return refuse("ibv_modify_qp", e, &format!("attribute mask {mask:#x}")),
        };
        match q.modify(&m) {
            Ok(()) => {
                // SAFETY: the QP's own field, which C only reads.
                unsafe { (*o.handle()).state = q.state() as u32 };
                0
            }
            Err(e) => errno_of("ibv_modify_qp", &e),
        }
    })
}

/// `ibv_query_qp`: the attributes as the device holds them, and the creation attributes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    _mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    // SAFETY: the caller passes a QP handle (checked by tag).
    let Some(o) = (unsafe { object::<UQp>(qp) }) else { return EINVAL };
    if attr.is_null() || init_attr.is_null() {
        return EINVAL;
    }
    guard("ibv_query_qp", EIO, || {
        // SAFETY: a shared look at the QP (no post races with a query, per the contract).
        let q = unsafe { &*o.qp.get() };
        match q.query() {
            Ok(a) => {
                // SAFETY: the QP's own fields (read), and the caller's two structures (checked
                // non-NULL) written whole.
                unsafe {
                    let h = &*o.handle();
                    attr.write(convert::c_qp_attr(&a));
                    init_attr.write(ibv_qp_init_attr {
                        qp_context: h.qp_context,
                        send_cq: h.send_cq,
                        recv_cq: h.recv_cq,
                        srq: h.srq,
                        cap: convert::c_qp_cap(&q.cap),
                        qp_type: h.qp_type,
                        sq_sig_all: 0,
                    });
                    if let Some(s) = a.qp_state {
                        (*o.handle()).state = s as u32;
                    }
                }
                0
            }
            Err(e) => errno_of("ibv_query_qp", &e),
        }
    })
}

/// `ibv_destroy_qp`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    // SAFETY: the caller passes a QP handle (checked by tag).
    let Some(o) = (unsafe { object::<UQp>(qp) }) else { return EINVAL };
    guard("ibv_destroy_qp", EIO, || {
        let (pd, scq, rcq, srq) = (o.pd, o.send_cq, o.recv_cq, o.srq);
        forget(o.handle(), Kind::Qp);
        // SAFETY: a live UQp, given up by the caller.
        unsafe { destroy::<UQp>(qp) };
        for u in [&pd.users, &scq.users, &rcq.users] {
            u.fetch_sub(1, Ordering::AcqRel);
        }
        if let Some(s) = srq {
            s.users.fetch_sub(1, Ordering::AcqRel);
        }
        0
    })
}

/// `ibv_qp_to_qp_ex` (IBVERBS_1.6): the `ibv_qp_ex` of a QP created by `ibv_create_qp_ex` with
/// send-ops flags; NULL for any other QP (as rdma-core).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    // SAFETY: the caller passes a QP handle (checked by tag).
    match unsafe { object::<UQp>(qp) } {
        Some(o) if o.extended => o.ibv.get(),
        _ => fail(EOPNOTSUPP),
    }
}
