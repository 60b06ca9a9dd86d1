//! RC transport over a perfect fabric: every opcode, multi-packet messages, CQE format and
//! owner bits, unsignaled WQEs, remote access violations, RNR and flush on error.

mod transport_common;
use transport_common::*;
use umlx_hwdesc::U32;
use umlx_hwdesc::enums::{CqeOpcode, CqeSyndrome, WqeOpcode};
use umlx_hwdesc::plain::{wqe as w, wqe_inline_seg};
use zerocopy::IntoBytes;

const SEND: WqeOpcode = WqeOpcode::SEND;
const SEND_IMM: WqeOpcode = WqeOpcode::SEND_IMM;
const WRITE: WqeOpcode = WqeOpcode::RDMA_WRITE;
const WRITE_IMM: WqeOpcode = WqeOpcode::RDMA_WRITE_IMM;
const READ: WqeOpcode = WqeOpcode::RDMA_READ;
const CS: WqeOpcode = WqeOpcode::ATOMIC_CS;
const FA: WqeOpcode = WqeOpcode::ATOMIC_FA;
const NOP: WqeOpcode = WqeOpcode::NOP;

fn pair() -> RcPair {
    RcPair::new(FabricConfig::default(), RcParams::default())
}

#[test]
fn rc_write_send_read_byte_exact_multi_packet() {
    let mut p = pair();
    // WRITE of 5000 bytes (MTU 256: 20 packets).
    let data = pattern(1, 5000);
    p.a.mem.write(0, &data);
    let s = segs(&[&raddr_seg(p.b.va(0x10000), p.b.mkey), &data_seg(5000, p.a.mkey, p.a.va(0))]);
    let idx = p.a.post_send(&mut p.qa, WRITE, true, 0, &s);
    let c = p.a.poll_cq();
    assert_eq!(cqe_opcode(&c), CqeOpcode::REQ, "REQ CQE");
    assert_eq!(sent_opcode(&c), WRITE, "send opcode in sop_drop_qpn");
    assert_eq!(cqe_qpn(&c), p.qa.qpn);
    assert_eq!(cqe(&c).wqe_counter.get(), idx);
    assert!(!op_own(&c).owner(), "owner bit of the first pass");
    assert_eq!(p.b.mem.to_vec(0x10000, 5000), data);

    // SEND of 3000 bytes into a posted receive.
    let data2 = pattern(2, 3000);
    p.a.mem.write(0x2000, &data2);
    p.b.post_recv(&mut p.qb, 0x40000, 4096);
    let s = data_seg(3000, p.a.mkey, p.a.va(0x2000));
    p.a.post_send(&mut p.qa, SEND_IMM, true, 0xdeadbeef, &s);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (CqeOpcode::REQ, SEND_IMM));
    let r = p.b.poll_cq();
    assert_eq!(cqe_opcode(&r), CqeOpcode::RESP_SEND_IMM, "RESP_SEND_IMM");
    assert_eq!(cqe(&r).byte_cnt.get(), 3000, "byte_cnt");
    assert_eq!(cqe(&r).imm_inval_pkey.get(), 0xdeadbeef, "imm");
    assert_eq!(cqe_qpn(&r), p.qb.qpn);
    assert_eq!(cqe(&r).wqe_counter.get(), 0, "receive WQE counter");
    assert_eq!(p.b.mem.to_vec(0x40000, 3000), data2);

    // READ 6000 bytes back from B into A.
    let data3 = pattern(3, 6000);
    p.b.mem.write(0x80000, &data3);
    let s = segs(&[&raddr_seg(p.b.va(0x80000), p.b.mkey), &data_seg(6000, p.a.mkey, p.a.va(0x100000))]);
    p.a.post_send(&mut p.qa, READ, true, 0, &s);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (CqeOpcode::REQ, READ), "{:?}", cqe(&c));
    assert_eq!(cqe(&c).byte_cnt.get(), 6000);
    assert_eq!(p.a.mem.to_vec(0x100000, 6000), data3);
}

