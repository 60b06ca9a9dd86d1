//! The data path allocates nothing per message: once two in-process software ConnectX adapters
//! have warmed up, RC SENDs into posted receives, RDMA WRITEs and RDMA READs, posted and
//! completed through the verbs API, make no heap allocation per message on any thread (the
//! application's, the devices' engines). Counted by a global allocator that wraps the system's.

#![forbid(unsafe_code)]

use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};
use std::alloc::System;
use std::time::{Duration, Instant};
use umlx_verbs::*;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

mod two_sims;
use two_sims::End;

/// Two adapters whose MRs and QPs allow remote writes and reads.
fn pair() -> (umlx_sim::fabric::Fabric, End, End) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    two_sims::pair(31, access, ConnectParams { access, rd_atomic: Some(1), ..Default::default() })
}

/// Waits for successful completions on `cq` of the operations `ops`, in order.
fn complete(cq: &mut Cq, ops: &[WcOpcode]) {
    let mut wc = [Wc::default(); 4];
    let start = Instant::now();
    let mut got = 0;
    while got < ops.len() {
        let n = cq.poll(&mut wc);
        for w in &wc[..n] {
            assert_eq!((w.status, w.opcode), (WcStatus::Success, ops[got]), "completion {got}");
            got += 1;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{got} of {} completions", ops.len());
    }
}

/// One round: a receive posted at `b`, then from `a` a 64-byte SEND into it, a 64-byte WRITE
/// and a 64-byte READ, each completed.
fn round(a: &mut End, b: &mut End, i: u64) {
    let rsge = [b.mr.sge(0, 64)];
    b.qp.post_recv(&[RecvWr { wr_id: i, sg_list: &rsge }]).unwrap();
    let s = [a.mr.sge(0, 64)];
    let into = [a.mr.sge(8192, 64)];
    let remote = Remote { addr: b.mr.addr() + 4096, rkey: b.mr.rkey() };
    a.qp.post_send(&[
        SendWr::new(i, SendOp::Send { data: Payload::Sges(&s), imm: None }),
        SendWr::new(i, SendOp::Write { data: Payload::Sges(&s), remote, imm: None }),
        SendWr::new(i, SendOp::Read { into: &into, remote }),
    ])
    .unwrap();
    complete(&mut a.cq, &[WcOpcode::Send, WcOpcode::RdmaWrite, WcOpcode::RdmaRead]);
    complete(&mut b.cq, &[WcOpcode::Recv]);
}

#[test]
fn sends_writes_and_reads_allocate_nothing_once_warm() {
    let (_fabric, mut a, mut b) = pair();
    let data: Vec<u8> = (0..64u8).collect();
    a.mr.write(0, &data).unwrap();
    for i in 0..2_000 {
        round(&mut a, &mut b, i);
    }
    let region = Region::new(GLOBAL);
    for i in 0..10_000 {
        round(&mut a, &mut b, i);
    }
    let stats = region.change();
    // What arrived is checked after the count: the checks allocate.
    assert_eq!(b.mr.to_vec(0, 64).unwrap(), data, "the SEND's bytes");
    assert_eq!(b.mr.to_vec(4096, 64).unwrap(), data, "the WRITE's bytes");
    assert_eq!(a.mr.to_vec(8192, 64).unwrap(), data, "the READ's bytes");
    // An allocation per message would count at least 10,000; what remains is the buffer lists
    // settling between the threads (bounded, a few dozen).
    assert!(
        stats.allocations + stats.reallocations < 100,
        "heap allocations over 10,000 rounds of SEND, WRITE and READ: {stats:?}"
    );
}
