//! The data path's posts: receive WRs onto a receive queue (a QP's or an SRQ's) and send WRs
//! onto a send queue, each work request written as its WQE.

use super::*;

/// Posts receive WRs on `rq` and updates its doorbell record once. As ibverbs: the requests
/// before the first failing one are posted. One-SGE requests with room known are written here;
/// at the first other one, [`post_recv_rest`] takes over the rest of the chain (out of line, so
/// this loop keeps its state in registers).
#[inline(always)]
pub(super) fn post_recv_chain(rq: &mut RecvQueue, wrs: &[RecvWr<'_>]) -> Result<()> {
    let mut rest = wrs;
    while let [wr, tail @ ..] = rest {
        match wr.sg_list {
            [sge] if rq.try_write_one(wr.wr_id, sge) => rest = tail,
            _ => return post_recv_rest(rq, wrs.len() - rest.len(), rest),
        }
    }
    rq.ring_doorbell();
    Ok(())
}

/// The rest of a receive chain from index `first` on, any request shape; rings the doorbell
/// record.
#[inline(never)]
pub(super) fn post_recv_rest(rq: &mut RecvQueue, first: usize, rest: &[RecvWr<'_>]) -> Result<()> {
    let mut result = Ok(());
    for (i, wr) in rest.iter().enumerate() {
        if let Err(e) = rq.write_wqe(wr.wr_id, wr.sg_list) {
            result = Err(post_error(first + i, e));
            break;
        }
    }
    rq.ring_doorbell();
    result
}

/// Writes `wr` if it takes the short path (SEND(_IMM), RDMA_WRITE(_IMM) or RDMA_READ with one
/// non-empty SGE) and the ring has room known without reading the tail.
#[inline(always)]
pub(super) fn short_one(chain: &mut SqChain<'_, Dev>, wr: &SendWr<'_>) -> bool {
    let (id, flags) = (wr.wr_id, wr.flags.0);
    // One specialised copy per opcode (not `short_form`): a single merged call costs the
    // one-request post about 20 instructions.
    match wr.op {
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: None } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::RDMA_WRITE, flags, 0, Some(remote), sge)
        }
        SendOp::Send { data: Payload::Sges([sge]), imm: None } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::SEND, flags, 0, None, sge)
        }
        SendOp::Send { data: Payload::Sges([sge]), imm: Some(imm) } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::SEND_IMM, flags, imm, None, sge)
        }
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: Some(imm) } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::RDMA_WRITE_IMM, flags, imm, Some(remote), sge)
        }
        SendOp::Read { into: [sge], remote } if !sge.is_empty() && chain.has_room() => {
            chain.put_simple(id, opcode::RDMA_READ, flags, 0, Some(remote), sge)
        }
        _ => return false,
    }
    true
}

/// The WQE opcode, immediate, remote side and SGE of a request the short path takes (SEND,
/// RDMA WRITE and READ, with or without immediate, one SGE); `None` for the others.
#[inline(always)]
pub(super) fn short_form<'a>(op: &SendOp<'a>) -> Option<(u8, u32, Option<Remote>, &'a Sge)> {
    Some(match *op {
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: None } => (opcode::RDMA_WRITE, 0, Some(remote), sge),
        SendOp::Send { data: Payload::Sges([sge]), imm: None } => (opcode::SEND, 0, None, sge),
        SendOp::Send { data: Payload::Sges([sge]), imm: Some(imm) } => (opcode::SEND_IMM, imm, None, sge),
        SendOp::Write { data: Payload::Sges([sge]), remote, imm: Some(imm) } => {
            (opcode::RDMA_WRITE_IMM, imm, Some(remote), sge)
        }
        SendOp::Read { into: [sge], remote } => (opcode::RDMA_READ, 0, Some(remote), sge),
        _ => return None,
    })
}

/// The inline form of a request the inline path takes: (opcode, immediate, remote side, the
/// data).
#[inline(always)]
pub(super) fn inline_form<'a>(op: &SendOp<'a>) -> Option<(u8, u32, Option<Remote>, &'a [u8])> {
    Some(match *op {
        SendOp::Send { data: Payload::Inline(d), imm: None } => (opcode::SEND, 0, None, d),
        SendOp::Send { data: Payload::Inline(d), imm: Some(imm) } => (opcode::SEND_IMM, imm, None, d),
        SendOp::Write { data: Payload::Inline(d), remote, imm: None } => (opcode::RDMA_WRITE, 0, Some(remote), d),
        SendOp::Write { data: Payload::Inline(d), remote, imm: Some(imm) } => {
            (opcode::RDMA_WRITE_IMM, imm, Some(remote), d)
        }
        _ => return None,
    })
}

/// Writes the leading requests of `rest` that are all `opcode` (as `extract` recognises them,
/// giving the immediate, the remote side and the one SGE) with a non-empty SGE, as many as the
/// ring has room for without reading the tail; advances `rest` past them.
#[inline(always)]
pub(super) fn short_run<'a>(
    chain: &mut SqChain<'_, Dev>,
    rest: &mut &[SendWr<'a>],
    opcode: u8,
    extract: impl Fn(&SendOp<'a>) -> Option<(u32, Option<Remote>, &'a Sge)>,
) {
    let room = (chain.room() as usize).min(rest.len());
    let mut done = 0;
    for wr in &rest[..room] {
        let Some((imm, remote, sge)) = extract(&wr.op) else { break };
        if sge.is_empty() {
            break;
        }
        chain.put_simple(wr.wr_id, opcode, wr.flags.0, imm, remote, sge);
        done += 1;
    }
    *rest = &rest[done..];
}

