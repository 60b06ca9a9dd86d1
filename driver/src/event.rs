//! Waiting on interrupt eventfds. One of the driver's `unsafe` modules (a `poll(2)` call).

use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// Waits until `fd` is readable or `timeout` passes; returns whether it is readable.
pub fn wait_readable(fd: impl AsFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd { fd: fd.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `pfd` is a valid pollfd for the duration of the call; nfds is 1; the descriptor
    // is open (borrowed for the call).
    let r = unsafe { libc::poll(&mut pfd, 1, ms) };
    r > 0 && pfd.revents & libc::POLLIN != 0
}

/// Reads (resets) an eventfd's counter; returns the count, 0 if it was not signalled.
pub fn drain(fd: impl AsFd) -> u64 {
    let mut v = [0u8; 8];
    // SAFETY: `v` is 8 writable bytes, the size an eventfd read needs; the descriptor is open
    // (borrowed for the call).
    let r = unsafe { libc::read(fd.as_fd().as_raw_fd(), v.as_mut_ptr().cast(), 8) };
    if r == 8 { u64::from_ne_bytes(v) } else { 0 }
}
