//! Protection domains, memory regions, completion channels, CQs, QPs and address handles: the
//! control path of the C ABI over `umlx-verbs`.

use super::events::Kind;
use super::qp_ex::{WrBuilder, fill_ops};
use super::*;
use libc::{EAGAIN, EBUSY};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use umlx_verbs::{Ah, CompChannel, Cq, ExternalBuffer, Mr, Pd, Qp, QpType, Srq};

/// A zeroed pthread mutex and condition variable (their static initialisers on Linux).
fn sync_pair() -> (libc::pthread_mutex_t, libc::pthread_cond_t) {
    (libc::PTHREAD_MUTEX_INITIALIZER, libc::PTHREAD_COND_INITIALIZER)
}

/// Reads an object behind a handle after checking its tag.
///
/// # Safety
///
/// `p` is NULL or a handle of the kind `T` is, from this library, not yet destroyed (or a
/// stale one, whose tag was cleared).
unsafe fn object<'a, T: Tagged>(p: *mut T::C) -> Option<&'a T> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the handle is the first field of a live T (repr(C), UnsafeCell transparent).
    let o = unsafe { &*p.cast::<T>() };
    (o.tag() == T::TAG).then_some(o)
}

/// An object whose first field is its C handle, with a tag after it.
pub(crate) trait Tagged {
    /// The C structure.
    type C;
    /// The live tag.
    const TAG: u64;
    /// The tag now.
    fn tag(&self) -> u64;
    /// Marks the object dead (a stale handle is then refused).
    fn clear_tag(&self);
    /// The C handle, for reading and writing its fields (not for freeing).
    fn handle(&self) -> *mut Self::C;
}

macro_rules! tagged {
    ($t:ty, $c:ty, $tag:expr) => {
        impl Tagged for $t {
            type C = $c;
            const TAG: u64 = $tag;
            fn tag(&self) -> u64 {
                self.tag.load(Ordering::Relaxed)
            }
            fn clear_tag(&self) {
                self.tag.store(tag::DEAD, Ordering::Relaxed)
            }
            fn handle(&self) -> *mut $c {
                self.ibv.get().cast()
            }
        }
    };
}

/// Moves an object to the heap for C: the handle is its first field, with the provenance of
/// the whole allocation (taken from the raw pointer, no reference in between).
fn leak<T: Tagged>(o: T) -> *mut T::C {
    Box::into_raw(Box::new(o)).cast::<T::C>()
}

/// Frees the object behind a handle from [`leak`], after clearing its tag.
///
/// # Safety
///
/// `handle` is a live handle of a `T` that no one uses any more.
unsafe fn destroy<T: Tagged>(handle: *mut T::C) {
    let o = handle.cast::<T>();
    // SAFETY: see the function's contract: `o` is the allocation `leak` made.
    unsafe {
        (*o).clear_tag();
        drop(Box::from_raw(o));
    }
}

/// The C handle types whose `context` and `handle` fields name an object for events.
trait Named {
    fn context_and_number(&self) -> (*mut ibv_context, u32);
}
impl Named for ibv_cq {
    fn context_and_number(&self) -> (*mut ibv_context, u32) {
        (self.context, self.handle)
    }
}
impl Named for ibv_qp {
    fn context_and_number(&self) -> (*mut ibv_context, u32) {
        (self.context, self.handle)
    }
}
impl Named for ibv_srq {
    fn context_and_number(&self) -> (*mut ibv_context, u32) {
        (self.context, self.handle)
    }
}

/// Records a new object's handle with its context, for the events that name it.
fn remember<T: Named>(h: *mut T, kind: Kind) {
    // SAFETY: `h` is a new handle this library made, its fields set.
    let (ctx, num) = unsafe { (*h).context_and_number() };
    // SAFETY: the object's context is open (objects are created on an open context).
    if let Some(u) = unsafe { ucontext(ctx) } {
        u.handles.insert(kind, num, h);
    }
}

/// Forgets an object about to be destroyed.
fn forget<T: Named>(h: *mut T, kind: Kind) {
    // SAFETY: `h` is a live handle of this library.
    let (ctx, num) = unsafe { (*h).context_and_number() };
    // SAFETY: the object's context is still open (the ibverbs contract: objects go first).
    if let Some(u) = unsafe { ucontext(ctx) } {
        u.handles.remove(kind, num);
    }
}

