//! The rest of libibverbs' exported API that perftest and `librdmacm.so.1` link: address
//! handles from a received datagram, the extended GID query, ECE, multicast, the kernel-ABI
//! copy helpers and the sysfs path.

use super::objects::ibv_create_ah;
use super::*;
use umlx_verbs::Gid;

/// The RoCEv2 GID of an IPv4 address (`::ffff:a.b.c.d`).
fn ipv4_gid(ip: [u8; 4]) -> ibv_gid {
    ibv_gid { raw: Gid::from_ip(std::net::Ipv4Addr::from(ip).into()).0 }
}

/// The index of `gid` in the port's GID table.
fn gid_index(u: &UContext, gid: &ibv_gid) -> Option<u8> {
    u.ctx.gids().iter().find(|(_, g)| g.0 == gid.raw).and_then(|(i, _)| u8::try_from(*i).ok())
}

/// `ibv_init_ah_from_wc`: the address that answers the sender of a UD receive. With RoCEv2 over
/// IPv4 the 40 bytes in front of the data hold the IPv4 header in their last 20; over IPv6, the
/// IPv6 header (the GRH's layout).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    ctx: *mut ibv_context,
    port: u8,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    ah_attr: *mut ibv_ah_attr,
) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return -1 };
    if wc.is_null() || ah_attr.is_null() {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: `wc` points to a `struct ibv_wc` (checked non-NULL).
    let w = unsafe { *wc };
    let mut a =
        ibv_ah_attr { dlid: w.slid, sl: w.sl, src_path_bits: w.dlid_path_bits, port_num: port, ..Default::default() };
    if w.wc_flags & IBV_WC_GRH != 0 {
        if grh.is_null() {
            set_errno(EINVAL);
            return -1;
        }
        // SAFETY: the 40 bytes of the GRH area the program received (checked non-NULL).
        let bytes: [u8; 40] = unsafe { grh.cast::<[u8; 40]>().read_unaligned() };
        let ip4 = &bytes[20..];
        let (sgid, dgid, tclass, flow) = if ip4[0] == 0x45 {
            // IPv4 header (version 4, 5 words): source address at 12, destination at 16.
            let src = ipv4_gid([ip4[12], ip4[13], ip4[14], ip4[15]]);
            let dst = ipv4_gid([ip4[16], ip4[17], ip4[18], ip4[19]]);
            (dst, src, ip4[1], 0)
        } else if bytes[0] >> 4 == 6 {
            // SAFETY: as above, read as the GRH.
            let g = unsafe { grh.read_unaligned() };
            let vtf = u32::from_be(g.version_tclass_flow);
            (g.dgid, g.sgid, (vtf >> 20) as u8, vtf & 0xf_ffff)
        } else {
            return refuse_errno(
                "ibv_init_ah_from_wc",
                EINVAL,
                "the GRH area holds neither an IPv4 nor an IPv6 header",
            );
        };
        let Some(sgid_index) = gid_index(u, &sgid) else {
            return refuse_errno("ibv_init_ah_from_wc", EINVAL, "the datagram's destination is not in the GID table");
        };
        a.is_global = 1;
        a.grh = ibv_global_route { dgid, flow_label: flow, sgid_index, hop_limit: 0xff, traffic_class: tclass };
    }
    // SAFETY: `ah_attr` is writable (checked non-NULL).
    unsafe { ah_attr.write(a) };
    0
}

/// Sets errno after `refuse` and answers -1 (the calls that return -1 with errno).
fn refuse_errno(call: &str, errno: c_int, why: &str) -> c_int {
    set_errno(refuse(call, errno, why));
    -1
}

/// `ibv_create_ah_from_wc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut ibv_pd,
    wc: *mut ibv_wc,
    grh: *mut ibv_grh,
    port: u8,
) -> *mut ibv_ah {
    if pd.is_null() {
        return fail(EINVAL);
    }
    let mut a = ibv_ah_attr::default();
    // SAFETY: `pd` is the caller's PD handle (non-NULL); its context field is read; the rest
    // is checked by `ibv_init_ah_from_wc` and `ibv_create_ah`.
    unsafe {
        if ibv_init_ah_from_wc((*pd).context, port, wc, grh, &mut a) != 0 {
            return null_mut();
        }
        ibv_create_ah(pd, &mut a)
    }
}

/// `_ibv_query_gid_ex` (`ibv_query_gid_ex`): a GID table entry with its type.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    ctx: *mut ibv_context,
    port: u32,
    index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: size_t,
) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return EINVAL };
    if entry.is_null() || flags != 0 || entry_size < std::mem::size_of::<ibv_gid_entry>() || port != 1 {
        return EINVAL;
    }
    // rdma-core answers ENODATA for an empty entry.
    let Some((_, g)) = u.ctx.gids().into_iter().find(|(i, g)| *i == index && g.0 != [0; 16]) else {
        return libc::ENODATA;
    };
    // SAFETY: `entry` holds at least a `struct ibv_gid_entry` (checked).
    unsafe {
        entry.write(ibv_gid_entry {
            gid: ibv_gid { raw: g.0 },
            gid_index: index,
            port_num: port,
            gid_type: gid_type::ROCE_V2,
            ndev_ifindex: 0,
        })
    };
    0
}

