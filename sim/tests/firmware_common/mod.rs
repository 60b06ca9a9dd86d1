//! Shared helpers of the firmware tests: a brought-up environment, status assertions, and
//! builders for the objects (CQ, QP, SRQ, MKey, GIDs).
#![allow(dead_code)]

use std::fmt::Debug;
use umlx_hwdesc::enums::{
    CmdOpcode, CmdStatus, DeliveryStatus, EventType, HealthSyndrome, NicInterface, QpPmState, QpServiceType, QpState,
    RqType,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::{self, cq, cqe64, eqe_cmd, eqe_page_req, iseg, wqe};
#[allow(unused_imports)]
pub use umlx_sim::firmware::syndrome as sy;
pub use umlx_sim::host::*;
pub use umlx_sim::{SimConfig, SimDevice};
use zerocopy::FromBytes;

/// A device brought up to INIT_HCA with a UAR, a PD and an EQ for completion events only (so
/// commands do not fill it).
pub struct Env {
    pub dev: SimDevice,
    pub host: CmdHost,
    pub uar: u32,
    pub pd: u32,
    pub eq: HostEq,
}

impl Env {
    pub fn new() -> Env {
        Env::with_config(SimConfig::default())
    }

    pub fn with_config(cfg: SimConfig) -> Env {
        let dev = SimDevice::new(cfg);
        let mut host = CmdHost::new(&dev);
        host.bring_up().expect("bring-up");
        let uar = host.alloc_uar().expect("ALLOC_UAR");
        let pd = host.alloc_pd().expect("ALLOC_PD");
        let eq = host.create_eq(uar, 6, 1 << EventType::COMP.0, 0).expect("CREATE_EQ");
        Env { dev, host, uar, pd, eq }
    }
}

/// QUERY_HCA_VPORT_CONTEXT of `port`: the command's output.
pub fn query_hca_vport(host: &mut CmdHost, port: u64) -> Result<Vec<u8>, CmdError> {
    host.exec(
        CmdOpcode::QUERY_HCA_VPORT_CONTEXT,
        0,
        query_hca_vport_context_in::SIZE_BYTES,
        query_hca_vport_context_out::SIZE_BYTES,
        |i| {
            query_hca_vport_context_in::port_num.set(i, port);
        },
    )
}

/// QUERY_VPORT_STATE of the function's own vport: the command's output.
pub fn query_vport_state(host: &mut CmdHost) -> Result<Vec<u8>, CmdError> {
    host.exec(
        CmdOpcode::QUERY_VPORT_STATE,
        0,
        query_vport_state_in::SIZE_BYTES,
        query_vport_state_out::SIZE_BYTES,
        |_| {},
    )
}

/// Asserts a command failed with `status` and the sim syndrome reason `reason` for `opcode`.
#[track_caller]
pub fn expect_fail<T: Debug>(r: Result<T, CmdError>, opcode: CmdOpcode, status: CmdStatus, reason: u16) {
    let e = r.expect_err("command unexpectedly succeeded");
    assert_eq!(e.delivery, DeliveryStatus::OK, "delivery of {e}");
    assert!(!e.timed_out, "{e}");
    assert_eq!(e.status, status, "status of {e}");
    assert_eq!(e.reason(), reason, "syndrome reason of {e}");
    assert_eq!(e.syndrome_opcode(), opcode.0, "syndrome opcode of {e}");
}

/// Asserts a command failed with `status` (any syndrome).
#[track_caller]
pub fn expect_status<T: Debug>(r: Result<T, CmdError>, status: CmdStatus) -> CmdError {
    let e = r.expect_err("command unexpectedly succeeded");
    assert_eq!(e.delivery, DeliveryStatus::OK, "delivery of {e}");
    assert_eq!(e.status, status, "status of {e}");
    e
}

/// Asserts a command failed delivery with `delivery`.
#[track_caller]
pub fn expect_delivery<T: Debug>(r: Result<T, CmdError>, delivery: DeliveryStatus) {
    let e = r.expect_err("command unexpectedly succeeded");
    assert!(!e.timed_out, "{e}");
    assert_eq!(e.delivery, delivery, "{e}");
}

/// A CQ and its memory.
#[derive(Debug)]
pub struct CqHandle {
    pub cqn: u32,
    pub buf: HostBuffer,
    pub dbr: HostBuffer,
}

/// A CREATE_CQ input for 2^`log_size` 64-byte CQEs in 4 KiB pages `pas`.
pub fn cq_input(uar: u32, eqn: u32, log_size: u32, pas: &[u64], dbr: u64) -> Vec<u8> {
    let mut i = cmd_input(CmdOpcode::CREATE_CQ, 0, create_cq_in::SIZE_BYTES + 8 * pas.len());
    let c = create_cq_in::cq_context;
    c.inner(cqc::log_cq_size).set(&mut i, log_size as u64);
    c.inner(cqc::uar_page).set(&mut i, uar as u64);
    c.inner(cqc::c_eqn_or_apu_element).set(&mut i, eqn as u64);
    c.inner(cqc::log_page_size).set(&mut i, 0);
    c.inner(cqc::dbr_addr).set(&mut i, dbr);
    put_pas(&mut i, create_cq_in::SIZE_BYTES, pas);
    i
}

/// Writes a page list at byte `at`.
pub fn put_pas(input: &mut [u8], at: usize, pas: &[u64]) {
    for (k, p) in pas.iter().enumerate() {
        input[at + 8 * k..at + 8 * k + 8].copy_from_slice(&p.to_be_bytes());
    }
}

/// The pages of a buffer.
pub fn pages_of(buf: &HostBuffer) -> Vec<u64> {
    (0..buf.len() / PAGE_SIZE).map(|i| buf.iova_at(i * PAGE_SIZE)).collect()
}

/// Creates a CQ of 2^`log_size` CQEs with fresh memory (every CQE owned by software).
pub fn create_cq(host: &mut CmdHost, uar: u32, eqn: u32, log_size: u32) -> Result<CqHandle, CmdError> {
    let buf = host.alloc(cqe64::SIZE << log_size);
    for i in 0..(1usize << log_size) {
        buf.write_u8(i * cqe64::SIZE + cqe64::op_own, cq::CQE_OP_OWN_INVALID);
    }
    let dbr = host.alloc(64);
    let input = cq_input(uar, eqn, log_size, &pages_of(&buf), dbr.iova());
    let o = host.run(&input, create_cq_out::SIZE_BYTES)?;
    Ok(CqHandle { cqn: create_cq_out::cqn.get(&o) as u32, buf, dbr })
}

/// DESTROY_CQ.
pub fn destroy_cq(host: &mut CmdHost, cqn: u32) -> Result<(), CmdError> {
    host.exec(CmdOpcode::DESTROY_CQ, 0, destroy_cq_in::SIZE_BYTES, destroy_cq_out::SIZE_BYTES, |i| {
        destroy_cq_in::cqn.set(i, cqn as u64);
    })
    .map(drop)
}

/// A QP and its memory.
#[derive(Debug)]
pub struct QpHandle {
    pub qpn: u32,
    pub buf: HostBuffer,
    pub dbr: HostBuffer,
}

/// What a CREATE_QP uses.
#[derive(Clone, Copy, Debug)]
pub struct QpSpec {
    pub st: QpServiceType,
    pub pd: u32,
    pub uar: u32,
    pub cqn: u32,
    pub log_rq_size: u32,
    pub log_sq_size: u32,
    /// `Some(srqn)`: the RQ is that SRQ.
    pub srqn: Option<u32>,
}

impl QpSpec {
    pub fn rc(pd: u32, uar: u32, cqn: u32) -> QpSpec {
        QpSpec { st: QpServiceType::RC, pd, uar, cqn, log_rq_size: 4, log_sq_size: 4, srqn: None }
    }
}

/// Receive WQE size of the QPs [`create_qp`] makes.
pub const RQ_WQE_SIZE: usize = 64;
/// The QPC's `log_rq_stride` for [`RQ_WQE_SIZE`].
pub const LOG_RQ_STRIDE: u32 = RQ_WQE_SIZE.trailing_zeros() - wqe::RQ_STRIDE_UNIT_SHIFT;

/// CREATE_QP with fresh memory (RQ of 2^log_rq_size [`RQ_WQE_SIZE`]-byte WQEs, then the SQ).
pub fn create_qp(host: &mut CmdHost, s: QpSpec) -> Result<QpHandle, CmdError> {
    create_qp_with(host, s, |_| {})
}

/// CREATE_QP as [`create_qp`], with `extra` changing the input last.
pub fn create_qp_with(host: &mut CmdHost, s: QpSpec, extra: impl FnOnce(&mut [u8])) -> Result<QpHandle, CmdError> {
    let rq_bytes = if s.srqn.is_some() { 0 } else { RQ_WQE_SIZE << s.log_rq_size };
    let buf = host.alloc(rq_bytes + (wqe::SEND_WQE_BB << s.log_sq_size));
    let dbr = host.alloc(64);
    let pas = pages_of(&buf);
    let q = create_qp_in::qpc;
    let o =
        host.exec(CmdOpcode::CREATE_QP, 0, create_qp_in::SIZE_BYTES + 8 * pas.len(), create_qp_out::SIZE_BYTES, |i| {
            q.inner(qpc::st).set(i, s.st.0 as u64);
            q.inner(qpc::pm_state).set(i, QpPmState::MIGRATED.0 as u64);
            q.inner(qpc::pd).set(i, s.pd as u64);
            q.inner(qpc::uar_page).set(i, s.uar as u64);
            q.inner(qpc::log_rq_size).set(i, s.log_rq_size as u64);
            q.inner(qpc::log_rq_stride).set(i, LOG_RQ_STRIDE as u64);
            q.inner(qpc::log_sq_size).set(i, s.log_sq_size as u64);
            q.inner(qpc::cqn_snd).set(i, s.cqn as u64);
            q.inner(qpc::cqn_rcv).set(i, s.cqn as u64);
            q.inner(qpc::dbr_addr).set(i, dbr.iova());
            if let Some(srqn) = s.srqn {
                q.inner(qpc::rq_type).set(i, RqType::SRQ_RQ.0 as u64);
                q.inner(qpc::srqn_rmpn_xrqn).set(i, srqn as u64);
            }
            put_pas(i, create_qp_in::SIZE_BYTES, &pas);
            extra(i);
        })?;
    Ok(QpHandle { qpn: create_qp_out::qpn.get(&o) as u32, buf, dbr })
}

/// DESTROY_QP.
pub fn destroy_qp(host: &mut CmdHost, qpn: u32) -> Result<(), CmdError> {
    host.exec(CmdOpcode::DESTROY_QP, 0, destroy_qp_in::SIZE_BYTES, destroy_qp_out::SIZE_BYTES, |i| {
        destroy_qp_in::qpn.set(i, qpn as u64);
    })
    .map(drop)
}

/// A QP modify command (`op`) on `qpn`; `fill` sets the QPC fields (command-relative through
/// `rst2init_qp_in::qpc`, shared by every modify command).
pub fn modify_qp(
    host: &mut CmdHost,
    op: CmdOpcode,
    qpn: u32,
    opt_mask: u32,
    fill: impl FnOnce(&mut [u8]),
) -> Result<(), CmdError> {
    let short = matches!(op, CmdOpcode::QP_2ERR | CmdOpcode::QP_2RST);
    let size = if short { qp_2err_in::SIZE_BYTES } else { rst2init_qp_in::SIZE_BYTES };
    host.exec(op, 0, size, rst2init_qp_out::SIZE_BYTES, |i| {
        rst2init_qp_in::qpn.set(i, qpn as u64);
        if !short {
            rst2init_qp_in::opt_param_mask.set(i, opt_mask as u64);
            fill(i);
        }
    })
    .map(drop)
}

/// A field of the QPC inside a modify command.
pub fn qpc_f(f: umlx_hwdesc::Field) -> umlx_hwdesc::Field {
    rst2init_qp_in::qpc.inner(f)
}

/// A field of the primary address path inside a modify command.
pub fn ads_f(f: umlx_hwdesc::Field) -> umlx_hwdesc::Field {
    rst2init_qp_in::qpc.inner(qpc::primary_address_path).inner(f)
}

/// An IPv4-mapped GID.
pub fn gid_v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// A remote GID used by the RTR attributes.
pub const REMOTE_GID: [u8; 16] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 99];

