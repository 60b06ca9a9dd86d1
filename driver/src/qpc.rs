//! QP contexts for the state transitions and QUERY_QP: this module owns which `qpc` and `ads`
//! fields each modify command carries and its `opt_param_mask`, from neutral attributes
//! ([`QpAttrs`], the ibverbs `ibv_qp_attr` fields a caller set), and the decoding of a queried
//! context ([`QpQueried`]). It follows Linux `mlx5_ib` (`__mlx5_ib_modify_qp`, `mlx5_set_path`):
//!
//! - every context carries `pm_state` = MIGRATED, the port in `vhca_port_num`, and for a UD QP
//!   `mtu` = 4096 with `log_msg_max` = 12;
//! - a connected QP given a path MTU gets `log_msg_max` = the cap `log_max_msg`;
//! - the optional-parameter bits are those of the attributes given, cut to the transition's
//!   table ([`QpOptParam::allowed`]), so a parameter the firmware treats as mandatory is never
//!   flagged;
//! - the RoCEv2 UDP source port of a connected path comes from the flow label or, when it is
//!   0, from the two QP numbers ([`roce_udp_sport`]).

use crate::Result;
use crate::backend::Backend;
use crate::objects::{Qp, Transition};
use umlx_hwdesc::Field;
use umlx_hwdesc::enums::{IbMtu, QpOptParam, QpPmState, QpServiceType, QpState};
use umlx_hwdesc::ifc::{ads, cmd_hca_cap, qpc};

/// `log_msg_max` of a UD QP (Linux: 4 KiB messages).
pub const UD_LOG_MSG_MAX: u8 = 12;
/// Hop limit written when a path gives 0.
pub const DEFAULT_HOP_LIMIT: u8 = crate::av::DEFAULT_HOP_LIMIT;

/// The RoCEv2 UDP source port of a path (`rdma_get_udp_sport`): the flow label folded into
/// 0xC000..=0xFFFF, or, when the flow label is 0, a label computed from the two QP numbers.
/// The one place the driver computes it.
pub fn roce_udp_sport(flow_label: u32, lqpn: u32, rqpn: u32) -> u16 {
    umlx_wire::packet::udp_sport(flow_label, lqpn, rqpn)
}

/// Remote access a responder allows (the ibverbs access flags that reach the QPC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteAccess {
    /// Remote write (`rwe`).
    pub write: bool,
    /// Remote read (`rre`).
    pub read: bool,
    /// Remote atomic (`rae`).
    pub atomic: bool,
}

/// A RoCE primary address path (`ibv_ah_attr` with its GRH, and the resolved MAC).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AddressPath {
    /// Destination MAC.
    pub dmac: [u8; 6],
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit (0: [`DEFAULT_HOP_LIMIT`]).
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Service level.
    pub sl: u8,
}

/// The attributes of one transition: `Some` for each attribute the caller sets (its bit in
/// the ibverbs attribute mask). The port is always written (the QP's current port).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttrs {
    /// The port (always written to `vhca_port_num`).
    pub port: u8,
    /// Whether the caller set the port (IBV_QP_PORT).
    pub port_given: bool,
    /// IBV_QP_ACCESS_FLAGS.
    pub access: Option<RemoteAccess>,
    /// IBV_QP_PKEY_INDEX.
    pub pkey_index: Option<u16>,
    /// IBV_QP_QKEY.
    pub qkey: Option<u32>,
    /// IBV_QP_PATH_MTU.
    pub path_mtu: Option<IbMtu>,
    /// IBV_QP_AV (RoCE path, MAC resolved).
    pub path: Option<AddressPath>,
    /// IBV_QP_DEST_QPN.
    pub dest_qpn: Option<u32>,
    /// IBV_QP_RQ_PSN.
    pub rq_psn: Option<u32>,
    /// IBV_QP_SQ_PSN.
    pub sq_psn: Option<u32>,
    /// IBV_QP_MAX_DEST_RD_ATOMIC.
    pub max_dest_rd_atomic: Option<u8>,
    /// IBV_QP_MAX_QP_RD_ATOMIC.
    pub max_rd_atomic: Option<u8>,
    /// IBV_QP_MIN_RNR_TIMER.
    pub min_rnr_timer: Option<u8>,
    /// IBV_QP_TIMEOUT.
    pub timeout: Option<u8>,
    /// IBV_QP_RETRY_CNT.
    pub retry_cnt: Option<u8>,
    /// IBV_QP_RNR_RETRY.
    pub rnr_retry: Option<u8>,
}