#[test]
fn rc_send_plain_write_imm_atomics_nop_unsignaled() {
    let mut p = pair();
    // Unsignaled SEND then signaled NOP: only the NOP makes a CQE.
    p.b.post_recv(&mut p.qb, 0x1000, 256);
    p.a.mem.write(0, b"hello world");
    p.a.post_send(&mut p.qa, SEND, false, 0, &data_seg(11, p.a.mkey, p.a.va(0)));
    let nop = p.a.post_send(&mut p.qa, NOP, true, 0, &[]);
    let c = p.a.poll_cq();
    assert_eq!((sent_opcode(&c), cqe(&c).wqe_counter.get()), (NOP, nop));
    let r = p.b.poll_cq();
    assert_eq!((cqe_opcode(&r), cqe(&r).byte_cnt.get()), (CqeOpcode::RESP_SEND, 11));
    assert_eq!(p.b.mem.to_vec(0x1000, 11), b"hello world");

    // WRITE with immediate consumes a receive WQE.
    p.b.post_recv(&mut p.qb, 0x2000, 64);
    p.a.mem.write(0x100, &[7u8; 600]);
    let s = segs(&[&raddr_seg(p.b.va(0x3000), p.b.mkey), &data_seg(600, p.a.mkey, p.a.va(0x100))]);
    p.a.post_send(&mut p.qa, WRITE_IMM, true, 0x1234, &s);
    assert_eq!(sent_opcode(&p.a.poll_cq()), WRITE_IMM);
    let r = p.b.poll_cq();
    let rx = cqe(&r);
    assert_eq!((cqe_opcode(&r), rx.imm_inval_pkey.get(), rx.byte_cnt.get()), (CqeOpcode::RESP_WR_IMM, 0x1234, 600));
    assert_eq!(p.b.mem.to_vec(0x3000, 600), vec![7u8; 600]);

    // Inline WRITE.
    let mut inl = segs(&[wqe_inline_seg { byte_count: U32::new(w::INLINE_SEG | 20) }.as_bytes(), &[0x5a; 20]]);
    inl.resize(inl.len().next_multiple_of(w::SEND_WQE_DS), 0);
    let s = segs(&[&raddr_seg(p.b.va(0x5000), p.b.mkey), &inl]);
    p.a.post_send(&mut p.qa, WRITE, true, 0, &s);
    assert_eq!(cqe_opcode(&p.a.poll_cq()), CqeOpcode::REQ);
    assert_eq!(p.b.mem.to_vec(0x5000, 20), vec![0x5a; 20]);

    // Atomics: fetch-add then compare-swap on a big-endian 8-byte target.
    p.b.mem.write_u64_be(0x6000, 100);
    let at = atomic_seg(5, 0);
    let s = segs(&[&raddr_seg(p.b.va(0x6000), p.b.mkey), &at, &data_seg(8, p.a.mkey, p.a.va(0x7000))]);
    p.a.post_send(&mut p.qa, FA, true, 0, &s);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), sent_opcode(&c), cqe(&c).byte_cnt.get()), (CqeOpcode::REQ, FA, 8));
    assert_eq!(p.a.mem.read_u64_be(0x7000), 100);
    assert_eq!(p.b.mem.read_u64_be(0x6000), 105);
    let at = atomic_seg(999, 105);
    let s = segs(&[&raddr_seg(p.b.va(0x6000), p.b.mkey), &at, &data_seg(8, p.a.mkey, p.a.va(0x7008))]);
    p.a.post_send(&mut p.qa, CS, true, 0, &s);
    assert_eq!(sent_opcode(&p.a.poll_cq()), CS);
    assert_eq!(p.a.mem.read_u64_be(0x7008), 105);
    assert_eq!(p.b.mem.read_u64_be(0x6000), 999);
}

#[test]
fn rc_bad_rkey_is_remote_access_error_and_memory_unchanged() {
    let mut p = pair();
    p.b.mem.write(0x9000, &[0xee; 64]);
    p.a.mem.write(0, &[1; 64]);
    let s = segs(&[&raddr_seg(p.b.va(0x9000), p.b.mkey ^ 0x100), &data_seg(64, p.a.mkey, p.a.va(0))]);
    let idx = p.a.post_send(&mut p.qa, WRITE, true, 0, &s);
    let c = p.a.poll_cq();
    assert_eq!(cqe_opcode(&c), CqeOpcode::REQ_ERR, "REQ_ERR");
    assert_eq!(syndrome(&c), CqeSyndrome::REMOTE_ACCESS_ERR, "remote access error syndrome");
    assert_eq!(error_cqe(&c).wqe_counter.get(), idx);
    assert_eq!(p.b.mem.to_vec(0x9000, 64), vec![0xee; 64]);
    assert!(p.b.dev.transport_stats().err_naks_sent >= 1, "NAK on the wire");
    // Later WQEs are flushed.
    p.a.post_send(&mut p.qa, NOP, true, 0, &[]);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), syndrome(&c)), (CqeOpcode::REQ_ERR, CqeSyndrome::WR_FLUSH_ERR), "flushed");
}

#[test]
fn rc_out_of_bounds_read_is_remote_access_error() {
    let mut p = pair();
    let s = segs(&[&raddr_seg(p.b.va(MEM - 16), p.b.mkey), &data_seg(64, p.a.mkey, p.a.va(0))]);
    p.a.post_send(&mut p.qa, READ, true, 0, &s);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), syndrome(&c)), (CqeOpcode::REQ_ERR, CqeSyndrome::REMOTE_ACCESS_ERR));
}

#[test]
fn rc_bad_lkey_is_local_protection_error() {
    let mut p = pair();
    p.a.post_send(&mut p.qa, SEND, true, 0, &data_seg(64, p.a.mkey ^ 0x1, p.a.va(0)));
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), syndrome(&c)), (CqeOpcode::REQ_ERR, CqeSyndrome::LOCAL_PROT_ERR));
}

#[test]
fn rc_rnr_then_receive_posted() {
    let mut p = pair();
    p.a.mem.write(0, &[3; 100]);
    p.a.post_send(&mut p.qa, SEND, true, 0, &data_seg(100, p.a.mkey, p.a.va(0)));
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(p.b.dev.transport_stats().rnr_naks_sent >= 1);
    p.b.post_recv(&mut p.qb, 0x100, 128);
    let c = p.a.poll_cq();
    assert_eq!(cqe_opcode(&c), CqeOpcode::REQ);
    let r = p.b.poll_cq();
    assert_eq!((cqe_opcode(&r), cqe(&r).byte_cnt.get()), (CqeOpcode::RESP_SEND, 100));
    assert_eq!(p.b.mem.to_vec(0x100, 100), vec![3; 100]);
}

#[test]
fn rc_write_with_immediate_waits_through_rnr_for_its_receive() {
    // A one-packet WRITE with an immediate needs a receive WQE: without one the responder
    // answers RNR and writes nothing; the requester's retry, once a receive is posted, lands.
    let mut p = pair();
    p.a.mem.write(0, &[9; 100]);
    let s = segs(&[&raddr_seg(p.b.va(0x3000), p.b.mkey), &data_seg(100, p.a.mkey, p.a.va(0))]);
    p.a.post_send(&mut p.qa, WRITE_IMM, true, 0x5678, &s);
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert!(p.b.dev.transport_stats().rnr_naks_sent >= 1, "RNR NAK");
    assert_eq!(p.b.mem.to_vec(0x3000, 100), vec![0; 100], "nothing written before the receive");
    p.b.post_recv(&mut p.qb, 0x100, 128);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (CqeOpcode::REQ, WRITE_IMM), "the WRITE completes");
    let r = p.b.poll_cq();
    assert_eq!((cqe_opcode(&r), cqe(&r).imm_inval_pkey.get()), (CqeOpcode::RESP_WR_IMM, 0x5678));
    assert_eq!(p.b.mem.to_vec(0x3000, 100), vec![9; 100]);
    assert_eq!(p.b.dev.transport_stats().err_naks_sent, 0, "no error NAK");
}

