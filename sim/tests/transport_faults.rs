//! RC over an impaired fabric: loss, duplication, reordering and corruption at 1% and 10%
//! with byte-exact delivery and exactly one completion per message; retry exhaustion.

mod transport_common;
use std::time::Duration;
use transport_common::*;
use umlx_hwdesc::enums::{CqeOpcode, CqeSyndrome, WqeOpcode};

const SEND: WqeOpcode = WqeOpcode::SEND;
const WRITE: WqeOpcode = WqeOpcode::RDMA_WRITE;
const READ: WqeOpcode = WqeOpcode::RDMA_READ;
const FA: WqeOpcode = WqeOpcode::ATOMIC_FA;

fn run(cfg: FabricConfig) {
    let mut p = RcPair::new(cfg, RcParams { ack_timeout: 12, ..Default::default() });
    let msgs = 40usize;
    let mut expected = Vec::new();
    for i in 0..msgs {
        let len = 100 + (i * 397) % 3000;
        let data = pattern(i as u32, len);
        let src = i * 0x2000;
        p.a.mem.write(src, &data);
        match i % 4 {
            0 | 1 => {
                let s =
                    segs(&[&raddr_seg(p.b.va(0x100000 + src), p.b.mkey), &data_seg(len as u32, p.a.mkey, p.a.va(src))]);
                p.a.post_send(&mut p.qa, WRITE, true, 0, &s);
                expected.push((0x100000 + src, data));
            }
            2 => {
                p.b.post_recv(&mut p.qb, 0x100000 + src, 4096);
                p.a.post_send(&mut p.qa, SEND, true, 0, &data_seg(len as u32, p.a.mkey, p.a.va(src)));
                expected.push((0x100000 + src, data));
            }
            _ => {
                p.b.mem.write(0x200000 + src, &data);
                let s = segs(&[
                    &raddr_seg(p.b.va(0x200000 + src), p.b.mkey),
                    &data_seg(len as u32, p.a.mkey, p.a.va(0x300000 + src)),
                ]);
                p.a.post_send(&mut p.qa, READ, true, 0, &s);
            }
        }
    }
    // One fetch-add: executed exactly once despite duplicates and retries.
    p.b.mem.write_u64_be(0x3f0000, 1000);
    let at = atomic_seg(1, 0);
    let s = segs(&[&raddr_seg(p.b.va(0x3f0000), p.b.mkey), &at, &data_seg(8, p.a.mkey, p.a.va(0x3f0000))]);
    p.a.post_send(&mut p.qa, FA, true, 0, &s);
    for i in 0..=msgs {
        let c =
            p.a.poll_cq_timeout(Duration::from_secs(30))
                .unwrap_or_else(|| panic!("CQE {i} missing; {:?}", p.a.dev.transport_stats()));
        assert_eq!(
            cqe_opcode(&c),
            CqeOpcode::REQ,
            "CQE {i} syndrome {}; {:?} B: {:?} {:?}",
            syndrome(&c),
            p.a.dev.transport_stats(),
            p.b.dev.transport_stats(),
            p.fabric.stats()
        );
        assert_eq!(cqe(&c).wqe_counter.get() as usize, i, "in order, one per message");
    }
    assert!(p.a.poll_cq_timeout(Duration::from_millis(50)).is_none(), "no duplicate completion");
    let mut recv = 0;
    while let Some(r) = p.b.poll_cq_timeout(Duration::from_millis(200)) {
        assert_eq!(cqe_opcode(&r), CqeOpcode::RESP_SEND);
        recv += 1;
    }
    assert_eq!(recv, msgs / 4, "one receive completion per SEND");
    for (off, data) in expected {
        assert_eq!(p.b.mem.to_vec(off, data.len()), data, "at {off:#x}");
    }
    for i in 0..msgs {
        if i % 4 == 3 {
            let len = 100 + (i * 397) % 3000;
            assert_eq!(p.a.mem.to_vec(0x300000 + i * 0x2000, len), pattern(i as u32, len), "READ {i}");
        }
    }
    assert_eq!(p.b.mem.read_u64_be(0x3f0000), 1001);
    assert_eq!(p.a.mem.read_u64_be(0x3f0000), 1000);
}

fn impaired(rate: f64, seed: u64) -> FabricConfig {
    FabricConfig { seed, loss: rate, duplicate: rate, reorder: rate, corrupt: rate, ..Default::default() }
}

#[test]
fn rc_one_percent_impairments() {
    run(impaired(0.01, 1));
}

#[test]
fn rc_ten_percent_impairments() {
    run(impaired(0.10, 2));
}

#[test]
fn rc_ten_percent_loss_only() {
    run(FabricConfig { seed: 3, loss: 0.10, ..Default::default() });
}

#[test]
fn rc_total_loss_is_transport_retry_exceeded() {
    let mut p = RcPair::new(
        FabricConfig { loss: 1.0, ..Default::default() },
        RcParams { retry_count: 3, ack_timeout: 6, ..Default::default() },
    );
    p.a.post_send(
        &mut p.qa,
        WRITE,
        true,
        0,
        &segs(&[&raddr_seg(p.b.va(0), p.b.mkey), &data_seg(8, p.a.mkey, p.a.va(0))]),
    );
    p.a.post_send(
        &mut p.qa,
        WRITE,
        true,
        0,
        &segs(&[&raddr_seg(p.b.va(0), p.b.mkey), &data_seg(8, p.a.mkey, p.a.va(0))]),
    );
    let c = p.a.poll_cq();
    let retry_exceeded = (CqeOpcode::REQ_ERR, CqeSyndrome::TRANSPORT_RETRY_EXC_ERR);
    assert_eq!((cqe_opcode(&c), syndrome(&c)), retry_exceeded, "transport retry exceeded");
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), syndrome(&c)), (CqeOpcode::REQ_ERR, CqeSyndrome::WR_FLUSH_ERR), "then flushed");
    assert_eq!(p.a.dev.transport_stats().timeouts, 4);
}

