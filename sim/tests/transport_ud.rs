//! UD: SEND and SEND with immediate between two devices, the 40-byte GRH, Q_Key check.

mod transport_common;
use transport_common::*;
use umlx_hwdesc::U32;
use umlx_hwdesc::enums::{CqeOpcode, WqeOpcode};
use umlx_hwdesc::plain::{cq, wqe, wqe_av};
use zerocopy::IntoBytes;

fn ud_wqe(dst: &Node, dqpn: u32, qkey: u32, lkey: u32, va: u64, len: u32) -> Vec<u8> {
    let av = wqe_av {
        qkey: U32::new(qkey),
        dqp_dct: U32::new(wqe::EXTENDED_UD_AV | dqpn),
        rmac: dst.mac,
        hop_limit: 64,
        rgid: dst.gid,
        ..Default::default()
    };
    segs(&[av.as_bytes(), &data_seg(len, lkey, va)])
}

#[test]
fn ud_send_with_grh_and_qkey() {
    let fabric = Fabric::perfect();
    let mut a = Node::new(1, &fabric);
    let mut b = Node::new(2, &fabric);
    let mut qa = a.create_qp(true, 6, 6);
    let mut qb = b.create_qp(true, 6, 6);
    a.activate_ud(&qa, 0x1111);
    b.activate_ud(&qb, 0x2222);
    let data = pattern(9, 200);
    a.mem.write(0, &data);
    b.post_recv(&mut qb, 0x1000, 1024);
    let w = ud_wqe(&b, qb.qpn, 0x2222, a.mkey, a.va(0), 200);
    a.post_send(&mut qa, WqeOpcode::SEND_IMM, true, 0xabcd, &w);
    let c = a.poll_cq();
    assert_eq!((cqe_opcode(&c), sent_opcode(&c)), (CqeOpcode::REQ, WqeOpcode::SEND_IMM));
    let r = b.poll_cq();
    assert_eq!(cqe_opcode(&r), CqeOpcode::RESP_SEND_IMM);
    let rx = cqe(&r);
    assert_eq!(rx.byte_cnt.get(), 240, "GRH + payload");
    assert_eq!(rx.flags_rqpn.get() & cq::NUM_MASK_24, qa.qpn, "source QPN");
    assert_ne!(rx.flags_rqpn.get() >> cq::FLAGS_RQPN_GRH_SHIFT & cq::FLAGS_RQPN_GRH_MASK, 0, "GRH indication");
    assert_eq!(rx.imm_inval_pkey.get(), 0xabcd);
    let got = b.mem.to_vec(0x1000, 240);
    assert_eq!(&got[..20], &[0u8; 20], "IPv4: 20 zero bytes");
    assert_eq!(got[20] >> 4, 4, "then the IPv4 header");
    assert_eq!(&got[32..36], &[10, 77, 0, 2], "source IP");
    assert_eq!(&got[40..], &data[..]);

    // Wrong Q_Key: dropped, no receive completion.
    b.post_recv(&mut qb, 0x2000, 1024);
    let w = ud_wqe(&b, qb.qpn, 0x9999, a.mkey, a.va(0), 10);
    a.post_send(&mut qa, WqeOpcode::SEND, true, 0, &w);
    assert_eq!(cqe_opcode(&a.poll_cq()), CqeOpcode::REQ);
    assert!(b.poll_cq_timeout(std::time::Duration::from_millis(50)).is_none());
    let w = ud_wqe(&b, qb.qpn, 0x2222, a.mkey, a.va(0), 10);
    a.post_send(&mut qa, WqeOpcode::SEND, true, 0, &w);
    assert_eq!(cqe_opcode(&a.poll_cq()), CqeOpcode::REQ);
    let r = b.poll_cq();
    assert_eq!((cqe_opcode(&r), cqe(&r).byte_cnt.get()), (CqeOpcode::RESP_SEND, 50));
}