#[test]
fn rc_rnr_retry_exceeded() {
    let mut p = RcPair::new(FabricConfig::default(), RcParams { rnr_retry: 2, ..Default::default() });
    p.a.post_send(&mut p.qa, SEND, true, 0, &data_seg(10, p.a.mkey, p.a.va(0)));
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), syndrome(&c)), (CqeOpcode::REQ_ERR, CqeSyndrome::RNR_RETRY_EXC_ERR));
}

#[test]
fn rc_flush_on_error_state() {
    let mut p = pair();
    for i in 0..3 {
        p.b.post_recv(&mut p.qb, 0x100 * i, 64);
    }
    p.b.move_to_error(&p.qb);
    for i in 0..3u16 {
        let c = p.b.poll_cq();
        let flushed = (CqeOpcode::RESP_ERR, CqeSyndrome::WR_FLUSH_ERR, i);
        assert_eq!((cqe_opcode(&c), syndrome(&c), error_cqe(&c).wqe_counter.get()), flushed);
    }
}

#[test]
fn rc_cqe_owner_bit_flips_after_wrap() {
    let mut p = pair();
    let n = 1usize << p.a.cq.log;
    for i in 0..n + 5 {
        p.a.post_send(&mut p.qa, NOP, true, 0, &[]);
        let c = p.a.poll_cq();
        assert_eq!(op_own(&c).owner(), (i / n) & 1 == 1, "owner at {i}");
    }
}

/// A `SEND_ONLY` with AckReq from A to `dgid` and `dest_qp`, at the PSN B's QP expects first
/// (0xfffff0: without the checks, B would take it).
fn send_only(p: &RcPair, dgid: &[u8; 16], dest_qp: u32) -> Vec<u8> {
    use umlx_wire::packet::{Bth, Opcode};
    let mut bth = Bth::new(Opcode::RC_SEND_ONLY, dest_qp, 0xff_fff0);
    bth.ack_req = true;
    umlx_wire::FrameBuilder::from_gids(p.a.mac, p.b.mac, &p.a.gid, dgid, bth)
        .with_payload(b"not for this port")
        .to_vec()
        .expect("a frame")
}

#[test]
fn rc_requests_for_another_gid_or_an_unknown_qp_are_dropped_and_counted() {
    let mut p = pair();
    p.b.post_recv(&mut p.qb, 0x1000, 64);
    let before = p.b.dev.transport_stats();
    // Another GID than any of B's, to B's MAC and B's QP; then B's GID and a QP B does not have.
    p.b.dev.port().inject(send_only(&p, &gid_v4([10, 77, 0, 99]), p.qb.qpn));
    p.b.dev.port().inject(send_only(&p, &p.b.gid, p.qb.qpn ^ 0x40));
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while p.b.dev.transport_stats().rx_packets < before.rx_packets + 2 {
        assert!(std::time::Instant::now() < end, "B did not take the two frames");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let after = p.b.dev.transport_stats();
    assert_eq!(after.rx_dropped - before.rx_dropped, 2, "{after:?}");
    let answers = |s: &umlx_sim::transport::TransportStats| (s.acks_sent, s.seq_naks_sent, s.err_naks_sent, s.cqes);
    assert_eq!(answers(&after), answers(&before), "nothing answered, nothing completed");
    assert!(p.b.poll_cq_timeout(std::time::Duration::from_millis(20)).is_none(), "no receive completion at B");
    // The QP still takes its own traffic: the receive WQE is still there for A's SEND.
    p.a.mem.write(0, b"for B");
    p.a.post_send(&mut p.qa, SEND, true, 0, &data_seg(5, p.a.mkey, p.a.va(0)));
    assert_eq!(cqe_opcode(&p.a.poll_cq()), CqeOpcode::REQ);
    let r = p.b.poll_cq();
    assert_eq!((cqe_opcode(&r), cqe(&r).byte_cnt.get()), (CqeOpcode::RESP_SEND, 5));
    assert_eq!(p.b.mem.to_vec(0x1000, 5), b"for B");
}

#[test]
fn a_doorbell_rung_while_another_thread_holds_the_device_is_posted_and_runs_when_it_lets_go() {
    use std::sync::mpsc;
    use std::time::Duration;
    let mut p = pair();
    p.a.mem.write(0, b"posted doorbell");
    let dev = p.a.dev.clone();
    let (held_tx, held_rx) = mpsc::channel();
    let (rang_tx, rang_rx) = mpsc::channel::<()>();
    let holder = std::thread::spawn(move || {
        let mut h = dev.lock();
        let before = h.transport_stats().tx_packets;
        held_tx.send(()).expect("test thread");
        // A doorbell write that waited for the device would never come back while it is held.
        rang_rx.recv_timeout(Duration::from_secs(10)).expect("the doorbell write returned while the device was held");
        let while_held = h.transport_stats().tx_packets;
        drop(h); // executes the posted doorbell
        (before, while_held)
    });
    held_rx.recv().expect("holder thread");
    let s = segs(&[&raddr_seg(p.b.va(0x2000), p.b.mkey), &data_seg(15, p.a.mkey, p.a.va(0))]);
    p.a.post_send(&mut p.qa, WRITE, true, 0, &s);
    rang_tx.send(()).expect("holder thread");
    let (before, while_held) = holder.join().expect("holder thread");
    assert_eq!(while_held, before, "the WQE ran while another thread held the device");
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), cqe(&c).byte_cnt.get()), (CqeOpcode::REQ, 15));
    assert_eq!(p.b.mem.to_vec(0x2000, 15), b"posted doorbell");
    assert_eq!(p.a.dev.transport_stats().tx_packets, before + 1);
}

