//! Changing a QP's state and attributes: [`ModifyQp`] (the attributes of `ibv_modify_qp`,
//! each setter setting its mask bit), the table of what each transition must and may carry,
//! and [`ConnectParams`] / [`RcPeer`] for [`crate::Qp::connect`], which takes an RC QP from
//! RESET to RTS in one call.

use crate::types::{AccessFlags, AhAttr, Gid, Mtu, QpAttr, QpAttrMask, QpState};
use umlx_driver::objects::Transition;

/// The attributes of one `ibv_modify_qp`: each setter stores its value and sets its
/// `IBV_QP_*` mask bit, so the mask cannot disagree with the fields. [`crate::Qp::modify`]
/// checks the result against the transition: a missing required attribute is refused with an
/// error that names it, an attribute the transition cannot take likewise.
///
/// ```
/// use umlx_verbs::{AccessFlags, ModifyQp, QpAttrMask, QpState};
/// let init = ModifyQp::to(QpState::Init).port_num(1).pkey_index(0).qp_access_flags(AccessFlags::REMOTE_WRITE);
/// assert_eq!(init.mask(), QpAttrMask::STATE | QpAttrMask::PORT | QpAttrMask::PKEY_INDEX | QpAttrMask::ACCESS_FLAGS);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModifyQp {
    attr: QpAttr,
    mask: QpAttrMask,
}

/// One setter per attribute: stores the value and sets the mask bit.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty => $bit:ident;)*) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(mut self, v: $ty) -> ModifyQp {
                self.attr.$name = v;
                self.mask = self.mask | QpAttrMask::$bit;
                self
            }
        )*
    };
}

impl ModifyQp {
    /// No state change: only the attributes set afterwards (e.g. RTS to RTS).
    pub fn new() -> ModifyQp {
        ModifyQp::default()
    }

    /// A transition to `state` (IBV_QP_STATE).
    pub fn to(state: QpState) -> ModifyQp {
        ModifyQp { attr: QpAttr { qp_state: Some(state), ..Default::default() }, mask: QpAttrMask::STATE }
    }

    /// The ibverbs form: `attr` with the fields `mask` names (what a C caller of
    /// `ibv_modify_qp` passes).
    pub fn from_raw(attr: QpAttr, mask: QpAttrMask) -> ModifyQp {
        ModifyQp { attr, mask }
    }

    /// The attributes.
    pub fn attr(&self) -> &QpAttr {
        &self.attr
    }

    /// The mask of the attributes set.
    pub fn mask(&self) -> QpAttrMask {
        self.mask
    }

    /// The path MTU (IBV_QP_PATH_MTU).
    #[must_use]
    pub fn path_mtu(mut self, mtu: Mtu) -> ModifyQp {
        self.attr.path_mtu = Some(mtu);
        self.mask = self.mask | QpAttrMask::PATH_MTU;
        self
    }

    setters! {
        /// The Q_Key of a UD QP (IBV_QP_QKEY).
        qkey: u32 => QKEY;
        /// The first PSN expected from the peer (IBV_QP_RQ_PSN).
        rq_psn: u32 => RQ_PSN;
        /// The first PSN sent (IBV_QP_SQ_PSN).
        sq_psn: u32 => SQ_PSN;
        /// The peer's QP number (IBV_QP_DEST_QPN).
        dest_qp_num: u32 => DEST_QPN;
        /// What the peer may do to this QP's memory (IBV_QP_ACCESS_FLAGS).
        qp_access_flags: AccessFlags => ACCESS_FLAGS;
        /// The peer's address (IBV_QP_AV).
        ah_attr: AhAttr => AV;
        /// The P_Key index (IBV_QP_PKEY_INDEX).
        pkey_index: u16 => PKEY_INDEX;
        /// Outstanding RDMA READs and atomics as initiator (IBV_QP_MAX_QP_RD_ATOMIC).
        max_rd_atomic: u8 => MAX_QP_RD_ATOMIC;
        /// Outstanding RDMA READs and atomics as responder (IBV_QP_MAX_DEST_RD_ATOMIC).
        max_dest_rd_atomic: u8 => MAX_DEST_RD_ATOMIC;
        /// The RNR NAK timer code this QP sends (IBV_QP_MIN_RNR_TIMER).
        min_rnr_timer: u8 => MIN_RNR_TIMER;
        /// The port (IBV_QP_PORT).
        port_num: u8 => PORT;
        /// The local ACK timeout code, 4.096 µs × 2^timeout (IBV_QP_TIMEOUT).
        timeout: u8 => TIMEOUT;
        /// Transport retries (IBV_QP_RETRY_CNT).
        retry_cnt: u8 => RETRY_CNT;
        /// RNR retries, 7 = infinite (IBV_QP_RNR_RETRY).
        rnr_retry: u8 => RNR_RETRY;
    }
}

