//! Asynchronous events (`ibv_get_async_event`, `ibv_ack_async_event`) and the enum strings
//! programs print with them. An event names its object by number (CQN, QPN, SRQN); each
//! context keeps the C handles of its CQs, QPs and SRQs by number (control path only) so that
//! the event carries the handle the program created.

use super::objects::{USrq, srq_limit_reached};
use super::*;
use crate::convert::{EventElement, async_event, event_element};
use std::collections::HashMap;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::time::Duration;

/// The C handles of a context's CQs, QPs and SRQs, by kind and number.
#[derive(Default)]
pub(crate) struct Handles(Mutex<HashMap<(u8, u32), usize>>);

/// The kinds of object an event can name, as the registry keys them.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Cq = 0,
    Qp = 1,
    Srq = 2,
}

impl Handles {
    /// Records the handle of a new object.
    pub(crate) fn insert<T>(&self, kind: Kind, num: u32, handle: *mut T) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert((kind as u8, num), handle as usize);
    }

    /// Forgets a destroyed object.
    pub(crate) fn remove(&self, kind: Kind, num: u32) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&(kind as u8, num));
    }

    fn get(&self, kind: Kind, num: u32) -> Option<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).get(&(kind as u8, num)).copied()
    }
}

/// The next event of the context that a program is told about, as `struct ibv_async_event`;
/// events of objects destroyed since are dropped.
fn next_event(u: &UContext) -> Result<Option<ibv_async_event>, c_int> {
    loop {
        let ev = match u.ctx.get_async_event() {
            Ok(Some(ev)) => ev,
            Ok(None) => return Ok(None),
            Err(e) => return Err(errno_of("ibv_get_async_event", &e)),
        };
        let Some((event_type, what)) = async_event(ev.event_type, ev.sub_type) else { continue };
        let element = match what {
            EventElement::Cq => u.handles.get(Kind::Cq, ev.object).map(|h| async_element { cq: h as *mut ibv_cq }),
            EventElement::Qp => u.handles.get(Kind::Qp, ev.object).map(|h| async_element { qp: h as *mut ibv_qp }),
            EventElement::Srq => u.handles.get(Kind::Srq, ev.object).map(|h| {
                if event_type == event_type::SRQ_LIMIT_REACHED {
                    // SAFETY: a registered handle is a live SRQ (it is removed before it is
                    // freed).
                    if let Some(s) = unsafe { (h as *mut USrq).as_ref() } {
                        srq_limit_reached(s);
                    }
                }
                async_element { srq: h as *mut ibv_srq }
            }),
            EventElement::Port => Some(async_element { port_num: ev.object as c_int }),
            EventElement::Device => Some(async_element { port_num: 0 }),
        };
        if let Some(element) = element {
            return Ok(Some(ibv_async_event { element, event_type }));
        }
    }
}

/// Waits until the eventfd `fd` is signalled (at most `timeout_ms`, -1: no limit), then
/// clears it.
fn wait_and_clear(fd: c_int, timeout_ms: c_int) {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd, owned by this frame.
    if unsafe { libc::poll(&mut p, 1, timeout_ms) } == 1 && p.revents & libc::POLLIN != 0 {
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into a local u64; the eventfd is readable, so this does not
        // block.
        unsafe { libc::read(fd, (&raw mut count).cast(), 8) };
    }
}

/// `ibv_get_async_event`: waits for the next asynchronous event of the context (returns at
/// once with EAGAIN when `async_fd` is non-blocking and none is pending).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_async_event(ctx: *mut ibv_context, event: *mut ibv_async_event) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else {
        set_errno(EINVAL);
        return -1;
    };
    if event.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    let fd = u.async_fd.as_ref().map_or(-1, |f| f.as_raw_fd());
    guard("ibv_get_async_event", -1, || {
        let nonblock = fd >= 0 && nonblocking(fd);
        loop {
            match next_event(u) {
                Ok(Some(e)) => {
                    // SAFETY: `event` is writable (checked non-NULL).
                    unsafe { event.write(e) };
                    return 0;
                }
                Ok(None) => {}
                Err(e) => {
                    set_errno(e);
                    return -1;
                }
            }
            if nonblock {
                // Clear the readiness that brought the program here, then look once more (an
                // event may have come in between).
                wait_and_clear(fd, 0);
                if let Ok(Some(e)) = next_event(u) {
                    // SAFETY: as above.
                    unsafe { event.write(e) };
                    return 0;
                }
                set_errno(libc::EAGAIN);
                return -1;
            }
            if fd >= 0 {
                wait_and_clear(fd, -1);
            } else {
                // A backend without an interrupt descriptor: look again shortly.
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    })
}

/// `ibv_ack_async_event`: counts the event on its object (`events_completed`,
/// `async_events_completed`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    if event.is_null() {
        return;
    }
    // SAFETY: `event` is an event `ibv_get_async_event` filled; its element is a live handle of
    // the kind its type names (the program acknowledges before destroying the object).
    unsafe {
        let e = *event;
        match event_element(e.event_type) {
            EventElement::Cq if !e.element.cq.is_null() => {
                (*e.element.cq).async_events_completed = (*e.element.cq).async_events_completed.wrapping_add(1)
            }
            EventElement::Qp if !e.element.qp.is_null() => {
                (*e.element.qp).events_completed = (*e.element.qp).events_completed.wrapping_add(1)
            }
            EventElement::Srq if !e.element.srq.is_null() => {
                (*e.element.srq).events_completed = (*e.element.srq).events_completed.wrapping_add(1)
            }
            _ => {}
        }
    }
}

/// `ibv_event_type_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_event_type_str(event: u32) -> *const c_char {
    const NAMES: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    NAMES.get(event as usize).unwrap_or(&c"unknown").as_ptr()
}

/// `ibv_node_type_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    const NAMES: [&CStr; 6] = [
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
    ];
    usize::try_from(node_type - 1).ok().and_then(|i| NAMES.get(i)).unwrap_or(&c"unknown").as_ptr()
}