#[test]
fn rc_read_of_memory_the_responder_cannot_reach_is_a_remote_access_error() {
    // The responder reads a READ's data as it builds each response, having checked the whole
    // range first: a range whose host memory is no longer mapped for DMA is refused before any
    // response goes out.
    let mut p = pair();
    p.b.mem.unmap().expect("unmap");
    let faults = p.b.dev.page_accounting().iommu_faults;
    let s = segs(&[&raddr_seg(p.b.va(0), p.b.mkey), &data_seg(3000, p.a.mkey, p.a.va(0))]);
    p.a.post_send(&mut p.qa, READ, true, 0, &s);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), syndrome(&c)), (CqeOpcode::REQ_ERR, CqeSyndrome::REMOTE_ACCESS_ERR));
    assert_eq!(p.b.dev.page_accounting().iommu_faults, faults + 1);
    assert_eq!(p.b.dev.transport_stats().tx_packets, 1, "one NAK, no READ response");
}

/// A CQ context's `page_offset` counts 64ths of the CQ's page, whatever its size: with 8 KiB
/// pages (`log_page_size` 1) and `page_offset` 3, the ring starts 384 bytes into the buffer
/// (a 64-byte unit would put it at 192).
#[test]
fn a_cq_page_offset_counts_64ths_of_its_page() {
    let fabric = Fabric::new(FabricConfig::default());
    let mut a = Node::new(1, &fabric);
    let mut b = Node::new(2, &fabric);
    a.cq = create_cq_paged(&mut a.host, a.uar, a.eq.eqn, 6, 1, 3);
    assert_eq!(a.cq.ring_at, 384);
    let qa = a.create_qp(false, 8, 8);
    let qb = b.create_qp(false, 8, 8);
    let (ga, ma, gb, mb) = (a.gid, a.mac, b.gid, b.mac);
    a.connect_rc(&qa, (&gb, mb, qb.qpn), RcParams::default());
    b.connect_rc(&qb, (&ga, ma, qa.qpn), RcParams::default());
    let mut p = RcPair { a, b, qa, qb, fabric };
    p.a.mem.write(0, b"paged CQ");
    let s = segs(&[&raddr_seg(p.b.va(0x3000), p.b.mkey), &data_seg(8, p.a.mkey, p.a.va(0))]);
    let idx = p.a.post_send(&mut p.qa, WRITE, true, 0, &s);
    let c = p.a.poll_cq(); // reads the ring at byte 384
    assert_eq!((cqe_opcode(&c), sent_opcode(&c), cqe(&c).wqe_counter.get()), (CqeOpcode::REQ, WRITE, idx));
    assert_eq!(p.b.mem.to_vec(0x3000, 8), b"paged CQ");
    let at_64_byte_unit = p.a.cq.buf.read_u8(192 + umlx_hwdesc::plain::cqe64::op_own);
    assert_eq!(at_64_byte_unit, umlx_hwdesc::plain::cq::CQE_OP_OWN_INVALID, "nothing written at byte 192");
}

/// A multi-packet WRITE whose MKey is destroyed between its packets. The responder translates
/// the whole region once, at the first packet, and uses that translation for the packets after
/// it only while no MKey has been destroyed since: the packet after the destroy is refused with
/// a remote access NAK and none of its bytes land, though the first packet's translation
/// covered them. The requester is played by the test, its frames injected at the port.
#[test]
fn a_write_whose_mkey_is_destroyed_between_its_packets_writes_no_more() {
    use umlx_hwdesc::enums::CmdOpcode;
    use umlx_hwdesc::ifc::{destroy_mkey_in, destroy_mkey_out};
    use umlx_hwdesc::plain::mkey;
    use umlx_wire::packet::{ExtHeaders, Opcode, Reth};

    let fabric = Fabric::perfect();
    let mut b = Node::new(2, &fabric);
    let qb = b.create_qp(false, 8, 8);
    let (peer_mac, peer_ip, peer_qpn) = ([0x02, 0, 0, 0, 0, 0x99], [10, 77, 0, 99], 0x99);
    b.connect_rc(&qb, (&gid_v4(peer_ip), peer_mac, peer_qpn), RcParams::default());
    // The responder expects PSN 0xff_fff0 (`connect_rc`), MTU 256.
    let (first_psn, mtu, at) = (0xff_fff0, 256usize, 0x2000usize);
    let data = pattern(7, 3 * mtu);
    let frame = |op: Opcode, k: u32, ext: ExtHeaders, payload: &[u8]| {
        peer_frame(b.mac, qb.qpn, op, first_psn + k, ext, payload)
    };
    let reth = Reth { va: b.va(at), rkey: b.mkey, dma_len: data.len() as u32 };
    let first =
        frame(Opcode::RC_RDMA_WRITE_FIRST, 0, ExtHeaders { reth: Some(reth), ..Default::default() }, &data[..mtu]);
    b.dev.port().inject(first);
    assert_eq!(b.mem.to_vec(at, mtu), &data[..mtu], "the first packet lands");

    let naks = b.dev.transport_stats().err_naks_sent;
    b.host
        .exec(CmdOpcode::DESTROY_MKEY, 0, destroy_mkey_in::SIZE_BYTES, destroy_mkey_out::SIZE_BYTES, |i| {
            destroy_mkey_in::mkey_index.set(i, mkey::index(b.mkey) as u64);
        })
        .expect("DESTROY_MKEY");
    let middle = frame(Opcode::RC_RDMA_WRITE_MIDDLE, 1, ExtHeaders::default(), &data[mtu..2 * mtu]);
    b.dev.port().inject(middle);
    assert_eq!(b.mem.to_vec(at + mtu, mtu), vec![0; mtu], "nothing of the packet after the destroy lands");
    assert_eq!(b.dev.transport_stats().err_naks_sent, naks + 1, "a remote access NAK answers it");
}