/// `ibv_query_ece`: umlx negotiates no ECE options (EOPNOTSUPP, as rdma-core for a provider
/// without ECE).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    unsupported("ibv_query_ece", "enhanced connection establishment (ECE)")
}

/// `ibv_set_ece`: see [`ibv_query_ece`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_set_ece(_qp: *mut ibv_qp, _ece: *mut ibv_ece) -> c_int {
    unsupported("ibv_set_ece", "enhanced connection establishment (ECE)")
}

/// `ibv_attach_mcast`: UD multicast is not implemented (EOPNOTSUPP).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_attach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    unsupported("ibv_attach_mcast", "multicast")
}

/// `ibv_detach_mcast`: see [`ibv_attach_mcast`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_detach_mcast(_qp: *mut ibv_qp, _gid: *const ibv_gid, _lid: u16) -> c_int {
    unsupported("ibv_detach_mcast", "multicast")
}

/// The kernel's `struct ib_uverbs_ah_attr` as `struct ibv_ah_attr`.
fn ah_attr_from_kern(s: &ib_uverbs_ah_attr) -> ibv_ah_attr {
    ibv_ah_attr {
        grh: ibv_global_route {
            dgid: ibv_gid { raw: s.grh.dgid },
            flow_label: s.grh.flow_label,
            sgid_index: s.grh.sgid_index,
            hop_limit: s.grh.hop_limit,
            traffic_class: s.grh.traffic_class,
        },
        dlid: s.dlid,
        sl: s.sl,
        src_path_bits: s.src_path_bits,
        static_rate: s.static_rate,
        is_global: s.is_global,
        port_num: s.port_num,
    }
}

/// `ibv_copy_ah_attr_from_kern`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *const ib_uverbs_ah_attr) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: both point to their structures (checked non-NULL).
    unsafe { dst.write(ah_attr_from_kern(&*src)) };
}

/// `ibv_copy_qp_attr_from_kern`: every field but `qp_state` (as rdma-core).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *const ib_uverbs_qp_attr) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: both point to their structures (checked non-NULL).
    let (d, s) = unsafe { (&mut *dst, &*src) };
    d.cur_qp_state = s.cur_qp_state;
    d.path_mtu = s.path_mtu;
    d.path_mig_state = s.path_mig_state;
    d.qkey = s.qkey;
    d.rq_psn = s.rq_psn;
    d.sq_psn = s.sq_psn;
    d.dest_qp_num = s.dest_qp_num;
    d.qp_access_flags = s.qp_access_flags;
    d.cap = ibv_qp_cap {
        max_send_wr: s.max_send_wr,
        max_recv_wr: s.max_recv_wr,
        max_send_sge: s.max_send_sge,
        max_recv_sge: s.max_recv_sge,
        max_inline_data: s.max_inline_data,
    };
    d.ah_attr = ah_attr_from_kern(&s.ah_attr);
    d.alt_ah_attr = ah_attr_from_kern(&s.alt_ah_attr);
    d.pkey_index = s.pkey_index;
    d.alt_pkey_index = s.alt_pkey_index;
    d.en_sqd_async_notify = s.en_sqd_async_notify;
    d.sq_draining = s.sq_draining;
    d.max_rd_atomic = s.max_rd_atomic;
    d.max_dest_rd_atomic = s.max_dest_rd_atomic;
    d.min_rnr_timer = s.min_rnr_timer;
    d.port_num = s.port_num;
    d.timeout = s.timeout;
    d.retry_cnt = s.retry_cnt;
    d.rnr_retry = s.rnr_retry;
    d.alt_port_num = s.alt_port_num;
    d.alt_timeout = s.alt_timeout;
}

/// `ibv_copy_path_rec_from_kern`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *const ib_user_path_rec) {
    if dst.is_null() || src.is_null() {
        return;
    }
    // SAFETY: both point to their structures (checked non-NULL).
    let s = unsafe { &*src };
    let d = ibv_sa_path_rec {
        dgid: ibv_gid { raw: s.dgid },
        sgid: ibv_gid { raw: s.sgid },
        dlid: s.dlid,
        slid: s.slid,
        raw_traffic: s.raw_traffic as c_int,
        flow_label: s.flow_label,
        hop_limit: s.hop_limit,
        traffic_class: s.traffic_class,
        reversible: s.reversible as c_int,
        numb_path: s.numb_path,
        pkey: s.pkey,
        sl: s.sl,
        mtu_selector: s.mtu_selector,
        mtu: s.mtu as u8,
        rate_selector: s.rate_selector,
        rate: s.rate,
        packet_life_time_selector: s.packet_life_time_selector,
        packet_life_time: s.packet_life_time,
        preference: s.preference,
    };
    // SAFETY: as above.
    unsafe { dst.write(d) };
}

/// `ibv_get_sysfs_path`: where sysfs is mounted (`SYSFS_PATH` overrides, as in rdma-core).
/// umlx's devices have no entries there; the path is what programs build other paths from.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    PATH.get_or_init(|| {
        let p = std::env::var("SYSFS_PATH").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| "/sys".into());
        CString::new(p.trim_end_matches('/')).unwrap_or_else(|_| c"/sys".into())
    })
    .as_ptr()
}
