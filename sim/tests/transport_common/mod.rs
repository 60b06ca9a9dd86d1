//! Shared helpers of the transport tests: a device brought up with a GID, a CQ, a registered
//! memory region and a port on a fabric; RC and UD QPs driven by writing WQEs into host memory,
//! doorbell records and BAR0 doorbells; CQE polling with owner bits.
#![allow(dead_code)]

use std::time::{Duration, Instant};
use umlx_hwdesc::enums::{
    CmdOpcode, CqeOpcode, CqeSyndrome, EventType, IbMtu, MkcAccessMode, QpPmState, QpServiceType, WqeOpcode,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::{
    CqeOpOwn, cq as cq_consts, cqe64, dbr, err_cqe, mkey, page, uar as uar_page, wqe as w, wqe_atomic_seg,
    wqe_ctrl_seg, wqe_data_seg, wqe_raddr_seg,
};
use umlx_hwdesc::{U32, U64};
pub use umlx_sim::fabric::{Fabric, FabricConfig};
pub use umlx_sim::host::*;
pub use umlx_sim::{SimConfig, SimDevice};
use zerocopy::{FromBytes, IntoBytes};

/// Memory region size of each node.
pub const MEM: usize = 4 << 20;

/// Receive WQE size: a data segment, the terminating one, zeros after them.
const RQ_WQE_SIZE: usize = 64;
/// The QPC's `log_rq_stride` for [`RQ_WQE_SIZE`].
const LOG_RQ_STRIDE: u32 = RQ_WQE_SIZE.trailing_zeros() - w::RQ_STRIDE_UNIT_SHIFT;

/// A completion queue.
pub struct Cq {
    pub cqn: u32,
    pub buf: HostBuffer,
    /// Where the ring starts in `buf` (what the CQ context's `page_offset` names).
    pub ring_at: usize,
    pub dbr: HostBuffer,
    pub log: u32,
    pub ci: u32,
}

/// One device with everything a QP needs.
pub struct Node {
    pub dev: SimDevice,
    pub host: CmdHost,
    pub uar: u32,
    pub pd: u32,
    pub eq: HostEq,
    pub cq: Cq,
    pub mem: HostBuffer,
    pub mkey: u32,
    pub gid: [u8; 16],
    pub mac: [u8; 6],
}

/// A QP and its rings.
pub struct Qp {
    pub qpn: u32,
    pub buf: HostBuffer,
    pub dbr: HostBuffer,
    pub log_sq: u32,
    pub log_rq: u32,
    pub sq_pi: u16,
    pub rq_pi: u16,
    pub ud: bool,
}

/// RC connection parameters.
#[derive(Clone, Copy, Debug)]
pub struct RcParams {
    pub mtu: u8,
    pub ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry: u8,
    pub min_rnr_nak: u8,
    pub access: (bool, bool, bool),
}

impl Default for RcParams {
    fn default() -> Self {
        RcParams {
            mtu: IbMtu::MTU_256.0,
            ack_timeout: 8,
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_nak: 1,
            access: (true, true, true),
        }
    }
}

pub fn gid_v4(a: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&a);
    g
}

/// The addresses of `buf`'s pages of `page_bytes` (a PAS list).
fn pages_of(buf: &HostBuffer, page_bytes: usize) -> Vec<u64> {
    (0..buf.len().div_ceil(page_bytes)).map(|i| buf.iova() + (page_bytes * i) as u64).collect()
}

fn put_pas(input: &mut [u8], at: usize, pas: &[u64]) {
    for (k, p) in pas.iter().enumerate() {
        input[at + 8 * k..at + 8 * k + 8].copy_from_slice(&p.to_be_bytes());
    }
}

fn qpc_f(f: umlx_hwdesc::Field) -> umlx_hwdesc::Field {
    rst2init_qp_in::qpc.inner(f)
}
fn ads_f(f: umlx_hwdesc::Field) -> umlx_hwdesc::Field {
    rst2init_qp_in::qpc.inner(qpc::primary_address_path).inner(f)
}