/// A node at 10.77.0.3 with an RC QP connected to QP 0x99 of a peer at 10.77.0.99 that the
/// test plays by injecting frames ([`peer_frame`]).
fn node_with_peer_qp() -> (Fabric, Node, Qp) {
    let fabric = Fabric::perfect();
    let mut b = Node::new(2, &fabric);
    let qb = b.create_qp(false, 8, 8);
    b.connect_rc(&qb, (&gid_v4([10, 77, 0, 99]), [0x02, 0, 0, 0, 0, 0x99], 0x99), RcParams::default());
    (fabric, b, qb)
}

/// Frames a peer at 10.77.0.99 sends to QP `qpn` of the node at 10.77.0.3 with MAC `mac`, each
/// asking for its ACK.
fn peer_frame(
    mac: [u8; 6],
    qpn: u32,
    op: umlx_wire::packet::Opcode,
    psn: u32,
    ext: umlx_wire::packet::ExtHeaders,
    payload: &[u8],
) -> Vec<u8> {
    use umlx_wire::packet::{Bth, FrameBuilder};
    let (peer_mac, peer_ip, b_ip) = ([0x02, 0, 0, 0, 0, 0x99], [10, 77, 0, 99], [10, 77, 0, 3]);
    // Each packet asks for its ACK, so a test sees each answer.
    let bth = Bth { ack_req: true, ..Bth::new(op, qpn, psn & 0xff_ffff) };
    FrameBuilder::ipv4(peer_mac, mac, peer_ip.into(), b_ip.into(), bth)
        .with_ext(ext)
        .with_payload(payload)
        .to_vec()
        .expect("a valid frame")
}

#[test]
fn a_packet_after_one_that_failed_its_qp_in_the_same_burst_is_not_executed() {
    use umlx_wire::packet::{ExtHeaders, Opcode, Reth};

    let (_fabric, b, qb) = node_with_peer_qp();
    let (psn, at) = (0xff_fff0, 0x2000usize);
    let data = pattern(3, 64);
    let write = |rkey: u32| {
        let reth = Reth { va: b.va(at), rkey, dma_len: data.len() as u32 };
        peer_frame(
            b.mac,
            qb.qpn,
            Opcode::RC_RDMA_WRITE_ONLY,
            psn,
            ExtHeaders { reth: Some(reth), ..Default::default() },
            &data,
        )
    };
    // The first WRITE names a key the adapter does not have: a remote access NAK, and the QP
    // goes to error. The second, the same PSN with the right key, comes in the same burst.
    let (bad, good) = (write(b.mkey ^ 0x100), write(b.mkey));
    let naks = b.dev.transport_stats().err_naks_sent;
    b.dev.port().inject_burst([bad, good]);
    assert_eq!(b.dev.transport_stats().err_naks_sent, naks + 1, "the bad key is NAKed");
    assert_eq!(b.mem.to_vec(at, data.len()), vec![0; data.len()], "nothing lands on a QP in error");
}

#[test]
fn a_burst_of_packets_for_two_qps_in_turn_reaches_both() {
    use umlx_wire::packet::{ExtHeaders, Opcode, Reth};

    let fabric = Fabric::perfect();
    let mut b = Node::new(2, &fabric);
    let (q1, q2) = (b.create_qp(false, 8, 8), b.create_qp(false, 8, 8));
    let peer = (&gid_v4([10, 77, 0, 99]), [0x02, 0, 0, 0, 0, 0x99]);
    b.connect_rc(&q1, (peer.0, peer.1, 0x99), RcParams::default());
    b.connect_rc(&q2, (peer.0, peer.1, 0x9a), RcParams::default());
    let psn = 0xff_fff0;
    // WRITEs to q1, q2, q1, q2: each QP's second one in sequence after its first.
    let mut frames = Vec::new();
    let mut expected = Vec::new();
    for k in 0..4u32 {
        let (qpn, at) = (if k % 2 == 0 { q1.qpn } else { q2.qpn }, 0x2000 + 0x100 * k as usize);
        let data = pattern(10 + k, 64);
        let reth = Reth { va: b.va(at), rkey: b.mkey, dma_len: 64 };
        let ext = ExtHeaders { reth: Some(reth), ..Default::default() };
        frames.push(peer_frame(b.mac, qpn, Opcode::RC_RDMA_WRITE_ONLY, psn + k / 2, ext, &data));
        expected.push((at, data));
    }
    b.dev.port().inject_burst(frames);
    for (k, (at, data)) in expected.iter().enumerate() {
        assert_eq!(&b.mem.to_vec(*at, 64), data, "WRITE {k}");
    }
    assert_eq!(b.dev.transport_stats().rx_dropped, 0, "no packet dropped");
}