/// The attributes a modify must carry (besides `IBV_QP_STATE`) and those it may carry, for an
/// RC (`rc`) or UD QP: the table the Linux RDMA core checks every `ibv_modify_qp` against
/// (`qp_state_table`, `ib_modify_qp_is_ok`), so umlx accepts exactly what rdma-core on a
/// kernel device accepts and refuses the rest with EINVAL instead of dropping it.
pub(crate) fn transition_attrs(t: Transition, rc: bool) -> (QpAttrMask, QpAttrMask) {
    use QpAttrMask as M;
    let m = |bits: &[QpAttrMask]| M(bits.iter().fold(0, |a, b| a | b.0));
    let none = M(0);
    match (t, rc) {
        (Transition::ToRst | Transition::ToErr, _) => (none, none),
        (Transition::Rst2Init, true) => (m(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS]), none),
        (Transition::Rst2Init, false) => (m(&[M::PKEY_INDEX, M::PORT, M::QKEY]), none),
        (Transition::Init2Init, true) => (none, m(&[M::PKEY_INDEX, M::PORT, M::ACCESS_FLAGS])),
        (Transition::Init2Init, false) => (none, m(&[M::PKEY_INDEX, M::PORT, M::QKEY])),
        (Transition::Init2Rtr, true) => (
            m(&[M::AV, M::PATH_MTU, M::DEST_QPN, M::RQ_PSN, M::MAX_DEST_RD_ATOMIC, M::MIN_RNR_TIMER]),
            m(&[M::ALT_PATH, M::ACCESS_FLAGS, M::PKEY_INDEX]),
        ),
        (Transition::Init2Rtr, false) => (none, m(&[M::PKEY_INDEX, M::QKEY])),
        (Transition::Rtr2Rts, true) => (
            m(&[M::TIMEOUT, M::RETRY_CNT, M::RNR_RETRY, M::SQ_PSN, M::MAX_QP_RD_ATOMIC]),
            m(&[M::CUR_STATE, M::ALT_PATH, M::ACCESS_FLAGS, M::MIN_RNR_TIMER, M::PATH_MIG_STATE]),
        ),
        (Transition::Rtr2Rts, false) => (M::SQ_PSN, m(&[M::CUR_STATE, M::QKEY])),
        (Transition::Rts2Rts | Transition::Sqd2Rts, true) => {
            (none, m(&[M::CUR_STATE, M::ACCESS_FLAGS, M::ALT_PATH, M::PATH_MIG_STATE, M::MIN_RNR_TIMER]))
        }
        (Transition::Rts2Rts | Transition::Sqd2Rts | Transition::SqErr2Rts, false) => {
            (none, m(&[M::CUR_STATE, M::QKEY]))
        }
        // An RC QP never reaches SQE (its send errors move it to ERR).
        (Transition::SqErr2Rts, true) => (none, none),
    }
}

