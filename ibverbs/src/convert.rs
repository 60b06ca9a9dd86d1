//! Between the C structures of `<infiniband/verbs.h>` and the `umlx-verbs` types: plain
//! value conversions, no pointers. What a C value cannot say in `umlx-verbs` (an unknown
//! enumeration value, an attribute umlx does not implement) is an errno, never dropped.

use crate::abi::*;
use libc::{EINVAL, EOPNOTSUPP, c_char, c_int};
use umlx_verbs::{
    AccessFlags, AhAttr, DeviceAttr, EventType, Gid, GlobalRoute, ModifyQp, Mtu, PortAttr, PortChangeSubtype, QpAttr,
    QpAttrMask, QpCap, QpState, QpType, Wc,
};

/// Copies `s` into a C string field, cut to fit with its terminating NUL.
pub fn put_cstr(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.bytes().take(n)) {
        *d = b as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// The device capability flags umlx reports (what it does, nothing more).
const DEVICE_CAP_FLAGS: u32 = device_cap::PORT_ACTIVE_EVENT | device_cap::SYS_IMAGE_GUID | device_cap::RC_RNR_NAK_GEN;

fn clamp_int(v: u32) -> c_int {
    v.min(c_int::MAX as u32) as c_int
}

/// `struct ibv_device_attr` from the device's attributes.
pub fn device_attr(d: &DeviceAttr) -> ibv_device_attr {
    let mut a = ibv_device_attr::default();
    put_cstr(&mut a.fw_ver, &d.fw_ver);
    a.node_guid = d.node_guid.to_be();
    a.sys_image_guid = d.sys_image_guid.to_be();
    a.max_mr_size = d.max_mr_size;
    a.page_size_cap = d.page_size_cap;
    a.vendor_id = d.vendor_id;
    a.vendor_part_id = d.vendor_part_id;
    a.hw_ver = d.hw_ver;
    a.max_qp = clamp_int(d.max_qp);
    a.max_qp_wr = clamp_int(d.max_qp_wr);
    a.device_cap_flags = DEVICE_CAP_FLAGS;
    a.max_sge = clamp_int(d.max_sge);
    a.max_sge_rd = clamp_int(d.max_sge);
    a.max_cq = clamp_int(d.max_cq);
    a.max_cqe = clamp_int(d.max_cqe);
    a.max_mr = clamp_int(d.max_mr);
    a.max_pd = clamp_int(d.max_pd);
    a.max_qp_rd_atom = clamp_int(d.max_qp_rd_atom);
    a.max_res_rd_atom = clamp_int(d.max_qp_rd_atom.saturating_mul(d.max_qp));
    a.max_qp_init_rd_atom = clamp_int(d.max_qp_init_rd_atom);
    a.atomic_cap = if d.atomic_cap != 0 { IBV_ATOMIC_HCA } else { IBV_ATOMIC_NONE };
    a.max_ah = c_int::MAX;
    a.max_srq = clamp_int(d.max_srq);
    a.max_srq_wr = clamp_int(d.max_srq_wr);
    a.max_srq_sge = clamp_int(d.max_srq_sge);
    a.max_pkeys = 1;
    a.local_ca_ack_delay = d.local_ca_ack_delay;
    a.phys_port_cnt = d.phys_port_cnt;
    a
}

/// `struct ibv_port_attr` from the port's attributes (a RoCE port: no LID, no subnet manager,
/// one P_Key).
pub fn port_attr(p: &PortAttr) -> ibv_port_attr {
    ibv_port_attr {
        state: p.state as u32,
        max_mtu: p.max_mtu as u32,
        active_mtu: p.active_mtu as u32,
        gid_tbl_len: clamp_int(p.gid_tbl_len),
        max_msg_sz: p.max_msg_sz,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        max_vl_num: 1,
        phys_state: p.phys_state,
        link_layer: IBV_LINK_LAYER_ETHERNET,
        active_width: p.active_width,
        active_speed: p.active_speed,
        ..Default::default()
    }
}

/// `enum ibv_qp_type` to the QP types umlx has.
pub fn qp_type(t: u32) -> Result<QpType, c_int> {
    match t {
        qpt::RC => Ok(QpType::Rc),
        qpt::UD => Ok(QpType::Ud),
        qpt::UC | qpt::RAW_PACKET | qpt::XRC_SEND | qpt::XRC_RECV | qpt::DRIVER => Err(EOPNOTSUPP),
        _ => Err(EINVAL),
    }
}

/// The name of an `enum ibv_qp_type` value, for messages.
pub fn qp_type_name(t: u32) -> &'static str {
    match t {
        qpt::RC => "RC",
        qpt::UC => "UC",
        qpt::UD => "UD",
        qpt::RAW_PACKET => "raw packet",
        qpt::XRC_SEND => "XRC send",
        qpt::XRC_RECV => "XRC receive",
        qpt::DRIVER => "driver-specific",
        _ => "unknown",
    }
}