#[test]
fn a_write_only_whose_payload_is_not_its_length_is_an_invalid_request_and_an_empty_one_needs_no_key() {
    use umlx_wire::packet::{AethKind, ExtHeaders, NakCode, Opcode, Reth, parse_frame};
    use umlx_wire::pcap::PcapReader;

    let (_fabric, b, qb) = node_with_peer_qp();
    let pcap = std::env::temp_dir().join(format!("umlx-write-only-{}.pcap", std::process::id()));
    b.dev.port().set_pcap(&pcap).expect("recording the frames");
    let (psn, at) = (0xff_fff0, 0x2000usize);
    b.mem.write(at, &[0xee; 100]);
    let write = |psn: u32, rkey: u32, dma_len: u32, payload: &[u8]| {
        let ext = ExtHeaders { reth: Some(Reth { va: b.va(at), rkey, dma_len }), ..Default::default() };
        peer_frame(b.mac, qb.qpn, Opcode::RC_RDMA_WRITE_ONLY, psn, ext, payload)
    };
    // An empty WRITE with a key the adapter does not have: no memory is named, no key checked.
    b.dev.port().inject(write(psn, b.mkey ^ 0x100, 0, &[]));
    // A WRITE whose RETH says 100 bytes and whose one packet carries 64.
    b.dev.port().inject(write(psn + 1, b.mkey, 100, &pattern(5, 64)));
    b.dev.port().stop_pcap().expect("closing the recording");
    let answers: Vec<AethKind> = PcapReader::new(std::fs::File::open(&pcap).expect("the recording"))
        .expect("a pcap")
        .map(|r| r.expect("a record").data)
        .filter_map(|f| parse_frame(&f).ok().filter(|p| p.eth().src == b.mac).and_then(|p| p.aeth()).map(|a| a.kind()))
        .collect();
    let _ = std::fs::remove_file(&pcap);
    assert!(matches!(answers.first(), Some(AethKind::Ack { .. })), "the empty WRITE is ACKed: {answers:?}");
    assert_eq!(answers.get(1), Some(&AethKind::Nak(NakCode::InvalidRequest)), "{answers:?}");
    assert_eq!(b.mem.to_vec(at, 100), vec![0xee; 100], "nothing of the short WRITE lands");
}

#[test]
fn wqes_rung_together_across_the_rings_end_and_a_page_are_each_executed_once_in_order() {
    // The SQ (256 WQEBBs, four pages) is filled up to WQEBB 240 with NOPs, then 51 WRITEs are
    // written and published with one doorbell: one WQEBB each with a gather entry, three with
    // 100 bytes inline. They run from WQEBB 240 over the ring's end and the first page's end,
    // and a fetch reads the posted WQEBBs ahead (a block ends at a page's end, the ring's end,
    // or 32 WQEBBs), so WQEs of three WQEBBs fall across the blocks' edges.
    let mut p = pair();
    while p.qa.sq_pi < 240 {
        p.a.post_send(&mut p.qa, NOP, false, 0, &[]);
    }
    let mut expected = Vec::new();
    let mut db = 0;
    for k in 0..51u32 {
        let (at, data) = (0x20000 + 0x100 * k as usize, pattern(100 + k, 100));
        let s = if k % 3 == 2 {
            let head = wqe_inline_seg { byte_count: U32::new(w::INLINE_SEG | 100) };
            let mut inl = segs(&[head.as_bytes(), &data]);
            inl.resize(inl.len().next_multiple_of(w::SEND_WQE_DS), 0);
            segs(&[&raddr_seg(p.b.va(at), p.b.mkey), &inl])
        } else {
            p.a.mem.write(0x1000 + 0x100 * k as usize, &data);
            segs(&[&raddr_seg(p.b.va(at), p.b.mkey), &data_seg(100, p.a.mkey, p.a.va(0x1000 + 0x100 * k as usize))])
        };
        let signaled = if k == 50 { w::WQE_CTRL_CQ_UPDATE } else { 0 };
        let (_, d) = p.a.write_send_wqe(&mut p.qa, WRITE, signaled, 0, &s);
        db = if k == 0 { d } else { db };
        expected.push((at, data));
    }
    assert!(p.qa.sq_pi as usize > 256 + 64, "the chain crosses the ring's end and a page: {}", p.qa.sq_pi);
    p.a.ring_sq(&p.qa, db);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (CqeOpcode::REQ, WRITE), "the last WRITE completes");
    for (k, (at, data)) in expected.iter().enumerate() {
        assert_eq!(&p.b.mem.to_vec(*at, 100), data, "WRITE {k}");
    }
    assert_eq!(p.a.dev.transport_stats().bad_wqes, 0, "no WQE misread");
    assert_eq!(p.b.dev.transport_stats().duplicates, 0, "none executed twice");
}

/// [`pair`] with an ACK timeout of 268 ms (`ack_timeout` 16) instead of 1 ms: for the tests
/// that count packets and find no retransmission, so that a thread the scheduler keeps off a
/// CPU for a millisecond or two (a loaded machine: two busy processes beside the suite made
/// one run in seven of `frames_that_arrive_...` retransmit) does not make one.
fn pair_with_patient_requester() -> RcPair {
    RcPair::new(FabricConfig::default(), RcParams { ack_timeout: 16, ..RcParams::default() })
}

/// A 600-byte WRITE (three packets at the pair's MTU of 256) of `pattern(seed, 600)` from A's
/// offset 0x1000 to B's 0x8000, its WQE written but not rung: the data, the WQE's index and its
/// doorbell value.
fn write_600_unrung(p: &mut RcPair, seed: u32) -> (Vec<u8>, u16, u64) {
    let data = pattern(seed, 600);
    p.a.mem.write(0x1000, &data);
    let s = segs(&[&raddr_seg(p.b.va(0x8000), p.b.mkey), &data_seg(600, p.a.mkey, p.a.va(0x1000))]);
    let (idx, db) = p.a.write_send_wqe(&mut p.qa, WRITE, w::WQE_CTRL_CQ_UPDATE, 0, &s);
    (data, idx, db)
}

/// The WRITE of [`write_600_unrung`] (WQE `idx`) completed once, its `data` at B, sent and
/// received in three packets, none again.
fn assert_write_600_done_once(p: &mut RcPair, idx: u16, data: &[u8]) {
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), cqe(&c).wqe_counter.get()), (CqeOpcode::REQ, idx));
    assert_eq!(p.b.mem.to_vec(0x8000, 600), data);
    let (ta, tb) = (p.a.dev.transport_stats(), p.b.dev.transport_stats());
    assert_eq!((ta.tx_packets, tb.rx_packets, ta.retransmits, tb.duplicates), (3, 3, 0, 0), "{ta:?} {tb:?}");
    assert!(p.a.poll_cq_timeout(std::time::Duration::from_millis(20)).is_none(), "no further CQE");
}

