//! The C side of `<infiniband/verbs.h>` (rdma-core 44 to 65, LP64 Linux), declared once.
//!
//! Our own declarations of the public ABI: field names as in the header, so that a reader can
//! hold this file next to it. Sizes and offsets are checked at compile time against the values
//! the header gives (see the asserts at the end: a layout typed twice is two copies of one
//! guess, so every one of them is pinned). Only the structures the library reads or writes are
//! declared; the others are opaque.
//!
//! Two simplifications that keep the layout: the `imm_data` / `invalidate_rkey` unions of
//! `ibv_send_wr` and `ibv_wc` are one `u32` (both members are 32-bit), and function-pointer
//! slots this library never calls (`_compat_*`, the placeholders) are untyped `Option<fn()>`.

#![allow(non_camel_case_types)]

use libc::{c_char, c_int, c_uint, c_void, pthread_cond_t, pthread_mutex_t, size_t};

/// A function-pointer slot whose signature this library never needs.
pub type AnyFn = Option<unsafe extern "C" fn()>;

// ---------------------------------------------------------------------------------------------
// Enumerations and flags (the values the library uses).
// ---------------------------------------------------------------------------------------------

/// `IBV_NODE_CA` (`enum ibv_node_type`).
pub const IBV_NODE_CA: c_int = 1;
/// `IBV_TRANSPORT_IB` (`enum ibv_transport_type`).
pub const IBV_TRANSPORT_IB: c_int = 0;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_ATOMIC_NONE`, `IBV_ATOMIC_HCA` (`enum ibv_atomic_cap`).
pub const IBV_ATOMIC_NONE: c_uint = 0;
/// `IBV_ATOMIC_HCA`.
pub const IBV_ATOMIC_HCA: c_uint = 1;

/// `enum ibv_device_cap_flags` bits the devices report.
pub mod device_cap {
    /// `IBV_DEVICE_PORT_ACTIVE_EVENT`.
    pub const PORT_ACTIVE_EVENT: u32 = 1 << 10;
    /// `IBV_DEVICE_SYS_IMAGE_GUID`.
    pub const SYS_IMAGE_GUID: u32 = 1 << 11;
    /// `IBV_DEVICE_RC_RNR_NAK_GEN`.
    pub const RC_RNR_NAK_GEN: u32 = 1 << 12;
}

/// `enum ibv_qp_type`.
pub mod qpt {
    /// `IBV_QPT_RC`.
    pub const RC: u32 = 2;
    /// `IBV_QPT_UC`.
    pub const UC: u32 = 3;
    /// `IBV_QPT_UD`.
    pub const UD: u32 = 4;
    /// `IBV_QPT_RAW_PACKET`.
    pub const RAW_PACKET: u32 = 8;
    /// `IBV_QPT_XRC_SEND`.
    pub const XRC_SEND: u32 = 9;
    /// `IBV_QPT_XRC_RECV`.
    pub const XRC_RECV: u32 = 10;
    /// `IBV_QPT_DRIVER`.
    pub const DRIVER: u32 = 0xff;
}

/// `enum ibv_wr_opcode`.
pub mod wr_opcode {
    /// `IBV_WR_RDMA_WRITE`.
    pub const RDMA_WRITE: u32 = 0;
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// `IBV_WR_SEND`.
    pub const SEND: u32 = 2;
    /// `IBV_WR_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u32 = 3;
    /// `IBV_WR_RDMA_READ`.
    pub const RDMA_READ: u32 = 4;
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// `IBV_WR_LOCAL_INV`.
    pub const LOCAL_INV: u32 = 7;
    /// `IBV_WR_BIND_MW`.
    pub const BIND_MW: u32 = 8;
    /// `IBV_WR_SEND_WITH_INV`.
    pub const SEND_WITH_INV: u32 = 9;
    /// `IBV_WR_TSO`.
    pub const TSO: u32 = 10;
    /// `IBV_WR_DRIVER1`.
    pub const DRIVER1: u32 = 11;
    /// `IBV_WR_ATOMIC_WRITE`.
    pub const ATOMIC_WRITE: u32 = 15;
}

/// `enum ibv_send_flags`.
pub mod send_flags {
    /// `IBV_SEND_FENCE`.
    pub const FENCE: u32 = 1 << 0;
    /// `IBV_SEND_SIGNALED`.
    pub const SIGNALED: u32 = 1 << 1;
    /// `IBV_SEND_SOLICITED`.
    pub const SOLICITED: u32 = 1 << 2;
    /// `IBV_SEND_INLINE`.
    pub const INLINE: u32 = 1 << 3;
    /// `IBV_SEND_IP_CSUM`.
    pub const IP_CSUM: u32 = 1 << 4;
}

/// `enum ibv_access_flags` (and the optional range of `<infiniband/verbs_api.h>`).
pub mod access {
    /// `IBV_ACCESS_LOCAL_WRITE`, `REMOTE_WRITE`, `REMOTE_READ`, `REMOTE_ATOMIC`: what umlx does.
    pub const BASIC: u32 = 0xf;
    /// `IBV_ACCESS_MW_BIND`.
    pub const MW_BIND: u32 = 1 << 4;
    /// `IBV_ACCESS_ZERO_BASED`.
    pub const ZERO_BASED: u32 = 1 << 5;
    /// `IBV_ACCESS_ON_DEMAND`.
    pub const ON_DEMAND: u32 = 1 << 6;
    /// `IBV_ACCESS_HUGETLB` (a hint).
    pub const HUGETLB: u32 = 1 << 7;
    /// `IBV_ACCESS_FLUSH_GLOBAL`, `IBV_ACCESS_FLUSH_PERSISTENT`.
    pub const FLUSH: u32 = (1 << 8) | (1 << 9);
    /// `IBV_ACCESS_OPTIONAL_RANGE`: bits 20 to 29, which a provider may ignore.
    pub const OPTIONAL_RANGE: u32 = ((1 << 29) << 1) - (1 << 20);
}

/// `enum ibv_qp_attr_mask` bits the library looks at itself.
pub mod qp_attr_mask {
    use libc::c_int;
    /// `IBV_QP_CAP`.
    pub const CAP: c_int = 1 << 19;
    /// Every bit `ibv_modify_qp` knows (`IBV_QP_STATE` .. `IBV_QP_DEST_QPN`).
    pub const KNOWN: c_int = (1 << 21) - 1;
    /// `IBV_QP_RATE_LIMIT`.
    pub const RATE_LIMIT: c_int = 1 << 25;
}

/// `enum ibv_gid_type_sysfs` (`<infiniband/driver.h>`, the private `ibv_query_gid_type`).
pub mod gid_type_sysfs {
    /// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1`.
    pub const IB_ROCE_V1: u32 = 0;
    /// `IBV_GID_TYPE_SYSFS_ROCE_V2`.
    pub const ROCE_V2: u32 = 1;
}