impl Node {
    /// Device `index` (IP 10.77.0.index+1) attached to `fabric`.
    pub fn new(index: u8, fabric: &Fabric) -> Node {
        let cfg = SimConfig::numbered(index);
        let mac = cfg.mac;
        let gid = gid_v4([10, 77, 0, index + 1]);
        let dev = SimDevice::new(cfg);
        let mut host = CmdHost::new(&dev);
        host.bring_up().expect("bring-up");
        let uar = host.alloc_uar().expect("ALLOC_UAR");
        let pd = host.alloc_pd().expect("ALLOC_PD");
        let events = [EventType::COMP, EventType::SRQ_LAST_WQE, EventType::SRQ_RQ_LIMIT];
        let eq = host.create_eq(uar, 8, events.iter().fold(0, |m, t| m | 1 << t.0), 0).expect("CREATE_EQ");
        let a = set_roce_address_in::roce_address;
        host.exec(
            CmdOpcode::SET_ROCE_ADDRESS,
            0,
            set_roce_address_in::SIZE_BYTES,
            set_roce_address_out::SIZE_BYTES,
            |i| {
                set_roce_address_in::roce_address_index.set(i, 0);
                set_roce_address_in::vhca_port_num.set(i, 1);
                a.inner(roce_addr_layout::source_l3_address).bytes_mut(i).expect("gid").copy_from_slice(&gid);
                a.inner(roce_addr_layout::source_mac_47_32).set(i, u16::from_be_bytes([mac[0], mac[1]]) as u64);
                a.inner(roce_addr_layout::source_mac_31_0)
                    .set(i, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as u64);
                a.inner(roce_addr_layout::roce_l3_type).set(i, 0);
                a.inner(roce_addr_layout::roce_version).set(i, 2);
            },
        )
        .expect("SET_ROCE_ADDRESS");
        let cq = create_cq(&mut host, uar, eq.eqn, 10);
        let mem = host.alloc(MEM);
        let mkey = create_mkey(&mut host, pd, &mem, 0x42, true);
        fabric.attach(&dev.port());
        Node { dev, host, uar, pd, eq, cq, mem, mkey, gid, mac }
    }

    /// VA (= IOVA) of byte `off` of the memory region.
    pub fn va(&self, off: usize) -> u64 {
        self.mem.iova() + off as u64
    }

    /// Creates an RC or UD QP using the node's CQ for both directions.
    pub fn create_qp(&mut self, ud: bool, log_sq: u32, log_rq: u32) -> Qp {
        let buf = self.host.alloc((RQ_WQE_SIZE << log_rq) + (w::SEND_WQE_BB << log_sq));
        let dbr = self.host.alloc(64);
        let pas = pages_of(&buf, page::ADAPTER_PAGE_SIZE);
        let q = create_qp_in::qpc;
        let st = if ud { QpServiceType::UD } else { QpServiceType::RC };
        let (pd, uar, cqn) = (self.pd, self.uar, self.cq.cqn);
        let o = self
            .host
            .exec(CmdOpcode::CREATE_QP, 0, create_qp_in::SIZE_BYTES + 8 * pas.len(), create_qp_out::SIZE_BYTES, |i| {
                q.inner(qpc::st).set(i, st.0 as u64);
                q.inner(qpc::pm_state).set(i, QpPmState::MIGRATED.0 as u64);
                q.inner(qpc::pd).set(i, pd as u64);
                q.inner(qpc::uar_page).set(i, uar as u64);
                q.inner(qpc::log_rq_size).set(i, log_rq as u64);
                q.inner(qpc::log_rq_stride).set(i, LOG_RQ_STRIDE as u64);
                q.inner(qpc::log_sq_size).set(i, log_sq as u64);
                q.inner(qpc::cqn_snd).set(i, cqn as u64);
                q.inner(qpc::cqn_rcv).set(i, cqn as u64);
                q.inner(qpc::dbr_addr).set(i, dbr.iova());
                put_pas(i, create_qp_in::SIZE_BYTES, &pas);
            })
            .expect("CREATE_QP");
        Qp { qpn: create_qp_out::qpn.get(&o) as u32, buf, dbr, log_sq, log_rq, sq_pi: 0, rq_pi: 0, ud }
    }

