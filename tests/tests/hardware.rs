//! Every scenario of umlx-tests on real hardware: two ConnectX ports (or adapters) cabled to
//! each other, bound to vfio-pci, named by the environment:
//!
//! ```text
//! UMLX_PCI=0000:3b:00.0 UMLX_PCI_PEER=0000:3b:00.1 UMLX_IP=192.0.2.1 UMLX_IP_PEER=192.0.2.2 \
//!     cargo test -p umlx-tests --release --test hardware -- --nocapture
//! ```
//!
//! (`UMLX_PEER_MAC` optionally gives the MAC the first port sends to for the second.) Without
//! `UMLX_PCI` (when the tests are built) every test reports as ignored, saying how to enable
//! it; run with `--ignored` all the same, each fails with that hint. The two devices are opened once
//! and shared by the tests, one at a time; the last test to finish closes them (a filtered run
//! leaves that to process exit). Scenarios that need the sim's fault injection report that
//! they are sim only and pass.

#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use umlx_tests::{Env, HARDWARE_HINT, HardwareConfig, Outcome, Result};

/// The opened devices, shared by the tests (one at a time).
static HW: Mutex<Option<Env>> = Mutex::new(None);
/// Tests still to finish; the last one closes the devices.
static REMAINING: AtomicUsize = AtomicUsize::new(COUNT);

struct Finished;

impl Drop for Finished {
    fn drop(&mut self) {
        if REMAINING.fetch_sub(1, Ordering::AcqRel) == 1 {
            let env = HW.lock().unwrap_or_else(|e| e.into_inner()).take();
            drop(env);
        }
    }
}

fn run(name: &str, scenario: fn(&mut Env) -> Result<Outcome>) {
    let _finished = Finished;
    let cfg = match HardwareConfig::from_env() {
        Ok(Some(cfg)) => cfg,
        Ok(None) => panic!("{name}: {HARDWARE_HINT}"),
        Err(e) => panic!("{name}: {e}"),
    };
    let mut guard = HW.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_none() {
        let env = Env::hardware(&cfg).unwrap_or_else(|e| panic!("{name}: {e}"));
        *guard = Some(env);
    }
    let Some(env) = guard.as_mut() else { unreachable!("opened above") };
    match scenario(env) {
        Ok(Outcome::Passed) => println!("{name}: passed on {} and {}", cfg.pci, cfg.pci_peer),
        Ok(Outcome::Skipped(why)) => println!("{name}: skipped on hardware: {why}"),
        Err(e) => panic!("{name} failed on {} and {}: {e}", cfg.pci, cfg.pci_peer),
    }
}

macro_rules! hardware_tests {
    ($($name:ident),* $(,)?) => {
        const COUNT: usize = [$(stringify!($name)),*].len();
        $(
            #[test]
            #[cfg_attr(not(umlx_hardware), ignore = "needs a ConnectX: set UMLX_PCI, UMLX_PCI_PEER, UMLX_IP, UMLX_IP_PEER")]
            fn $name() {
                run(stringify!($name), umlx_tests::scenarios::$name);
            }
        )*
    };
}

umlx_tests::for_each_scenario!(hardware_tests);
