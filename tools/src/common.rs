//! Helpers the tools share: waiting for one completion, printing MACs.

use std::result::Result;
use std::time::{Duration, Instant};
use umlx_verbs::*;

/// Polls `cq` until one completion arrives or `secs` pass.
pub fn wait_one(cq: &mut Cq, secs: u64) -> Result<Wc, String> {
    let mut wc = [Wc::default(); 1];
    let start = Instant::now();
    loop {
        if cq.poll(&mut wc) == 1 {
            return Ok(wc[0]);
        }
        if start.elapsed() > Duration::from_secs(secs) {
            return Err(format!("no completion on CQ {:#x} within {secs} s", cq.cqn()));
        }
        std::hint::spin_loop();
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}
