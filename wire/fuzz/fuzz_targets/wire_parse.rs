//! Fuzz target: arbitrary bytes into `parse_frame`; whatever parses must rebuild with
//! `FrameBuilder::from_packet` and re-parse (verified) to the same fields.
//!
//! Run with `cargo fuzz run wire_parse` from `wire/` (nightly, or `RUSTC_BOOTSTRAP=1` with
//! `-s none` on stable, as `.ci/run` does for 30 seconds).

#![no_main]

use libfuzzer_sys::fuzz_target;
use umlx_wire::packet::{FrameBuilder, parse_frame, parse_frame_verified};
use umlx_wire::{arp, icrc};

fuzz_target!(|data: &[u8]| {
    let _ = icrc::verify(data);
    let _ = arp::parse(data);
    let Ok(p) = parse_frame(data) else {
        return;
    };
    let mut buf = Vec::new();
    FrameBuilder::from_packet(&p).build_vec(&mut buf).expect("a parsed packet rebuilds");
    let q = parse_frame_verified(&buf).expect("a rebuilt packet verifies");
    assert_eq!(q.eth(), p.eth());
    assert_eq!(q.bth, p.bth);
    assert_eq!(q.ext(), p.ext());
    assert_eq!(q.payload, p.payload);
    assert_eq!(q.ip().src(), p.ip().src());
    assert_eq!(q.ip().dst(), p.ip().dst());
    assert_eq!(q.udp().map(|u| u.src_port), p.udp().map(|u| u.src_port));
    // Rebuilding the rebuilt packet is a fixed point.
    let again = FrameBuilder::from_packet(&q).to_vec().expect("rebuilds");
    assert_eq!(again, buf);
});
