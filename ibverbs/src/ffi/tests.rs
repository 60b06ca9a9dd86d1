//! The C entry points driven as a C program would, on a software ConnectX in this process
//! (no wire: an RC QP connected to itself).
use super::objects::*;
use super::*;
use crate::abi::wr_opcode;

fn cstr(p: *const c_char) -> String {
    // SAFETY: the library's strings are static and NUL-terminated.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A context on a new software ConnectX in this process, as `ibv_open_device` makes one.
fn sim_context() -> *mut ibv_context {
    new_context(Context::open_sim(Default::default()).expect("sim"), &devices()[0])
}

/// A work request of one SGE at `sge`; `remote` is (address, rkey) for RDMA opcodes.
fn send_wr(wr_id: u64, sge: *mut ibv_sge, opcode: u32, flags: u32, imm_be: u32, remote: (u64, u32)) -> ibv_send_wr {
    ibv_send_wr {
        wr_id,
        next: null_mut(),
        sg_list: sge,
        num_sge: 1,
        opcode,
        send_flags: flags,
        imm_data: imm_be,
        wr: send_wr_wr { rdma: wr_rdma { remote_addr: remote.0, rkey: remote.1 } },
        xrc_remote_srqn: 0,
        ext: send_wr_ext { tso: wr_tso { hdr: null_mut(), hdr_sz: 0, mss: 0 } },
    }
}

/// Takes an RC QP from RESET to RTS connected to itself, as a C program would.
///
/// # Safety
///
/// `qp` is a live RC QP handle; `gid` the port's GID index 1.
unsafe fn connect_to_itself(qp: *mut ibv_qp, gid: ibv_gid) {
    // SAFETY: the function's contract; the attributes are locals.
    unsafe {
        let mut a = ibv_qp_attr { qp_state: 1, port_num: 1, qp_access_flags: 0xe, ..Default::default() };
        assert_eq!(ibv_modify_qp(qp, &mut a, 1 | (1 << 3) | (1 << 4) | (1 << 5)), 0);
        let mut a = ibv_qp_attr {
            qp_state: 2,
            path_mtu: 3,
            dest_qp_num: (*qp).qp_num,
            rq_psn: 7,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah_attr: ibv_ah_attr {
                grh: ibv_global_route { dgid: gid, sgid_index: 1, hop_limit: 1, ..Default::default() },
                is_global: 1,
                port_num: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        assert_eq!(
            ibv_modify_qp(qp, &mut a, 1 | (1 << 7) | (1 << 8) | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15)),
            0
        );
        a.qp_state = 3;
        a.sq_psn = 7;
        a.timeout = 14;
        a.retry_cnt = 7;
        a.rnr_retry = 7;
        a.max_rd_atomic = 1;
        assert_eq!(ibv_modify_qp(qp, &mut a, 1 | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 16) | (1 << 13)), 0);
        assert_eq!((*qp).state, 3);
    }
}

#[test]
fn strings_and_the_default_device_list() {
    assert_eq!(cstr(ibv_wc_status_str(0)), "success");
    assert_eq!(cstr(ibv_wc_status_str(5)), "Work Request Flushed Error");
    assert_eq!(cstr(ibv_wc_status_str(99)), "unknown");
    assert_eq!(cstr(ibv_port_state_str(4)), "PORT_ACTIVE");
    let mut n = -1;
    // SAFETY: a valid int out-pointer; the list is freed below.
    let list = unsafe { ibv_get_device_list(&mut n) };
    assert!(!list.is_null() && n >= 1);
    // SAFETY: the list has n entries and a NULL after them.
    unsafe {
        assert!((*list.add(n as usize)).is_null());
        let names: Vec<String> = (0..n as usize).map(|i| cstr(ibv_get_device_name(*list.add(i)))).collect();
        assert!(names.iter().all(|x| x.starts_with("umlx_sim") || x.starts_with("mlx5_")), "{names:?}");
        ibv_free_device_list(list);
    }
}

#[test]
fn a_c_program_sends_to_itself_through_the_ops_table() {
    let ctx = sim_context();
    let mut buf = vec![0u8; 8192];
    // SAFETY: every pointer below is a handle this test got from the library, or a local
    // it owns for the duration of the call.
    unsafe {
        let mut port = ibv_port_attr::default();
        let vctx = ctx.cast::<u8>().sub(std::mem::offset_of!(verbs_context, context)).cast::<verbs_context>();
        let query_port = (*vctx).query_port.expect("extended query_port");
        assert_eq!(query_port(ctx, 1, &mut port, std::mem::size_of::<ibv_port_attr>()), 0);
        assert_eq!((port.state, port.link_layer), (4, IBV_LINK_LAYER_ETHERNET));
        assert_eq!((port.active_width, port.active_speed), (2, 32), "the sim's 100GBASE-CR4: 4X at 25 Gb/s");
        let mut gid = ibv_gid::default();
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);

        let pd = ibv_alloc_pd(ctx);
        buf[..5].copy_from_slice(b"hello");
        // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ (the READ below reads it).
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1 | 2 | 4);
        assert!(!mr.is_null());
        assert_eq!((*mr).addr, buf.as_mut_ptr().cast(), "registered in place");
        assert_eq!(ibv_reg_mr(pd, buf.as_mut_ptr().cast(), 16, 1 << 6), null_mut(), "ODP");
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut init = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap: ibv_qp_cap { max_send_wr: 4, max_recv_wr: 4, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
            qp_type: qpt::RC,
            sq_sig_all: 0,
        };
        let qp = ibv_create_qp(pd, &mut init);
        assert!(!qp.is_null() && init.cap.max_send_wr >= 4);
        init.qp_type = qpt::UC;
        assert!(ibv_create_qp(pd, &mut init).is_null());
        assert_eq!(*libc::__errno_location(), EOPNOTSUPP);
        assert_eq!(ibv_dealloc_pd(pd), libc::EBUSY);

        // A one-SGE post (the fast entry) to a QP still in RESET: EINVAL, the request named.
        let mut early_sge = ibv_sge { addr: buf.as_mut_ptr() as u64, length: 8, lkey: (*mr).lkey };
        let mut early = send_wr(
            3,
            &mut early_sge,
            wr_opcode::RDMA_WRITE,
            send_flags::SIGNALED,
            0,
            (buf.as_mut_ptr() as u64, (*mr).rkey),
        );
        let mut early_bad = null_mut();
        assert_eq!((*ctx).ops.post_send.unwrap()(qp, &mut early, &mut early_bad), EINVAL);
        assert_eq!(early_bad, &raw mut early);

        connect_to_itself(qp, gid);

        let ops = &(*ctx).ops;
        let lkey = (*mr).lkey;
        let base = buf.as_mut_ptr() as u64;
        let mut rsge = ibv_sge { addr: base + 4096, length: 64, lkey };
        let mut rwr = ibv_recv_wr { wr_id: 1, next: null_mut(), sg_list: &mut rsge, num_sge: 1 };
        let mut bad_r = null_mut();
        assert_eq!(ops.post_recv.unwrap()(qp, &mut rwr, &mut bad_r), 0);
        let mut ssge = ibv_sge { addr: base, length: 5, lkey };
        let mut swr =
            send_wr(2, &mut ssge, wr_opcode::SEND_WITH_IMM, send_flags::SIGNALED, 0x1234_5678u32.to_be(), (0, 0));
        let mut bad = null_mut();
        // More SGEs than the QP has: refused, naming the request.
        swr.num_sge = 2;
        assert_eq!(ops.post_send.unwrap()(qp, &mut swr, &mut bad), EINVAL);
        assert_eq!(bad, &raw mut swr);
        swr.num_sge = 1;
        assert_eq!(ops.post_send.unwrap()(qp, &mut swr, &mut bad), 0);

        // An RDMA READ of those 5 bytes back into 6000 (the one-SGE fast entry).
        let mut read_sge = ibv_sge { addr: base + 6000, length: 5, lkey };
        let mut read =
            send_wr(4, &mut read_sge, wr_opcode::RDMA_READ, send_flags::SIGNALED, 0, (base + 4096, (*mr).rkey));
        assert_eq!(ops.post_send.unwrap()(qp, &mut read, &mut bad), 0);

        // Each other opcode of the fast entry: a WRITE with immediate into a posted
        // receive, and a plain WRITE, of those 5 bytes.
        let mut rwr5 = ibv_recv_wr { wr_id: 5, next: null_mut(), sg_list: &mut rsge, num_sge: 1 };
        assert_eq!(ops.post_recv.unwrap()(qp, &mut rwr5, &mut bad_r), 0);
        let mut wsge = ibv_sge { addr: base, length: 5, lkey };
        let (imm, rkey) = (0xabcd_0123u32.to_be(), (*mr).rkey);
        let mut write_imm =
            send_wr(6, &mut wsge, wr_opcode::RDMA_WRITE_WITH_IMM, send_flags::SIGNALED, imm, (base + 7000, rkey));
        assert_eq!(ops.post_send.unwrap()(qp, &mut write_imm, &mut bad), 0);
        let mut write = send_wr(7, &mut wsge, wr_opcode::RDMA_WRITE, send_flags::SIGNALED, 0, (base + 7500, rkey));
        assert_eq!(ops.post_send.unwrap()(qp, &mut write, &mut bad), 0);

        // The poll writes each entry whole, straight into the program's array: entries start
        // as garbage, and every field must come out as the completion says.
        let mut wc = [ibv_wc::default(); 4];
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 6 && std::time::Instant::now() < deadline {
            std::ptr::write_bytes(wc.as_mut_ptr(), 0xa5, wc.len());
            let n = ops.poll_cq.unwrap()(cq, 4, wc.as_mut_ptr());
            assert!(n >= 0);
            got.extend_from_slice(&wc[..n as usize]);
        }
        assert_eq!(got.len(), 6, "{got:?}");
        let qpn = (*qp).qp_num;
        let recv = got.iter().find(|w| w.wr_id == 1).expect("the receive");
        assert_eq!((recv.status, recv.opcode, recv.byte_len, recv.vendor_err), (0, 128, 5, 0));
        assert_eq!(u32::from_be(recv.imm_data), 0x1234_5678);
        assert_eq!(recv.wc_flags, 2, "IBV_WC_WITH_IMM only");
        assert_eq!((recv.qp_num, recv.src_qp, recv.pkey_index, recv.slid, recv.dlid_path_bits), (qpn, qpn, 0, 0, 0));
        let send = got.iter().find(|w| w.wr_id == 2).expect("the send");
        assert_eq!((send.status, send.opcode, send.qp_num, send.wc_flags), (0, 0, qpn, 0));
        assert_eq!((send.vendor_err, send.byte_len, send.imm_data, send.src_qp, send.sl), (0, 0, 0, 0, 0));
        let read = got.iter().find(|w| w.wr_id == 4).expect("the READ");
        assert_eq!((read.status, read.opcode, read.byte_len, read.qp_num), (0, 2, 5, qpn), "IBV_WC_RDMA_READ of 5");
        assert_eq!(&buf[4096..4101], b"hello", "landed in the program's own buffer");
        assert_eq!(&buf[6000..6005], b"hello", "read back");
        let recv5 = got.iter().find(|w| w.wr_id == 5).expect("the WRITE with immediate's receive");
        // IBV_WC_RECV_RDMA_WITH_IMM, with the immediate and the WRITE's length.
        assert_eq!((recv5.status, recv5.opcode, recv5.byte_len, recv5.wc_flags), (0, 129, 5, 2));
        assert_eq!(u32::from_be(recv5.imm_data), 0xabcd_0123);
        for (id, what) in [(6, "WRITE with immediate"), (7, "WRITE")] {
            let w = got.iter().find(|w| w.wr_id == id).expect(what);
            assert_eq!((w.status, w.opcode, w.qp_num), (0, 1, qpn), "{what}: IBV_WC_RDMA_WRITE");
        }
        assert_eq!((&buf[7000..7005], &buf[7500..7505]), (&b"hello"[..], &b"hello"[..]), "both WRITEs landed");
        assert_eq!(ops.poll_cq.unwrap()(cq, -1, wc.as_mut_ptr()), -EINVAL);
        assert_eq!(ops.poll_cq.unwrap()(cq, 0, null_mut()), 0, "no entries asked for");
        assert_eq!(ops.poll_cq.unwrap()(cq, 1, null_mut()), -EINVAL);
        let misaligned = wc.as_mut_ptr().cast::<u8>().add(1).cast::<ibv_wc>();
        assert_eq!(ops.poll_cq.unwrap()(cq, 1, misaligned), -EINVAL);

        let (mut qa, mut qi) = (ibv_qp_attr::default(), std::mem::zeroed::<ibv_qp_init_attr>());
        assert_eq!(ibv_query_qp(qp, &mut qa, qp_attr_mask::CAP, &mut qi), 0);
        assert_eq!((qa.qp_state, qa.dest_qp_num, qi.send_cq), (3, (*qp).qp_num, cq));

        assert_eq!(ibv_destroy_cq(cq), libc::EBUSY);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
    assert_eq!(&buf[..5], b"hello", "the buffer is still the program's");
}

