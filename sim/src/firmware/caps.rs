//! Device capabilities: QUERY_HCA_CAP (current and max) for the general, RoCE and atomic
//! capability types, and SET_HCA_CAP with the settable fields.
//!
//! The values model a ConnectX-6 Dx PF with one Ethernet (RoCE) port. SET_HCA_CAP compares the
//! new capability area with the current one field by field (from the hwdesc declaration): a
//! changed field must be in the settable list and within the maximum, or the command fails with
//! BAD_PARAM_ERR (syndrome CAP_NOT_SETTABLE). Capability types other than general, RoCE and
//! atomic answer BAD_PARAM_ERR.

use super::exec::{CmdResult, bad_param, need_in, out};
use super::{Hca, syndrome as sy};
use crate::config::SimConfig;
use umlx_hwdesc::Field;
use umlx_hwdesc::enums::{
    AtomicOps, AtomicReqMode, AtomicSize, CmdOpcode, HcaCapType, RoceL3TypeCaps, RoceVersionCaps,
};
use umlx_hwdesc::ifc::*;

/// Size of the capability area in QUERY_HCA_CAP / SET_HCA_CAP.
pub const CAP_AREA: usize = query_hca_cap_out::capability.size_bytes();

/// Fields of the general capabilities a driver may set: (field, rule).
#[derive(Clone, Copy)]
enum Rule {
    /// Any value.
    Any,
    /// At most the max capability's value.
    UpToMax,
}

fn general_settable() -> [(Field, Rule); 12] {
    use cmd_hca_cap as c;
    [
        (c::cmdif_checksum, Rule::Any),
        (c::log_uar_page_sz, Rule::UpToMax),
        (c::disable_link_up, Rule::UpToMax),
        (c::mkey_by_name, Rule::UpToMax),
        (c::pkey_table_size, Rule::UpToMax),
        (c::log_max_qp, Rule::UpToMax),
        (c::uar_4k, Rule::UpToMax),
        (c::cache_line_128byte, Rule::UpToMax),
        (c::num_vhca_ports, Rule::UpToMax),
        (c::roce, Rule::UpToMax),
        (c::atomic, Rule::UpToMax),
        (c::sw_owner_id, Rule::UpToMax),
    ]
}

fn roce_settable() -> [(Field, Rule); 1] {
    [(roce_cap::sw_r_roce_src_udp_port, Rule::UpToMax)]
}

fn atomic_settable() -> [(Field, Rule); 1] {
    [(atomic_caps::atomic_req_8B_endianness_mode, Rule::UpToMax)]
}

/// The capability areas, current and max.
#[derive(Clone)]
pub struct Caps {
    general_cur: Vec<u8>,
    general_max: Vec<u8>,
    roce_cur: Vec<u8>,
    roce_max: Vec<u8>,
    atomic_cur: Vec<u8>,
    atomic_max: Vec<u8>,
}

/// The device's limits, used both for the caps and for checks on commands.
pub mod limits {
    /// log2 max QPs (the max cap; the current cap, which bounds the QPs, may be lower).
    pub const LOG_MAX_QP: u64 = 18;
    /// log2 max WQEs (SQ in WQEBBs, RQ in WQEs) per queue.
    pub const LOG_MAX_QP_SZ: u64 = 15;
    /// log2 max CQs.
    pub const LOG_MAX_CQ: u64 = 24;
    /// log2 max CQEs per CQ.
    pub const LOG_MAX_CQ_SZ: u64 = 22;
    /// log2 max EQs.
    pub const LOG_MAX_EQ: u64 = 8;
    /// log2 max EQEs per EQ.
    pub const LOG_MAX_EQ_SZ: u64 = 22;
    /// log2 max SRQs.
    pub const LOG_MAX_SRQ: u64 = 23;
    /// log2 max WQEs per SRQ.
    pub const LOG_MAX_SRQ_SZ: u64 = 15;
    /// log2 max MKeys.
    pub const LOG_MAX_MKEY: u64 = 24;
    /// log2 max PDs.
    pub const LOG_MAX_PD: u64 = 23;
    /// log2 max transport domains.
    pub const LOG_MAX_TRANSPORT_DOMAIN: u64 = 20;
    /// log2 max message size.
    pub const LOG_MAX_MSG: u64 = 30;
    /// log2 max outstanding RDMA READ/atomic per QP as requester and as responder.
    pub const LOG_MAX_RA_QP: u64 = 4;
    /// GID table entries.
    pub const GID_TABLE_SIZE: u64 = 256;
    /// Max send WQE size in bytes.
    pub const MAX_WQE_SZ_SQ: u64 = 1024;
    /// Max receive WQE size in bytes.
    pub const MAX_WQE_SZ_RQ: u64 = 512;
    /// log2 of the BlueFlame register size.
    pub const LOG_BF_REG_SIZE: u64 = 9;
    /// log2 max UAR pages.
    pub const LOG_MAX_UAR: u64 = 13;
}