/// The rest of an RC send chain from index `first` on, any request shape: short-path requests
/// (with the tail read when the ring looks full), everything else through
/// [`write_send_general`]. Ends the chain (doorbell). Out of line, so the caller's loop stays
/// free of calls.
#[inline(never)]
pub(super) fn post_send_rest(mut chain: SqChain<'_, Dev>, first: usize, rest: &[SendWr<'_>]) -> Result<()> {
    let mut result = Ok(());
    for (i, wr) in rest.iter().enumerate() {
        let (id, flags) = (wr.wr_id, wr.flags.0);
        let r = match short_form(&wr.op) {
            Some((op, imm, remote, sge)) => chain.write_simple(id, op, flags, imm, remote, sge),
            None if let Some((op, imm, remote, data)) = inline_form(&wr.op) => {
                chain.write_inline(id, op, flags, imm, remote, data)
            }
            None => match chain.with_queue(|sq| write_send_general(sq, wr)) {
                Ok(()) => Ok(()),
                Err(why) => {
                    result = Err(Error::post(first + i, why, QpState::Rts));
                    break;
                }
            },
        };
        if let Err(e) = r {
            result = Err(post_error(first + i, e));
            break;
        }
    }
    chain.finish();
    result
}

/// Any RC send WR the short path does not take: inline data, SGE lists, atomics.
#[inline(never)]
pub(super) fn write_send_general(sq: &mut SendQueue<Dev>, wr: &SendWr<'_>) -> std::result::Result<(), PostWhy> {
    let (op, imm, remote, atomic, data) = match &wr.op {
        SendOp::Send { data, imm: None } => (opcode::SEND, 0, Remote::default(), (0, 0), *data),
        SendOp::Send { data, imm: Some(imm) } => (opcode::SEND_IMM, *imm, Remote::default(), (0, 0), *data),
        SendOp::Write { data, remote, imm: None } => (opcode::RDMA_WRITE, 0, *remote, (0, 0), *data),
        SendOp::Write { data, remote, imm: Some(imm) } => (opcode::RDMA_WRITE_IMM, *imm, *remote, (0, 0), *data),
        SendOp::Read { into, remote } => (opcode::RDMA_READ, 0, *remote, (0, 0), Payload::Sges(into)),
        SendOp::CompareSwap { result, remote, compare, swap } => {
            (opcode::ATOMIC_CS, 0, *remote, (*swap, *compare), Payload::Sges(std::slice::from_ref(result)))
        }
        SendOp::FetchAdd { result, remote, add } => {
            (opcode::ATOMIC_FA, 0, *remote, (*add, 0), Payload::Sges(std::slice::from_ref(result)))
        }
    };
    if matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA) && !matches!(data, Payload::Sges([r]) if r.length() == 8) {
        return Err(PostWhy::AtomicLength);
    }
    let w = send_wqe(wr.wr_id, wr.flags, (op, imm, remote, atomic), data, None);
    sq.write_wqe(&w).map_err(post_why)
}

/// The WQE of a request the general path writes: its id and flags, (opcode, immediate, remote
/// side, atomic operands), the payload as a gather list or inline bytes, the UD address vector.
pub(super) fn send_wqe<'a>(
    wr_id: u64,
    flags: SendFlags,
    (opcode, imm, remote, atomic): (u8, u32, Remote, (u64, u64)),
    data: Payload<'a>,
    av: Option<&'a [u8; umlx_hwdesc::plain::wqe_av::SIZE]>,
) -> SendWqe<'a> {
    let (sges, inline) = match data {
        Payload::Sges(s) => (s, None),
        Payload::Inline(b) => (&[][..], Some(b)),
    };
    SendWqe { wr_id, opcode, send_flags: flags.0 & 7, imm, remote, atomic, sges, inline, av }
}

#[cfg(all(test, feature = "sim"))]
mod tests {
    use crate::Context;

    #[test]
    fn a_dropped_srq_leaves_the_ring_table() {
        let ctx = Context::open_sim(Default::default()).expect("sim");
        let pd = ctx.alloc_pd().expect("pd");
        let table = &ctx.shared.qps;
        let before = table.retained();
        for _ in 0..200 {
            let srq = pd.create_srq(16, 1, 0).expect("srq");
            assert_eq!(table.retained(), before + 1, "the SRQ's rings are in the table");
            drop(srq);
        }
        table.reclaim();
        if table.reclaims() {
            assert_eq!(table.retained(), before, "200 SRQs created and dropped: none left");
        }
        // An SRQ dropped while a QP takes receives from it keeps its rings for that QP's
        // completions.
        let cq = ctx.create_cq(16, None).expect("cq");
        let srq = pd.create_srq(16, 1, 0).expect("srq");
        let qp = pd.create_qp(crate::QpType::Rc, &cq).srq(&srq).build().expect("qp on the SRQ");
        let with_qp = table.retained();
        drop(srq);
        assert_eq!(table.retained(), with_qp, "kept while the QP uses the SRQ");
        drop(qp);
    }
}