#[test]
fn an_srq_feeds_a_qp_and_its_limit_event_names_it() {
    use super::events::*;
    assert_eq!(cstr(ibv_event_type_str(event_type::SRQ_LIMIT_REACHED)), "SRQ limit reached");
    assert_eq!(cstr(ibv_event_type_str(99)), "unknown");
    assert_eq!(cstr(ibv_node_type_str(IBV_NODE_CA)), "InfiniBand channel adapter");
    assert_eq!(cstr(ibv_node_type_str(-1)), "unknown");
    let ctx = sim_context();
    let mut buf = vec![0u8; 8192];
    // SAFETY: every pointer below is a handle this test got from the library, or a local
    // it owns for the duration of the call.
    unsafe {
        let mut gid = ibv_gid::default();
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        let pd = ibv_alloc_pd(ctx);
        // LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ (the READ below reads it).
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 1 | 2 | 4);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let mut sinit = ibv_srq_init_attr {
            srq_context: 0x5151 as *mut c_void,
            attr: ibv_srq_attr { max_wr: 6, max_sge: 1, srq_limit: 0 },
        };
        let srq = ibv_create_srq(pd, &mut sinit);
        assert!(!srq.is_null());
        assert_eq!((sinit.attr.max_wr, sinit.attr.max_sge), (7, 1), "what the SRQ got");
        assert_eq!((*srq).srq_context, 0x5151 as *mut c_void);
        let mut sa = ibv_srq_attr { max_wr: 100, ..Default::default() };
        assert_eq!(ibv_modify_srq(srq, &mut sa, srq_attr_mask::MAX_WR), EINVAL, "no resizing");

        let mut init = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq,
            cap: ibv_qp_cap { max_send_wr: 8, max_recv_wr: 0, max_send_sge: 1, max_recv_sge: 0, max_inline_data: 0 },
            qp_type: qpt::RC,
            sq_sig_all: 1,
        };
        let qp = ibv_create_qp(pd, &mut init);
        assert!(!qp.is_null());
        assert_eq!((*qp).srq, srq);
        assert_eq!(ibv_destroy_srq(srq), libc::EBUSY, "a QP takes receives from it");
        connect_to_itself(qp, gid);

        // Four receives on the SRQ (through the ops table), the limit armed at 3: the
        // second SEND leaves 2 and raises the limit event.
        let ops = &(*ctx).ops;
        let (lkey, base) = ((*mr).lkey, buf.as_mut_ptr() as u64);
        let mut rsge: Vec<ibv_sge> = (0..4).map(|i| ibv_sge { addr: base + 4096 + 64 * i, length: 64, lkey }).collect();
        let mut rwrs: Vec<ibv_recv_wr> = (0..4)
            .map(|i| ibv_recv_wr { wr_id: 10 + i as u64, next: null_mut(), sg_list: &mut rsge[i], num_sge: 1 })
            .collect();
        for i in 0..3 {
            rwrs[i].next = &mut rwrs[i + 1];
        }
        let mut bad = null_mut();
        assert_eq!(ops.post_srq_recv.unwrap()(srq, rwrs.as_mut_ptr(), &mut bad), 0);
        let mut too_many = ibv_recv_wr { wr_id: 99, next: null_mut(), sg_list: rsge.as_mut_ptr(), num_sge: 2 };
        assert_eq!(ops.post_srq_recv.unwrap()(srq, &mut too_many, &mut bad), EINVAL);
        assert_eq!(bad, &raw mut too_many, "the refused request is named");
        sa.srq_limit = 3;
        assert_eq!(ibv_modify_srq(srq, &mut sa, srq_attr_mask::LIMIT), 0);
        let mut q = ibv_srq_attr::default();
        assert_eq!(ibv_query_srq(srq, &mut q), 0);
        assert_eq!((q.max_wr, q.max_sge, q.srq_limit), (7, 1, 3));

        buf[..4].copy_from_slice(b"srq!");
        let mut ssge = ibv_sge { addr: base, length: 4, lkey };
        let mut swr = send_wr(1, &mut ssge, wr_opcode::SEND, 0, 0, (0, 0));
        let mut sbad = null_mut();
        for _ in 0..2 {
            assert_eq!(ops.post_send.unwrap()(qp, &mut swr, &mut sbad), 0);
        }
        let mut wc = [ibv_wc::default(); 8];
        let mut got = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while got.len() < 4 && std::time::Instant::now() < deadline {
            let n = ops.poll_cq.unwrap()(cq, 8, wc.as_mut_ptr());
            got.extend_from_slice(&wc[..n.max(0) as usize]);
        }
        let recvs: Vec<u64> = got.iter().filter(|w| w.opcode == 128).map(|w| w.wr_id).collect();
        assert_eq!(recvs, [10, 11], "the SRQ's first two receives, in order: {got:?}");
        assert!(got.iter().all(|w| w.status == 0 && w.qp_num == (*qp).qp_num));
        assert_eq!(&buf[4096..4100], b"srq!");

        // The limit event names the SRQ handle; it disarms the limit.
        let mut ev = std::mem::zeroed::<ibv_async_event>();
        assert_eq!(ibv_get_async_event(ctx, &mut ev), 0);
        assert_eq!((ev.event_type, ev.element.srq), (event_type::SRQ_LIMIT_REACHED, srq));
        ibv_ack_async_event(&mut ev);
        assert_eq!((*srq).events_completed, 1);
        assert_eq!(ibv_query_srq(srq, &mut q), 0);
        assert_eq!(q.srq_limit, 0, "the event disarmed the limit");
        // Nothing more: a non-blocking async_fd answers EAGAIN.
        let fd = (*ctx).async_fd;
        if fd >= 0 {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            assert_eq!(libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK), 0);
            assert_eq!(ibv_get_async_event(ctx, &mut ev), -1);
            assert_eq!(*libc::__errno_location(), libc::EAGAIN);
        }

        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_srq(srq), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}