// ---------------------------------------------------------------------------------------------
// Protection domains.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_pd` and its verbs PD.
#[repr(C)]
pub(crate) struct UPd {
    ibv: UnsafeCell<ibv_pd>,
    tag: AtomicU64,
    pd: Pd,
    ctx: *mut ibv_context,
    /// MRs, QPs and AHs on it.
    users: AtomicU32,
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

// ---------------------------------------------------------------------------------------------
// Completion channels.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_comp_channel` and its verbs channel.
#[repr(C)]
pub(crate) struct UChannel {
    ibv: UnsafeCell<ibv_comp_channel>,
    tag: AtomicU64,
    pub(crate) ch: Arc<CompChannel>,
    /// The `fd` the program sees (see `readiness_fd`).
    ready: OwnedFd,
    /// CQs bound to it.
    users: AtomicU32,
}
tagged!(UChannel, ibv_comp_channel, tag::CHANNEL);

/// An epoll descriptor that is readable while `fd` is: the channel's `fd` for the program.
/// The interrupt eventfd itself is non-blocking (the driver drains it without waiting), so it
/// cannot tell whether the program made the channel non-blocking; the epoll descriptor is the
/// program's own open file, whose `O_NONBLOCK` says so, and `poll`/`epoll` wait on it alike.
fn readiness_fd(fd: impl std::os::fd::AsFd) -> std::io::Result<OwnedFd> {
    // SAFETY: epoll_create1 reads no memory; a new descriptor or -1.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if ep < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `ep` is a new descriptor this process owns from here on.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: 0 };
    // SAFETY: `ev` is a valid epoll_event for the call; `fd` is the channel's open eventfd.
    if unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_fd().as_raw_fd(), &mut ev) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(ep)
}

/// `ibv_create_comp_channel`: its `fd` becomes readable when the channel has an event, for
/// `poll`/`epoll`; set `O_NONBLOCK` on it and `ibv_get_cq_event` answers EAGAIN instead of
/// waiting.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_comp_channel(ctx: *mut ibv_context) -> *mut ibv_comp_channel {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return fail(EINVAL) };
    guard("ibv_create_comp_channel", null_mut(), || match u.ctx.create_comp_channel() {
        Ok(ch) => {
            let Some(fd) = ch.fd() else {
                return fail(unsupported("ibv_create_comp_channel", "a device without interrupt eventfds"));
            };
            let ready = match readiness_fd(&*fd) {
                Ok(r) => r,
                Err(e) => {
                    let errno = e.raw_os_error().unwrap_or(EIO);
                    return fail(refuse("ibv_create_comp_channel", errno, &format!("epoll: {e}")));
                }
            };
            leak(UChannel {
                ibv: UnsafeCell::new(ibv_comp_channel { context: ctx, fd: ready.as_raw_fd(), refcnt: 0 }),
                tag: AtomicU64::new(tag::CHANNEL),
                ch,
                ready,
                users: AtomicU32::new(0),
            })
        }
        Err(e) => fail(errno_of("ibv_create_comp_channel", &e)),
    })
}

/// `ibv_destroy_comp_channel`: EBUSY while CQs are bound to it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_comp_channel(ch: *mut ibv_comp_channel) -> c_int {
    // SAFETY: the caller passes a channel handle (checked by tag).
    let Some(o) = (unsafe { object::<UChannel>(ch) }) else { return EINVAL };
    if o.users.load(Ordering::Acquire) != 0 {
        return refuse("ibv_destroy_comp_channel", EBUSY, "CQs are still bound to the channel");
    }
    // SAFETY: a live UChannel that no CQ uses, given up by the caller.
    guard("ibv_destroy_comp_channel", EIO, || unsafe {
        destroy::<UChannel>(ch);
        0
    })
}

// ---------------------------------------------------------------------------------------------
// Completion queues.
// ---------------------------------------------------------------------------------------------

/// `struct ibv_cq` and its verbs CQ.
#[repr(C)]
pub(crate) struct UCq {
    ibv: UnsafeCell<ibv_cq>,
    tag: AtomicU64,
    /// Reached mutably by the data path only (`poll_cq`, `req_notify_cq`).
    pub(crate) cq: UnsafeCell<Cq>,
    channel: Option<&'static UChannel>,
    /// QPs that complete on it.
    users: AtomicU32,
}
tagged!(UCq, ibv_cq, tag::CQ);

