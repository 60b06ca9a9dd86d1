//! The data path against the PRM's byte layouts: send WQEs (control, remote address and data
//! segments), the SQ doorbell record and BlueFlame doorbell, receive WQEs with their
//! terminator, CQE ownership across passes over the ring, and the pollers' QP cache.
//!
//! What the driver writes is read back through hwdesc's declarations (`wqe_ctrl_seg`,
//! `wqe_raddr_seg`, `wqe_data_seg`, `cqe64`, ...), the layouts `umlx layout` checks against
//! the public mlx5 headers, not through offsets typed again here.

use std::sync::Arc;
use umlx_driver::SimBackend;
use umlx_driver::datapath::{
    CqRing, HeadTaken, PlainQueueMemory, PostError, QpCache, QpTable, QueueMemory, RecvQueue, Remote, SendQueue,
    SendWqe, Sge, SopDropQpn, SqGeometry, WrRing, opcode, send_flags,
};
use umlx_driver::dma::DmaMemory;
use umlx_hwdesc::enums::{CqeOpcode, WqeOpcode};
use umlx_hwdesc::plain::{
    CqeOpOwn, FmCeSe, cq_dbr, cqe64, qp_dbr, uar, wqe as w, wqe_ctrl_seg, wqe_data_seg, wqe_raddr_seg, wqe_srq_next_seg,
};
use umlx_hwdesc::{U16, U32};
use umlx_sim::SimConfig;
use zerocopy::{FromBytes, IntoBytes};

/// The structure `T` at `off` of `m`.
fn read<T: FromBytes>(m: &DmaMemory, off: usize) -> T {
    T::read_from_bytes(&bytes(m, off, size_of::<T>())).unwrap()
}

/// A control segment's fields: (WQE index, opcode, QPN, DS count, fm_ce_se, imm).
fn ctrl_fields(c: &wqe_ctrl_seg) -> (u32, WqeOpcode, u32, u32, FmCeSe, u32) {
    let op = c.opmod_idx_opcode.get();
    let qd = c.qpn_ds.get();
    (
        (op >> w::WQE_CTRL_WQE_INDEX_SHIFT) & w::WQE_CTRL_WQE_INDEX_MASK,
        WqeOpcode(op as u8),
        qd >> w::WQE_CTRL_QPN_SHIFT,
        qd & w::WQE_CTRL_DS_MASK,
        FmCeSe::from_bits(c.fm_ce_se),
        c.imm.get(),
    )
}

/// A data segment's (address, byte count, lkey).
fn data_fields(d: &wqe_data_seg) -> (u64, u32, u32) {
    (d.addr.get(), d.byte_count.get(), d.lkey.get())
}

fn bytes(m: &DmaMemory, off: usize, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    m.read_bytes(off, &mut b).unwrap();
    b
}

fn be32(m: &DmaMemory, off: usize) -> u32 {
    u32::from_be_bytes(bytes(m, off, 4).try_into().unwrap())
}

/// One page of queue buffer and a doorbell record, owned together (what the queues keep alive).
fn plain_memory() -> Arc<PlainQueueMemory> {
    PlainQueueMemory::new(DmaMemory::new(4096).unwrap(), DmaMemory::new(64).unwrap())
}

