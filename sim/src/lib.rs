//! umlx-sim: a software ConnectX.
//!
//! A device model of a ConnectX-6 Dx class adapter with one RoCE port that honours the mlx5
//! hardware contract declared in `umlx-hwdesc`: BAR0 (initialization segment, command queue,
//! health buffer, UAR pages), the firmware command processor, firmware pages, an IOMMU through
//! which every device access to host memory goes, the objects (EQ, CQ, PD, MKey, QP, SRQ), the
//! RoCEv2 transport and a real wire. It knows nothing of the umlx driver.
//!
//! Modules: [`device`] (the public device: BAR0, PCI config, IOMMU map/unmap, interrupts, the
//! engine thread), [`firmware`] (command processor and objects), [`iommu`] (the only path to
//! host memory) and [`hostmem`] (its loads and stores: atomic, never plain copies), [`config`] (identity and hostile knobs), [`port`] (the wire side of the port),
//! [`host`] (a minimal software host that drives the device directly: tests and benchmarks),
//! [`buffers`] (the frame and payload buffers it reuses).
//! Frames are parsed and built by the `umlx-wire` crate.

pub mod buffers;
pub mod config;
pub mod device;
pub mod fabric;
pub mod firmware;
pub mod host;
pub mod hostmem;
pub mod iommu;
pub mod port;
pub mod transport;

pub use config::{FailCommand, Hostile, SimConfig};
pub use device::SimDevice;

/// A `T` alone on its cache lines (two, as the adjacent-line prefetcher pairs them): for state
/// that different threads write at once, each its own (a receive queue, a thread's spare
/// lanes), which would otherwise share lines and move between the threads' cores at every
/// write.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CacheLines<T>(pub(crate) T);

impl<T> std::ops::Deref for CacheLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> std::ops::DerefMut for CacheLines<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}
