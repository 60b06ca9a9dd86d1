//! Helpers shared by the verbs integration tests.

use umlx_verbs::*;

/// What an RC connection in a test varies.
#[derive(Clone, Copy)]
pub struct RcParams {
    /// Both PSNs (ours and the peer's first).
    pub psn: u32,
    /// Remote access the QP grants.
    pub access: AccessFlags,
    /// Outstanding READ/atomic, both directions.
    pub rd_atomic: u8,
    /// Local ACK timeout code.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
}

/// RESET -> INIT -> RTR -> RTS towards `dest` at `dgid` from GID index 1, path MTU 1024.
pub fn connect_rc(qp: &mut Qp, dest: u32, dgid: Gid, p: RcParams) {
    let init = QpAttr { qp_state: Some(QpState::Init), port_num: 1, qp_access_flags: p.access, ..Default::default() };
    qp.modify(&init, QpAttrMask::RC_INIT).unwrap();
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: dest,
        rq_psn: p.psn,
        max_dest_rd_atomic: p.rd_atomic,
        min_rnr_timer: 1,
        ah_attr: AhAttr {
            grh: GlobalRoute { dgid, sgid_index: 1, hop_limit: 64, ..Default::default() },
            port_num: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    qp.modify(&rtr, QpAttrMask::RC_RTR).unwrap();
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: p.psn,
        timeout: p.timeout,
        retry_cnt: p.retry_cnt,
        rnr_retry: p.rnr_retry,
        max_rd_atomic: p.rd_atomic,
        ..Default::default()
    };
    qp.modify(&rts, QpAttrMask::RC_RTS).unwrap();
}