#[test]
fn sge_is_held_as_the_data_segment() {
    let s = Sge::new(0x1122_3344_5566_7788, 0x0a0b_0c0d, 0x0102_0304);
    assert_eq!((s.addr(), s.length(), s.lkey()), (0x1122_3344_5566_7788, 0x0a0b_0c0d, 0x0102_0304));
    let wire: Vec<u8> = s.wire().iter().flat_map(|w| w.to_ne_bytes()).collect();
    // byte_count, lkey, address: big-endian, as the device reads a data segment.
    assert_eq!(wire, [0x0a, 0x0b, 0x0c, 0x0d, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
    assert!(!s.is_empty());
    assert!(Sge::new(0x1000, 0, 5).is_empty());
    assert!(format!("{s:?}").contains("addr: 0x1122334455667788"));
}

struct Sq {
    backend: Arc<SimBackend>,
    mem: Arc<PlainQueueMemory>,
    ring: Arc<WrRing>,
    sq: SendQueue<SimBackend>,
}

/// The BlueFlame buffer size the test SQ alternates by (a device with `log_bf_reg_size` 10).
const BF_BUF_SIZE: usize = 0x200;

/// A four-WQEBB SQ of `qpn` at the start of its buffer: one SGE, no inline data.
fn geometry(qpn: u32, bf_buf_size: usize) -> SqGeometry {
    SqGeometry { qpn, sq_offset: 0, log_bbs: 2, uar_index: 0, max_sge: 1, max_inline: 0, sig_all: false, bf_buf_size }
}

/// A four-WQEBB SQ of QP 0x1234 with its doorbell going to plain memory.
fn sq() -> Sq {
    let backend = SimBackend::with_plain_doorbells("dp", SimConfig::default()).unwrap();
    let mem = plain_memory();
    let ring = Arc::new(WrRing::new(0x1234, 4, 1));
    let geo = geometry(0x1234, BF_BUF_SIZE);
    let sq = SendQueue::new(backend.clone(), mem.clone(), geo, ring.clone()).unwrap();
    Sq { backend, mem, ring, sq }
}

#[test]
fn short_wqes_follow_the_prm_layout_and_a_chain_rings_once() {
    let mut q = sq();
    let sge = Sge::new(0xaaaa_0000, 64, 0x55);
    let mut chain = q.sq.begin();
    let write = Some(Remote { addr: 0xbbbb_0000_1111, rkey: 0x77 });
    chain.write_simple(7, opcode::RDMA_WRITE, send_flags::SIGNALED, 0, write, &sge).unwrap();
    chain
        .write_simple(8, opcode::SEND_IMM, send_flags::SOLICITED | send_flags::FENCE, 0xdead_beef, None, &sge)
        .unwrap();
    chain.finish();

    let cq_update = FmCeSe::new().with_ce(2);
    // WQE 0: control (index 0, RDMA_WRITE, QPN, DS 3, CQ_UPDATE), remote address, data.
    let c0: wqe_ctrl_seg = read(q.mem.buf(), 0);
    assert_eq!(ctrl_fields(&c0), (0, WqeOpcode::RDMA_WRITE, 0x1234, 3, cq_update, 0));
    let r0: wqe_raddr_seg = read(q.mem.buf(), wqe_ctrl_seg::SIZE);
    assert_eq!((r0.raddr.get(), r0.rkey.get()), (0xbbbb_0000_1111, 0x77));
    let d0: wqe_data_seg = read(q.mem.buf(), wqe_ctrl_seg::SIZE + wqe_raddr_seg::SIZE);
    assert_eq!(data_fields(&d0), (0xaaaa_0000, 64, 0x55));
    // WQE 1: index 1, SEND_IMM, DS 2, fence and solicited, the immediate, then data.
    let c1: wqe_ctrl_seg = read(q.mem.buf(), w::SEND_WQE_BB);
    let fence_se = FmCeSe::new().with_fm(4).with_se(true);
    assert_eq!(ctrl_fields(&c1), (1, WqeOpcode::SEND_IMM, 0x1234, 2, fence_se, 0xdead_beef));
    assert_eq!(c1.fm_ce_se, w::WQE_CTRL_FENCE | w::WQE_CTRL_SOLICITED);
    let d1: wqe_data_seg = read(q.mem.buf(), w::SEND_WQE_BB + wqe_ctrl_seg::SIZE);
    assert_eq!(data_fields(&d1), (0xaaaa_0000, 64, 0x55));
    // One doorbell: the record holds the producer counter, the BlueFlame register the first
    // 8 bytes of the last WQE.
    assert_eq!(be32(q.mem.dbr(), qp_dbr::send_counter), 2);
    let db = q.backend.plain_doorbell(uar::BF_OFFSET).unwrap();
    assert_eq!(&db.to_ne_bytes()[..], &c1.as_bytes()[..8]);
    let other = uar::BF_OFFSET + BF_BUF_SIZE;
    assert_eq!(q.backend.plain_doorbell(other), Some(0), "only one doorbell was rung");

    // The ring holds four: two more fit, the fifth is refused.
    let mut chain = q.sq.begin();
    chain.write_simple(9, opcode::SEND, 0, 0, None, &sge).unwrap();
    chain.write_simple(10, opcode::SEND, 0, 0, None, &sge).unwrap();
    assert_eq!(chain.write_simple(11, opcode::SEND, 0, 0, None, &sge), Err(PostError::QueueFull));
    chain.finish();
    assert_eq!(be32(q.mem.dbr(), qp_dbr::send_counter), 4);
    assert_ne!(q.backend.plain_doorbell(other), Some(0), "the second doorbell uses the other register");

    // A completion of WQE 0 frees its WQEBB: the next WQE wraps to slot 0 with index 4, and a
    // zero-length SGE is left out (DS 1).
    assert_eq!(q.ring.complete_send(0), 7);
    let mut chain = q.sq.begin();
    chain.write_simple(12, opcode::SEND, 0, 0, None, &Sge::new(0, 0, 0x55)).unwrap();
    assert_eq!(chain.write_simple(13, opcode::SEND, 0, 0, None, &sge), Err(PostError::QueueFull));
    chain.finish();
    let c4: wqe_ctrl_seg = read(q.mem.buf(), 0);
    assert_eq!(ctrl_fields(&c4), (4, WqeOpcode::SEND, 0x1234, 1, FmCeSe::new(), 0));
    assert_eq!(q.ring.complete_send(4), 12);
}

/// An SQ `geo` (QP `geo.qpn`) of four WQEBBs at 0x400 of `mem` (an RQ before it) whose first
/// three WQEBBs held one-WQEBB SENDs that completed: the next WQE starts at its last WQEBB, and
/// one longer than a WQEBB wraps to its first.
fn sq_whose_next_wqe_wraps(geo: SqGeometry, mem: &Arc<PlainQueueMemory>) -> (SendQueue<SimBackend>, Arc<WrRing>) {
    let backend = SimBackend::with_plain_doorbells("dp", SimConfig::default()).unwrap();
    let ring = Arc::new(WrRing::new(geo.qpn, 4, 1));
    let geo = SqGeometry { sq_offset: 0x400, ..geo };
    let mut sq = SendQueue::new(backend, mem.clone(), geo, ring.clone()).unwrap();
    let sge = Sge::new(0x1000, 8, 1);
    let mut chain = sq.begin();
    for id in 0..3 {
        chain.write_simple(id, opcode::SEND, 0, 0, None, &sge).unwrap();
    }
    chain.finish();
    assert_eq!(ring.complete_send(2), 2, "WQEBBs 0 to 2 retired");
    (sq, ring)
}

/// Writes `wqe` into [`sq_whose_next_wqe_wraps`]'s SQ and rings; its control segment as
/// written (at the SQ's last WQEBB, 0x4c0 of `buf`).
fn write_at_last_wqebb(sq: &mut SendQueue<SimBackend>, wqe: &SendWqe<'_>, buf: &DmaMemory) -> wqe_ctrl_seg {
    let mut chain = sq.begin();
    chain.with_queue(|sq| sq.write_wqe(wqe)).unwrap();
    chain.finish();
    read(buf, 0x400 + 3 * w::SEND_WQE_BB)
}

#[test]
fn a_general_wqe_wraps_at_the_rings_end_inside_its_queue() {
    // Three SGEs per WQE.
    let mem = plain_memory();
    let (mut sq, ring) = sq_whose_next_wqe_wraps(SqGeometry { max_sge: 3, ..geometry(0x42, BF_BUF_SIZE) }, &mem);
    // RDMA WRITE with three SGEs: DS 5, two WQEBBs from WQEBB 3, so its last data segment
    // wraps to the ring's first.
    let sges = [Sge::new(0xa000, 16, 0x11), Sge::new(0xb000, 32, 0x22), Sge::new(0xc000, 48, 0x33)];
    let wqe = SendWqe {
        wr_id: 99,
        opcode: opcode::RDMA_WRITE,
        send_flags: send_flags::SIGNALED,
        imm: 0,
        remote: Remote { addr: 0xdd00_0000, rkey: 0x44 },
        atomic: (0, 0),
        sges: &sges,
        inline: None,
        av: None,
    };
    let (buf, at) = (mem.buf(), 0x400 + 3 * w::SEND_WQE_BB);
    let c = write_at_last_wqebb(&mut sq, &wqe, buf);
    assert_eq!(ctrl_fields(&c), (3, WqeOpcode::RDMA_WRITE, 0x42, 5, FmCeSe::new().with_ce(2), 0));
    let r: wqe_raddr_seg = read(buf, at + wqe_ctrl_seg::SIZE);
    assert_eq!((r.raddr.get(), r.rkey.get()), (0xdd00_0000, 0x44));
    let d = at + wqe_ctrl_seg::SIZE + wqe_raddr_seg::SIZE;
    assert_eq!(data_fields(&read(buf, d)), (0xa000, 16, 0x11));
    assert_eq!(data_fields(&read(buf, d + wqe_data_seg::SIZE)), (0xb000, 32, 0x22));
    assert_eq!(data_fields(&read(buf, 0x400)), (0xc000, 48, 0x33), "wrapped to the SQ's start");
    assert!(bytes(buf, 0x3f0, 16).iter().all(|&b| b == 0), "nothing written before the SQ");
    assert!(bytes(buf, 0x500, 16).iter().all(|&b| b == 0), "nothing written past the SQ");
    assert_eq!(be32(mem.dbr(), qp_dbr::send_counter), 5);
    assert_eq!(ring.complete_send(3), 99);
    assert_eq!(sq.free_bbs(), 4);
}

#[test]
fn inline_data_follows_its_header_in_zero_padded_segments_that_wrap() {
    // Up to 128 bytes inline; the ring's bytes start as 0xee, so that padding left unwritten
    // would show.
    let mem = plain_memory();
    mem.buf().write_bytes(0x400, &[0xee; 0x100]).unwrap();
    let (mut sq, ring) = sq_whose_next_wqe_wraps(SqGeometry { max_inline: 128, ..geometry(0x43, BF_BUF_SIZE) }, &mem);
    // A SEND of 45 bytes inline from WQEBB 3: control, then 4 + 45 bytes in four segments
    // (DS 5), the last two wrapped to the ring's start.
    let data: Vec<u8> = (1..=45).collect();
    let wqe = SendWqe {
        wr_id: 77,
        opcode: opcode::SEND,
        send_flags: send_flags::SIGNALED,
        imm: 0,
        remote: Remote { addr: 0, rkey: 0 },
        atomic: (0, 0),
        sges: &[],
        inline: Some(&data),
        av: None,
    };
    let (buf, at) = (mem.buf(), 0x400 + 3 * w::SEND_WQE_BB);
    let c = write_at_last_wqebb(&mut sq, &wqe, buf);
    assert_eq!(ctrl_fields(&c), (3, WqeOpcode::SEND, 0x43, 5, FmCeSe::new().with_ce(2), 0));
    // The segments as the device reads them: the first three from the ring's last WQEBB, the
    // fourth from its first.
    let mut inline = bytes(buf, at + wqe_ctrl_seg::SIZE, 48);
    inline.extend(bytes(buf, 0x400, 16));
    assert_eq!(inline[..4], (w::INLINE_SEG | 45).to_be_bytes());
    assert_eq!(inline[4..49], data[..]);
    assert!(inline[49..].iter().all(|&b| b == 0), "the last segment is zero-padded: {:?}", &inline[49..]);
    assert_eq!(data_fields(&read(buf, 0x410)), (0x1000, 8, 1), "WQE 0's data segment is left as it was");
    assert_eq!(ring.complete_send(3), 77);
}

/// The inline path (`SqChain::write_inline`, the latency tests' requests) writes what the
/// general one (`write_wqe`) writes for the same request, byte for byte, wrapping at the
/// ring's end: SEND and RDMA WRITE, with and without an immediate, from no data to the QP's
/// inline limit; and refuses what it refuses.
#[test]
fn the_inline_path_writes_the_general_paths_wqe() {
    let geo = SqGeometry { max_inline: 128, ..geometry(0x44, BF_BUF_SIZE) };
    let remote = Remote { addr: 0xdd00_1234_5678, rkey: 0x55aa };
    let cases = [
        (opcode::SEND, 0, None),
        (opcode::SEND_IMM, 0x0102_0304, None),
        (opcode::RDMA_WRITE, 0, Some(remote)),
        (opcode::RDMA_WRITE_IMM, 0xa0b0_c0d0, Some(remote)),
    ];
    for (op, imm, to) in cases {
        for len in [0usize, 1, 11, 12, 13, 28, 45, 64, 100, 128] {
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let run = |inline_path: bool| {
                let mem = plain_memory();
                mem.buf().write_bytes(0x400, &[0xee; 0x100]).unwrap();
                let (mut sq, ring) = sq_whose_next_wqe_wraps(geo, &mem);
                let mut chain = sq.begin();
                let flags = send_flags::SIGNALED | send_flags::SOLICITED;
                if inline_path {
                    chain.write_inline(31, op, flags, imm, to, &data).unwrap();
                } else {
                    let wqe = SendWqe {
                        wr_id: 31,
                        opcode: op,
                        send_flags: flags,
                        imm,
                        remote: to.unwrap_or_default(),
                        atomic: (0, 0),
                        sges: &[],
                        inline: Some(&data),
                        av: None,
                    };
                    chain.with_queue(|sq| sq.write_wqe(&wqe)).unwrap();
                }
                chain.finish();
                let written = (bytes(mem.buf(), 0x400, 0x100), be32(mem.dbr(), qp_dbr::send_counter));
                let head = sq.cur_post();
                (written, head, ring.complete_send(3), sq.free_bbs())
            };
            let (general, inline) = (run(false), run(true));
            assert_eq!(inline, general, "opcode {op:#x}, {len} bytes inline");
            // The inline segment as the device reads it (both paths share its writer): the
            // header, the data, zeros to the segment's end; from after the control and remote
            // address segments of the WQE at the ring's last WQEBB, wrapping to its first.
            let ring = &inline.0.0;
            let first = w::SEND_WQE_BB * 3 + wqe_ctrl_seg::SIZE * (1 + to.is_some() as usize);
            let segs = if len == 0 { 0 } else { (4 + len).div_ceil(16) };
            let got: Vec<u8> = (0..segs * 16).map(|i| ring[(first + i) % ring.len()]).collect();
            let mut want = if len == 0 { vec![] } else { (w::INLINE_SEG | len as u32).to_be_bytes().to_vec() };
            want.extend(&data);
            want.resize(segs * 16, 0);
            assert_eq!(got, want, "opcode {op:#x}, {len} bytes inline");
        }
    }
    // What both refuse: more than the QP's inline limit, and a WQE the ring has no room for.
    let mem = plain_memory();
    let (mut sq, _ring) = sq_whose_next_wqe_wraps(geo, &mem);
    let mut chain = sq.begin();
    assert_eq!(chain.write_inline(1, opcode::SEND, 0, 0, None, &[0; 129]), Err(PostError::InlineTooLarge));
    // 128 bytes with a remote address: 9 segments, 3 WQEBBs, of the 4 free.
    chain.write_inline(2, opcode::RDMA_WRITE, 0, 0, Some(remote), &[0; 128]).unwrap();
    assert_eq!(chain.write_inline(3, opcode::SEND, 0, 0, None, &[0; 64]), Err(PostError::QueueFull));
    chain.write_inline(4, opcode::SEND, 0, 0, None, &[0; 12]).unwrap();
    chain.finish();
    assert_eq!(sq.free_bbs(), 0);
}

#[test]
fn queues_keep_their_memory_alive() {
    let mem = plain_memory();
    let ring = CqRing::new(mem.clone(), 2).unwrap();
    let rq = RecvQueue::new(mem.clone(), 0, 2, 5, Arc::new(WrRing::new(1, 1, 4)), false).unwrap();
    let backend = SimBackend::with_plain_doorbells("dp", SimConfig::default()).unwrap();
    let sq = SendQueue::new(backend, mem.clone(), geometry(1, BF_BUF_SIZE), Arc::new(WrRing::new(1, 4, 1))).unwrap();
    assert_eq!(Arc::strong_count(&mem), 4, "the CQ reader and both writers each hold the memory");
    drop((ring, rq, sq));
    assert_eq!(Arc::strong_count(&mem), 1);
    assert!(CqRing::new(mem.clone(), 7).is_none(), "a ring larger than its buffer is refused");
    assert_eq!(Arc::strong_count(&mem), 1, "and not kept");
}

#[test]
fn the_doorbell_alternates_by_the_devices_blueflame_buffer_size() {
    // The test SQ's device has 0x200-byte buffers: the second doorbell lands 0x200 past the
    // first (a fixed 0x100 would write into the wrong buffer).
    let mut q = sq();
    let sge = Sge::new(0x1000, 8, 1);
    for (i, at) in [(0u64, uar::BF_OFFSET), (1, uar::BF_OFFSET + 0x200), (2, uar::BF_OFFSET)] {
        let mut chain = q.sq.begin();
        chain.write_simple(i, opcode::SEND, 0, 0, None, &sge).unwrap();
        chain.finish();
        let c: wqe_ctrl_seg = read(q.mem.buf(), i as usize * w::SEND_WQE_BB);
        assert_eq!(q.backend.plain_doorbell(at), Some(u64::from_ne_bytes(c.as_bytes()[..8].try_into().unwrap())));
    }
    // Sizes the doorbell cannot alternate by are refused at creation.
    for bad in [0, 0x180, 0x800] {
        let geo = geometry(1, bad);
        let ring = Arc::new(WrRing::new(1, 4, 1));
        assert!(SendQueue::new(q.backend.clone(), q.mem.clone(), geo, ring).is_err(), "{bad:#x}");
    }
}

#[test]
fn receive_wqes_carry_their_terminator_and_a_closed_queue_refuses() {
    let mem = plain_memory();
    let (buf, dbr) = (mem.buf(), mem.dbr());
    let ring = Arc::new(WrRing::new(1, 1, 4));
    // Four WQEs of 32 bytes: room for two SGEs, so one SGE is followed by a terminator.
    let mut rq = RecvQueue::new(mem.clone(), 0, 2, 5, ring.clone(), false).unwrap();
    assert_eq!(rq.max_sge, 2);
    let sge = Sge::new(0xcafe_0000, 256, 0x99);
    assert!(rq.try_write_one(5, &sge));
    rq.ring_doorbell();
    let terminator = (0, 0, w::INVALID_LKEY);
    assert_eq!(data_fields(&read(buf, 0)), (0xcafe_0000, 256, 0x99));
    assert_eq!(data_fields(&read(buf, wqe_data_seg::SIZE)), terminator);
    assert_eq!(be32(dbr, qp_dbr::recv_counter), 1);

    // A zero-length SGE is not the short path; written in full it leaves only the terminator.
    assert!(!rq.try_write_one(6, &Sge::new(0x1000, 0, 0x99)));
    rq.write_wqe(6, &[Sge::new(0x1000, 0, 0x99)]).unwrap();
    assert_eq!(data_fields(&read(buf, 32)), terminator);

    // Closed (its QP in RESET): refused on both paths, nothing written.
    rq.close();
    assert!(!rq.try_write_one(7, &sge));
    assert_eq!(rq.write_wqe(7, &[sge]), Err(PostError::Closed));
    rq.open();
    rq.write_wqe(7, &[sge]).unwrap();
    assert!(rq.try_write_one(8, &sge));
    assert_eq!(rq.write_wqe(9, &[sge]), Err(PostError::QueueFull));
    assert_eq!(rq.write_wqe(9, &[sge, sge, sge]), Err(PostError::TooManySges));
    // One completion frees one WQE.
    assert_eq!(ring.complete_recv(0), 5);
    rq.write_wqe(9, &[sge]).unwrap();
    rq.ring_doorbell();
    assert_eq!(be32(dbr, qp_dbr::recv_counter), 5);
}

/// The SGE address in the scatter list of SRQ WQE `i` (32-byte WQEs: next segment, one SGE).
fn srq_sge_addr(buf: &DmaMemory, i: usize) -> u64 {
    read::<wqe_data_seg>(buf, i * 32 + wqe_srq_next_seg::SIZE).addr.get()
}

/// The `next_wqe_index` of SRQ WQE `i`.
fn srq_next(buf: &DmaMemory, i: usize) -> u16 {
    read::<wqe_srq_next_seg>(buf, i * 32).next_wqe_index.get()
}

#[test]
fn an_srq_reuses_only_completed_wqes_through_its_free_list() {
    // Four SRQ WQEs linked 0 -> 1 -> 2 -> 3, as CREATE_SRQ leaves them; WQE 3 is the list's
    // tail, which is never posted while it is the tail (rdma-core's SRQ keeps the same rule).
    let mem = plain_memory();
    let (buf, dbr) = (mem.buf(), mem.dbr());
    for i in 0..4usize {
        let next = wqe_srq_next_seg { next_wqe_index: U16::new(((i + 1) % 4) as u16), ..Default::default() };
        buf.write_bytes(i * 32, next.as_bytes()).unwrap();
    }
    let ring = Arc::new(WrRing::new_srq(9, 4));
    let mut rq = RecvQueue::new(mem.clone(), 0, 2, 5, ring.clone(), true).unwrap();
    let sge = |n: u64| Sge::new(0x1000 * n, 64, 0x99);
    for id in 0..3 {
        assert!(!rq.try_write_one(id, &sge(id + 1)), "an SRQ post takes the general path");
        rq.write_wqe(id, &[sge(id + 1)]).unwrap();
    }
    assert_eq!(rq.write_wqe(3, &[sge(4)]), Err(PostError::QueueFull));
    rq.ring_doorbell();
    assert_eq!(be32(dbr, qp_dbr::recv_counter), 3);

    // Two QPs share the SRQ: WQE 1 completes while WQE 0 is still being filled. WQE 0 must
    // not be reused (a ring would have counted one free WQE and written the oldest, WQE 0).
    assert_eq!(ring.complete_recv(1), 1);
    rq.write_wqe(10, &[sge(10)]).unwrap(); // into the old tail, WQE 3
    assert_eq!(rq.write_wqe(11, &[sge(11)]), Err(PostError::QueueFull));
    assert_eq!(srq_sge_addr(buf, 0), 0x1000, "WQE 0 is untouched");
    assert_eq!(srq_sge_addr(buf, 3), 0xa000);
    // The device's list now runs 3 -> 1 (WQE 1 became the tail).
    assert_eq!(srq_next(buf, 3), 1);

    // WQE 0 completes: it is linked after WQE 1, and the next post goes into WQE 1.
    assert_eq!(ring.complete_recv(0), 0);
    rq.write_wqe(11, &[sge(11)]).unwrap();
    assert_eq!(srq_sge_addr(buf, 1), 0xb000);
    assert_eq!(srq_next(buf, 1), 0);
    assert_eq!(rq.write_wqe(12, &[sge(12)]), Err(PostError::QueueFull));
    rq.ring_doorbell();
    assert_eq!(be32(dbr, qp_dbr::recv_counter), 5);
    // The completions name the WQEs the posts went into.
    assert_eq!(ring.complete_recv(3), 10);
    assert_eq!(ring.complete_recv(1), 11);
}

/// Writes CQE `index` as the device would: an RDMA WRITE's requester CQE (`opcode` REQ) or a
/// responder SEND's, for `qpn` and WQE `counter`, with `owner`.
fn put_cqe(buf: &DmaMemory, index: usize, qpn: u32, counter: u16, opcode: CqeOpcode, owner: bool) {
    let cqe = cqe64 {
        sop_drop_qpn: U32::new(((WqeOpcode::RDMA_WRITE.0 as u32) << 24) | qpn),
        wqe_counter: U16::new(counter),
        op_own: CqeOpOwn::new().with_opcode(opcode.0).with_owner(owner).into_bits(),
        ..Default::default()
    };
    buf.write_bytes(index * cqe64::SIZE, cqe.as_bytes()).unwrap();
}

/// The consumer index in a CQ doorbell record.
fn cq_ci(dbr: &DmaMemory) -> u32 {
    be32(dbr, cq_dbr::set_ci)
}

#[test]
fn cqe_ownership_follows_the_pass_over_the_ring() {
    let mem = plain_memory();
    let (buf, dbr) = (mem.buf(), mem.dbr());
    for i in 0..4 {
        // INVALID, owner 0: as the driver initialises a CQ.
        buf.write_u8(i * cqe64::SIZE + cqe64::op_own, umlx_hwdesc::plain::cq::CQE_OP_OWN_INVALID).unwrap();
    }
    let mut ring = CqRing::new(mem.clone(), 2).unwrap();
    // What `take_requesters` hands over: (QPN, WQE counter, send opcode) of each CQE taken.
    let take = |ring: &mut CqRing, max: usize| {
        let mut out = vec![(0u32, 0u16, 0u8); max];
        let mut c = ring.cursor();
        let n = c.take_requesters(&mut out, |cqe, o| {
            *o = (cqe.qpn(), cqe.wqe_counter(), cqe.wqe_opcode());
            assert_eq!(cqe.sop_drop_qpn(), SopDropQpn::new(cqe.wqe_opcode(), cqe.qpn()));
            cqe.qpn() != 0xdead // a QP the caller does not know: left unconsumed
        });
        let next = c.peek().map(|c| c.opcode());
        c.finish();
        out.truncate(n);
        (out, next)
    };
    assert_eq!(take(&mut ring, 4), (vec![], None), "an INVALID CQE is not handed over");
    put_cqe(buf, 0, 0x1234, 7, CqeOpcode::REQ, false); // requester, first pass (owner 0)
    put_cqe(buf, 1, 0x1234, 0, CqeOpcode::RESP_SEND, false); // responder SEND: only the general peek takes it
    assert_eq!(take(&mut ring, 4), (vec![(0x1234, 7, 0x08)], Some(2)));
    assert_eq!(cq_ci(dbr), 1, "the consumer index reaches the doorbell record");
    {
        let mut c = ring.cursor();
        c.advance(); // the responder CQE, consumed by a general poll
        c.finish();
    }
    put_cqe(buf, 2, 0x1234, 8, CqeOpcode::REQ, true); // owner 1 in the first pass: not yet the device's
    assert_eq!(take(&mut ring, 4), (vec![], None));
    put_cqe(buf, 2, 0x1234, 8, CqeOpcode::REQ, false);
    put_cqe(buf, 3, 0xdead, 9, CqeOpcode::REQ, false);
    assert_eq!(take(&mut ring, 4), (vec![(0x1234, 8, 0x08)], Some(0)), "refused by the caller: left");
    put_cqe(buf, 3, 0x1234, 9, CqeOpcode::REQ, false);
    // A run stops at the ring's end: CQE 0 of the second pass is owner 1, and still owner 0.
    assert_eq!(take(&mut ring, 4), (vec![(0x1234, 9, 0x08)], None));
    put_cqe(buf, 0, 0x1234, 10, CqeOpcode::REQ, true);
    assert_eq!(take(&mut ring, 4), (vec![(0x1234, 10, 0x08)], None));
    assert_eq!(cq_ci(dbr), 5);
}

#[test]
fn the_pollers_qp_cache_forgets_removed_qps() {
    let write = |qpn| SopDropQpn::new(opcode::RDMA_WRITE, qpn);
    let table = QpTable::default();
    let first = Arc::new(WrRing::new(0x10, 1, 1));
    table.insert(first.clone());
    let mut cache = QpCache::default();
    {
        let mut pinned = cache.pin(&table);
        assert!(pinned.hit(write(0x10)).is_none(), "an empty cache hits nothing");
        assert!(std::ptr::eq(pinned.learn(write(0x10)).unwrap(), &*first));
        assert!(std::ptr::eq(pinned.hit(write(0x10)).unwrap(), &*first));
        assert!(pinned.hit(SopDropQpn::new(opcode::SEND, 0x10)).is_none(), "the opcode is part of the key");
        assert!(pinned.learn(write(0x11)).is_none(), "an unknown QP is not learnt");
        assert!(std::ptr::eq(pinned.qp(0x10).unwrap(), &*first));
        assert!(pinned.srq(0x10).is_none(), "QPs and SRQs are two number spaces");
    }
    assert!(std::ptr::eq(cache.pin(&table).hit(write(0x10)).unwrap(), &*first), "kept between polls");
    // QP 0x10 destroyed, its number reused: the cache must not hand out the old rings.
    table.remove(0x10);
    assert!(cache.pin(&table).hit(write(0x10)).is_none(), "a removal invalidates the cache");
    let second = Arc::new(WrRing::new(0x10, 1, 1));
    table.insert(second.clone());
    {
        let mut pinned = cache.pin(&table);
        assert!(pinned.hit(write(0x10)).is_none());
        assert!(std::ptr::eq(pinned.learn(write(0x10)).unwrap(), &*second));
    }
    assert!(std::ptr::eq(cache.pin(&table).hit(write(0x10)).unwrap(), &*second), "the new QP, learnt");
    // A cache from another table is not trusted either.
    let other = QpTable::default();
    let third = Arc::new(WrRing::new(0x10, 1, 1));
    other.insert(third.clone());
    let mut pinned = cache.pin(&other);
    assert!(pinned.hit(write(0x10)).is_none());
    assert!(std::ptr::eq(pinned.learn(write(0x10)).unwrap(), &*third));
}

#[test]
fn the_poll_fast_path_takes_one_requester_cqe_and_publishes_it() {
    let mem = plain_memory();
    let (buf, dbr) = (mem.buf(), mem.dbr());
    for i in 0..4 {
        buf.write_u8(i * cqe64::SIZE + cqe64::op_own, umlx_hwdesc::plain::cq::CQE_OP_OWN_INVALID).unwrap();
    }
    let mut ring = CqRing::new(mem.clone(), 2).unwrap();
    // (what the closure saw: QPN, counter, whether the next CQE is empty), and what happened.
    let take = |ring: &mut CqRing, accept: bool| {
        let mut seen = None;
        let r = ring.take_requester(|cqe, next| {
            seen = Some((cqe.qpn(), cqe.wqe_counter(), next.is_empty()));
            accept
        });
        (r, seen)
    };
    assert_eq!(take(&mut ring, true), (HeadTaken::Empty, None));
    put_cqe(buf, 0, 0x1234, 7, CqeOpcode::REQ, false);
    assert_eq!(take(&mut ring, false), (HeadTaken::Declined, Some((0x1234, 7, true))));
    assert_eq!((ring.ci(), cq_ci(dbr)), (0, 0), "declined: not consumed, not published");
    put_cqe(buf, 1, 0x1234, 8, CqeOpcode::REQ, false);
    assert_eq!(take(&mut ring, true), (HeadTaken::Taken, Some((0x1234, 7, false))), "the next one is there");
    assert_eq!((ring.ci(), cq_ci(dbr)), (1, 1), "taken: consumed and published");
    assert_eq!(take(&mut ring, true), (HeadTaken::Taken, Some((0x1234, 8, true))));
    put_cqe(buf, 2, 0x1234, 0, CqeOpcode::RESP_SEND, false); // responder SEND
    assert_eq!(take(&mut ring, true), (HeadTaken::Other, None), "not a requester success: not shown");
    {
        let mut c = ring.cursor();
        c.advance();
        c.finish();
    }
    put_cqe(buf, 3, 0x1234, 9, CqeOpcode::REQ, false);
    // The next CQE is slot 0 again, on the second pass: its owner bit must be 1.
    assert_eq!(take(&mut ring, true), (HeadTaken::Taken, Some((0x1234, 9, true))), "slot 0 is still pass 0's");
    assert_eq!(take(&mut ring, true), (HeadTaken::Empty, None));
    put_cqe(buf, 0, 0x1234, 10, CqeOpcode::REQ, true);
    assert_eq!(take(&mut ring, true), (HeadTaken::Taken, Some((0x1234, 10, true))), "wrapped: owner 1");
    assert_eq!((ring.ci(), cq_ci(dbr)), (5, 5));
    put_cqe(buf, 1, 0x1234, 11, CqeOpcode::REQ, false);
    assert_eq!(take(&mut ring, true), (HeadTaken::Empty, None), "owner 0 on the second pass is stale");
}