/// Sets valid RC INIT2RTR attributes: MTU 1024, GID index 0, a remote GID and MAC, port 1.
pub fn rtr_attrs(i: &mut [u8]) {
    qpc_f(qpc::mtu).set(i, 3);
    qpc_f(qpc::log_msg_max).set(i, 20);
    qpc_f(qpc::remote_qpn).set(i, 0x123);
    qpc_f(qpc::next_rcv_psn).set(i, 0x10);
    qpc_f(qpc::min_rnr_nak).set(i, 12);
    ads_f(ads::src_addr_index).set(i, 0);
    ads_f(ads::hop_limit).set(i, 64);
    ads_f(ads::udp_sport).set(i, 0xdcba);
    ads_f(ads::vhca_port_num).set(i, 1);
    ads_f(ads::rgid_rip).bytes_mut(i).expect("rgid").copy_from_slice(&REMOTE_GID);
    ads_f(ads::rmac_47_32).set(i, 0x0200);
    ads_f(ads::rmac_31_0).set(i, 0x5e10_0063);
}

/// Sets valid RC RTR2RTS attributes.
pub fn rts_attrs(i: &mut [u8]) {
    qpc_f(qpc::next_send_psn).set(i, 0x20);
    qpc_f(qpc::retry_count).set(i, 7);
    qpc_f(qpc::rnr_retry).set(i, 7);
    qpc_f(qpc::log_sra_max).set(i, 2);
    ads_f(ads::ack_timeout).set(i, 14);
    ads_f(ads::vhca_port_num).set(i, 1);
}