#[test]
fn rc_payload_unmapped_before_its_retransmission_is_a_local_protection_error() {
    // Every frame is lost, so the WRITE is sent again after the ACK timeout, and its source
    // is unmapped by then. The device reads a packet's payload from host memory when it builds
    // the packet, as a NIC's DMA engine does, so the retransmission's read faults.
    let mut p = RcPair::new(
        FabricConfig { loss: 1.0, ..Default::default() },
        RcParams { retry_count: 3, ack_timeout: 8, ..Default::default() },
    );
    p.a.mem.write(0, &pattern(7, 600));
    p.a.post_send(
        &mut p.qa,
        WRITE,
        true,
        0,
        &segs(&[&raddr_seg(p.b.va(0), p.b.mkey), &data_seg(600, p.a.mkey, p.a.va(0))]),
    );
    // MTU 256: three packets, sent at the doorbell.
    assert_eq!(p.a.dev.transport_stats().tx_packets, 3);
    let faults = p.a.dev.page_accounting().iommu_faults;
    p.a.mem.unmap().expect("unmap");
    let c = p.a.poll_cq();
    assert_eq!(cqe_opcode(&c), CqeOpcode::REQ_ERR);
    assert_eq!(syndrome(&c), CqeSyndrome::LOCAL_PROT_ERR, "not a transport retry");
    let s = p.a.dev.transport_stats();
    assert_eq!((s.timeouts, s.tx_packets), (1, 3), "the first retransmission faulted before it was sent");
    assert_eq!(p.a.dev.page_accounting().iommu_faults, faults + 1);
}

#[test]
fn an_engine_waits_for_a_distant_retransmit_timer_instead_of_looking_every_100_us() {
    // Every frame is lost and the ACK timeout is about 4 s (4.096 µs << 20): the WRITE's
    // retransmit timer stays armed for the whole test. The engine runs the device when its
    // timers are due: here only the firmware's page touch, every 10 ms, so about 10 times in
    // 100 ms (it ran the timers every millisecond whatever was due, about 100 times, and before
    // that every 100 µs while any timer was armed, about 1,000 times).
    let mut p = RcPair::new(
        FabricConfig { loss: 1.0, ..Default::default() },
        RcParams { ack_timeout: 20, ..Default::default() },
    );
    p.a.post_send(
        &mut p.qa,
        WRITE,
        true,
        0,
        &segs(&[&raddr_seg(p.b.va(0), p.b.mkey), &data_seg(8, p.a.mkey, p.a.va(0))]),
    );
    let before = p.a.dev.stats().engine_runs;
    std::thread::sleep(Duration::from_millis(100));
    let runs = p.a.dev.stats().engine_runs - before;
    assert!((5..=60).contains(&runs), "{runs} engine runs in 100 ms");
    let s = p.a.dev.transport_stats();
    assert_eq!((s.tx_packets, s.timeouts), (1, 0), "sent once, not timed out yet");
}

#[test]
fn a_qp_whose_messages_were_all_acked_is_not_due_and_its_next_message_still_times_out() {
    // A QP stays in the timers' set after its last ACK (until their next run), so that a
    // ping-pong does not change the set twice a message: listed with nothing armed, it must not
    // make the timers due, and once their run has taken it out, its next message must still
    // arm a retransmit timer that fires.
    let mut p = RcPair::new(FabricConfig::default(), RcParams { ack_timeout: 12, ..Default::default() });
    let write = |p: &mut RcPair, at: usize| {
        let s = segs(&[&raddr_seg(p.b.va(at), p.b.mkey), &data_seg(8, p.a.mkey, p.a.va(0))]);
        p.a.post_send(&mut p.qa, WRITE, true, 0, &s);
    };
    p.a.mem.write(0, b"acked ok");
    write(&mut p, 0);
    assert_eq!(cqe_opcode(&p.a.poll_cq()), CqeOpcode::REQ);
    {
        let mut h = p.a.dev.lock();
        let now = std::time::Instant::now();
        // The transport's timers only: the firmware's page touch, every 10 ms, is due whenever
        // the engine is late (a loaded machine).
        assert!(h.transport_due(now).is_none_or(|due| due > now), "an ACKed QP makes no timer due");
        h.tick(now); // takes the idle QP out of the set
        assert!(h.transport_due(now).is_none_or(|due| due > now));
    }
    // Lost, then retransmitted once the fabric delivers again (ACK timeout about 17 ms).
    p.fabric.set_config(FabricConfig { loss: 1.0, ..Default::default() });
    write(&mut p, 0x100);
    std::thread::sleep(Duration::from_millis(30));
    p.fabric.set_config(FabricConfig::default());
    let c = p.a.poll_cq();
    assert_eq!(cqe_opcode(&c), CqeOpcode::REQ);
    assert_eq!(p.b.mem.to_vec(0x100, 8), b"acked ok");
    let s = p.a.dev.transport_stats();
    assert!(s.timeouts >= 1 && s.retransmits >= 1, "{s:?}");
}
