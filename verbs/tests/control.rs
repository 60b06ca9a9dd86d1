//! Verbs control path on the software ConnectX: queries, objects, QP state rules, post errors.

#![forbid(unsafe_code)]

use umlx_verbs::*;

fn ctx() -> Context {
    Context::open_sim(umlx_sim::SimConfig::numbered(3)).expect("open sim")
}

#[test]
fn device_port_and_gid_queries() {
    let c = ctx();
    let d = c.query_device().unwrap();
    assert_eq!(d.vendor_id, 0x15b3);
    assert_eq!(d.vendor_part_id, 0x101d);
    assert_eq!(d.fw_ver, "22.39.1002");
    assert!(d.max_qp >= 1 << 16 && d.max_cqe > 0 && d.atomic_cap == 1);
    let p = c.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.link_layer, "Ethernet");
    assert_eq!(p.active_mtu, Mtu::Mtu1024, "1500-byte Ethernet MTU gives 1024");
    assert_eq!(p.gid_tbl_len, 256);
    let g1 = c.query_gid(1, 1).unwrap();
    assert_eq!(g1.to_ip(), "10.77.0.4".parse::<std::net::IpAddr>().unwrap());
    assert_eq!(&c.query_gid(1, 0).unwrap().0[..2], &[0xfe, 0x80]);
    assert!(c.query_port(2).is_err());
    assert_eq!(devices().last().unwrap().kind, DeviceKind::Sim);
}

#[test]
fn qp_state_rules_and_post_errors() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(64, None).unwrap();
    let cap = QpCap { max_send_wr: 16, max_recv_wr: 16, max_send_sge: 2, max_recv_sge: 2, max_inline_data: 64 };
    let mut qp = pd.create_qp(QpType::Rc, &cq).cap(cap).build().unwrap();
    assert!(qp.cap.max_send_wr >= 16 && qp.cap.max_inline_data >= 64);
    let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let sge = [mr.sge(0, 64)];
    let wr = SendWr::new(1, SendOp::Send { data: Payload::Sges(&sge), imm: None }).signaled();
    let e = qp.post_send(&[wr]).unwrap_err();
    assert_eq!((e.kind(), e.qp_state(), e.work_request()), (ErrorKind::WrongState, Some(QpState::Reset), Some(0)));
    assert_eq!(e.errno(), libc::EINVAL);
    assert!(qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &sge }]).is_err(), "post_recv in RESET");
    // RESET -> RTR is not a transition.
    let e = qp.modify(&ModifyQp::to(QpState::Rtr)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WrongState, "{e}");
    // RESET -> INIT without the required attributes.
    let e = qp.modify(&ModifyQp::to(QpState::Init)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let remote = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    qp.modify(&ModifyQp::to(QpState::Init).pkey_index(0).port_num(1).qp_access_flags(remote)).unwrap();
    let q = qp.query().unwrap();
    assert_eq!(q.qp_state, Some(QpState::Init));
    assert!(q.qp_access_flags.contains(remote));
    // Receive queue: fill it in one call with one too many: all but the last are posted, the
    // last is ENOMEM, the rest are on the queue; then one more is ENOMEM.
    let cap = qp.cap.max_recv_wr as usize;
    let wrs: Vec<RecvWr> = (0..=cap).map(|i| RecvWr { wr_id: i as u64, sg_list: &sge }).collect();
    let e = qp.post_recv(&wrs).unwrap_err();
    assert_eq!((e.work_request(), e.kind(), e.errno()), (Some(cap), ErrorKind::QueueFull, libc::ENOMEM));
    let e = qp.post_recv(&[RecvWr { wr_id: 99, sg_list: &sge }]).unwrap_err();
    assert_eq!((e.work_request(), e.kind()), (Some(0), ErrorKind::QueueFull));
    // In ERR sends are accepted (and flushed), but not more than the QP was created for.
    qp.modify(&ModifyQp::to(QpState::Err)).unwrap();
    let big = vec![0u8; 4096];
    let e = qp.post_send(&[SendWr::new(3, SendOp::Send { data: Payload::Inline(&big), imm: None })]).unwrap_err();
    assert_eq!((e.kind(), e.errno(), e.work_request()), (ErrorKind::InvalidArgument, libc::EINVAL, Some(0)));
    assert!(e.to_string().contains("max_inline_data"), "{e}");
    let too_many: Vec<Sge> = (0..=qp.cap.max_send_sge).map(|i| mr.sge(8 * i as usize, 8)).collect();
    let e = qp.post_send(&[SendWr::new(4, SendOp::Send { data: Payload::Sges(&too_many), imm: None })]).unwrap_err();
    assert_eq!((e.kind(), e.work_request()), (ErrorKind::InvalidArgument, Some(0)));
    assert!(e.to_string().contains("more SGEs"), "{e}");
}

#[test]
fn memory_registration_access_rules() {
    let c = ctx();
    let pd = c.alloc_pd().unwrap();
    let e = pd.alloc_mr(64, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let data: Vec<u8> = (0..10000u32).map(|i| i as u8).collect();
    let mr = pd.reg_mr(data.clone(), AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    assert_eq!(mr.len(), 10000);
    assert_eq!(mr.to_vec(9990, 10).unwrap(), data[9990..].to_vec());
    mr.write(0, b"umlx").unwrap();
    assert!(mr.write(9998, b"xyz").is_err(), "out of bounds");
    let back = mr.dereg().unwrap();
    assert_eq!(&back[..4], b"umlx");
}

#[test]
fn bring_up_raises_log_max_qp_to_the_max_cap_as_linux_does() {
    // Firmware that starts with room for 2^2 QPs: bring-up asks for the max cap's 2^18.
    let c =
        Context::open_sim(umlx_sim::SimConfig { log_max_qp: 2, ..umlx_sim::SimConfig::numbered(6) }).expect("open sim");
    assert_eq!(c.query_device().unwrap().max_qp, 1 << 18);
    let pd = c.alloc_pd().unwrap();
    let cq = c.create_cq(64, None).unwrap();
    let qps: Vec<_> =
        (0..8).map(|k| pd.create_qp(QpType::Rc, &cq).build().unwrap_or_else(|e| panic!("QP {k}: {e}"))).collect();
    assert_eq!(qps.len(), 8);
}
