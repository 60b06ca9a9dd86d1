//! Eventfds: waiting on interrupt eventfds (`poll(2)`), creating, signalling and draining
//! them. One of the driver's `unsafe` modules.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

/// Waits until `fd` is readable or `timeout` passes; returns whether it is readable.
pub fn wait_readable(fd: impl AsFd, timeout: Duration) -> bool {
    let mut pfd = [libc::pollfd { fd: fd.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
    poll_in(&mut pfd, timeout)[0]
}

/// Waits until `a` (when given) or `b` is readable, or `timeout` passes; says which are
/// readable (`a`, `b`).
pub fn wait_either(a: Option<BorrowedFd<'_>>, b: BorrowedFd<'_>, timeout: Duration) -> (bool, bool) {
    // poll(2) skips an entry whose descriptor is negative.
    let mut pfds = [
        libc::pollfd { fd: a.map_or(-1, |fd| fd.as_raw_fd()), events: libc::POLLIN, revents: 0 },
        libc::pollfd { fd: b.as_raw_fd(), events: libc::POLLIN, revents: 0 },
    ];
    let [a, b] = poll_in(&mut pfds, timeout);
    (a, b)
}

/// `poll(2)` for input on `pfds` (descriptors open, or negative to skip) for at most `timeout`;
/// which of them are readable.
fn poll_in<const N: usize>(pfds: &mut [libc::pollfd; N], timeout: Duration) -> [bool; N] {
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `pfds` is an array of N valid pollfds, exclusively borrowed for the call, and
    // nfds is its length; the callers' non-negative descriptors are open (borrowed by them).
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), N as libc::nfds_t, ms) };
    pfds.map(|p| r > 0 && p.revents & libc::POLLIN != 0)
}

/// Reads (resets) an eventfd's counter; returns the count, 0 if it was not signalled.
pub fn drain(fd: impl AsFd) -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: `v` is 8 writable bytes, the size an eventfd read needs; the descriptor is open
    // (borrowed for the call).
    let r = unsafe { libc::read(fd.as_fd().as_raw_fd(), v.as_mut_ptr().cast(), 8) };
    if r == 8 { u64::from_ne_bytes(v) } else { 0 }
}

/// A new eventfd (close-on-exec; non-blocking when asked).
pub fn new_eventfd(nonblocking: bool) -> std::io::Result<OwnedFd> {
    let flags = libc::EFD_CLOEXEC | if nonblocking { libc::EFD_NONBLOCK } else { 0 };
    // SAFETY: eventfd takes no pointer; on success it returns a new descriptor that nothing
    // else owns, which `OwnedFd` takes over.
    let fd = unsafe { libc::eventfd(0, flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is the new, open descriptor eventfd returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds one to an eventfd's counter (makes it readable); says whether the write was taken.
pub fn signal(fd: impl AsFd) -> bool {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes the 8 bytes of the local `one`, the size an eventfd write needs; the
    // descriptor is open (borrowed for the call).
    let r = unsafe { libc::write(fd.as_fd().as_raw_fd(), one.as_ptr().cast(), 8) };
    r == 8
}

/// An eventfd registered with tokio's reactor (the `tokio` feature): what the verbs API's
/// async CQ waits on. It holds its own duplicate of the eventfd, so the registration never
/// outlives the descriptor it watches, whoever owns the original.
#[cfg(feature = "tokio")]
pub struct AsyncEventFd {
    fd: tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
}

#[cfg(feature = "tokio")]
impl std::fmt::Debug for AsyncEventFd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use std::os::fd::AsRawFd;
        f.debug_struct("AsyncEventFd").field("fd", &self.fd.get_ref().as_raw_fd()).finish()
    }
}

#[cfg(feature = "tokio")]
impl AsyncEventFd {
    /// Registers a duplicate of `fd` for readability with the current tokio runtime (which
    /// must have its IO driver enabled).
    pub fn new(fd: impl std::os::fd::AsFd) -> std::io::Result<AsyncEventFd> {
        if tokio::runtime::Handle::try_current().is_err() {
            // AsyncFd would panic: refuse with an error instead.
            return Err(std::io::Error::other(
                "no tokio runtime on this thread (an async CQ needs one, with IO enabled)",
            ));
        }
        let owned = fd.as_fd().try_clone_to_owned()?;
        // A runtime built without its IO driver makes the registration panic, and tokio offers
        // no way to ask first: the panic is caught and becomes this error (the panic hook has
        // printed its message by then).
        let registered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: the AsyncFd owns `owned`: the descriptor stays open while it is
            // registered and is closed only when the AsyncFd drops, after it has deregistered it.
            unsafe { tokio::io::unix::AsyncFd::register_with_interest(owned, tokio::io::Interest::READABLE) }
        }));
        let fd = match registered {
            Ok(r) => r.map_err(|e| e.into_parts().1)?,
            Err(_) => {
                return Err(std::io::Error::other(
                    "the tokio runtime on this thread has its IO driver disabled (an async CQ needs \
                     `enable_io`)",
                ));
            }
        };
        Ok(AsyncEventFd { fd })
    }

    /// Polls for readability: `Ready(Ok(()))` once the eventfd was signalled since the last
    /// ready poll, and forgets that readiness (the caller then drains the eventfd; a signal
    /// after this wakes the task again); registers the task's waker otherwise.
    pub fn poll_readable(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        self.fd.poll_read_ready(cx).map_ok(|mut g| g.clear_ready())
    }
}
