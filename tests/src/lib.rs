//! umlx-tests: the end-to-end scenario suite, written once and run on any backend.
//!
//! A scenario is a function `fn(&mut Env<B>) -> Result<Outcome>` generic over the backend `B`
//! ([`scenarios`]): bring-up, every verb, every opcode with its data checked byte for byte in
//! the remote memory, and every error path. An [`Env`] gives it two endpoints that reach each
//! other:
//!
//! - `tests/sim.rs` runs every scenario on two software ConnectX adapters on an in-process
//!   fabric ([`Env::sim`]), and checks that each leaves no device object behind and causes no
//!   IOMMU fault;
//! - `tests/hardware.rs` runs the same scenarios on two real ConnectX ports cabled to each
//!   other when `UMLX_PCI`, `UMLX_PCI_PEER`, `UMLX_IP` and `UMLX_IP_PEER` name them
//!   ([`HardwareConfig`]); without `UMLX_PCI` (at build time) each is ignored, and run anyway
//!   it fails with [`HARDWARE_HINT`].
//!
//! A scenario that needs what only the sim has (fault injection: a fabric that loses every
//! frame, or loses and reorders some) returns [`Outcome::Skipped`] on hardware and says so.
//!
//! The test entry points are generated from [`for_each_scenario!`], so both lists are the same.

#![forbid(unsafe_code)]

pub mod env;
pub mod kit;
pub mod scenarios;

pub use env::{Endpoint, Env, EnvKind, HARDWARE_HINT, HardwareConfig, SIDE_MR_LEN, Side, SimSnapshot};
pub use kit::{Failure, Outcome, Result};