/// `enum ibv_gid_type` (`struct ibv_gid_entry`).
pub mod gid_type {
    /// `IBV_GID_TYPE_IB`.
    pub const IB: u32 = 0;
    /// `IBV_GID_TYPE_ROCE_V1`.
    pub const ROCE_V1: u32 = 1;
    /// `IBV_GID_TYPE_ROCE_V2`.
    pub const ROCE_V2: u32 = 2;
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value that says a `verbs_context` precedes the
/// `ibv_context`.
pub const VERBS_ABI_IS_EXTENDED: usize = usize::MAX;

// ---------------------------------------------------------------------------------------------
// Structures.
// ---------------------------------------------------------------------------------------------

/// `union ibv_gid`: 16 bytes in network order, aligned as its `global` member (two `__be64`).
#[repr(C, align(8))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ibv_gid {
    /// `raw`.
    pub raw: [u8; 16],
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_gid_entry {
    /// `gid`.
    pub gid: ibv_gid,
    /// `gid_index`.
    pub gid_index: u32,
    /// `port_num`.
    pub port_num: u32,
    /// `gid_type` (`enum ibv_gid_type`).
    pub gid_type: u32,
    /// `ndev_ifindex`.
    pub ndev_ifindex: u32,
}

/// `struct _ibv_device_ops` (obsolete, never used).
#[repr(C)]
#[derive(Debug)]
pub struct _ibv_device_ops {
    /// `_dummy1`.
    pub _dummy1: AnyFn,
    /// `_dummy2`.
    pub _dummy2: AnyFn,
}

/// `IBV_SYSFS_NAME_MAX`.
pub const IBV_SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const IBV_SYSFS_PATH_MAX: usize = 256;

/// `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_device {
    /// `_ops`.
    pub _ops: _ibv_device_ops,
    /// `node_type` (`enum ibv_node_type`).
    pub node_type: c_int,
    /// `transport_type` (`enum ibv_transport_type`).
    pub transport_type: c_int,
    /// `name`: the device name programs match `-d` against.
    pub name: [c_char; IBV_SYSFS_NAME_MAX],
    /// `dev_name`.
    pub dev_name: [c_char; IBV_SYSFS_NAME_MAX],
    /// `dev_path`.
    pub dev_path: [c_char; IBV_SYSFS_PATH_MAX],
    /// `ibdev_path`.
    pub ibdev_path: [c_char; IBV_SYSFS_PATH_MAX],
}

/// `ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `ops.req_notify_cq`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `ops.post_send`.
pub type PostSendFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `ops.post_recv`.
pub type PostRecvFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `verbs_context.create_qp_ex`.
pub type CreateQpExFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;
/// `ops.post_srq_recv`.
pub type PostSrqRecvFn = unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `verbs_context.query_port`.
pub type QueryPortFn = unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr, size_t) -> c_int;
/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn =
    unsafe extern "C" fn(*mut ibv_context, *const ibv_query_device_ex_input, *mut ibv_device_attr_ex, size_t) -> c_int;

/// `struct ibv_context_ops`: the table the header's inline verbs call through.
#[repr(C)]
#[derive(Debug, Default)]
pub struct ibv_context_ops {
    /// `_compat_query_device`.
    pub _compat_query_device: AnyFn,
    /// `_compat_query_port`.
    pub _compat_query_port: AnyFn,
    /// `_compat_alloc_pd`.
    pub _compat_alloc_pd: AnyFn,
    /// `_compat_dealloc_pd`.
    pub _compat_dealloc_pd: AnyFn,
    /// `_compat_reg_mr`.
    pub _compat_reg_mr: AnyFn,
    /// `_compat_rereg_mr`.
    pub _compat_rereg_mr: AnyFn,
    /// `_compat_dereg_mr`.
    pub _compat_dereg_mr: AnyFn,
    /// `alloc_mw` (NULL: the inline `ibv_alloc_mw` answers EOPNOTSUPP).
    pub alloc_mw: AnyFn,
    /// `bind_mw`.
    pub bind_mw: AnyFn,
    /// `dealloc_mw`.
    pub dealloc_mw: AnyFn,
    /// `_compat_create_cq`.
    pub _compat_create_cq: AnyFn,
    /// `poll_cq`.
    pub poll_cq: Option<PollCqFn>,
    /// `req_notify_cq`.
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    /// `_compat_cq_event`.
    pub _compat_cq_event: AnyFn,
    /// `_compat_resize_cq`.
    pub _compat_resize_cq: AnyFn,
    /// `_compat_destroy_cq`.
    pub _compat_destroy_cq: AnyFn,
    /// `_compat_create_srq`.
    pub _compat_create_srq: AnyFn,
    /// `_compat_modify_srq`.
    pub _compat_modify_srq: AnyFn,
    /// `_compat_query_srq`.
    pub _compat_query_srq: AnyFn,
    /// `_compat_destroy_srq`.
    pub _compat_destroy_srq: AnyFn,
    /// `post_srq_recv`.
    pub post_srq_recv: Option<PostSrqRecvFn>,
    /// `_compat_create_qp`.
    pub _compat_create_qp: AnyFn,
    /// `_compat_query_qp`.
    pub _compat_query_qp: AnyFn,
    /// `_compat_modify_qp`.
    pub _compat_modify_qp: AnyFn,
    /// `_compat_destroy_qp`.
    pub _compat_destroy_qp: AnyFn,
    /// `post_send`.
    pub post_send: Option<PostSendFn>,
    /// `post_recv`.
    pub post_recv: Option<PostRecvFn>,
    /// `_compat_create_ah`.
    pub _compat_create_ah: AnyFn,
    /// `_compat_destroy_ah`.
    pub _compat_destroy_ah: AnyFn,
    /// `_compat_attach_mcast`.
    pub _compat_attach_mcast: AnyFn,
    /// `_compat_detach_mcast`.
    pub _compat_detach_mcast: AnyFn,
    /// `_compat_async_event`.
    pub _compat_async_event: AnyFn,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    /// `device`.
    pub device: *mut ibv_device,
    /// `ops`.
    pub ops: ibv_context_ops,
    /// `cmd_fd` (-1: no kernel command channel).
    pub cmd_fd: c_int,
    /// `async_fd`.
    pub async_fd: c_int,
    /// `num_comp_vectors`.
    pub num_comp_vectors: c_int,
    /// `mutex`.
    pub mutex: pthread_mutex_t,
    /// `abi_compat` ([`VERBS_ABI_IS_EXTENDED`]).
    pub abi_compat: *mut c_void,
}

