//! What the driver's sim tests share: opening a software ConnectX and bringing it up.

use std::sync::Arc;
use umlx_driver::{Hca, HcaOptions, OpenHca, SimBackend};
use umlx_sim::SimConfig;

/// A sim with `cfg` and the bring-up on it (interrupts on or off), its result unwrapped by the
/// caller: some tests expect bring-up to fail.
pub fn open(cfg: SimConfig, interrupts: bool) -> (Arc<SimBackend>, umlx_driver::Result<Arc<OpenHca<SimBackend>>>) {
    open_with(cfg, HcaOptions { interrupts, ..Default::default() })
}

/// A sim with `cfg` and the bring-up on it with `opts`.
pub fn open_with(cfg: SimConfig, opts: HcaOptions) -> (Arc<SimBackend>, umlx_driver::Result<Arc<OpenHca<SimBackend>>>) {
    let b = SimBackend::new("t", cfg).expect("sim backend");
    let h = Hca::open(b.clone(), opts);
    (b, h)
}