/// Why a QP type is refused.
pub fn qp_type_refusal(t: u32, errno: c_int) -> String {
    if errno == EOPNOTSUPP {
        format!("QP type {t} ({}) is not supported", qp_type_name(t))
    } else {
        format!("QP type {t} is not an ibv_qp_type")
    }
}

/// `struct ibv_qp_cap` to the verbs capabilities.
pub fn qp_cap(c: &ibv_qp_cap) -> QpCap {
    QpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// The verbs capabilities to `struct ibv_qp_cap`.
pub fn c_qp_cap(c: &QpCap) -> ibv_qp_cap {
    ibv_qp_cap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

/// `struct ibv_ah_attr` to an address: RoCE addresses are global (`is_global` must be set).
pub fn ah_attr(a: &ibv_ah_attr) -> Result<AhAttr, c_int> {
    if a.is_global == 0 {
        // A RoCE port has no LIDs: the GRH carries the address (as the kernel refuses it).
        return Err(EINVAL);
    }
    if a.static_rate != 0 {
        return Err(EOPNOTSUPP);
    }
    let g = a.grh;
    Ok(AhAttr {
        grh: GlobalRoute {
            dgid: Gid(g.dgid.raw),
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        },
        sl: a.sl,
        port_num: a.port_num,
        dmac: None,
    })
}

/// An address to `struct ibv_ah_attr`.
pub fn c_ah_attr(a: &AhAttr) -> ibv_ah_attr {
    let g = a.grh;
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: g.dgid.0 },
            flow_label: g.flow_label,
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
        },
        dlid: 0,
        sl: a.sl,
        src_path_bits: 0,
        static_rate: 0,
        is_global: 1,
        port_num: a.port_num,
    }
}

/// The `ibv_modify_qp` attributes and mask, for a QP now in `current`. Attributes umlx does
/// not implement (alternate paths, path migration, SQD notification, rate limits) are
/// EOPNOTSUPP; unknown mask bits and enumeration values are EINVAL. Whether the transition
/// takes the attributes is `umlx_verbs::Qp::modify`'s to check.
pub fn modify_qp(a: &ibv_qp_attr, mask: c_int, current: QpState) -> Result<ModifyQp, c_int> {
    use QpAttrMask as M;
    if mask & qp_attr_mask::RATE_LIMIT != 0 {
        return Err(EOPNOTSUPP);
    }
    if mask & !qp_attr_mask::KNOWN != 0 {
        return Err(EINVAL);
    }
    let m = QpAttrMask(mask as u32);
    if m.contains(M::ALT_PATH) || m.contains(M::PATH_MIG_STATE) || m.contains(M::EN_SQD_ASYNC_NOTIFY) {
        return Err(EOPNOTSUPP);
    }
    if m.contains(M::CUR_STATE) && QpState::from_value(a.cur_qp_state) != Some(current) {
        return Err(EINVAL);
    }
    let qp_state = if m.contains(M::STATE) { Some(QpState::from_value(a.qp_state).ok_or(EINVAL)?) } else { None };
    let path_mtu = if m.contains(M::PATH_MTU) { Some(Mtu::from_value(a.path_mtu).ok_or(EINVAL)?) } else { None };
    if m.contains(M::ACCESS_FLAGS) && a.qp_access_flags & !access::BASIC != 0 {
        return Err(if a.qp_access_flags & access::MW_BIND != 0 { EOPNOTSUPP } else { EINVAL });
    }
    let ah = if m.contains(M::AV) { ah_attr(&a.ah_attr)? } else { AhAttr::default() };
    let attr = QpAttr {
        qp_state,
        path_mtu,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: AccessFlags(a.qp_access_flags),
        cap: qp_cap(&a.cap),
        ah_attr: ah,
        pkey_index: a.pkey_index,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
    };
    Ok(ModifyQp::from_raw(attr, m))
}