    fn modify(&mut self, op: CmdOpcode, qpn: u32, fill: impl FnOnce(&mut [u8])) {
        let short = matches!(op, CmdOpcode::QP_2ERR | CmdOpcode::QP_2RST);
        let size = if short { qp_2err_in::SIZE_BYTES } else { rst2init_qp_in::SIZE_BYTES };
        self.host
            .exec(op, 0, size, rst2init_qp_out::SIZE_BYTES, |i| {
                rst2init_qp_in::qpn.set(i, qpn as u64);
                if !short {
                    fill(i);
                }
            })
            .unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }

    /// Moves an RC QP to RTS towards `peer_qpn` on `peer`.
    pub fn connect_rc(&mut self, qp: &Qp, peer: (&[u8; 16], [u8; 6], u32), p: RcParams) {
        let (rre, rwe, rae) = p.access;
        self.modify(CmdOpcode::RST2INIT_QP, qp.qpn, |i| {
            qpc_f(qpc::rre).set(i, rre as u64);
            qpc_f(qpc::rwe).set(i, rwe as u64);
            qpc_f(qpc::rae).set(i, rae as u64);
            ads_f(ads::vhca_port_num).set(i, 1);
        });
        let (gid, mac, rqpn) = peer;
        self.modify(CmdOpcode::INIT2RTR_QP, qp.qpn, |i| {
            qpc_f(qpc::mtu).set(i, p.mtu as u64);
            qpc_f(qpc::log_msg_max).set(i, 30);
            qpc_f(qpc::remote_qpn).set(i, rqpn as u64);
            qpc_f(qpc::next_rcv_psn).set(i, 0xff_fff0);
            qpc_f(qpc::min_rnr_nak).set(i, p.min_rnr_nak as u64);
            qpc_f(qpc::log_rra_max).set(i, 3);
            ads_f(ads::src_addr_index).set(i, 0);
            ads_f(ads::hop_limit).set(i, 64);
            ads_f(ads::vhca_port_num).set(i, 1);
            ads_f(ads::rgid_rip).bytes_mut(i).expect("rgid").copy_from_slice(gid);
            ads_f(ads::rmac_47_32).set(i, u16::from_be_bytes([mac[0], mac[1]]) as u64);
            ads_f(ads::rmac_31_0).set(i, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as u64);
        });
        self.modify(CmdOpcode::RTR2RTS_QP, qp.qpn, |i| {
            qpc_f(qpc::next_send_psn).set(i, 0xff_fff0);
            qpc_f(qpc::retry_count).set(i, p.retry_count as u64);
            qpc_f(qpc::rnr_retry).set(i, p.rnr_retry as u64);
            qpc_f(qpc::log_sra_max).set(i, 2);
            ads_f(ads::ack_timeout).set(i, p.ack_timeout as u64);
            ads_f(ads::vhca_port_num).set(i, 1);
        });
    }

    /// Moves a UD QP to RTS with `qkey`.
    pub fn activate_ud(&mut self, qp: &Qp, qkey: u32) {
        self.modify(CmdOpcode::RST2INIT_QP, qp.qpn, |i| {
            qpc_f(qpc::q_key).set(i, qkey as u64);
            ads_f(ads::vhca_port_num).set(i, 1);
        });
        self.modify(CmdOpcode::INIT2RTR_QP, qp.qpn, |_| {});
        self.modify(CmdOpcode::RTR2RTS_QP, qp.qpn, |i| {
            qpc_f(qpc::next_send_psn).set(i, 0);
        });
    }

    /// QP_2ERR.
    pub fn move_to_error(&mut self, qp: &Qp) {
        self.modify(CmdOpcode::QP_2ERR, qp.qpn, |_| {});
    }

    /// Posts a send WQE made of `segs` (16-byte units after the control segment).
    pub fn post_send(&mut self, qp: &mut Qp, opcode: WqeOpcode, signaled: bool, imm: u32, segs: &[u8]) -> u16 {
        self.post_send_flags(qp, opcode, if signaled { w::WQE_CTRL_CQ_UPDATE } else { 0 }, imm, segs)
    }

    /// Posts a send WQE with explicit `fm_ce_se`.
    pub fn post_send_flags(&mut self, qp: &mut Qp, opcode: WqeOpcode, fm_ce_se: u8, imm: u32, segs: &[u8]) -> u16 {
        let (idx, db) = self.write_send_wqe(qp, opcode, fm_ce_se, imm, segs);
        self.ring_sq(qp, db);
        idx
    }