/// A send doorbell rung while another run holds the QP's transport (handling its packets, say)
/// does not wait for it: that run fetches and sends the WQEs before it puts the transport
/// back. Rung once, with nothing else to run the QP after, the WRITE still lands, once.
#[test]
fn a_send_doorbell_rung_while_another_run_holds_the_qps_transport_is_served_by_that_run() {
    let mut p = pair_with_patient_requester();
    let (data, idx, db) = write_600_unrung(&mut p, 7);
    let dev = p.a.dev.clone();
    let mut rung = false;
    assert!(dev.hold_qp_transport_while(p.qa.qpn, || {
        p.a.ring_sq(&p.qa, db);
        rung = true;
    }));
    assert!(rung, "the doorbell returned while the transport was held");
    assert_write_600_done_once(&mut p, idx, &data);
}

/// A register read runs beside the data path: it takes the device shared, not whole, so it
/// neither waits for a run in progress nor holds off the threads that ring doorbells meanwhile
/// (their writes, and the frames that arrive, would be left to the reading thread: the
/// driver's health check, once a second, would run the data path in its event thread, whose
/// first runs then make that thread's lists). Another thread reads the health counter while
/// this one's run holds a QP's transport; the read returns before the run lets go.
#[test]
fn a_register_read_returns_while_another_run_holds_the_device_shared() {
    use umlx_hwdesc::plain::iseg;
    let p = pair();
    let dev = p.a.dev.clone();
    let counter = |d: &umlx_sim::SimDevice| d.bar0_read32(iseg::HEALTH_COUNTER as u64) & iseg::HEALTH_COUNTER_MASK;
    let before = counter(&dev);
    let mut during = None;
    assert!(dev.hold_qp_transport_while(p.qa.qpn, || {
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = dev.clone();
        std::thread::spawn(move || {
            let _ = tx.send(counter(&reader));
        });
        during = rx.recv_timeout(std::time::Duration::from_secs(5)).ok();
    }));
    let during = during.expect("the read waited for the run to let go of the device");
    // The register's value, not a stand-in: the counter only goes forward.
    assert!(during >= before && counter(&dev) >= during, "health counter {before}, {during}, then {}", counter(&dev));
}

/// Frames that arrive in a receive queue while another thread's run handles that queue wait
/// for that run, which handles them before it lets go (one run at a time handles a queue, so
/// that a QP's packets are handled in the order they arrived): the run that brought them finds
/// the queue taken, marks it and returns. With the receiving device's engine kept out (it would
/// find them at its next look), the WRITE has not landed while the queue is held, and has the
/// moment the holder lets go.
#[test]
fn frames_that_arrive_while_another_run_handles_their_queue_are_handled_by_that_run() {
    use umlx_hwdesc::plain::{dbr, uar};
    let mut p = pair_with_patient_requester();
    let (data, idx, db) = write_600_unrung(&mut p, 11);
    p.qa.dbr.write_u32_be(dbr::SND_DBR, p.qa.sq_pi as u32);
    let doorbell = (p.a.uar as usize * uar::UAR_PAGE_SIZE + uar::BF_OFFSET) as u64;
    let (dev_a, dev_b, qpn_b) = (p.a.dev.clone(), p.b.dev.clone(), p.qb.qpn);
    let mut during_hold = None;
    let after_hold = dev_b.hold_engine_while(|| {
        let held = dev_b.hold_receive_queue_while(qpn_b, || {
            // Another thread rings: its run sends the WRITE's packets, which reach B's queue.
            std::thread::scope(|t| {
                t.spawn(|| dev_a.bar0_write64(doorbell, db));
            });
            during_hold = Some(p.b.mem.to_vec(0x8000, 600));
        });
        assert!(held, "the queue was held");
        p.b.mem.to_vec(0x8000, 600)
    });
    // The queue's claim kept the ringing thread's run off the frames, and its mark had the
    // holder handle them before it let go.
    let during_hold = during_hold.expect("the queue was held");
    assert!(during_hold.iter().all(|&b| b == 0), "nothing handled while the queue was held");
    assert!(after_hold == data, "the WRITE landed when the holder let go");
    assert_write_600_done_once(&mut p, idx, &data);
}