/// `struct ibv_qp_attr` from the QP's attributes as the device holds them.
pub fn c_qp_attr(q: &QpAttr) -> ibv_qp_attr {
    let state = q.qp_state.map_or(7, |s| s as u32); // IBV_QPS_UNKNOWN
    ibv_qp_attr {
        qp_state: state,
        cur_qp_state: state,
        path_mtu: q.path_mtu.map_or(0, |m| m as u32),
        qkey: q.qkey,
        rq_psn: q.rq_psn,
        sq_psn: q.sq_psn,
        dest_qp_num: q.dest_qp_num,
        qp_access_flags: q.qp_access_flags.0,
        cap: c_qp_cap(&q.cap),
        ah_attr: c_ah_attr(&q.ah_attr),
        pkey_index: q.pkey_index,
        max_rd_atomic: q.max_rd_atomic,
        max_dest_rd_atomic: q.max_dest_rd_atomic,
        min_rnr_timer: q.min_rnr_timer,
        port_num: q.port_num,
        timeout: q.timeout,
        retry_cnt: q.retry_cnt,
        rnr_retry: q.rnr_retry,
        ..Default::default()
    }
}

/// A completion as `struct ibv_wc`: the immediate in network order, as the header says.
#[inline(always)]
pub fn c_wc(w: &Wc) -> ibv_wc {
    ibv_wc {
        wr_id: w.wr_id,
        status: w.status as u32,
        opcode: w.opcode as u32,
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        imm_data: w.imm_data.to_be(),
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.wc_flags.0,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: 0,
    }
}

/// What `ibv_reg_mr`'s access flags ask of umlx: the flags it implements, or the errno for the
/// ones it does not (the optional range and the huge-page hint may be ignored, as the header
/// allows).
pub fn mr_access(flags: c_int) -> Result<AccessFlags, c_int> {
    let f = flags as u32 & !(access::OPTIONAL_RANGE | access::HUGETLB);
    if f & (access::MW_BIND | access::ZERO_BASED | access::ON_DEMAND | access::FLUSH) != 0 {
        return Err(EOPNOTSUPP);
    }
    if f & !access::BASIC != 0 {
        return Err(EINVAL);
    }
    Ok(AccessFlags(f))
}

/// `ibv_wc_status_str`'s text for the statuses `umlx-verbs` does not name.
pub fn extra_wc_status(status: u32) -> Option<&'static str> {
    match status {
        22 => Some("TM error"),
        23 => Some("TM rendezvous incomplete"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_strings_are_cut_and_terminated() {
        let mut b = [1 as c_char; 4];
        put_cstr(&mut b, "abcdef");
        assert_eq!(b, [b'a' as c_char, b'b' as c_char, b'c' as c_char, 0]);
    }

    #[test]
    fn modify_keeps_the_mask_and_refuses_what_umlx_lacks() {
        let a = ibv_qp_attr { qp_state: 1, port_num: 1, ..Default::default() };
        let m = modify_qp(&a, 1 | (1 << 4) | (1 << 5) | (1 << 3), QpState::Reset).unwrap();
        assert_eq!(m.mask().0, 0b111001);
        assert_eq!(m.attr().qp_state, Some(QpState::Init));
        assert_eq!(modify_qp(&a, 1 | (1 << 14), QpState::Reset).unwrap_err(), EOPNOTSUPP);
        assert_eq!(modify_qp(&a, 1 | (1 << 25), QpState::Reset).unwrap_err(), EOPNOTSUPP);
        assert_eq!(modify_qp(&a, 1 << 22, QpState::Reset).unwrap_err(), EINVAL);
        let bad = ibv_qp_attr { qp_state: 9, ..Default::default() };
        assert_eq!(modify_qp(&bad, 1, QpState::Reset).unwrap_err(), EINVAL);
        // A non-global address on RoCE.
        let av = ibv_qp_attr { qp_state: 2, ..Default::default() };
        assert_eq!(modify_qp(&av, 1 | (1 << 7), QpState::Init).unwrap_err(), EINVAL);
    }

    #[test]
    fn access_flags_ignore_only_what_may_be_ignored() {
        assert_eq!(mr_access(1 | (1 << 20) | (1 << 7)), Ok(AccessFlags(1)));
        assert_eq!(mr_access(1 << 6), Err(EOPNOTSUPP));
        assert_eq!(mr_access(1 << 12), Err(EINVAL));
    }

    #[test]
    fn completions_carry_the_immediate_in_network_order() {
        let w = Wc { imm_data: 0x1234_5678, ..Default::default() };
        assert_eq!(c_wc(&w).imm_data.to_ne_bytes(), [0x12, 0x34, 0x56, 0x78]);
    }
}

/// What an asynchronous event is about (`struct ibv_async_event`'s `element`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventElement {
    /// A CQ, by CQN.
    Cq,
    /// A QP, by QPN.
    Qp,
    /// An SRQ, by SRQN.
    Srq,
    /// A port, by number.
    Port,
    /// The device (no element).
    Device,
}

