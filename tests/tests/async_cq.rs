//! The verbs API's tokio integration on the sim: `AsyncCq::next().await` and the completion
//! `Stream` wake on the completion channel's event (another thread posts while the task is
//! parked), and deliver every completion in order.

#![forbid(unsafe_code)]

use futures_core::Stream;
use std::pin::Pin;
use std::time::Duration;
use umlx_verbs::*;

/// A context, a region and an RC QP connected to itself whose completions go to `acq`.
fn self_connected(acq: &mut AsyncCq, pd: &Pd, ctx: &Context) -> Qp {
    let mut qp = pd.create_qp(QpType::Rc, acq.cq()).max_send_wr(128).max_recv_wr(128).build().unwrap();
    let (_, gid) = ctx.default_gid().expect("the sim has an IPv4 GID");
    qp.connect(&RcPeer { qp_num: qp.qp_num(), psn: 0x10, gid }, &ConnectParams { sq_psn: 0x10, ..Default::default() })
        .unwrap();
    qp
}

#[tokio::test(flavor = "current_thread")]
async fn next_wakes_on_the_channel_event_when_another_thread_posts() {
    let ctx = Context::open_sim(Default::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut acq = ctx.create_async_cq(64).unwrap();
    let mr = pd.alloc_mr(8192, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap();
    let mut qp = self_connected(&mut acq, &pd, &ctx);
    mr.write(0, b"async completion").unwrap();
    let (sge, remote) = (mr.sge(0, 16), Remote { addr: mr.addr() + 4096, rkey: mr.rkey() });
    // The task parks in `next()` (empty CQ, armed) before the WRITE is posted.
    let poster = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        let op = SendOp::Write { data: Payload::Sges(&[sge]), remote, imm: None };
        qp.post_send(&[SendWr::new(77, op).signaled()]).unwrap();
        qp
    });
    let wc = tokio::time::timeout(Duration::from_secs(10), acq.next())
        .await
        .expect("no completion within 10 s: the channel event did not wake the task")
        .unwrap();
    assert_eq!((wc.wr_id, wc.status, wc.opcode), (77, WcStatus::Success, WcOpcode::RdmaWrite));
    assert_eq!(mr.to_vec(4096, 16).unwrap(), b"async completion");
    let _qp = poster.join().unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn the_stream_yields_every_completion_in_order() {
    let ctx = Context::open_sim(Default::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mut acq = ctx.create_async_cq(256).unwrap();
    let mr = pd.alloc_mr(1 << 16, AccessFlags::LOCAL_WRITE).unwrap();
    let mut qp = self_connected(&mut acq, &pd, &ctx);
    // 40 SENDs to itself, each consuming one of 40 receives: 80 completions.
    for i in 0..40u64 {
        qp.post_recv(&[RecvWr { wr_id: 1000 + i, sg_list: &[mr.sge(1024 + 64 * i as usize, 64)] }]).unwrap();
    }
    for i in 0..40u64 {
        mr.write(0, &[i as u8; 8]).unwrap();
        let sge = [mr.sge(0, 8)];
        qp.post_send(&[SendWr::new(i, SendOp::Send { data: Payload::Sges(&sge), imm: Some(i as u32) }).signaled()])
            .unwrap();
        // Wait for this one before rewriting the source buffer.
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let item = std::future::poll_fn(|cx| Pin::new(&mut acq).poll_next(cx)).await;
            seen.push(item.expect("the stream never ends").unwrap());
        }
        seen.sort_by_key(|w| w.wr_id);
        assert_eq!((seen[0].wr_id, seen[0].opcode, seen[0].status), (i, WcOpcode::Send, WcStatus::Success));
        assert_eq!((seen[1].wr_id, seen[1].opcode), (1000 + i, WcOpcode::Recv));
        assert_eq!((seen[1].imm_data, seen[1].byte_len), (i as u32, 8));
    }
    for i in 0..40usize {
        assert_eq!(mr.to_vec(1024 + 64 * i, 8).unwrap(), vec![i as u8; 8], "receive {i}");
    }
}

#[test]
fn an_async_cq_outside_a_runtime_is_an_error_not_a_panic() {
    let ctx = Context::open_sim(Default::default()).unwrap();
    let e = ctx.create_async_cq(16).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Os);
    assert!(e.to_string().contains("tokio"), "{e}");
}

#[test]
fn an_async_cq_on_a_runtime_without_io_is_an_error_not_a_panic() {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let ctx = Context::open_sim(Default::default()).unwrap();
    let e = rt.block_on(async { ctx.create_async_cq(16) }).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Os);
    assert!(e.to_string().contains("enable_io"), "{e}");
    // The context is still usable: a CQ on a runtime with IO works.
    let io = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
    io.block_on(async { ctx.create_async_cq(16) }).expect("with IO enabled");
}