/// Send doorbells of one QP rung by two threads at once (each run of the device services the
/// QP, and sends what it fetched; a doorbell that finds another run holding the QP's transport
/// leaves the work to it, and one receive queue's frames are handled by one run at a time): every WQE is sent
/// once and completes once, in order, its packets arrive in order, and its data lands.
#[test]
fn two_threads_ringing_one_qps_doorbell_at_once_send_each_wqe_once_in_order() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use umlx_hwdesc::plain::uar;
    const WRITES: u32 = 1200;
    const BATCH: u32 = 4;
    /// Four packets at the pair's path MTU of 256.
    const LEN: usize = 1000;
    let mut p = pair();
    let bad_before = p.a.dev.stats().bad_doorbells;
    let doorbell = (p.a.uar as usize * uar::UAR_PAGE_SIZE + uar::BF_OFFSET) as u64;
    let write = |p: &mut RcPair, i: u32| {
        let src = (i % 16) as usize * LEN;
        p.a.mem.write(src, &pattern(i, LEN));
        let dst = p.b.va(0x4000 + i as usize * LEN);
        let s = segs(&[&raddr_seg(dst, p.b.mkey), &data_seg(LEN as u32, p.a.mkey, p.a.va(src))]);
        p.a.write_send_wqe(&mut p.qa, WRITE, w::WQE_CTRL_CQ_UPDATE, 0, &s)
    };
    // The other thread rings with the first WQE's doorbell value (it names the QP; the device
    // fetches up to the doorbell record, whatever index the value carries).
    let (idx0, db0) = write(&mut p, 0);
    p.a.ring_sq(&p.qa, db0);
    let c = p.a.poll_cq();
    assert_eq!((cqe_opcode(&c), cqe(&c).wqe_counter.get()), (CqeOpcode::REQ, idx0));
    let stop = Arc::new(AtomicBool::new(false));
    let rung = Arc::new(AtomicU64::new(0));
    let ringer = {
        let (dev, stop, rung) = (p.a.dev.clone(), stop.clone(), rung.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                dev.bar0_write64(doorbell, db0);
                rung.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    while rung.load(Ordering::Relaxed) == 0 {
        std::thread::yield_now();
    }
    for first in (1..WRITES).step_by(BATCH as usize) {
        let batch: Vec<u16> = (first..(first + BATCH).min(WRITES))
            .map(|i| {
                let (idx, db) = write(&mut p, i);
                p.a.ring_sq(&p.qa, db);
                idx
            })
            .collect();
        for (i, idx) in (first..).zip(batch) {
            let c = p.a.poll_cq();
            assert_eq!((cqe_opcode(&c), cqe(&c).wqe_counter.get()), (CqeOpcode::REQ, idx), "WRITE {i}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    ringer.join().expect("the ringing thread");
    for i in 0..WRITES {
        assert_eq!(p.b.mem.to_vec(0x4000 + i as usize * LEN, LEN), pattern(i, LEN), "WRITE {i}'s data");
    }
    let (ta, tb) = (p.a.dev.transport_stats(), p.b.dev.transport_stats());
    let packets = WRITES as u64 * LEN.div_ceil(256) as u64;
    assert_eq!((ta.tx_packets, tb.rx_packets), (packets, packets), "each packet sent once: {ta:?} {tb:?}");
    assert_eq!((ta.retransmits, tb.duplicates, tb.seq_naks_sent), (0, 0, 0), "{ta:?} {tb:?}");
    assert!(p.a.poll_cq_timeout(std::time::Duration::from_millis(20)).is_none(), "no further CQE");
    assert_eq!(p.a.dev.stats().bad_doorbells, bad_before, "every ring named the QP");
}

/// A CQ takes completions for as long as its consumer makes room (the consumer counter of its
/// doorbell record), however stale the count the device read last, and overruns, moved to
/// error with a CQ_ERROR event and the overrun syndrome, at the first completion that finds it
/// full: the ring then holds exactly the completions that fit.
#[test]
fn a_cq_overruns_at_the_first_completion_that_finds_it_full_and_not_before() {
    use std::time::Duration;
    use umlx_hwdesc::enums::{CqErrorSyndrome, EventType};
    use umlx_hwdesc::plain::{eqe, eqe_cq_err};
    use zerocopy::FromBytes;
    let fabric = Fabric::new(FabricConfig::default());
    let (mut a, mut b) = (Node::new(1, &fabric), Node::new(2, &fabric));
    // A's QP completes into a CQ of four entries; an EQ of its own takes CQ errors.
    a.cq = create_cq(&mut a.host, a.uar, a.eq.eqn, 2);
    let mut errors = a.host.create_eq(a.uar, 3, 1 << EventType::CQ_ERROR.0, 0).expect("CREATE_EQ");
    let mut qa = a.create_qp(false, 6, 6);
    let qb = b.create_qp(false, 6, 6);
    let (ga, ma, gb, mb) = (a.gid, a.mac, b.gid, b.mac);
    a.connect_rc(&qa, (&gb, mb, qb.qpn), RcParams::default());
    b.connect_rc(&qb, (&ga, ma, qa.qpn), RcParams::default());
    a.mem.write(0, b"complete");
    let s = segs(&[&raddr_seg(b.va(0), b.mkey), &data_seg(8, a.mkey, a.va(0))]);
    // Twelve WRITEs, four at a time, each four polled before the next: the ring is full by the
    // count the device read last at every round's first completion.
    for _ in 0..3 {
        let first = a.post_send(&mut qa, WRITE, true, 0, &s);
        for _ in 1..4 {
            a.post_send(&mut qa, WRITE, true, 0, &s);
        }
        for k in 0..4 {
            let c = a.poll_cq();
            assert_eq!((cqe_opcode(&c), cqe(&c).wqe_counter.get()), (CqeOpcode::REQ, first.wrapping_add(k)));
        }
    }
    assert!(errors.poll().is_none(), "no CQ error while the consumer keeps up");
    // Five more, none polled: four fill the ring, the fifth overruns it.
    let first = a.post_send(&mut qa, WRITE, true, 0, &s);
    for _ in 1..5 {
        a.post_send(&mut qa, WRITE, true, 0, &s);
    }
    let e = errors.wait(Duration::from_secs(5)).expect("a CQ_ERROR event");
    let e = eqe::read_from_bytes(&e[..]).expect("an EQE");
    assert_eq!(e.type_, EventType::CQ_ERROR.0);
    let (err, _) = eqe_cq_err::read_from_prefix(&e.data[..]).expect("a CQ error payload");
    assert_eq!(err.cqn.get(), a.cq.cqn);
    assert_eq!(CqErrorSyndrome(err.syndrome), CqErrorSyndrome::CQ_OVERRUN);
    for k in 0..4 {
        let c = a.poll_cq();
        assert_eq!((cqe_opcode(&c), cqe(&c).wqe_counter.get()), (CqeOpcode::REQ, first.wrapping_add(k)));
    }
    assert!(a.poll_cq_timeout(Duration::from_millis(100)).is_none(), "the fifth completion was not written");
}