/// One modify command's payload: the optional-parameter mask and the QPC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModifyQpc {
    /// `opt_param_mask`.
    pub opt_param_mask: QpOptParam,
    /// The QPC (`qpc::SIZE_BYTES`).
    pub qpc: Vec<u8>,
}

/// log2 rounded up (`fls(n - 1)`), 0 for 0 and 1.
fn log2_ceil(n: u8) -> u64 {
    if n <= 1 { 0 } else { (32 - ((n as u32) - 1).leading_zeros()) as u64 }
}

/// Builds the QPC and `opt_param_mask` of transition `t` for a QP of service type `st`, number
/// `lqpn`; `log_max_msg` is the device's cap.
pub fn build(t: Transition, st: QpServiceType, lqpn: u32, a: &QpAttrs, log_max_msg: u8) -> ModifyQpc {
    let mut c = vec![0u8; qpc::SIZE_BYTES];
    let p = qpc::primary_address_path;
    let set = |c: &mut Vec<u8>, f: Field, v: u64| f.set(c, v);
    let mut want = QpOptParam::empty();
    set(&mut c, qpc::pm_state, QpPmState::MIGRATED.0 as u64);
    set(&mut c, p.inner(ads::vhca_port_num), a.port as u64);
    if a.port_given {
        want |= QpOptParam::PRI_PORT;
    }
    let ud = st == QpServiceType::UD;
    if ud {
        set(&mut c, qpc::mtu, IbMtu::MTU_4096.0 as u64);
        set(&mut c, qpc::log_msg_max, UD_LOG_MSG_MAX as u64);
    } else if let Some(m) = a.path_mtu {
        set(&mut c, qpc::mtu, m.0 as u64);
        set(&mut c, qpc::log_msg_max, log_max_msg as u64);
    }
    if let Some(acc) = a.access
        && !ud
    {
        set(&mut c, qpc::rwe, acc.write as u64);
        set(&mut c, qpc::rre, acc.read as u64);
        set(&mut c, qpc::rae, acc.atomic as u64);
        want |= QpOptParam::RRE | QpOptParam::RWE | QpOptParam::RAE;
    }
    if let Some(k) = a.pkey_index {
        set(&mut c, p.inner(ads::pkey_index), k as u64);
        want |= QpOptParam::PKEY_INDEX;
    }
    if let Some(q) = a.qkey {
        set(&mut c, qpc::q_key, q as u64);
        want |= QpOptParam::Q_KEY;
    }
    if let Some(g) = a.path {
        let dest = a.dest_qpn.unwrap_or(0);
        set(&mut c, p.inner(ads::src_addr_index), g.sgid_index as u64);
        set(&mut c, p.inner(ads::hop_limit), if g.hop_limit == 0 { DEFAULT_HOP_LIMIT } else { g.hop_limit } as u64);
        set(&mut c, p.inner(ads::tclass), g.traffic_class as u64);
        set(&mut c, p.inner(ads::flow_label), (g.flow_label & 0xf_ffff) as u64);
        set(&mut c, p.inner(ads::dscp), (g.traffic_class >> 2) as u64);
        set(&mut c, p.inner(ads::eth_prio), (g.sl & 7) as u64);
        set(&mut c, p.inner(ads::udp_sport), roce_udp_sport(g.flow_label, lqpn, dest) as u64);
        if let Some(d) = p.inner(ads::rgid_rip).bytes_mut(&mut c) {
            d.copy_from_slice(&g.dgid);
        }
        let m = g.dmac;
        set(&mut c, p.inner(ads::rmac_47_32), u16::from_be_bytes([m[0], m[1]]) as u64);
        set(&mut c, p.inner(ads::rmac_31_0), u32::from_be_bytes([m[2], m[3], m[4], m[5]]) as u64);
        want |= QpOptParam::PRIMARY_ADDR_PATH | QpOptParam::PRI_PORT;
    }
    if let Some(d) = a.dest_qpn {
        set(&mut c, qpc::remote_qpn, (d & 0xff_ffff) as u64);
    }
    if let Some(psn) = a.rq_psn {
        set(&mut c, qpc::next_rcv_psn, (psn & 0xff_ffff) as u64);
    }
    if let Some(psn) = a.sq_psn {
        set(&mut c, qpc::next_send_psn, (psn & 0xff_ffff) as u64);
    }
    if let Some(n) = a.max_dest_rd_atomic {
        set(&mut c, qpc::log_rra_max, log2_ceil(n));
        want |= QpOptParam::RRA_MAX;
    }
    if let Some(n) = a.max_rd_atomic {
        set(&mut c, qpc::log_sra_max, log2_ceil(n));
        want |= QpOptParam::SRA_MAX;
    }
    if let Some(v) = a.min_rnr_timer {
        set(&mut c, qpc::min_rnr_nak, v as u64);
        want |= QpOptParam::RNR_TIMEOUT;
    }
    if let Some(v) = a.timeout {
        set(&mut c, p.inner(ads::ack_timeout), v as u64);
        want |= QpOptParam::ACK_TIMEOUT;
    }
    if let Some(v) = a.retry_cnt {
        set(&mut c, qpc::retry_count, v as u64);
        want |= QpOptParam::RETRY_COUNT;
    }
    if let Some(v) = a.rnr_retry {
        set(&mut c, qpc::rnr_retry, v as u64);
        want |= QpOptParam::RNR_RETRY;
    }
    ModifyQpc { opt_param_mask: want & QpOptParam::allowed(t.opcode(), st), qpc: c }
}

