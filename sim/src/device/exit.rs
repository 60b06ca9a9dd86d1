//! What the process's exit owes its sims' peers: the ACKs a polling application's run left
//! waiting ([`crate::port::Port::acks_may_wait`]), and the frames of send doorbells rung back
//! to back that its port held for one datagram (`port::tx_hold`).
//!
//! A ConnectX acknowledges a request as it arrives. The sim may hold that ACK back, for a
//! polling application to send it with its reply in one datagram; a later poll, post or
//! command, or the engine within 20 ms, sends it. A program that exits right after the poll
//! that took the request (destroying nothing, as many small programs do, and any program on an
//! error path) would leave it unsent, and its peer, whose request was delivered, retransmits
//! to a closed port until its retry count runs out and fails the request.
//!
//! So each device registers here as it starts, and the first registration asks the C library
//! to call [`send_owed_acks_at_exit`] when the process exits (`atexit`: on `exit` or a return
//! from `main`; nothing runs on a signal that kills the process, or on `_exit`). In a library
//! loaded with `dlopen`, the C library calls it when that library is unloaded instead.
//!
//! This is one of the `unsafe` modules (the README lists them all): the `atexit` call.

use super::Inner;
use std::sync::{Arc, Mutex, Once, PoisonError, Weak};
use std::time::{Duration, Instant};

/// Every device started in this process (the dead ones are pruned at each start), and the
/// process that started them: a child forked since inherits the list and the handler, and
/// sends nothing for its parent's devices.
static DEVICES: Mutex<(u32, Vec<Weak<Inner>>)> = Mutex::new((0, Vec::new()));

/// How long the exit waits for a device another thread holds before it leaves its ACKs unsent.
const EXIT_WAIT: Duration = Duration::from_millis(100);

/// Registers a device that starts: its owed ACKs are sent when the process exits.
pub(super) fn register(inner: &Arc<Inner>) {
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        // SAFETY: `atexit` only records the address of `send_owed_acks_at_exit`, a function
        // with C linkage and no arguments that never unwinds (it catches panics), defined in
        // this module and so mapped for as long as the registration stands (the C library
        // calls a library's handlers when it unloads it). Its failure (no room for the
        // handler) leaves the ACKs to the other ways they leave.
        unsafe { libc::atexit(send_owed_acks_at_exit) };
    });
    let mut devices = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    let me = std::process::id();
    if devices.0 != me {
        *devices = (me, Vec::new());
    }
    devices.1.retain(|d| d.strong_count() > 0);
    devices.1.push(Arc::downgrade(inner));
}

/// The devices this process started that are alive now and owe their wire ACKs or frames held
/// for a burst (`Inner::owes_wire`).
fn owing() -> Vec<Arc<Inner>> {
    let devices = DEVICES.lock().unwrap_or_else(PoisonError::into_inner);
    if devices.0 != std::process::id() {
        return Vec::new();
    }
    devices.1.iter().filter_map(Weak::upgrade).filter(|d| d.owes_wire()).collect()
}

/// Sends the ACKs each device's polling application left waiting, with what else waits in
/// its outbox, and the frames its doorbells held, when the device can be had within
/// [`EXIT_WAIT`].
fn send_owed_acks(devices: Vec<Arc<Inner>>) {
    for inner in devices {
        let end = Instant::now() + EXIT_WAIT;
        loop {
            if let Some(mut h) = inner.try_lock() {
                inner.send_owed_acks(&mut h);
                break;
            }
            if Instant::now() >= end {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// What the C library calls at the process's exit: [`send_owed_acks`] for the devices that owe
/// ACKs, in a thread of its own, since the C library has destroyed the exiting thread's
/// thread-locals by then and a run of the device uses some. Nothing when no device owes any.
extern "C" fn send_owed_acks_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let devices = owing();
        if devices.is_empty() {
            return;
        }
        let sender = std::thread::Builder::new().name("umlx-sim-exit".into()).spawn(move || send_owed_acks(devices));
        if let Ok(sender) = sender {
            let _ = sender.join();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SimConfig;
    use crate::device::SimDevice;

    #[test]
    fn every_device_is_registered_and_a_dropped_one_is_pruned() {
        let a = SimDevice::new(SimConfig::numbered(1));
        let find = |d: &SimDevice| {
            DEVICES.lock().unwrap().1.iter().any(|w| w.upgrade().is_some_and(|i| Arc::ptr_eq(&i, &d.inner)))
        };
        assert!(find(&a), "a started device is registered");
        let dead = Arc::downgrade(&a.inner);
        drop(a);
        // The engine thread lets go of its last reference as it stops.
        let end = Instant::now() + Duration::from_secs(5);
        while dead.strong_count() > 0 {
            assert!(Instant::now() < end, "the dropped device stays alive");
            std::thread::sleep(Duration::from_millis(1));
        }
        let b = SimDevice::new(SimConfig::numbered(2));
        assert!(find(&b));
        let list = DEVICES.lock().unwrap();
        assert_eq!(list.0, std::process::id());
        assert!(!list.1.iter().any(|w| w.ptr_eq(&dead)), "the dropped device was pruned at the next start");
    }
}