/// Sets RST2INIT attributes (remote read/write, port 1).
pub fn init_attrs(i: &mut [u8]) {
    qpc_f(qpc::rre).set(i, 1);
    qpc_f(qpc::rwe).set(i, 1);
    ads_f(ads::vhca_port_num).set(i, 1);
}

/// QUERY_QP with the fixed-size output drivers use (no page list); returns the output.
pub fn query_qp(host: &mut CmdHost, qpn: u32) -> Result<Vec<u8>, CmdError> {
    host.exec(CmdOpcode::QUERY_QP, 0, query_qp_in::SIZE_BYTES, query_qp_out::SIZE_BYTES, |i| {
        query_qp_in::qpn.set(i, qpn as u64);
    })
}

/// The QP state QUERY_QP reports.
pub fn qp_state(host: &mut CmdHost, qpn: u32) -> QpState {
    let o = query_qp(host, qpn).expect("QUERY_QP");
    QpState(query_qp_out::qpc.inner(qpc::state).get(&o) as u8)
}

/// SET_ROCE_ADDRESS of entry `index`.
pub fn set_roce_address(
    host: &mut CmdHost,
    index: u16,
    gid: [u8; 16],
    mac: [u8; 6],
    l3_type: u8,
    version: u8,
) -> Result<(), CmdError> {
    let a = set_roce_address_in::roce_address;
    host.exec(CmdOpcode::SET_ROCE_ADDRESS, 0, set_roce_address_in::SIZE_BYTES, set_roce_address_out::SIZE_BYTES, |i| {
        set_roce_address_in::roce_address_index.set(i, index as u64);
        set_roce_address_in::vhca_port_num.set(i, 1);
        a.inner(roce_addr_layout::source_l3_address).bytes_mut(i).expect("gid").copy_from_slice(&gid);
        a.inner(roce_addr_layout::source_mac_47_32).set(i, u16::from_be_bytes([mac[0], mac[1]]) as u64);
        a.inner(roce_addr_layout::source_mac_31_0).set(i, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as u64);
        a.inner(roce_addr_layout::roce_l3_type).set(i, l3_type as u64);
        a.inner(roce_addr_layout::roce_version).set(i, version as u64);
    })
    .map(drop)
}