/// A QP's attributes as QUERY_QP reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpQueried {
    /// State.
    pub state: QpState,
    /// Path MTU (0 when not set).
    pub mtu: IbMtu,
    /// Q_Key.
    pub qkey: u32,
    /// Next receive PSN.
    pub rq_psn: u32,
    /// Next send PSN.
    pub sq_psn: u32,
    /// Remote QPN.
    pub dest_qpn: u32,
    /// Remote access.
    pub access: RemoteAccess,
    /// Primary path.
    pub path: AddressPath,
    /// Port.
    pub port: u8,
    /// P_Key index.
    pub pkey_index: u16,
    /// Outstanding RDMA reads/atomics as initiator (a power of two, 0 when the log is 0).
    pub max_rd_atomic: u8,
    /// As responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
}

/// Decodes a queried QPC.
pub fn decode(c: &[u8]) -> QpQueried {
    let p = qpc::primary_address_path;
    let g = |f: Field| f.get(c);
    let mut dgid = [0u8; 16];
    if let Some(b) = p.inner(ads::rgid_rip).bytes(c) {
        dgid.copy_from_slice(b);
    }
    let mut dmac = [0u8; 6];
    dmac[..2].copy_from_slice(&(g(p.inner(ads::rmac_47_32)) as u16).to_be_bytes());
    dmac[2..].copy_from_slice(&(g(p.inner(ads::rmac_31_0)) as u32).to_be_bytes());
    let pow = |v: u64| if v == 0 { 0 } else { 1u8 << v.min(7) };
    let port = g(p.inner(ads::vhca_port_num)) as u8;
    QpQueried {
        state: QpState(g(qpc::state) as u8),
        mtu: IbMtu(g(qpc::mtu) as u8),
        qkey: g(qpc::q_key) as u32,
        rq_psn: g(qpc::next_rcv_psn) as u32,
        sq_psn: g(qpc::next_send_psn) as u32,
        dest_qpn: g(qpc::remote_qpn) as u32,
        access: RemoteAccess { write: g(qpc::rwe) != 0, read: g(qpc::rre) != 0, atomic: g(qpc::rae) != 0 },
        path: AddressPath {
            dmac,
            dgid,
            sgid_index: g(p.inner(ads::src_addr_index)) as u8,
            hop_limit: g(p.inner(ads::hop_limit)) as u8,
            traffic_class: g(p.inner(ads::tclass)) as u8,
            flow_label: g(p.inner(ads::flow_label)) as u32,
            sl: g(p.inner(ads::eth_prio)) as u8,
        },
        port,
        pkey_index: g(p.inner(ads::pkey_index)) as u16,
        max_rd_atomic: pow(g(qpc::log_sra_max)),
        max_dest_rd_atomic: pow(g(qpc::log_rra_max)),
        min_rnr_timer: g(qpc::min_rnr_nak) as u8,
        timeout: g(p.inner(ads::ack_timeout)) as u8,
        retry_cnt: g(qpc::retry_count) as u8,
        rnr_retry: g(qpc::rnr_retry) as u8,
    }
}

impl<B: Backend> Qp<B> {
    /// Runs transition `t` with attributes `a`: the context and optional-parameter mask come
    /// from [`build`] (the cap `log_max_msg` from the HCA).
    pub fn transition(&self, t: Transition, a: &QpAttrs) -> Result<()> {
        let log_max_msg = self.hca().caps().general_cap(cmd_hca_cap::log_max_msg) as u8;
        let m = build(t, self.config.service, self.qpn(), a, log_max_msg);
        self.modify(t, m.opt_param_mask.bits(), |c| c.copy_from_slice(&m.qpc))
    }

