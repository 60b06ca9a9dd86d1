//! [`EventFd`]: a non-blocking eventfd to connect an MSI-X vector to.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// A non-blocking eventfd (what VFIO connects an MSI-X vector to).
#[derive(Debug)]
pub struct EventFd(File);

impl EventFd {
    /// Creates an eventfd with counter 0 (`EFD_NONBLOCK | EFD_CLOEXEC`).
    pub fn new() -> std::io::Result<EventFd> {
        // SAFETY: `eventfd` takes no pointers; it returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a freshly created, valid descriptor that nothing else owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd(File::from(owned)))
    }

    /// The descriptor, for [`SimDevice::set_irq_eventfd`](crate::device::SimDevice::set_irq_eventfd).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }

    /// Reads and resets the counter: `Some(count)` if it was signalled, `None` if not.
    pub fn try_read(&self) -> Option<u64> {
        let mut b = [0u8; 8];
        match (&self.0).read(&mut b) {
            Ok(8) => Some(u64::from_ne_bytes(b)),
            _ => None,
        }
    }

    /// Waits up to `timeout` for a signal.
    pub fn wait(&self, timeout: Duration) -> Option<u64> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(v) = self.try_read() {
                return Some(v);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}
