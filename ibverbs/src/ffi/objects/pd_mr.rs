//! Protection domains and memory regions: `ibv_alloc_pd`, `ibv_dealloc_pd`, `ibv_reg_mr*`,
//! `ibv_dereg_mr`.

use super::*;

// ---------------------------------------------------------------------------------------------
// Protection domains.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_pd` and its verbs PD.
#[repr(C)]
pub(crate) struct UPd {
    ibv: UnsafeCell<ibv_pd>,
    tag: AtomicU64,
    pub(super) pd: Pd,
    pub(super) ctx: *mut ibv_context,
    /// MRs, QPs and AHs on it.
    pub(super) users: AtomicU32,
}
tagged!(UPd, ibv_pd, tag::PD);

/// `ibv_alloc_pd`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_alloc_pd(ctx: *mut ibv_context) -> *mut ibv_pd {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return fail(EINVAL) };
    guard("ibv_alloc_pd", null_mut(), || match u.ctx.alloc_pd() {
        Ok(pd) => {
            let handle = pd.pdn();
            leak(UPd {
                ibv: UnsafeCell::new(ibv_pd { context: ctx, handle }),
                tag: AtomicU64::new(tag::PD),
                pd,
                ctx,
                users: AtomicU32::new(0),
            })
        }
        Err(e) => fail(errno_of("ibv_alloc_pd", &e)),
    })
}

/// `ibv_dealloc_pd`: EBUSY while MRs, QPs or AHs use it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    // SAFETY: the caller passes a PD handle (checked by tag).
    let Some(o) = (unsafe { object::<UPd>(pd) }) else { return EINVAL };
    if o.users.load(Ordering::Acquire) != 0 {
        return refuse("ibv_dealloc_pd", EBUSY, "MRs, QPs or AHs still use the PD");
    }
    // SAFETY: a live UPd from ibv_alloc_pd that nothing uses (no users), given up by the caller.
    guard("ibv_dealloc_pd", EIO, || unsafe {
        destroy::<UPd>(pd);
        0
    })
}

// ---------------------------------------------------------------------------------------------
// Memory regions.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_mr` and its verbs MR over the caller's memory.
#[repr(C)]
pub(crate) struct UMr {
    ibv: UnsafeCell<ibv_mr>,
    tag: AtomicU64,
    mr: Mr,
    pd: &'static UPd,
}
tagged!(UMr, ibv_mr, tag::MR);

/// Registers `len` bytes at `addr` in place.
fn reg_mr(call: &str, pd: *mut ibv_pd, addr: *mut c_void, len: size_t, iova: u64, access: c_int) -> *mut ibv_mr {
    // SAFETY: the caller passes a PD handle (checked by tag). The PD lives until its users
    // (this MR among them) are gone, so the reference is good for the MR's life.
    let Some(p) = (unsafe { object::<UPd>(pd) }) else { return fail(EINVAL) };
    let flags = match convert::mr_access(access) {
        Ok(f) => f,
        Err(e) => return fail(refuse(call, e, &format!("access flags {access:#x}"))),
    };
    let Some(start) = std::ptr::NonNull::new(addr.cast::<u8>()) else {
        return fail(refuse(call, EINVAL, "NULL address (implicit on-demand paging is not supported)"));
    };
    if len == 0 {
        return fail(refuse(call, EINVAL, "zero length"));
    }
    if iova != addr as u64 {
        return fail(unsupported(call, "an IOVA other than the address"));
    }
    guard(call, null_mut(), || {
        // SAFETY: ibv_reg_mr's contract: the caller's buffer of `len` bytes at `addr` stays
        // allocated until ibv_dereg_mr, and the library holds no reference into it (copies and
        // the device only).
        let buf = unsafe { ExternalBuffer::new(start, len) };
        match p.pd.reg_external(buf, flags) {
            Ok(mr) => {
                if FORK_INIT.load(Ordering::Relaxed) {
                    dontfork(addr as usize, len);
                }
                p.users.fetch_add(1, Ordering::AcqRel);
                leak(UMr {
                    ibv: UnsafeCell::new(ibv_mr {
                        context: p.ctx,
                        pd,
                        addr,
                        length: len,
                        handle: mr.lkey(),
                        lkey: mr.lkey(),
                        rkey: mr.rkey(),
                    }),
                    tag: AtomicU64::new(tag::MR),
                    mr,
                    // The PD outlives its MRs (EBUSY otherwise).
                    pd: p,
                })
            }
            Err(e) => fail(errno_of(call, &e)),
        }
    })
}

/// Keeps the pages under `[addr, addr + len)` out of children after `ibv_fork_init`, so a
/// child's copy-on-write cannot move them under the device.
fn dontfork(addr: usize, len: usize) {
    let page = 4096;
    let start = addr & !(page - 1);
    let end = (addr + len).next_multiple_of(page);
    // SAFETY: madvise on whole pages of a mapping the caller registered; DONTFORK changes only
    // what a child inherits.
    unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTFORK) };
}

/// `ibv_reg_mr`: registers the caller's buffer where it lies.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, len: size_t, access: c_int) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr", pd, addr, len, addr as u64, access)
}

/// `ibv_reg_mr_iova` (IBVERBS_1.7): only with the IOVA equal to the address.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr_iova", pd, addr, len, iova, access)
}

/// `ibv_reg_mr_iova2` (IBVERBS_1.8): what the header's `ibv_reg_mr` calls when the access
/// flags are not constant or carry optional bits.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: size_t,
    iova: u64,
    access: libc::c_uint,
) -> *mut ibv_mr {
    reg_mr("ibv_reg_mr_iova2", pd, addr, len, iova, access as c_int)
}

/// `ibv_dereg_mr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    // SAFETY: the caller passes an MR handle (checked by tag).
    let Some(o) = (unsafe { object::<UMr>(mr) }) else { return EINVAL };
    guard("ibv_dereg_mr", EIO, || {
        let pd = o.pd;
        // SAFETY: a live UMr from ibv_reg_mr, given up by the caller.
        unsafe { destroy::<UMr>(mr) };
        pd.users.fetch_sub(1, Ordering::AcqRel);
        0
    })
}
