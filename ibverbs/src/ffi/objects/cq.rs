//! Completion channels and completion queues: `ibv_create_comp_channel`, `ibv_create_cq`,
//! `ibv_get_cq_event`, `ibv_ack_cq_events` and their destroys.

use super::*;

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
    pub(super) users: AtomicU32,
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