impl Caps {
    /// The caps of a freshly reset device.
    pub fn new(cfg: &SimConfig) -> Caps {
        use cmd_hca_cap as c;
        use limits::*;
        let mut g = vec![0u8; CAP_AREA];
        let general: &[(Field, u64)] = &[
            (c::log_max_srq_sz, LOG_MAX_SRQ_SZ),
            (c::log_max_qp_sz, LOG_MAX_QP_SZ),
            (c::log_max_qp, u64::from(cfg.log_max_qp).min(LOG_MAX_QP)),
            (c::log_max_srq, LOG_MAX_SRQ),
            (c::log_max_cq_sz, LOG_MAX_CQ_SZ),
            (c::log_max_cq, LOG_MAX_CQ),
            (c::log_max_eq_sz, LOG_MAX_EQ_SZ),
            (c::log_max_mkey, LOG_MAX_MKEY),
            (c::log_max_eq, LOG_MAX_EQ),
            (c::max_indirection, 4),
            (c::log_max_mrw_sz, 64),
            (c::fast_teardown, 1),
            (c::log_max_ra_req_qp, LOG_MAX_RA_QP),
            (c::log_max_ra_res_qp, LOG_MAX_RA_QP),
            (c::end_pad, 1),
            (c::cache_line_128byte, 0),
            (c::gid_table_size, GID_TABLE_SIZE),
            (c::pkey_table_size, 0),
            (c::local_ca_ack_delay, 16),
            (c::port_type, 1),
            (c::num_ports, 1),
            (c::log_max_msg, LOG_MAX_MSG),
            (c::max_tc, 8),
            (c::stat_rate_support, 0),
            (c::cqe_version, 1),
            (c::cmdif_checksum, 0),
            (c::wq_signature, 0),
            (c::roce, 1),
            (c::atomic, 1),
            (c::cq_oi, 1),
            (c::cq_resize, 1),
            (c::cq_moderation, 1),
            (c::xrc, 0),
            (c::ud, 1),
            (c::uc, 0),
            (c::rc, 1),
            (c::uar_4k, 0),
            (c::uar_sz, LOG_MAX_UAR),
            (c::umem_uid_0, 1),
            (c::log_pg_sz, 12),
            (c::bf, 1),
            (c::driver_version, 1),
            (c::mkey_by_name, 0),
            (c::log_bf_reg_size, LOG_BF_REG_SIZE),
            (c::max_wqe_sz_sq, MAX_WQE_SZ_SQ),
            (c::max_wqe_sz_rq, MAX_WQE_SZ_RQ),
            (c::max_wqe_sz_sq_dc, 0),
            (c::log_max_transport_domain, LOG_MAX_TRANSPORT_DOMAIN),
            (c::log_max_pd, LOG_MAX_PD),
            (c::log_max_xrcd, 0),
            (c::log_uar_page_sz, 0),
            (c::device_frequency_khz, 1_000_000),
            (c::num_of_uars_per_page, 1),
            (c::num_vhca_ports, 0),
            (c::sw_owner_id, 0),
        ];
        for (f, v) in general {
            f.set(&mut g, *v);
        }
        let mut gmax = g.clone();
        // What the max caps allow beyond the defaults.
        c::log_max_qp.set(&mut gmax, LOG_MAX_QP);
        c::mkey_by_name.set(&mut gmax, 0);
        c::cmdif_checksum.set(&mut gmax, 3);
        c::disable_link_up.set(&mut gmax, 1);
        c::log_uar_page_sz.set(&mut gmax, 0);
        c::sw_owner_id.set(&mut gmax, 1);

        let mut r = vec![0u8; CAP_AREA];
        let roce: &[(Field, u64)] = &[
            (roce_cap::roce_apm, 0),
            (roce_cap::sw_r_roce_src_udp_port, 0),
            (roce_cap::fl_rc_qp_when_roce_enabled, 0),
            // RoCE v2 only (the sim's wire is UDP/IP), over IPv4 and IPv6 GIDs.
            (roce_cap::roce_version, RoceVersionCaps::VERSION_2.bits() as u64),
            (roce_cap::l3_type, (RoceL3TypeCaps::IPV4 | RoceL3TypeCaps::IPV6).bits() as u64),
            (roce_cap::r_roce_dest_udp_port, 4791),
            (roce_cap::r_roce_max_src_udp_port, 0xffff),
            (roce_cap::r_roce_min_src_udp_port, 0xc000),
            (roce_cap::roce_address_table_size, limits::GID_TABLE_SIZE),
        ];
        for (f, v) in roce {
            f.set(&mut r, *v);
        }
        let mut rmax = r.clone();
        roce_cap::sw_r_roce_src_udp_port.set(&mut rmax, 1);

        let mut a = vec![0u8; CAP_AREA];
        // Compare-and-swap and fetch-and-add on 8 bytes; requester endianness settable.
        atomic_caps::atomic_operations.set(&mut a, (AtomicOps::CMP_SWAP | AtomicOps::FETCH_ADD).bits() as u64);
        atomic_caps::atomic_size_qp.set(&mut a, AtomicSize::QP_8BYTES.bits() as u64);
        atomic_caps::atomic_req_8B_endianness_mode.set(&mut a, AtomicReqMode::BE.0 as u64);
        // Whether mode 1 (host-order 8-byte atomic results) may be asked for; off by default
        // because the transport returns big-endian results (mode 0).
        atomic_caps::supported_atomic_req_8B_endianness_mode_1.set(&mut a, cfg.atomic_endianness_mode_1 as u64);
        let mut amax = a.clone();
        atomic_caps::atomic_req_8B_endianness_mode.set(&mut amax, AtomicReqMode::HOST_ENDIANNESS.0 as u64);
        Caps { general_cur: g, general_max: gmax, roce_cur: r, roce_max: rmax, atomic_cur: a, atomic_max: amax }
    }