/// Brings a new RC QP to RTS (GID index 0 must be set).
pub fn rc_to_rts(host: &mut CmdHost, qpn: u32) {
    modify_qp(host, CmdOpcode::RST2INIT_QP, qpn, 0, init_attrs).expect("RST2INIT");
    modify_qp(host, CmdOpcode::INIT2RTR_QP, qpn, 0, rtr_attrs).expect("INIT2RTR");
    modify_qp(host, CmdOpcode::RTR2RTS_QP, qpn, 0, rts_attrs).expect("RTR2RTS");
}

/// An EQE as hwdesc declares it.
pub fn eqe(e: &[u8; plain::eqe::SIZE]) -> plain::eqe {
    plain::eqe::read_from_bytes(&e[..]).expect("a 64-byte EQE")
}

/// The completed-slot vector of a command-completion EQE.
pub fn cmd_vector(e: &[u8; plain::eqe::SIZE]) -> u32 {
    eqe_cmd::read_from_prefix(&eqe(e).data[..]).expect("a CMD payload").0.vector.get()
}

/// The payload of a PAGE_REQUEST EQE.
pub fn page_request(e: &[u8; plain::eqe::SIZE]) -> eqe_page_req {
    eqe_page_req::read_from_prefix(&eqe(e).data[..]).expect("a PAGE_REQUEST payload").0
}

