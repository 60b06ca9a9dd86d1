//! Helpers the tools share: connecting QPs with the usual attributes, waiting for one
//! completion, printing MACs.

use std::result::Result;
use std::time::{Duration, Instant};
use umlx_verbs::*;

/// Moves an RC QP from RESET to RTS, connected to `dest_qpn` at `dgid` (from our GID index
/// `sgid_index`), with PSNs `sq_psn` (ours) and `rq_psn` (the peer's first PSN).
pub fn connect_rc(
    ctx: &Context,
    qp: &mut Qp,
    dest_qpn: u32,
    dgid: Gid,
    sgid_index: u8,
    sq_psn: u32,
    rq_psn: u32,
) -> Result<(), String> {
    connect_rc_mtu(ctx, qp, dest_qpn, dgid, sgid_index, sq_psn, rq_psn, ctx.active_mtu())
}

/// [`connect_rc`] with an explicit path MTU.
#[allow(clippy::too_many_arguments)]
pub fn connect_rc_mtu(
    _ctx: &Context,
    qp: &mut Qp,
    dest_qpn: u32,
    dgid: Gid,
    sgid_index: u8,
    sq_psn: u32,
    rq_psn: u32,
    mtu: Mtu,
) -> Result<(), String> {
    let access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let init = QpAttr { qp_state: Some(QpState::Init), port_num: 1, qp_access_flags: access, ..Default::default() };
    qp.modify(&init, QpAttrMask::RC_INIT).map_err(|e| e.to_string())?;
    let rtr = QpAttr {
        qp_state: Some(QpState::Rtr),
        path_mtu: Some(mtu),
        dest_qp_num: dest_qpn,
        rq_psn,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            grh: GlobalRoute { dgid, sgid_index, hop_limit: 64, ..Default::default() },
            port_num: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let rtr_mask = QpAttrMask::RC_RTR;
    qp.modify(&rtr, rtr_mask).map_err(|e| e.to_string())?;
    let rts = QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..Default::default()
    };
    let rts_mask = QpAttrMask::RC_RTS;
    qp.modify(&rts, rts_mask).map_err(|e| e.to_string())
}

/// Moves a UD QP from RESET to RTS with Q_Key `qkey`.
pub fn connect_ud(qp: &mut Qp, qkey: u32) -> Result<(), String> {
    let m = QpAttrMask::STATE;
    qp.modify(&QpAttr { qp_state: Some(QpState::Init), port_num: 1, qkey, ..Default::default() }, QpAttrMask::UD_INIT)
        .map_err(|e| e.to_string())?;
    qp.modify(&QpAttr { qp_state: Some(QpState::Rtr), ..Default::default() }, m).map_err(|e| e.to_string())?;
    qp.modify(&QpAttr { qp_state: Some(QpState::Rts), sq_psn: 0, ..Default::default() }, m | QpAttrMask::SQ_PSN)
        .map_err(|e| e.to_string())
}

/// Polls `cq` until one completion arrives or `secs` pass.
pub fn wait_one(cq: &mut Cq, secs: u64) -> Result<Wc, String> {
    let mut wc = [Wc::default(); 1];
    let start = Instant::now();
    loop {
        if cq.poll(&mut wc) == 1 {
            return Ok(wc[0]);
        }
        if start.elapsed() > Duration::from_secs(secs) {
            return Err(format!("no completion on CQ {:#x} within {secs} s", cq.cqn()));
        }
        std::hint::spin_loop();
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}