    /// Writes a send WQE into the SQ without publishing it (no doorbell record, no doorbell),
    /// as a driver writes each WQE of a chain before it rings once. Its index and its doorbell
    /// value (the control segment's first eight bytes).
    pub fn write_send_wqe(
        &mut self,
        qp: &mut Qp,
        opcode: WqeOpcode,
        fm_ce_se: u8,
        imm: u32,
        segs: &[u8],
    ) -> (u16, u64) {
        assert_eq!(segs.len() % w::SEND_WQE_DS, 0);
        let ds = 1 + segs.len() / w::SEND_WQE_DS;
        let idx = qp.sq_pi;
        let ctrl = wqe_ctrl_seg {
            opmod_idx_opcode: U32::new(((idx as u32) << w::WQE_CTRL_WQE_INDEX_SHIFT) | opcode.0 as u32),
            qpn_ds: U32::new((qp.qpn << w::WQE_CTRL_QPN_SHIFT) | ds as u32),
            fm_ce_se,
            imm: U32::new(imm),
            ..Default::default()
        };
        let mut wqe = [ctrl.as_bytes(), segs].concat();
        let nbb = wqe.len().div_ceil(w::SEND_WQE_BB);
        wqe.resize(nbb * w::SEND_WQE_BB, 0);
        let sq_off = RQ_WQE_SIZE << qp.log_rq;
        let size = 1usize << qp.log_sq;
        for (k, bb) in wqe.chunks_exact(w::SEND_WQE_BB).enumerate() {
            let slot = (qp.sq_pi as usize + k) & (size - 1);
            qp.buf.write(sq_off + slot * w::SEND_WQE_BB, bb);
        }
        qp.sq_pi = qp.sq_pi.wrapping_add(nbb as u16);
        // The doorbell is the control segment's first eight bytes.
        (idx, u64::from_be_bytes(wqe[..8].try_into().expect("8 bytes")))
    }

    /// Publishes the WQEs written so far (the doorbell record) and rings the doorbell with `db`.
    pub fn ring_sq(&mut self, qp: &Qp, db: u64) {
        qp.dbr.write_u32_be(dbr::SND_DBR, qp.sq_pi as u32);
        self.dev.bar0_write64((self.uar as usize * uar_page::UAR_PAGE_SIZE + uar_page::BF_OFFSET) as u64, db);
    }

    /// Arms the node's CQ for an event at its next completion, as `ibv_req_notify_cq` does: the
    /// arm word of its doorbell record, then the UAR's CQ doorbell (arm sequence number 0).
    pub fn arm_cq(&mut self) {
        let hi = uar_page::CQ_DB_REQ_NOT | (self.cq.ci & cq_consts::NUM_MASK_24);
        self.cq.dbr.write_u32_be(dbr::CQ_ARM_DB, hi);
        let doorbell = self.uar as usize * uar_page::UAR_PAGE_SIZE + uar_page::CQ_DOORBELL;
        self.dev.bar0_write64(doorbell as u64, (u64::from(hi) << 32) | u64::from(self.cq.cqn));
    }

    /// Posts a receive WQE with one scatter entry (and the terminating data segment).
    pub fn post_recv(&mut self, qp: &mut Qp, off: usize, len: u32) {
        let mut wqe = [data_seg(len, self.mkey, self.va(off)), data_seg(0, w::INVALID_LKEY, 0)].concat();
        wqe.resize(RQ_WQE_SIZE, 0);
        let slot = qp.rq_pi as usize & ((1 << qp.log_rq) - 1);
        qp.buf.write(slot * RQ_WQE_SIZE, &wqe);
        qp.rq_pi = qp.rq_pi.wrapping_add(1);
        qp.dbr.write_u32_be(dbr::RCV_DBR, qp.rq_pi as u32);
    }