/// The health buffer's syndrome byte (one byte of a 32-bit BAR0 register).
pub fn health_synd(dev: &SimDevice) -> HealthSyndrome {
    HealthSyndrome((dev.bar0_read32(iseg::HEALTH_SYND_DWORD as u64) >> iseg::HEALTH_SYND_SHIFT) as u8)
}

/// The health syndrome in bits 31:24 of the `health_counter` register.
pub fn health_counter_synd(dev: &SimDevice) -> HealthSyndrome {
    HealthSyndrome((dev.bar0_read32(iseg::HEALTH_COUNTER as u64) >> iseg::HEALTH_COUNTER_SYNDROME_SHIFT) as u8)
}

/// The `nic_interface` field of `cmdq_addr_l_sz`.
pub fn nic_interface(dev: &SimDevice) -> NicInterface {
    let v = dev.bar0_read32(iseg::CMDQ_ADDR_L_SZ as u64);
    NicInterface((v >> iseg::NIC_IFC_SHIFT & iseg::NIC_IFC_MASK) as u8)
}

/// Writes `nic_interface` into `cmdq_addr_l_sz`, with the queue address it holds.
pub fn set_nic_interface(dev: &SimDevice, ifc: NicInterface) {
    let v = dev.bar0_read32(iseg::CMDQ_ADDR_L_SZ as u64);
    dev.bar0_write32(
        iseg::CMDQ_ADDR_L_SZ as u64,
        (v & iseg::CMDQ_ADDR_L_MASK) | ((ifc.0 as u32) << iseg::NIC_IFC_SHIFT),
    );
}

/// Puts a capability page into a SET_HCA_CAP input.
pub fn set_cap(input: &mut [u8], cap: &[u8]) {
    set_hca_cap_in::capability.bytes_mut(input).expect("a SET_HCA_CAP input").copy_from_slice(cap);
}

/// The capability page of a QUERY_HCA_CAP output.
pub fn cap_of(out: &[u8]) -> &[u8] {
    query_hca_cap_out::capability.bytes(out).expect("a QUERY_HCA_CAP output")
}
