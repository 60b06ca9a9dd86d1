//! umlx-driver: the user-mode mlx5 driver.
//!
//! It reaches a device only through the [`backend::Backend`] seam: [`vfio`] for a real adapter
//! bound to `vfio-pci`, `simdev` for the software ConnectX (with the `sim` feature, on by
//! default; a production build without it carries no sim). On top of the seam it owns DMA
//! memory, the command interface, bring-up and teardown, firmware pages, event queues, health,
//! and the hardware objects (UAR, PD, MKey, CQ, QP, SRQ).

pub mod av;
pub mod backend;
pub mod cmd;
pub mod datapath;
pub mod dma;
pub mod error;
pub mod event;
pub mod hca;
pub mod objects;
pub mod pages;
pub mod port;
pub mod qpc;
#[cfg(feature = "sim")]
pub mod simdev;
pub mod vfio;
pub mod wqsize;

pub use backend::AnyBackend;
pub use error::{Error, Result};
pub use hca::{Hca, HcaOptions, OpenHca};
#[cfg(feature = "sim")]
pub use simdev::SimBackend;