/// `struct verbs_context`: the extended operations, which precede the `ibv_context` in memory
/// (the header finds them by `container_of` when `abi_compat` says so, and checks `sz` before
/// using an entry). Entries this library leaves NULL make the header's inlines answer
/// EOPNOTSUPP (or fall back to the legacy call).
#[repr(C)]
pub struct verbs_context {
    /// `query_port`.
    pub query_port: Option<QueryPortFn>,
    /// `advise_mr`.
    pub advise_mr: AnyFn,
    /// `alloc_null_mr`.
    pub alloc_null_mr: AnyFn,
    /// `read_counters`.
    pub read_counters: AnyFn,
    /// `attach_counters_point_flow`.
    pub attach_counters_point_flow: AnyFn,
    /// `create_counters`.
    pub create_counters: AnyFn,
    /// `destroy_counters`.
    pub destroy_counters: AnyFn,
    /// `reg_dm_mr`.
    pub reg_dm_mr: AnyFn,
    /// `alloc_dm`.
    pub alloc_dm: AnyFn,
    /// `free_dm`.
    pub free_dm: AnyFn,
    /// `modify_flow_action_esp`.
    pub modify_flow_action_esp: AnyFn,
    /// `destroy_flow_action`.
    pub destroy_flow_action: AnyFn,
    /// `create_flow_action_esp`.
    pub create_flow_action_esp: AnyFn,
    /// `modify_qp_rate_limit`.
    pub modify_qp_rate_limit: AnyFn,
    /// `alloc_parent_domain`.
    pub alloc_parent_domain: AnyFn,
    /// `dealloc_td`.
    pub dealloc_td: AnyFn,
    /// `alloc_td`.
    pub alloc_td: AnyFn,
    /// `modify_cq`.
    pub modify_cq: AnyFn,
    /// `post_srq_ops`.
    pub post_srq_ops: AnyFn,
    /// `destroy_rwq_ind_table`.
    pub destroy_rwq_ind_table: AnyFn,
    /// `create_rwq_ind_table`.
    pub create_rwq_ind_table: AnyFn,
    /// `destroy_wq`.
    pub destroy_wq: AnyFn,
    /// `modify_wq`.
    pub modify_wq: AnyFn,
    /// `create_wq`.
    pub create_wq: AnyFn,
    /// `query_rt_values`.
    pub query_rt_values: AnyFn,
    /// `create_cq_ex`.
    pub create_cq_ex: AnyFn,
    /// `priv`.
    pub priv_: *mut c_void,
    /// `query_device_ex`.
    pub query_device_ex: Option<QueryDeviceExFn>,
    /// `ibv_destroy_flow`.
    pub ibv_destroy_flow: AnyFn,
    /// `ABI_placeholder2`.
    pub abi_placeholder2: AnyFn,
    /// `ibv_create_flow`.
    pub ibv_create_flow: AnyFn,
    /// `ABI_placeholder1`.
    pub abi_placeholder1: AnyFn,
    /// `open_qp`.
    pub open_qp: AnyFn,
    /// `create_qp_ex`.
    pub create_qp_ex: Option<CreateQpExFn>,
    /// `get_srq_num`.
    pub get_srq_num: AnyFn,
    /// `create_srq_ex`.
    pub create_srq_ex: AnyFn,
    /// `open_xrcd`.
    pub open_xrcd: AnyFn,
    /// `close_xrcd`.
    pub close_xrcd: AnyFn,
    /// `_ABI_placeholder3`.
    pub abi_placeholder3: u64,
    /// `sz`: the size of this structure up to and including `context`.
    pub sz: size_t,
    /// `context`: what programs hold.
    pub context: ibv_context,
}

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_pd {
    /// `context`.
    pub context: *mut ibv_context,
    /// `handle`.
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_mr {
    /// `context`.
    pub context: *mut ibv_context,
    /// `pd`.
    pub pd: *mut ibv_pd,
    /// `addr`.
    pub addr: *mut c_void,
    /// `length`.
    pub length: size_t,
    /// `handle`.
    pub handle: u32,
    /// `lkey`.
    pub lkey: u32,
    /// `rkey`.
    pub rkey: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_comp_channel {
    /// `context`.
    pub context: *mut ibv_context,
    /// `fd`: readable when an event is pending.
    pub fd: c_int,
    /// `refcnt`: CQs bound to the channel.
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    /// `context`.
    pub context: *mut ibv_context,
    /// `channel`.
    pub channel: *mut ibv_comp_channel,
    /// `cq_context`.
    pub cq_context: *mut c_void,
    /// `handle`.
    pub handle: u32,
    /// `cqe`.
    pub cqe: c_int,
    /// `mutex`.
    pub mutex: pthread_mutex_t,
    /// `cond`.
    pub cond: pthread_cond_t,
    /// `comp_events_completed`.
    pub comp_events_completed: u32,
    /// `async_events_completed`.
    pub async_events_completed: u32,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct ibv_srq {
    /// `context`.
    pub context: *mut ibv_context,
    /// `srq_context`.
    pub srq_context: *mut c_void,
    /// `pd`.
    pub pd: *mut ibv_pd,
    /// `handle`.
    pub handle: u32,
    /// `mutex`.
    pub mutex: pthread_mutex_t,
    /// `cond`.
    pub cond: pthread_cond_t,
    /// `events_completed`.
    pub events_completed: u32,
}

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_srq_attr {
    /// `max_wr`.
    pub max_wr: u32,
    /// `max_sge`.
    pub max_sge: u32,
    /// `srq_limit`.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_srq_init_attr {
    /// `srq_context`.
    pub srq_context: *mut c_void,
    /// `attr`.
    pub attr: ibv_srq_attr,
}

/// `enum ibv_srq_attr_mask`.
pub mod srq_attr_mask {
    /// `IBV_SRQ_MAX_WR` (resizing).
    pub const MAX_WR: i32 = 1 << 0;
    /// `IBV_SRQ_LIMIT`.
    pub const LIMIT: i32 = 1 << 1;
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    /// `context`.
    pub context: *mut ibv_context,
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `pd`.
    pub pd: *mut ibv_pd,
    /// `send_cq`.
    pub send_cq: *mut ibv_cq,
    /// `recv_cq`.
    pub recv_cq: *mut ibv_cq,
    /// `srq`.
    pub srq: *mut ibv_srq,
    /// `handle`.
    pub handle: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `state` (`enum ibv_qp_state`).
    pub state: u32,
    /// `qp_type` (`enum ibv_qp_type`).
    pub qp_type: u32,
    /// `mutex`.
    pub mutex: pthread_mutex_t,
    /// `cond`.
    pub cond: pthread_cond_t,
    /// `events_completed`.
    pub events_completed: u32,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_ah {
    /// `context`.
    pub context: *mut ibv_context,
    /// `pd`.
    pub pd: *mut ibv_pd,
    /// `handle`.
    pub handle: u32,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_wc {
    /// `wr_id`.
    pub wr_id: u64,
    /// `status` (`enum ibv_wc_status`).
    pub status: u32,
    /// `opcode` (`enum ibv_wc_opcode`).
    pub opcode: u32,
    /// `vendor_err`.
    pub vendor_err: u32,
    /// `byte_len`.
    pub byte_len: u32,
    /// `imm_data` (network order) / `invalidated_rkey`.
    pub imm_data: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `src_qp`.
    pub src_qp: u32,
    /// `wc_flags`.
    pub wc_flags: c_uint,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `slid`.
    pub slid: u16,
    /// `sl`.
    pub sl: u8,
    /// `dlid_path_bits`.
    pub dlid_path_bits: u8,
}

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sge {
    /// `addr`.
    pub addr: u64,
    /// `length`.
    pub length: u32,
    /// `lkey`.
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct wr_rdma {
    /// `remote_addr`.
    pub remote_addr: u64,
    /// `rkey`.
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct wr_atomic {
    /// `remote_addr`.
    pub remote_addr: u64,
    /// `compare_add`.
    pub compare_add: u64,
    /// `swap`.
    pub swap: u64,
    /// `rkey`.
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct wr_ud {
    /// `ah`.
    pub ah: *mut ibv_ah,
    /// `remote_qpn`.
    pub remote_qpn: u32,
    /// `remote_qkey`.
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union send_wr_wr {
    /// `rdma`.
    pub rdma: wr_rdma,
    /// `atomic`.
    pub atomic: wr_atomic,
    /// `ud`.
    pub ud: wr_ud,
}

/// `bind_mw` of `struct ibv_send_wr` (`struct ibv_mw_bind_info` inlined).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_bind_mw {
    /// `mw`.
    pub mw: *mut c_void,
    /// `rkey`.
    pub rkey: u32,
    /// `bind_info.mr`.
    pub bind_info_mr: *mut ibv_mr,
    /// `bind_info.addr`.
    pub bind_info_addr: u64,
    /// `bind_info.length`.
    pub bind_info_length: u64,
    /// `bind_info.mw_access_flags`.
    pub bind_info_mw_access_flags: c_uint,
}

/// `tso` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wr_tso {
    /// `hdr`.
    pub hdr: *mut c_void,
    /// `hdr_sz`.
    pub hdr_sz: u16,
    /// `mss`.
    pub mss: u16,
}

/// The trailing anonymous union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union send_wr_ext {
    /// `bind_mw`.
    pub bind_mw: wr_bind_mw,
    /// `tso`.
    pub tso: wr_tso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct ibv_send_wr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `next`.
    pub next: *mut ibv_send_wr,
    /// `sg_list`.
    pub sg_list: *mut ibv_sge,
    /// `num_sge`.
    pub num_sge: c_int,
    /// `opcode` (`enum ibv_wr_opcode`).
    pub opcode: u32,
    /// `send_flags`.
    pub send_flags: c_uint,
    /// `imm_data` (network order) / `invalidate_rkey`.
    pub imm_data: u32,
    /// `wr`.
    pub wr: send_wr_wr,
    /// `qp_type.xrc.remote_srqn`.
    pub xrc_remote_srqn: u32,
    /// `bind_mw` / `tso`.
    pub ext: send_wr_ext,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct ibv_recv_wr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `next`.
    pub next: *mut ibv_recv_wr,
    /// `sg_list`.
    pub sg_list: *mut ibv_sge,
    /// `num_sge`.
    pub num_sge: c_int,
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_global_route {
    /// `dgid`.
    pub dgid: ibv_gid,
    /// `flow_label`.
    pub flow_label: u32,
    /// `sgid_index`.
    pub sgid_index: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `traffic_class`.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ah_attr {
    /// `grh`.
    pub grh: ibv_global_route,
    /// `dlid`.
    pub dlid: u16,
    /// `sl`.
    pub sl: u8,
    /// `src_path_bits`.
    pub src_path_bits: u8,
    /// `static_rate`.
    pub static_rate: u8,
    /// `is_global`.
    pub is_global: u8,
    /// `port_num`.
    pub port_num: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_cap {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// `max_recv_wr`.
    pub max_recv_wr: u32,
    /// `max_send_sge`.
    pub max_send_sge: u32,
    /// `max_recv_sge`.
    pub max_recv_sge: u32,
    /// `max_inline_data`.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp_init_attr {
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `send_cq`.
    pub send_cq: *mut ibv_cq,
    /// `recv_cq`.
    pub recv_cq: *mut ibv_cq,
    /// `srq`.
    pub srq: *mut ibv_srq,
    /// `cap`.
    pub cap: ibv_qp_cap,
    /// `qp_type`.
    pub qp_type: u32,
    /// `sq_sig_all`.
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_qp_attr {
    /// `qp_state`.
    pub qp_state: u32,
    /// `cur_qp_state`.
    pub cur_qp_state: u32,
    /// `path_mtu`.
    pub path_mtu: u32,
    /// `path_mig_state`.
    pub path_mig_state: u32,
    /// `qkey`.
    pub qkey: u32,
    /// `rq_psn`.
    pub rq_psn: u32,
    /// `sq_psn`.
    pub sq_psn: u32,
    /// `dest_qp_num`.
    pub dest_qp_num: u32,
    /// `qp_access_flags`.
    pub qp_access_flags: c_uint,
    /// `cap`.
    pub cap: ibv_qp_cap,
    /// `ah_attr`.
    pub ah_attr: ibv_ah_attr,
    /// `alt_ah_attr`.
    pub alt_ah_attr: ibv_ah_attr,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `alt_pkey_index`.
    pub alt_pkey_index: u16,
    /// `en_sqd_async_notify`.
    pub en_sqd_async_notify: u8,
    /// `sq_draining`.
    pub sq_draining: u8,
    /// `max_rd_atomic`.
    pub max_rd_atomic: u8,
    /// `max_dest_rd_atomic`.
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`.
    pub min_rnr_timer: u8,
    /// `port_num`.
    pub port_num: u8,
    /// `timeout`.
    pub timeout: u8,
    /// `retry_cnt`.
    pub retry_cnt: u8,
    /// `rnr_retry`.
    pub rnr_retry: u8,
    /// `alt_port_num`.
    pub alt_port_num: u8,
    /// `alt_timeout`.
    pub alt_timeout: u8,
    /// `rate_limit`.
    pub rate_limit: u32,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_port_attr {
    /// `state`.
    pub state: u32,
    /// `max_mtu`.
    pub max_mtu: u32,
    /// `active_mtu`.
    pub active_mtu: u32,
    /// `gid_tbl_len`.
    pub gid_tbl_len: c_int,
    /// `port_cap_flags`.
    pub port_cap_flags: u32,
    /// `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `bad_pkey_cntr`.
    pub bad_pkey_cntr: u32,
    /// `qkey_viol_cntr`.
    pub qkey_viol_cntr: u32,
    /// `pkey_tbl_len`.
    pub pkey_tbl_len: u16,
    /// `lid`.
    pub lid: u16,
    /// `sm_lid`.
    pub sm_lid: u16,
    /// `lmc`.
    pub lmc: u8,
    /// `max_vl_num`.
    pub max_vl_num: u8,
    /// `sm_sl`.
    pub sm_sl: u8,
    /// `subnet_timeout`.
    pub subnet_timeout: u8,
    /// `init_type_reply`.
    pub init_type_reply: u8,
    /// `active_width`.
    pub active_width: u8,
    /// `active_speed`.
    pub active_speed: u8,
    /// `phys_state`.
    pub phys_state: u8,
    /// `link_layer`.
    pub link_layer: u8,
    /// `flags`.
    pub flags: u8,
    /// `port_cap_flags2`.
    pub port_cap_flags2: u16,
}

/// The size of `struct _compat_ibv_port_attr`: `ibv_port_attr` up to and including `flags`,
/// what the exported `ibv_query_port@IBVERBS_1.1` writes (older programs pass that struct).
pub const COMPAT_PORT_ATTR_SIZE: usize = 48;

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr {
    /// `fw_ver`.
    pub fw_ver: [c_char; 64],
    /// `node_guid` (network order).
    pub node_guid: u64,
    /// `sys_image_guid` (network order).
    pub sys_image_guid: u64,
    /// `max_mr_size`.
    pub max_mr_size: u64,
    /// `page_size_cap`.
    pub page_size_cap: u64,
    /// `vendor_id`.
    pub vendor_id: u32,
    /// `vendor_part_id`.
    pub vendor_part_id: u32,
    /// `hw_ver`.
    pub hw_ver: u32,
    /// `max_qp`.
    pub max_qp: c_int,
    /// `max_qp_wr`.
    pub max_qp_wr: c_int,
    /// `device_cap_flags`.
    pub device_cap_flags: c_uint,
    /// `max_sge`.
    pub max_sge: c_int,
    /// `max_sge_rd`.
    pub max_sge_rd: c_int,
    /// `max_cq`.
    pub max_cq: c_int,
    /// `max_cqe`.
    pub max_cqe: c_int,
    /// `max_mr`.
    pub max_mr: c_int,
    /// `max_pd`.
    pub max_pd: c_int,
    /// `max_qp_rd_atom`.
    pub max_qp_rd_atom: c_int,
    /// `max_ee_rd_atom`.
    pub max_ee_rd_atom: c_int,
    /// `max_res_rd_atom`.
    pub max_res_rd_atom: c_int,
    /// `max_qp_init_rd_atom`.
    pub max_qp_init_rd_atom: c_int,
    /// `max_ee_init_rd_atom`.
    pub max_ee_init_rd_atom: c_int,
    /// `atomic_cap` (`enum ibv_atomic_cap`).
    pub atomic_cap: c_uint,
    /// `max_ee`.
    pub max_ee: c_int,
    /// `max_rdd`.
    pub max_rdd: c_int,
    /// `max_mw`.
    pub max_mw: c_int,
    /// `max_raw_ipv6_qp`.
    pub max_raw_ipv6_qp: c_int,
    /// `max_raw_ethy_qp`.
    pub max_raw_ethy_qp: c_int,
    /// `max_mcast_grp`.
    pub max_mcast_grp: c_int,
    /// `max_mcast_qp_attach`.
    pub max_mcast_qp_attach: c_int,
    /// `max_total_mcast_qp_attach`.
    pub max_total_mcast_qp_attach: c_int,
    /// `max_ah`.
    pub max_ah: c_int,
    /// `max_fmr`.
    pub max_fmr: c_int,
    /// `max_map_per_fmr`.
    pub max_map_per_fmr: c_int,
    /// `max_srq`.
    pub max_srq: c_int,
    /// `max_srq_wr`.
    pub max_srq_wr: c_int,
    /// `max_srq_sge`.
    pub max_srq_sge: c_int,
    /// `max_pkeys`.
    pub max_pkeys: u16,
    /// `local_ca_ack_delay`.
    pub local_ca_ack_delay: u8,
    /// `phys_port_cnt`.
    pub phys_port_cnt: u8,
}

impl Default for ibv_device_attr {
    fn default() -> ibv_device_attr {
        ibv_device_attr {
            fw_ver: [0; 64],
            node_guid: 0,
            sys_image_guid: 0,
            max_mr_size: 0,
            page_size_cap: 0,
            vendor_id: 0,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: 0,
            max_qp_wr: 0,
            device_cap_flags: 0,
            max_sge: 0,
            max_sge_rd: 0,
            max_cq: 0,
            max_cqe: 0,
            max_mr: 0,
            max_pd: 0,
            max_qp_rd_atom: 0,
            max_ee_rd_atom: 0,
            max_res_rd_atom: 0,
            max_qp_init_rd_atom: 0,
            max_ee_init_rd_atom: 0,
            atomic_cap: 0,
            max_ee: 0,
            max_rdd: 0,
            max_mw: 0,
            max_raw_ipv6_qp: 0,
            max_raw_ethy_qp: 0,
            max_mcast_grp: 0,
            max_mcast_qp_attach: 0,
            max_total_mcast_qp_attach: 0,
            max_ah: 0,
            max_fmr: 0,
            max_map_per_fmr: 0,
            max_srq: 0,
            max_srq_wr: 0,
            max_srq_sge: 0,
            max_pkeys: 0,
            local_ca_ack_delay: 0,
            phys_port_cnt: 0,
        }
    }
}

/// `struct ibv_query_device_ex_input`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_query_device_ex_input {
    /// `comp_mask`.
    pub comp_mask: u32,
}

/// `struct ibv_device_attr_ex` as rdma-core 44 declares it: `orig_attr` and the extended
/// capabilities, which umlx reports as absent (zero). Newer headers append fields; the
/// library writes at most what the caller's `attr_size` says and at most this much.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_device_attr_ex {
    /// `orig_attr`.
    pub orig_attr: ibv_device_attr,
    /// `comp_mask`.
    pub comp_mask: u32,
    /// Everything after `comp_mask` (ODP, timestamp, TSO, RSS, packet pacing, TM, CQ
    /// moderation, device memory, PCI atomics, `phys_port_cnt_ex`), all zero.
    pub ext: [u64; 20],
}

/// The `element` union of `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union async_element {
    /// `cq`.
    pub cq: *mut ibv_cq,
    /// `qp`.
    pub qp: *mut ibv_qp,
    /// `srq`.
    pub srq: *mut ibv_srq,
    /// `port_num`.
    pub port_num: c_int,
}

/// `enum ibv_event_type`.
pub mod event_type {
    /// `IBV_EVENT_CQ_ERR`.
    pub const CQ_ERR: u32 = 0;
    /// `IBV_EVENT_QP_FATAL`.
    pub const QP_FATAL: u32 = 1;
    /// `IBV_EVENT_QP_REQ_ERR`.
    pub const QP_REQ_ERR: u32 = 2;
    /// `IBV_EVENT_QP_ACCESS_ERR`.
    pub const QP_ACCESS_ERR: u32 = 3;
    /// `IBV_EVENT_COMM_EST`.
    pub const COMM_EST: u32 = 4;
    /// `IBV_EVENT_SQ_DRAINED`.
    pub const SQ_DRAINED: u32 = 5;
    /// `IBV_EVENT_PATH_MIG`.
    pub const PATH_MIG: u32 = 6;
    /// `IBV_EVENT_PATH_MIG_ERR`.
    pub const PATH_MIG_ERR: u32 = 7;
    /// `IBV_EVENT_DEVICE_FATAL`.
    pub const DEVICE_FATAL: u32 = 8;
    /// `IBV_EVENT_PORT_ACTIVE`.
    pub const PORT_ACTIVE: u32 = 9;
    /// `IBV_EVENT_PORT_ERR`.
    pub const PORT_ERR: u32 = 10;
    /// `IBV_EVENT_LID_CHANGE`.
    pub const LID_CHANGE: u32 = 11;
    /// `IBV_EVENT_PKEY_CHANGE`.
    pub const PKEY_CHANGE: u32 = 12;
    /// `IBV_EVENT_SM_CHANGE`.
    pub const SM_CHANGE: u32 = 13;
    /// `IBV_EVENT_SRQ_ERR`.
    pub const SRQ_ERR: u32 = 14;
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`.
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`.
    pub const QP_LAST_WQE_REACHED: u32 = 16;
    /// `IBV_EVENT_CLIENT_REREGISTER`.
    pub const CLIENT_REREGISTER: u32 = 17;
    /// `IBV_EVENT_GID_CHANGE`.
    pub const GID_CHANGE: u32 = 18;
    /// `IBV_EVENT_WQ_FATAL`.
    pub const WQ_FATAL: u32 = 19;
}

/// `struct ibv_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    /// `element`.
    pub element: async_element,
    /// `event_type` (`enum ibv_event_type`).
    pub event_type: u32,
}

/// `struct ibv_grh`: the 40 bytes in front of a UD receive (RoCEv2 over IPv4: the IPv4
/// header in its last 20 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_grh {
    /// `version_tclass_flow` (big-endian).
    pub version_tclass_flow: u32,
    /// `paylen` (big-endian).
    pub paylen: u16,
    /// `next_hdr`.
    pub next_hdr: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `sgid`.
    pub sgid: ibv_gid,
    /// `dgid`.
    pub dgid: ibv_gid,
}

/// `IBV_WC_GRH`: the receive buffer starts with a GRH.
pub const IBV_WC_GRH: u32 = 1 << 0;

/// `struct ibv_ece` (enhanced connection establishment).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_ece {
    /// `vendor_id`.
    pub vendor_id: u32,
    /// `options`.
    pub options: u32,
    /// `comp_mask`.
    pub comp_mask: u32,
}

/// `struct ib_uverbs_global_route` (`<rdma/ib_user_verbs.h>`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_global_route {
    /// `dgid`.
    pub dgid: [u8; 16],
    /// `flow_label`.
    pub flow_label: u32,
    /// `sgid_index`.
    pub sgid_index: u8,
    /// `hop_limit`.
    pub hop_limit: u8,
    /// `traffic_class`.
    pub traffic_class: u8,
    /// `reserved`.
    pub reserved: u8,
}

/// `struct ib_uverbs_ah_attr` (`<rdma/ib_user_verbs.h>`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_ah_attr {
    /// `grh`.
    pub grh: ib_uverbs_global_route,
    /// `dlid`.
    pub dlid: u16,
    /// `sl`.
    pub sl: u8,
    /// `src_path_bits`.
    pub src_path_bits: u8,
    /// `static_rate`.
    pub static_rate: u8,
    /// `is_global`.
    pub is_global: u8,
    /// `port_num`.
    pub port_num: u8,
    /// `reserved`.
    pub reserved: u8,
}

/// `struct ib_uverbs_qp_attr` (`<rdma/ib_user_verbs.h>`).
/// (Each field as the header names it.)
#[allow(missing_docs)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_uverbs_qp_attr {
    pub qp_attr_mask: u32,
    pub qp_state: u32,
    pub cur_qp_state: u32,
    pub path_mtu: u32,
    pub path_mig_state: u32,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: u32,
    pub ah_attr: ib_uverbs_ah_attr,
    pub alt_ah_attr: ib_uverbs_ah_attr,
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
}

/// `struct ib_user_path_rec` (`<rdma/ib_user_sa.h>`).
/// (Each field as the header names it.)
#[allow(missing_docs)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ib_user_path_rec {
    pub dgid: [u8; 16],
    pub sgid: [u8; 16],
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: u32,
    pub flow_label: u32,
    pub reversible: u32,
    pub mtu: u32,
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub numb_path: u8,
    pub sl: u8,
    pub mtu_selector: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `struct ibv_sa_path_rec` (`<infiniband/sa.h>`).
/// (Each field as the header names it.)
#[allow(missing_docs)]
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ibv_sa_path_rec {
    pub dgid: ibv_gid,
    pub sgid: ibv_gid,
    pub dlid: u16,
    pub slid: u16,
    pub raw_traffic: c_int,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub reversible: c_int,
    pub numb_path: u8,
    pub pkey: u16,
    pub sl: u8,
    pub mtu_selector: u8,
    pub mtu: u8,
    pub rate_selector: u8,
    pub rate: u8,
    pub packet_life_time_selector: u8,
    pub packet_life_time: u8,
    pub preference: u8,
}

/// `enum ibv_qp_init_attr_mask`.
pub mod qp_init_attr_mask {
    /// `IBV_QP_INIT_ATTR_PD`.
    pub const PD: u32 = 1 << 0;
    /// `IBV_QP_INIT_ATTR_CREATE_FLAGS`.
    pub const CREATE_FLAGS: u32 = 1 << 2;
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`.
    pub const SEND_OPS_FLAGS: u32 = 1 << 6;
}

/// `enum ibv_qp_create_send_ops_flags`: the work requests an extended QP builds.
pub mod send_ops {
    /// `IBV_QP_EX_WITH_RDMA_WRITE`.
    pub const RDMA_WRITE: u64 = 1 << 0;
    /// `IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u64 = 1 << 1;
    /// `IBV_QP_EX_WITH_SEND`.
    pub const SEND: u64 = 1 << 2;
    /// `IBV_QP_EX_WITH_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u64 = 1 << 3;
    /// `IBV_QP_EX_WITH_RDMA_READ`.
    pub const RDMA_READ: u64 = 1 << 4;
    /// `IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP`.
    pub const ATOMIC_CMP_AND_SWP: u64 = 1 << 5;
    /// `IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD`.
    pub const ATOMIC_FETCH_AND_ADD: u64 = 1 << 6;
    /// What umlx builds.
    pub const SUPPORTED: u64 =
        RDMA_WRITE | RDMA_WRITE_WITH_IMM | SEND | SEND_WITH_IMM | RDMA_READ | ATOMIC_CMP_AND_SWP | ATOMIC_FETCH_AND_ADD;
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
#[derive(Debug)]
pub struct ibv_rx_hash_conf {
    /// `rx_hash_function`.
    pub rx_hash_function: u8,
    /// `rx_hash_key_len`.
    pub rx_hash_key_len: u8,
    /// `rx_hash_key`.
    pub rx_hash_key: *mut u8,
    /// `rx_hash_fields_mask`.
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex`: `struct ibv_qp_init_attr`'s fields, then the extensions.
///
/// Its first fields are `struct ibv_qp_init_attr`'s (whose tail padding `comp_mask` takes).
#[repr(C)]
#[derive(Debug)]
pub struct ibv_qp_init_attr_ex {
    /// `qp_context`.
    pub qp_context: *mut c_void,
    /// `send_cq`.
    pub send_cq: *mut ibv_cq,
    /// `recv_cq`.
    pub recv_cq: *mut ibv_cq,
    /// `srq`.
    pub srq: *mut ibv_srq,
    /// `cap`.
    pub cap: ibv_qp_cap,
    /// `qp_type`.
    pub qp_type: u32,
    /// `sq_sig_all`.
    pub sq_sig_all: c_int,
    /// `comp_mask` (`enum ibv_qp_init_attr_mask`).
    pub comp_mask: u32,
    /// `pd`.
    pub pd: *mut ibv_pd,
    /// `xrcd`.
    pub xrcd: *mut c_void,
    /// `create_flags`.
    pub create_flags: u32,
    /// `max_tso_header`.
    pub max_tso_header: u16,
    /// `rwq_ind_tbl`.
    pub rwq_ind_tbl: *mut c_void,
    /// `rx_hash_conf`.
    pub rx_hash_conf: ibv_rx_hash_conf,
    /// `source_qpn`.
    pub source_qpn: u32,
    /// `send_ops_flags`.
    pub send_ops_flags: u64,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ibv_data_buf {
    /// `addr`.
    pub addr: *mut c_void,
    /// `length`.
    pub length: size_t,
}

/// `struct ibv_qp_ex`: the QP, then the work request builders of the new post-send API.
#[repr(C)]
pub struct ibv_qp_ex {
    /// `qp_base`.
    pub qp_base: ibv_qp,
    /// `comp_mask`.
    pub comp_mask: u64,
    /// `wr_id` of the next work request (the program sets it before the builder).
    pub wr_id: u64,
    /// `wr_flags` (`enum ibv_send_flags`) of the next work request.
    pub wr_flags: c_uint,
    /// `wr_atomic_cmp_swp`.
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    /// `wr_atomic_fetch_add`.
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    /// `wr_bind_mw`.
    pub wr_bind_mw: AnyFn,
    /// `wr_local_inv`.
    pub wr_local_inv: AnyFn,
    /// `wr_rdma_read`.
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// `wr_rdma_write`.
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    /// `wr_rdma_write_imm`.
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    /// `wr_send`.
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `wr_send_imm`.
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    /// `wr_send_inv`.
    pub wr_send_inv: AnyFn,
    /// `wr_send_tso`.
    pub wr_send_tso: AnyFn,
    /// `wr_set_ud_addr`.
    pub wr_set_ud_addr: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut ibv_ah, u32, u32)>,
    /// `wr_set_xrc_srqn`.
    pub wr_set_xrc_srqn: AnyFn,
    /// `wr_set_inline_data`.
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, size_t)>,
    /// `wr_set_inline_data_list`.
    pub wr_set_inline_data_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, size_t, *const ibv_data_buf)>,
    /// `wr_set_sge`.
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    /// `wr_set_sge_list`.
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, size_t, *const ibv_sge)>,
    /// `wr_start`.
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `wr_complete`.
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    /// `wr_abort`.
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    /// `wr_atomic_write`.
    pub wr_atomic_write: AnyFn,
}

// ---------------------------------------------------------------------------------------------
// The layout, as `<infiniband/verbs.h>` (rdma-core 44, x86_64 and aarch64) has it.
// ---------------------------------------------------------------------------------------------

macro_rules! layout {
    ($t:ty, size $size:expr, $($field:ident $(. $sub:ident)* @ $off:expr),* $(,)?) => {
        const _: () = assert!(std::mem::size_of::<$t>() == $size, concat!("size of ", stringify!($t)));
        $(const _: () = assert!(
            std::mem::offset_of!($t, $field $(. $sub)*) == $off,
            concat!("offset of ", stringify!($t), ".", stringify!($field $(. $sub)*))
        );)*
    };
}

const _: () = assert!(std::mem::size_of::<pthread_mutex_t>() == 40 && std::mem::size_of::<pthread_cond_t>() == 48);
layout!(ibv_device, size 664, node_type @ 16, transport_type @ 20, name @ 24, dev_name @ 88, dev_path @ 152, ibdev_path @ 408);
layout!(ibv_context_ops, size 256, alloc_mw @ 56, poll_cq @ 88, req_notify_cq @ 96, post_srq_recv @ 160,
    post_send @ 200, post_recv @ 208, _compat_async_event @ 248);
layout!(ibv_context, size 328, ops @ 8, cmd_fd @ 264, async_fd @ 268, num_comp_vectors @ 272, mutex @ 280, abi_compat @ 320);
layout!(verbs_context, size 648, query_port @ 0, create_cq_ex @ 200, query_device_ex @ 216, create_qp_ex @ 264,
    close_xrcd @ 296, sz @ 312, context @ 320);
layout!(ibv_pd, size 16, handle @ 8);
layout!(ibv_mr, size 48, pd @ 8, addr @ 16, length @ 24, handle @ 32, lkey @ 36, rkey @ 40);
layout!(ibv_comp_channel, size 16, fd @ 8, refcnt @ 12);
layout!(ibv_cq, size 128, channel @ 8, cq_context @ 16, handle @ 24, cqe @ 28, mutex @ 32, cond @ 72,
    comp_events_completed @ 120, async_events_completed @ 124);
layout!(ibv_qp, size 160, qp_context @ 8, pd @ 16, send_cq @ 24, recv_cq @ 32, srq @ 40, handle @ 48, qp_num @ 52,
    state @ 56, qp_type @ 60, mutex @ 64, cond @ 104, events_completed @ 152);
layout!(ibv_srq_attr, size 12, srq_limit @ 8);
layout!(ibv_srq_init_attr, size 24, attr @ 8);
layout!(ibv_srq, size 128, srq_context @ 8, pd @ 16, handle @ 24, mutex @ 32, cond @ 72, events_completed @ 120);
layout!(ibv_ah, size 24, pd @ 8, handle @ 16);
layout!(ibv_wc, size 48, status @ 8, opcode @ 12, vendor_err @ 16, byte_len @ 20, imm_data @ 24, qp_num @ 28,
    src_qp @ 32, wc_flags @ 36, pkey_index @ 40, slid @ 42, sl @ 44, dlid_path_bits @ 45);
layout!(ibv_sge, size 16, length @ 8, lkey @ 12);
layout!(ibv_send_wr, size 128, next @ 8, sg_list @ 16, num_sge @ 24, opcode @ 28, send_flags @ 32, imm_data @ 36,
    wr.rdma.remote_addr @ 40, wr.rdma.rkey @ 48, wr.atomic.compare_add @ 48, wr.atomic.swap @ 56,
    wr.atomic.rkey @ 64, wr.ud.ah @ 40, wr.ud.remote_qpn @ 48, wr.ud.remote_qkey @ 52, xrc_remote_srqn @ 72,
    ext.bind_mw.mw @ 80, ext.tso.hdr @ 80);
layout!(ibv_recv_wr, size 32, next @ 8, sg_list @ 16, num_sge @ 24);
layout!(ibv_global_route, size 24, flow_label @ 16, sgid_index @ 20, hop_limit @ 21, traffic_class @ 22);
layout!(ibv_ah_attr, size 32, dlid @ 24, sl @ 26, src_path_bits @ 27, static_rate @ 28, is_global @ 29, port_num @ 30);
layout!(ibv_qp_cap, size 20,);
layout!(ibv_qp_init_attr, size 64, send_cq @ 8, recv_cq @ 16, srq @ 24, cap @ 32, qp_type @ 52, sq_sig_all @ 56);
layout!(ibv_qp_attr, size 144, cur_qp_state @ 4, path_mtu @ 8, path_mig_state @ 12, qkey @ 16, rq_psn @ 20,
    sq_psn @ 24, dest_qp_num @ 28, qp_access_flags @ 32, cap @ 36, ah_attr @ 56, alt_ah_attr @ 88, pkey_index @ 120,
    alt_pkey_index @ 122, en_sqd_async_notify @ 124, sq_draining @ 125, max_rd_atomic @ 126,
    max_dest_rd_atomic @ 127, min_rnr_timer @ 128, port_num @ 129, timeout @ 130, retry_cnt @ 131, rnr_retry @ 132,
    alt_port_num @ 133, alt_timeout @ 134, rate_limit @ 136);
layout!(ibv_port_attr, size 52, gid_tbl_len @ 12, port_cap_flags @ 16, max_msg_sz @ 20, pkey_tbl_len @ 32, lid @ 34,
    sm_lid @ 36, lmc @ 38, active_width @ 43, active_speed @ 44, phys_state @ 45, link_layer @ 46, flags @ 47,
    port_cap_flags2 @ 48);
const _: () = assert!(COMPAT_PORT_ATTR_SIZE == std::mem::offset_of!(ibv_port_attr, port_cap_flags2));
layout!(ibv_device_attr, size 232, node_guid @ 64, sys_image_guid @ 72, max_mr_size @ 80, page_size_cap @ 88,
    vendor_id @ 96, hw_ver @ 104, max_qp @ 108, device_cap_flags @ 116, max_sge_rd @ 124, max_qp_init_rd_atom @ 156,
    atomic_cap @ 164, max_ah @ 200, max_srq @ 212, max_srq_sge @ 220, max_pkeys @ 224, local_ca_ack_delay @ 226,
    phys_port_cnt @ 227);
layout!(ibv_device_attr_ex, size 400, comp_mask @ 232, ext @ 240);
layout!(ibv_async_event, size 16, event_type @ 8);
const _: () = assert!(std::mem::align_of::<ibv_gid>() == 8 && std::mem::align_of::<ibv_ah_attr>() == 8);
layout!(ibv_gid_entry, size 32, gid_index @ 16, port_num @ 20, gid_type @ 24, ndev_ifindex @ 28);
layout!(ibv_query_device_ex_input, size 4,);
layout!(ibv_grh, size 40, paylen @ 4, hop_limit @ 7, sgid @ 8, dgid @ 24);
layout!(ibv_ece, size 12, comp_mask @ 8);
layout!(ib_uverbs_ah_attr, size 32, dlid @ 24, port_num @ 30);
layout!(ib_uverbs_qp_attr, size 144, ah_attr @ 40, alt_ah_attr @ 72, max_send_wr @ 104, pkey_index @ 124,
    alt_timeout @ 138);
layout!(ib_user_path_rec, size 64, dlid @ 32, raw_traffic @ 36, pkey @ 52, preference @ 63);
layout!(ibv_sa_path_rec, size 64, dlid @ 32, raw_traffic @ 36, flow_label @ 40, hop_limit @ 44, reversible @ 48,
    numb_path @ 52, pkey @ 54, sl @ 56, preference @ 63);
layout!(ibv_rx_hash_conf, size 24,);
layout!(ibv_qp_init_attr_ex, size 136, comp_mask @ 60, pd @ 64, xrcd @ 72, create_flags @ 80, max_tso_header @ 84,
    rwq_ind_tbl @ 88, rx_hash_conf @ 96, source_qpn @ 120, send_ops_flags @ 128);
layout!(ibv_data_buf, size 16,);
layout!(ibv_qp_ex, size 352, comp_mask @ 160, wr_id @ 168, wr_flags @ 176, wr_atomic_cmp_swp @ 184, wr_send @ 240,
    wr_set_sge_list @ 312, wr_start @ 320, wr_abort @ 336, wr_atomic_write @ 344);