    /// Waits for the next CQE (up to `timeout`).
    pub fn poll_cq_timeout(&mut self, timeout: Duration) -> Option<[u8; cqe64::SIZE]> {
        let end = Instant::now() + timeout;
        loop {
            let n = 1u32 << self.cq.log;
            let off = self.cq.ring_at + (self.cq.ci & (n - 1)) as usize * cqe64::SIZE;
            let op_own = CqeOpOwn::from_bits(self.cq.buf.read_u8(off + cqe64::op_own));
            let owner = (self.cq.ci >> self.cq.log) & 1 == 1;
            if CqeOpcode(op_own.opcode()) != CqeOpcode::INVALID && op_own.owner() == owner {
                let mut c = [0u8; cqe64::SIZE];
                self.cq.buf.read(off, &mut c);
                self.cq.ci = self.cq.ci.wrapping_add(1);
                self.cq.dbr.write_u32_be(dbr::CQ_SET_CI, self.cq.ci & cq_consts::NUM_MASK_24);
                return Some(c);
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }

    /// Waits for the next CQE (panics after 10 s).
    pub fn poll_cq(&mut self) -> [u8; cqe64::SIZE] {
        self.poll_cq_timeout(Duration::from_secs(10)).expect("no CQE within 10 s")
    }
}

/// Creates a CQ of 2^log entries (every `op_own` byte INVALID, owner 0).
pub fn create_cq(host: &mut CmdHost, uar: u32, eqn: u32, log: u32) -> Cq {
    create_cq_paged(host, uar, eqn, log, 0, 0)
}

/// [`create_cq`] in pages of 4 KiB << `log_page_size`, the ring starting `page_offset` parts
/// (a 64th of a page each) into its first page.
pub fn create_cq_paged(host: &mut CmdHost, uar: u32, eqn: u32, log: u32, log_page_size: u64, page_offset: u64) -> Cq {
    let page_shift = page::page_shift(log_page_size);
    let ring_at = page::page_offset_bytes(page_offset, page_shift) as usize;
    let page_bytes = 1usize << page_shift;
    let buf = host.alloc((ring_at + (cqe64::SIZE << log)).next_multiple_of(page_bytes));
    // Every 64-byte slot of the buffer, the ring's and those before it.
    for at in (0..buf.len()).step_by(cqe64::SIZE) {
        buf.write_u8(at + cqe64::op_own, cq_consts::CQE_OP_OWN_INVALID);
    }
    let dbr = host.alloc(64);
    let pas = pages_of(&buf, page_bytes);
    let c = create_cq_in::cq_context;
    let o = host
        .exec(CmdOpcode::CREATE_CQ, 0, create_cq_in::SIZE_BYTES + 8 * pas.len(), create_cq_out::SIZE_BYTES, |i| {
            c.inner(cqc::log_cq_size).set(i, log as u64);
            c.inner(cqc::uar_page).set(i, uar as u64);
            c.inner(cqc::c_eqn_or_apu_element).set(i, eqn as u64);
            c.inner(cqc::dbr_addr).set(i, dbr.iova());
            c.inner(cqc::log_page_size).set(i, log_page_size);
            c.inner(cqc::page_offset).set(i, page_offset);
            put_pas(i, create_cq_in::SIZE_BYTES, &pas);
        })
        .expect("CREATE_CQ");
    Cq { cqn: create_cq_out::cqn.get(&o) as u32, buf, ring_at, dbr, log, ci: 0 }
}

/// Registers `mem` (VA = IOVA) with local write, remote read/write and atomic when `remote`.
pub fn create_mkey(host: &mut CmdHost, pd: u32, mem: &HostBuffer, variant: u8, remote: bool) -> u32 {
    let pages = mem.len().div_ceil(4096);
    let m = create_mkey_in::memory_key_mkey_entry;
    let o = host
        .exec(CmdOpcode::CREATE_MKEY, 0, create_mkey_in::SIZE_BYTES + 8 * pages, create_mkey_out::SIZE_BYTES, |i| {
            m.inner(mkc::access_mode_1_0).set(i, MkcAccessMode::MTT.bits_1_0() as u64);
            m.inner(mkc::lw).set(i, 1);
            m.inner(mkc::lr).set(i, 1);
            m.inner(mkc::rr).set(i, remote as u64);
            m.inner(mkc::rw).set(i, remote as u64);
            m.inner(mkc::a).set(i, remote as u64);
            m.inner(mkc::qpn).set(i, 0xff_ffff);
            m.inner(mkc::mkey_7_0).set(i, variant as u64);
            m.inner(mkc::pd).set(i, pd as u64);
            m.inner(mkc::start_addr).set(i, mem.iova());
            m.inner(mkc::len).set(i, mem.len() as u64);
            m.inner(mkc::log_page_size).set(i, 12);
            m.inner(mkc::translations_octword_size).set(i, pages.div_ceil(2) as u64);
            create_mkey_in::translations_octword_actual_size.set(i, pages.div_ceil(2) as u64);
            for k in 0..pages {
                let e = create_mkey_in::klm_pas_mtt.elem(k);
                e.set(i, mem.iova() + 4096 * k as u64);
                e.inner(mtt::rd_en).set(i, 1);
                e.inner(mtt::wr_en).set(i, 1);
            }
        })
        .expect("CREATE_MKEY");
    mkey::key(create_mkey_out::mkey_index.get(&o) as u32, variant)
}

/// Two nodes with one connected RC QP pair.
pub struct RcPair {
    pub a: Node,
    pub b: Node,
    pub qa: Qp,
    pub qb: Qp,
    pub fabric: Fabric,
}

impl RcPair {
    pub fn new(cfg: FabricConfig, p: RcParams) -> RcPair {
        let fabric = Fabric::new(cfg);
        let mut a = Node::new(1, &fabric);
        let mut b = Node::new(2, &fabric);
        let qa = a.create_qp(false, 8, 8);
        let qb = b.create_qp(false, 8, 8);
        let (ga, ma, gb, mb) = (a.gid, a.mac, b.gid, b.mac);
        a.connect_rc(&qa, (&gb, mb, qb.qpn), p);
        b.connect_rc(&qb, (&ga, ma, qa.qpn), p);
        RcPair { a, b, qa, qb, fabric }
    }
}

/// A data segment.
pub fn data_seg(len: u32, lkey: u32, va: u64) -> [u8; wqe_data_seg::SIZE] {
    zerocopy::transmute!(wqe_data_seg { byte_count: U32::new(len), lkey: U32::new(lkey), addr: U64::new(va) })
}

/// A remote address segment.
pub fn raddr_seg(va: u64, rkey: u32) -> [u8; wqe_raddr_seg::SIZE] {
    zerocopy::transmute!(wqe_raddr_seg { raddr: U64::new(va), rkey: U32::new(rkey), ..Default::default() })
}

/// An atomic segment: the swap (compare-and-swap) or add (fetch-and-add) value, and the compare
/// value.
pub fn atomic_seg(swap_add: u64, compare: u64) -> [u8; wqe_atomic_seg::SIZE] {
    zerocopy::transmute!(wqe_atomic_seg { swap_add: U64::new(swap_add), compare: U64::new(compare) })
}

/// Concatenates segments.
pub fn segs(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// A CQE as hwdesc declares it.
pub fn cqe(c: &[u8; cqe64::SIZE]) -> cqe64 {
    cqe64::read_from_bytes(&c[..]).expect("a 64-byte CQE")
}

/// An error CQE (opcode REQ_ERR or RESP_ERR) as hwdesc declares it.
pub fn error_cqe(c: &[u8; cqe64::SIZE]) -> err_cqe {
    err_cqe::read_from_bytes(&c[..]).expect("a 64-byte CQE")
}

/// A CQE's `op_own` byte: opcode and owner bit.
pub fn op_own(c: &[u8; cqe64::SIZE]) -> CqeOpOwn {
    CqeOpOwn::from_bits(cqe(c).op_own)
}

/// CQE opcode.
pub fn cqe_opcode(c: &[u8; cqe64::SIZE]) -> CqeOpcode {
    CqeOpcode(op_own(c).opcode())
}

/// The opcode of the send WQE a requester CQE completes (`sop_drop_qpn` bits 31:24).
pub fn sent_opcode(c: &[u8; cqe64::SIZE]) -> WqeOpcode {
    WqeOpcode((cqe(c).sop_drop_qpn.get() >> cq_consts::SOP_WQE_OPCODE_SHIFT) as u8)
}

/// The local QP number of a CQE.
pub fn cqe_qpn(c: &[u8; cqe64::SIZE]) -> u32 {
    cqe(c).sop_drop_qpn.get() & cq_consts::NUM_MASK_24
}

/// The syndrome of an error CQE.
pub fn syndrome(c: &[u8; cqe64::SIZE]) -> CqeSyndrome {
    CqeSyndrome(error_cqe(c).syndrome)
}

/// A deterministic byte pattern.
pub fn pattern(seed: u32, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}
