//! UD: SEND and SEND with immediate between two devices, the 40-byte GRH, Q_Key check.

mod transport_common;
use transport_common::*;

fn ud_wqe(dst: &Node, dqpn: u32, qkey: u32, lkey: u32, va: u64, len: u32) -> Vec<u8> {
    let mut av = [0u8; 48];
    av[0..4].copy_from_slice(&qkey.to_be_bytes());
    av[8..12].copy_from_slice(&(0x8000_0000 | dqpn).to_be_bytes());
    av[0x14..0x1a].copy_from_slice(&dst.mac);
    av[0x1b] = 64;
    av[0x20..0x30].copy_from_slice(&dst.gid);
    segs(&[&av, &data_seg(len, lkey, va)])
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
    a.post_send(&mut qa, 0x0b, true, 0xabcd, &w);
    let c = a.poll_cq();
    assert_eq!((cqe_opcode(&c), c[0x38]), (0, 0x0b));
    let r = b.poll_cq();
    assert_eq!(cqe_opcode(&r), 3);
    assert_eq!(be32(&r, 0x2c), 240, "GRH + payload");
    assert_eq!(be32(&r, 0x18) & 0xff_ffff, qa.qpn, "source QPN");
    assert_ne!(be32(&r, 0x18) & (3 << 28), 0, "GRH indication");
    assert_eq!(be32(&r, 0x24), 0xabcd);
    let got = b.mem.to_vec(0x1000, 240);
    assert_eq!(&got[..20], &[0u8; 20], "IPv4: 20 zero bytes");
    assert_eq!(got[20] >> 4, 4, "then the IPv4 header");
    assert_eq!(&got[32..36], &[10, 77, 0, 2], "source IP");
    assert_eq!(&got[40..], &data[..]);

    // Wrong Q_Key: dropped, no receive completion.
    b.post_recv(&mut qb, 0x2000, 1024);
    let w = ud_wqe(&b, qb.qpn, 0x9999, a.mkey, a.va(0), 10);
    a.post_send(&mut qa, 0x0a, true, 0, &w);
    assert_eq!(cqe_opcode(&a.poll_cq()), 0);
    assert!(b.poll_cq_timeout(std::time::Duration::from_millis(50)).is_none());
    let w = ud_wqe(&b, qb.qpn, 0x2222, a.mkey, a.va(0), 10);
    a.post_send(&mut qa, 0x0a, true, 0, &w);
    assert_eq!(cqe_opcode(&a.poll_cq()), 0);
    let r = b.poll_cq();
    assert_eq!((cqe_opcode(&r), be32(&r, 0x2c)), (2, 50));
}