    /// Whether command signatures are enabled (`cmdif_checksum` non-zero in the current caps).
    pub fn checksum_enabled(&self) -> bool {
        cmd_hca_cap::cmdif_checksum.get(&self.general_cur) != 0
    }

    /// Whether INIT_HCA must leave the link down.
    pub fn link_down_by_init(&self) -> bool {
        cmd_hca_cap::disable_link_up.get(&self.general_cur) != 0
    }

    /// A current general capability.
    pub fn general(&self, f: Field) -> u64 {
        f.get(&self.general_cur)
    }

    fn areas(&mut self, ty: HcaCapType) -> Option<(&mut Vec<u8>, &Vec<u8>)> {
        match ty {
            HcaCapType::GENERAL => Some((&mut self.general_cur, &self.general_max)),
            HcaCapType::ROCE => Some((&mut self.roce_cur, &self.roce_max)),
            HcaCapType::ATOMIC => Some((&mut self.atomic_cur, &self.atomic_max)),
            _ => None,
        }
    }
}

impl Hca {
    pub(crate) fn cmd_query_hca_cap(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::QUERY_HCA_CAP.0;
        need_in(op, input, query_hca_cap_in::SIZE_BYTES)?;
        if query_hca_cap_in::other_function.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let ty = HcaCapType(op_mod >> 1);
        let current = op_mod & 1 == 1;
        let Some((cur, max)) = self.caps.areas(ty) else {
            return Err(bad_param(op, sy::BAD_OP_MOD));
        };
        let area = if current { cur.as_slice() } else { max.as_slice() };
        let mut o = out(query_hca_cap_out::SIZE_BYTES);
        if let Some(dst) = query_hca_cap_out::capability.bytes_mut(&mut o) {
            dst.copy_from_slice(area);
        }
        Ok(o)
    }

    pub(crate) fn cmd_set_hca_cap(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::SET_HCA_CAP.0;
        need_in(op, input, set_hca_cap_in::SIZE_BYTES)?;
        if set_hca_cap_in::other_function.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if self.state != super::HcaState::Enabled {
            // Capabilities are fixed once INIT_HCA ran.
            return Err(super::CmdFail::new(umlx_hwdesc::enums::CmdStatus::BAD_SYS_STATE_ERR, op, sy::ALREADY_DONE));
        }
        let ty = HcaCapType(op_mod >> 1);
        let (fields, settable): (&[Field], Vec<(Field, Rule)>) = match ty {
            HcaCapType::GENERAL => (cmd_hca_cap::FIELDS, general_settable().to_vec()),
            HcaCapType::ROCE => (roce_cap::FIELDS, roce_settable().to_vec()),
            HcaCapType::ATOMIC => (atomic_caps::FIELDS, atomic_settable().to_vec()),
            _ => return Err(bad_param(op, sy::BAD_OP_MOD)),
        };
        let new = set_hca_cap_in::capability.bytes(input).unwrap_or(&[]).to_vec();
        let Some((cur, max)) = self.caps.areas(ty) else {
            return Err(bad_param(op, sy::BAD_OP_MOD));
        };
        let mut next = cur.clone();
        for f in fields {
            if f.width_bits > 64 || matches!(f.kind, umlx_hwdesc::FieldKind::Reserved) {
                continue;
            }
            let (old, want) = (f.get(cur), f.get(&new));
            if old == want {
                continue;
            }
            let ok = match settable.iter().find(|(s, _)| s.offset_bits == f.offset_bits) {
                Some((_, Rule::Any)) => true,
                Some((_, Rule::UpToMax)) => want <= f.get(max),
                None => false,
            };
            if !ok {
                return Err(bad_param(op, sy::CAP_NOT_SETTABLE));
            }
            f.set(&mut next, want);
        }
        *cur = next;
        Ok(out(set_hca_cap_out::SIZE_BYTES))
    }
}