/// `ibv_create_cq` with at least `cqe` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_cq(
    ctx: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return fail(EINVAL) };
    let ch = if channel.is_null() {
        None
    } else {
        // SAFETY: a non-NULL channel is a channel handle (checked by tag); it lives while CQs
        // are bound to it (EBUSY otherwise), so the reference is good for the CQ's life.
        match unsafe { object::<UChannel>(channel) } {
            Some(c) => Some(c),
            None => return fail(EINVAL),
        }
    };
    // SAFETY: reading the context's own field.
    let vectors = unsafe { (*u.handle()).num_comp_vectors };
    if cqe < 1 || comp_vector < 0 || (comp_vector >= vectors && vectors > 0) {
        return fail(refuse("ibv_create_cq", EINVAL, &format!("cqe {cqe}, comp_vector {comp_vector}")));
    }
    guard("ibv_create_cq", null_mut(), || match u.ctx.create_cq(cqe as u32, ch.map(|c| &c.ch)) {
        Ok(cq) => {
            let capacity = cq.capacity().min(c_int::MAX as u32) as c_int;
            let (mutex, cond) = sync_pair();
            if let Some(c) = ch {
                c.users.fetch_add(1, Ordering::AcqRel);
                // SAFETY: the channel's own field, which C only reads.
                unsafe { (*c.handle()).refcnt += 1 };
            }
            let h = leak(UCq {
                ibv: UnsafeCell::new(ibv_cq {
                    context: ctx,
                    channel,
                    cq_context,
                    handle: cq.cqn(),
                    cqe: capacity,
                    mutex,
                    cond,
                    comp_events_completed: 0,
                    async_events_completed: 0,
                }),
                tag: AtomicU64::new(tag::CQ),
                cq: UnsafeCell::new(cq),
                channel: ch,
                users: AtomicU32::new(0),
            });
            // Events name the CQ by its handle: `ibv_get_cq_event` hands it back.
            // SAFETY: a shared look at the new CQ, which no one else has yet.
            unsafe { (*UnsafeCell::raw_get(&raw const (*h.cast::<UCq>()).cq)).set_event_context(h as u64) };
            remember(h, Kind::Cq);
            h
        }
        Err(e) => fail(errno_of("ibv_create_cq", &e)),
    })
}

/// `ibv_destroy_cq`: EBUSY while QPs complete on it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    // SAFETY: the caller passes a CQ handle (checked by tag).
    let Some(o) = (unsafe { object::<UCq>(cq) }) else { return EINVAL };
    if o.users.load(Ordering::Acquire) != 0 {
        return refuse("ibv_destroy_cq", EBUSY, "QPs still complete on the CQ");
    }
    guard("ibv_destroy_cq", EIO, || {
        let ch = o.channel;
        forget(o.handle(), Kind::Cq);
        // SAFETY: a live UCq that no QP uses, given up by the caller.
        unsafe { destroy::<UCq>(cq) };
        if let Some(c) = ch {
            c.users.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: the channel's own field, which C only reads.
            unsafe { (*c.handle()).refcnt -= 1 };
        }
        0
    })
}

/// `ibv_get_cq_event`: waits for a completion event on the channel (returns at once with
/// EAGAIN when the channel's fd is non-blocking and none is pending).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_cq_event(
    ch: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    // SAFETY: the caller passes a channel handle (checked by tag).
    let Some(o) = (unsafe { object::<UChannel>(ch) }) else {
        set_errno(EINVAL);
        return -1;
    };
    if cq.is_null() || cq_context.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    guard("ibv_get_cq_event", -1, || {
        let nonblocking = nonblocking(o.ready.as_raw_fd());
        loop {
            let wait = if nonblocking { Duration::ZERO } else { Duration::from_secs(3600) };
            match o.ch.get_cq_event(wait) {
                Ok(Some(ev)) => {
                    let handle = ev.context() as *mut ibv_cq;
                    if handle.is_null() {
                        continue; // an event of a CQ destroyed since
                    }
                    // SAFETY: a CQ bound to this channel set its handle as the event's value;
                    // it is live until the caller destroys it (after acknowledging its events).
                    unsafe {
                        cq.write(handle);
                        cq_context.write((*handle).cq_context);
                    }
                    return 0;
                }
                Ok(None) if nonblocking => {
                    set_errno(EAGAIN);
                    return -1;
                }
                Ok(None) => {}
                Err(e) => {
                    set_errno(errno_of("ibv_get_cq_event", &e));
                    return -1;
                }
            }
        }
    })
}

/// `ibv_ack_cq_events`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: libc::c_uint) {
    // SAFETY: the caller passes a CQ handle (checked by tag).
    if let Some(o) = unsafe { object::<UCq>(cq) } {
        // SAFETY: the CQ's own counter, which C only reads.
        unsafe { (*o.handle()).comp_events_completed = (*o.handle()).comp_events_completed.wrapping_add(nevents) };
    }
}

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
    users: AtomicU32,
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