/// An mlx5 asynchronous event (type, sub-type) as `enum ibv_event_type` and what its number
/// names; `None` for events ibverbs does not report (commands, pages, vendor events).
pub fn async_event(ty: EventType, sub_type: u8) -> Option<(u32, EventElement)> {
    use EventElement::*;
    use event_type as ev;
    Some(match ty {
        EventType::CQ_ERROR => (ev::CQ_ERR, Cq),
        EventType::WQ_CATAS_ERROR => (ev::QP_FATAL, Qp),
        EventType::WQ_INVAL_REQ_ERROR => (ev::QP_REQ_ERR, Qp),
        EventType::WQ_ACCESS_ERROR => (ev::QP_ACCESS_ERR, Qp),
        EventType::COMM_EST => (ev::COMM_EST, Qp),
        EventType::SQ_DRAINED => (ev::SQ_DRAINED, Qp),
        EventType::PATH_MIG => (ev::PATH_MIG, Qp),
        EventType::PATH_MIG_FAILED => (ev::PATH_MIG_ERR, Qp),
        EventType::SRQ_LAST_WQE => (ev::QP_LAST_WQE_REACHED, Qp),
        EventType::SRQ_CATAS_ERROR => (ev::SRQ_ERR, Srq),
        EventType::SRQ_RQ_LIMIT => (ev::SRQ_LIMIT_REACHED, Srq),
        EventType::INTERNAL_ERROR => (ev::DEVICE_FATAL, Device),
        EventType::PORT_CHANGE => (
            match PortChangeSubtype(sub_type) {
                PortChangeSubtype::ACTIVE => ev::PORT_ACTIVE,
                PortChangeSubtype::DOWN | PortChangeSubtype::INITIALIZED => ev::PORT_ERR,
                PortChangeSubtype::LID => ev::LID_CHANGE,
                PortChangeSubtype::PKEY => ev::PKEY_CHANGE,
                PortChangeSubtype::GUID => ev::GID_CHANGE,
                PortChangeSubtype::CLIENT_REREG => ev::CLIENT_REREGISTER,
                _ => return None,
            },
            Port,
        ),
        _ => return None,
    })
}

/// What an `enum ibv_event_type` value is about (`ibv_ack_async_event` counts it there).
pub fn event_element(ibv_type: u32) -> EventElement {
    use event_type as ev;
    match ibv_type {
        ev::CQ_ERR => EventElement::Cq,
        ev::QP_FATAL
        | ev::QP_REQ_ERR
        | ev::QP_ACCESS_ERR
        | ev::COMM_EST
        | ev::SQ_DRAINED
        | ev::PATH_MIG
        | ev::PATH_MIG_ERR
        | ev::QP_LAST_WQE_REACHED => EventElement::Qp,
        ev::SRQ_ERR | ev::SRQ_LIMIT_REACHED => EventElement::Srq,
        ev::DEVICE_FATAL => EventElement::Device,
        _ => EventElement::Port,
    }
}