/// A device that dies while a C program waits in `ibv_get_async_event` (blocking, as the
/// async fd is by default) wakes it with `IBV_EVENT_DEVICE_FATAL`, once; the next call
/// fails with EIO instead of waiting forever.
#[test]
fn a_device_that_dies_gives_the_waiting_program_device_fatal() {
    use super::events::*;
    let cfg = umlx_sim::SimConfig::numbered(91);
    let ips = cfg.ips.clone();
    let dev = umlx_sim::SimDevice::new(cfg);
    let ctx = new_context(Context::attach_sim(dev.clone(), "fatal", ips).expect("sim"), &devices()[0]);
    let ctx_addr = ctx as usize;
    let waiter = std::thread::spawn(move || {
        let mut ev = ibv_async_event { element: async_element { port_num: -1 }, event_type: u32::MAX };
        // SAFETY: the context handle stays open until the main thread joins this one.
        let r = unsafe { ibv_get_async_event(ctx_addr as *mut ibv_context, &mut ev) };
        // SAFETY: a device event's element is the port number 0.
        (r, ev.event_type, unsafe { ev.element.port_num })
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    dev.inject_fatal(umlx_hwdesc::enums::HealthSyndrome::HW_FTL_ERR);
    let (r, event_type, port) = waiter.join().unwrap();
    assert_eq!((r, event_type, port), (0, event_type::DEVICE_FATAL, 0));
    // SAFETY: `ctx` is the live context this test opened; `ev` a local.
    unsafe {
        let mut ev = std::mem::zeroed::<ibv_async_event>();
        assert_eq!(ibv_get_async_event(ctx, &mut ev), -1, "no second fatal event");
        assert_eq!(*libc::__errno_location(), libc::EIO);
        assert_eq!(ibv_close_device(ctx), 0);
    }
    assert_eq!(dev.page_accounting().mappings, 0);
}

#[test]
fn a_pulled_cable_gives_port_err_then_port_active() {
    use super::events::*;
    let fabric = umlx_sim::fabric::Fabric::perfect();
    let cfg = umlx_sim::SimConfig::numbered(93);
    let ips = cfg.ips.clone();
    let dev = umlx_sim::SimDevice::new(cfg);
    fabric.attach(&dev.port());
    let ctx = new_context(Context::attach_sim(dev.clone(), "cable", ips).expect("sim"), &devices()[0]);
    let next = |ctx: *mut ibv_context| {
        let mut ev = ibv_async_event { element: async_element { port_num: -1 }, event_type: u32::MAX };
        // SAFETY: `ctx` is the live context this test opened; `ev` a local; a port event's
        // element is its port number.
        unsafe {
            assert_eq!(ibv_get_async_event(ctx, &mut ev), 0);
            let got = (ev.event_type, ev.element.port_num);
            ibv_ack_async_event(&mut ev);
            got
        }
    };
    let port = |ctx: *mut ibv_context| {
        let mut attr = ibv_port_attr::default();
        // SAFETY: `ctx` is the live context this test opened; `attr` a local.
        assert_eq!(unsafe { ibv_query_port(ctx, 1, &mut attr) }, 0);
        (attr.state, attr.phys_state)
    };
    use umlx_hwdesc::enums::PortPhysicalState;
    let active = (umlx_verbs::PortState::Active as u32, PortPhysicalState::LINK_UP.0);
    assert_eq!(port(ctx), active);
    dev.port().disconnect();
    assert_eq!(next(ctx), (event_type::PORT_ERR, 1));
    assert_eq!(port(ctx), (umlx_verbs::PortState::Down as u32, PortPhysicalState::POLLING.0));
    fabric.attach(&dev.port());
    assert_eq!(next(ctx), (event_type::PORT_ACTIVE, 1));
    assert_eq!(port(ctx), active);
    // SAFETY: as above.
    unsafe { assert_eq!(ibv_close_device(ctx), 0) };
}

#[test]
fn the_new_post_send_api_writes_through_an_extended_qp() {
    let ctx = sim_context();
    let mut buf = vec![0u8; 8192];
    // SAFETY: every pointer below is a handle this test got from the library, or a local
    // it owns for the duration of the call.
    unsafe {
        let mut gid = ibv_gid::default();
        assert_eq!(ibv_query_gid(ctx, 1, 1, &mut gid), 0);
        let mut entry = ibv_gid_entry::default();
        assert_eq!(super::compat::_ibv_query_gid_ex(ctx, 1, 1, &mut entry, 0, 32), 0);
        assert_eq!((entry.gid, entry.gid_type), (gid, gid_type::ROCE_V2));
        let pd = ibv_alloc_pd(ctx);
        let mr = ibv_reg_mr(pd, buf.as_mut_ptr().cast(), buf.len(), 0xf);
        let cq = ibv_create_cq(ctx, 16, null_mut(), null_mut(), 0);
        let vctx = ctx.cast::<u8>().sub(std::mem::offset_of!(verbs_context, context)).cast::<verbs_context>();
        let create = (*vctx).create_qp_ex.expect("create_qp_ex");
        let mut a = ibv_qp_init_attr_ex {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap: ibv_qp_cap { max_send_wr: 8, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
            qp_type: qpt::RC,
            sq_sig_all: 0,
            comp_mask: qp_init_attr_mask::PD | qp_init_attr_mask::SEND_OPS_FLAGS,
            pd,
            xrcd: null_mut(),
            create_flags: 0,
            max_tso_header: 0,
            rwq_ind_tbl: null_mut(),
            rx_hash_conf: ibv_rx_hash_conf {
                rx_hash_function: 0,
                rx_hash_key_len: 0,
                rx_hash_key: null_mut(),
                rx_hash_fields_mask: 0,
            },
            source_qpn: 0,
            send_ops_flags: 1 << 8,
        };
        assert!(create(ctx, &mut a).is_null(), "memory-window binds are not offered");
        assert_eq!(*libc::__errno_location(), EOPNOTSUPP);
        a.send_ops_flags = send_ops::RDMA_WRITE;
        let qp = create(ctx, &mut a);
        assert!(!qp.is_null());
        connect_to_itself(qp, gid);
        let x = ibv_qp_to_qp_ex(qp);
        assert_eq!(x.cast::<ibv_qp>(), qp);
        assert!((*x).wr_send.is_none(), "only the operations asked for");

        buf[..6].copy_from_slice(b"wr api");
        let (lkey, rkey, base) = ((*mr).lkey, (*mr).rkey, buf.as_mut_ptr() as u64);
        (*x).wr_start.unwrap()(x);
        (*x).wr_id = 77;
        (*x).wr_flags = send_flags::SIGNALED;
        (*x).wr_rdma_write.unwrap()(x, rkey, base + 4096);
        (*x).wr_set_sge.unwrap()(x, lkey, base, 6);
        assert_eq!((*x).wr_complete.unwrap()(x), 0);
        let mut wc = [ibv_wc::default(); 2];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut n = 0;
        while n == 0 && std::time::Instant::now() < deadline {
            n = (*ctx).ops.poll_cq.unwrap()(cq, 2, wc.as_mut_ptr());
        }
        assert_eq!((n, wc[0].wr_id, wc[0].status, wc[0].opcode), (1, 77, 0, 1), "an RDMA WRITE completion");
        assert_eq!(&buf[4096..4102], b"wr api", "landed in remote memory");

        // Completions within `wait`, polling all along (the sim runs in this thread: a
        // doorbell executes its WQEs before the write returns).
        let poll_for = |wait: std::time::Duration| {
            let mut got = Vec::new();
            let until = std::time::Instant::now() + wait;
            while std::time::Instant::now() < until {
                let mut wc = [ibv_wc::default(); 4];
                let n = (*ctx).ops.poll_cq.unwrap()(cq, 4, wc.as_mut_ptr());
                assert!(n >= 0);
                got.extend(wc[..n as usize].iter().map(|w| (w.wr_id, w.status)));
            }
            got
        };
        let write = |wr_id: u64, to: u64| {
            (*x).wr_id = wr_id;
            (*x).wr_flags = send_flags::SIGNALED;
            (*x).wr_rdma_write.unwrap()(x, rkey, base + to);
            (*x).wr_set_sge.unwrap()(x, lkey, base, 6);
        };
        let short = std::time::Duration::from_millis(50);

        // A batch reaches the device only at wr_complete, all of it at once.
        (*x).wr_start.unwrap()(x);
        write(80, 5000);
        write(81, 5100);
        assert_eq!(poll_for(short), vec![], "nothing executes before wr_complete");
        assert_eq!(&buf[5000..5006], &[0; 6]);
        assert_eq!((*x).wr_complete.unwrap()(x), 0);
        assert_eq!(poll_for(short), vec![(80, 0), (81, 0)]);
        assert_eq!((&buf[5000..5006], &buf[5100..5106]), (&b"wr api"[..], &b"wr api"[..]));

        // wr_abort drops the whole batch: its WRITE never executes, and the next batch's
        // request takes its place in the ring.
        (*x).wr_start.unwrap()(x);
        write(90, 6000);
        (*x).wr_abort.unwrap()(x);
        (*x).wr_start.unwrap()(x);
        write(91, 6100);
        assert_eq!((*x).wr_complete.unwrap()(x), 0);
        assert_eq!(poll_for(short), vec![(91, 0)], "only the request after the abort");
        assert_eq!((&buf[6000..6006], &buf[6100..6106]), (&[0u8; 6][..], &b"wr api"[..]));

        // A request that never gets its data fails the batch, and the batch is dropped.
        (*x).wr_start.unwrap()(x);
        write(92, 6200);
        (*x).wr_rdma_write.unwrap()(x, rkey, base + 4096);
        assert_eq!((*x).wr_complete.unwrap()(x), EINVAL);
        assert_eq!(poll_for(short), vec![], "the failed batch's good request is dropped too");
        assert_eq!(&buf[6200..6206], &[0; 6]);

        let mut plain = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap: ibv_qp_cap { max_send_wr: 1, max_recv_wr: 1, max_send_sge: 1, max_recv_sge: 1, max_inline_data: 0 },
            qp_type: qpt::RC,
            sq_sig_all: 0,
        };
        let q2 = ibv_create_qp(pd, &mut plain);
        assert!(ibv_qp_to_qp_ex(q2).is_null(), "a QP from ibv_create_qp has no ibv_qp_ex");
        assert_eq!(ibv_destroy_qp(q2), 0);
        assert_eq!(ibv_destroy_qp(qp), 0);
        assert_eq!(ibv_destroy_cq(cq), 0);
        assert_eq!(ibv_dereg_mr(mr), 0);
        assert_eq!(ibv_dealloc_pd(pd), 0);
        assert_eq!(ibv_close_device(ctx), 0);
    }
}