    /// QUERY_QP, decoded.
    pub fn query_attrs(&self) -> Result<QpQueried> {
        Ok(decode(&self.query()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rc_rtr() -> QpAttrs {
        QpAttrs {
            port: 1,
            path_mtu: Some(IbMtu::MTU_1024),
            path: Some(AddressPath {
                dmac: [2, 0, 0, 0, 0, 9],
                dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
                sgid_index: 1,
                hop_limit: 0,
                traffic_class: 0x20,
                flow_label: 0,
                sl: 3,
            }),
            dest_qpn: Some(0x99),
            rq_psn: Some(0x1234),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(12),
            ..Default::default()
        }
    }

    #[test]
    fn rc_init2rtr_flags_no_mandatory_parameter() {
        let m = build(Transition::Init2Rtr, QpServiceType::RC, 0x42, &rc_rtr(), 20);
        // The path, RRA_MAX and RNR_TIMEOUT are mandatory in INIT2RTR: none is flagged.
        assert_eq!(m.opt_param_mask, QpOptParam::empty());
        let g = |f: Field| f.get(&m.qpc);
        let p = qpc::primary_address_path;
        assert_eq!(g(qpc::mtu), 3);
        assert_eq!(g(qpc::log_msg_max), 20, "log_msg_max from the cap log_max_msg");
        assert_eq!(g(qpc::pm_state), 3, "MLX5_QP_PM_MIGRATED");
        assert_eq!(g(qpc::remote_qpn), 0x99);
        assert_eq!(g(qpc::log_rra_max), 2);
        assert_eq!(g(p.inner(ads::hop_limit)), 64);
        assert_eq!(g(p.inner(ads::dscp)), 0x20 >> 2);
        assert_eq!(g(p.inner(ads::udp_sport)), roce_udp_sport(0, 0x42, 0x99) as u64);
        assert_eq!(g(p.inner(ads::rmac_31_0)), 0x0000_0009);
        // Access flags given in INIT2RTR are optional there.
        let mut a = rc_rtr();
        a.access = Some(RemoteAccess { write: true, read: true, atomic: false });
        let m = build(Transition::Init2Rtr, QpServiceType::RC, 0x42, &a, 20);
        assert_eq!(m.opt_param_mask, QpOptParam::RRE | QpOptParam::RWE | QpOptParam::RAE);
    }

    #[test]
    fn rc_rtr2rts_mask_is_empty_and_rts2rts_keeps_only_the_table() {
        let a = QpAttrs {
            port: 1,
            sq_psn: Some(5),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        };
        let m = build(Transition::Rtr2Rts, QpServiceType::RC, 1, &a, 30);
        assert_eq!(m.opt_param_mask, QpOptParam::empty());
        assert_eq!(qpc::retry_count.get(&m.qpc), 7);
        let a = QpAttrs { port: 1, min_rnr_timer: Some(3), timeout: Some(9), ..Default::default() };
        let m = build(Transition::Rts2Rts, QpServiceType::RC, 1, &a, 30);
        assert_eq!(m.opt_param_mask, QpOptParam::RNR_TIMEOUT);
    }

    #[test]
    fn ud_transitions_carry_mtu_4096_and_4k_messages() {
        for t in [Transition::Rst2Init, Transition::Init2Rtr, Transition::Rtr2Rts] {
            let a = QpAttrs { port: 1, qkey: Some(0x11), pkey_index: Some(0), ..Default::default() };
            let m = build(t, QpServiceType::UD, 7, &a, 30);
            assert_eq!((qpc::mtu.get(&m.qpc), qpc::log_msg_max.get(&m.qpc)), (5, 12), "{t:?}");
            let want = match t {
                Transition::Rst2Init => QpOptParam::empty(),
                Transition::Init2Rtr => QpOptParam::Q_KEY | QpOptParam::PKEY_INDEX,
                _ => QpOptParam::Q_KEY,
            };
            assert_eq!(m.opt_param_mask, want, "{t:?}");
        }
    }

    #[test]
    fn decode_reads_back_what_build_wrote() {
        let m = build(Transition::Init2Rtr, QpServiceType::RC, 0x42, &rc_rtr(), 20);
        let q = decode(&m.qpc);
        assert_eq!(q.mtu, IbMtu::MTU_1024);
        assert_eq!(q.dest_qpn, 0x99);
        assert_eq!(q.rq_psn, 0x1234);
        assert_eq!(q.max_dest_rd_atomic, 4);
        assert_eq!(q.path.dmac, [2, 0, 0, 0, 0, 9]);
        assert_eq!(q.path.hop_limit, 64);
        assert_eq!(q.path.sl, 3);
        assert_eq!(q.port, 1);
    }
}