/// The ibverbs names of the bits of `mask`, with the [`ModifyQp`] setter that sets each:
/// `IBV_QP_DEST_QPN (dest_qp_num)`.
pub(crate) fn attr_names(mask: QpAttrMask) -> String {
    const NAMES: [(&str, &str); 21] = [
        ("IBV_QP_STATE", "to"),
        ("IBV_QP_CUR_STATE", "cur_state"),
        ("IBV_QP_EN_SQD_ASYNC_NOTIFY", "en_sqd_async_notify"),
        ("IBV_QP_ACCESS_FLAGS", "qp_access_flags"),
        ("IBV_QP_PKEY_INDEX", "pkey_index"),
        ("IBV_QP_PORT", "port_num"),
        ("IBV_QP_QKEY", "qkey"),
        ("IBV_QP_AV", "ah_attr"),
        ("IBV_QP_PATH_MTU", "path_mtu"),
        ("IBV_QP_TIMEOUT", "timeout"),
        ("IBV_QP_RETRY_CNT", "retry_cnt"),
        ("IBV_QP_RNR_RETRY", "rnr_retry"),
        ("IBV_QP_RQ_PSN", "rq_psn"),
        ("IBV_QP_MAX_QP_RD_ATOMIC", "max_rd_atomic"),
        ("IBV_QP_ALT_PATH", "alt_path"),
        ("IBV_QP_MIN_RNR_TIMER", "min_rnr_timer"),
        ("IBV_QP_SQ_PSN", "sq_psn"),
        ("IBV_QP_MAX_DEST_RD_ATOMIC", "max_dest_rd_atomic"),
        ("IBV_QP_PATH_MIG_STATE", "path_mig_state"),
        ("IBV_QP_CAP", "cap"),
        ("IBV_QP_DEST_QPN", "dest_qp_num"),
    ];
    let mut names: Vec<String> = NAMES
        .iter()
        .enumerate()
        .filter(|(bit, _)| mask.0 & (1 << bit) != 0)
        .map(|(_, (ib, setter))| format!("{ib} ({setter})"))
        .collect();
    let unknown = mask.0 & !((1 << NAMES.len()) - 1);
    if unknown != 0 {
        names.push(format!("unknown bits {unknown:#x}"));
    }
    names.join(", ")
}

/// The peer of an RC connection: what the two sides exchange out of band before
/// [`crate::Qp::connect`] (rdma-core's pingpong exchanges the same three values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcPeer {
    /// The peer QP's number.
    pub qp_num: u32,
    /// The first PSN the peer sends.
    pub psn: u32,
    /// The peer port's GID.
    pub gid: Gid,
}

/// How [`crate::Qp::connect`] sets up the connection. The defaults are rdma-core's and
/// perftest's usual values; change a field with struct update syntax:
///
/// ```
/// use umlx_verbs::ConnectParams;
/// let p = ConnectParams { timeout: 10, retry_cnt: 3, ..Default::default() };
/// assert_eq!((p.min_rnr_timer, p.rnr_retry), (12, 7));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectParams {
    /// The first PSN this QP sends (the value its peer passes as [`RcPeer::psn`]).
    pub sq_psn: u32,
    /// The path MTU; `None`: the port's active MTU.
    pub path_mtu: Option<Mtu>,
    /// The source GID index; `None`: the port's RoCEv2 GID of its IPv4 address
    /// ([`crate::Context::default_gid`]).
    pub sgid_index: Option<u8>,
    /// The port.
    pub port_num: u8,
    /// The P_Key index.
    pub pkey_index: u16,
    /// What the peer may do to this QP's memory.
    pub access: AccessFlags,
    /// Outstanding RDMA READs and atomics, as initiator and as responder; `None`: 16, or the
    /// device's limit if lower.
    pub rd_atomic: Option<u8>,
    /// The RNR NAK timer code (12: 0.64 ms).
    pub min_rnr_timer: u8,
    /// The local ACK timeout code (14: 67 ms).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7: infinite).
    pub rnr_retry: u8,
    /// Hop limit (IPv4 TTL).
    pub hop_limit: u8,
    /// Traffic class (IP TOS).
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// The peer's MAC; `None`: resolved as for an address handle.
    pub dmac: Option<[u8; 6]>,
}

impl Default for ConnectParams {
    fn default() -> ConnectParams {
        ConnectParams {
            sq_psn: 0,
            path_mtu: None,
            sgid_index: None,
            port_num: 1,
            pkey_index: 0,
            access: AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
            rd_atomic: None,
            min_rnr_timer: 12,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
            dmac: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_setter_sets_exactly_its_bit() {
        let m = ModifyQp::to(QpState::Rtr).dest_qp_num(5).rq_psn(9).path_mtu(Mtu::Mtu1024);
        assert_eq!(m.mask(), QpAttrMask::STATE | QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN | QpAttrMask::PATH_MTU);
        assert_eq!((m.attr().dest_qp_num, m.attr().rq_psn, m.attr().path_mtu), (5, 9, Some(Mtu::Mtu1024)));
        assert_eq!(ModifyQp::new().mask(), QpAttrMask(0));
    }

    #[test]
    fn missing_attributes_are_named_as_ibverbs_and_the_setter_name_them() {
        assert_eq!(
            attr_names(QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN),
            "IBV_QP_RQ_PSN (rq_psn), IBV_QP_DEST_QPN (dest_qp_num)"
        );
        assert_eq!(attr_names(QpAttrMask(1 << 25)), "unknown bits 0x2000000");
    }
}
