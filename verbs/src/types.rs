//! ibverbs value types with their ibverbs names and numeric values: work completion status and
//! opcode, access flags, QP types and states, MTU, attribute masks, work requests, completions,
//! device and port attributes, GIDs.

use std::fmt;

macro_rules! ib_enum {
    ($(#[$m:meta])* $name:ident : $repr:ty { $($(#[$vm:meta])* $v:ident = $val:expr => $s:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr($repr)]
        pub enum $name {
            $($(#[$vm])* $v = $val),*
        }
        impl $name {
            /// The ibverbs name (as `ibv_*_str` prints it).
            pub fn name(self) -> &'static str {
                match self { $($name::$v => $s),* }
            }
            /// From the ibverbs numeric value.
            pub fn from_value(v: $repr) -> Option<$name> {
                match v { $(x if x == $val => Some($name::$v),)* _ => None }
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

ib_enum! {
    /// `enum ibv_wc_status`.
    WcStatus: u32 {
        /// IBV_WC_SUCCESS
        Success = 0 => "success",
        /// IBV_WC_LOC_LEN_ERR
        LocLenErr = 1 => "local length error",
        /// IBV_WC_LOC_QP_OP_ERR
        LocQpOpErr = 2 => "local QP operation error",
        /// IBV_WC_LOC_EEC_OP_ERR
        LocEecOpErr = 3 => "local EE context operation error",
        /// IBV_WC_LOC_PROT_ERR
        LocProtErr = 4 => "local protection error",
        /// IBV_WC_WR_FLUSH_ERR
        WrFlushErr = 5 => "Work Request Flushed Error",
        /// IBV_WC_MW_BIND_ERR
        MwBindErr = 6 => "memory management operation error",
        /// IBV_WC_BAD_RESP_ERR
        BadRespErr = 7 => "bad response error",
        /// IBV_WC_LOC_ACCESS_ERR
        LocAccessErr = 8 => "local access error",
        /// IBV_WC_REM_INV_REQ_ERR
        RemInvReqErr = 9 => "remote invalid request error",
        /// IBV_WC_REM_ACCESS_ERR
        RemAccessErr = 10 => "remote access error",
        /// IBV_WC_REM_OP_ERR
        RemOpErr = 11 => "remote operation error",
        /// IBV_WC_RETRY_EXC_ERR
        RetryExcErr = 12 => "transport retry counter exceeded",
        /// IBV_WC_RNR_RETRY_EXC_ERR
        RnrRetryExcErr = 13 => "RNR retry counter exceeded",
        /// IBV_WC_LOC_RDD_VIOL_ERR
        LocRddViolErr = 14 => "local RDD violation error",
        /// IBV_WC_REM_INV_RD_REQ_ERR
        RemInvRdReqErr = 15 => "remote invalid RD request",
        /// IBV_WC_REM_ABORT_ERR
        RemAbortErr = 16 => "aborted error",
        /// IBV_WC_INV_EECN_ERR
        InvEecnErr = 17 => "invalid EE context number",
        /// IBV_WC_INV_EEC_STATE_ERR
        InvEecStateErr = 18 => "invalid EE context state",
        /// IBV_WC_FATAL_ERR
        FatalErr = 19 => "fatal error",
        /// IBV_WC_RESP_TIMEOUT_ERR
        RespTimeoutErr = 20 => "response timeout error",
        /// IBV_WC_GENERAL_ERR
        GeneralErr = 21 => "general error",
    }
}

ib_enum! {
    /// `enum ibv_wc_opcode`.
    WcOpcode: u32 {
        /// IBV_WC_SEND
        Send = 0 => "IBV_WC_SEND",
        /// IBV_WC_RDMA_WRITE
        RdmaWrite = 1 => "IBV_WC_RDMA_WRITE",
        /// IBV_WC_RDMA_READ
        RdmaRead = 2 => "IBV_WC_RDMA_READ",
        /// IBV_WC_COMP_SWAP
        CompSwap = 3 => "IBV_WC_COMP_SWAP",
        /// IBV_WC_FETCH_ADD
        FetchAdd = 4 => "IBV_WC_FETCH_ADD",
        /// IBV_WC_RECV
        Recv = 128 => "IBV_WC_RECV",
        /// IBV_WC_RECV_RDMA_WITH_IMM
        RecvRdmaWithImm = 129 => "IBV_WC_RECV_RDMA_WITH_IMM",
    }
}

ib_enum! {
    /// `enum ibv_wr_opcode`.
    WrOpcode: u32 {
        /// IBV_WR_RDMA_WRITE
        RdmaWrite = 0 => "IBV_WR_RDMA_WRITE",
        /// IBV_WR_RDMA_WRITE_WITH_IMM
        RdmaWriteWithImm = 1 => "IBV_WR_RDMA_WRITE_WITH_IMM",
        /// IBV_WR_SEND
        Send = 2 => "IBV_WR_SEND",
        /// IBV_WR_SEND_WITH_IMM
        SendWithImm = 3 => "IBV_WR_SEND_WITH_IMM",
        /// IBV_WR_RDMA_READ
        RdmaRead = 4 => "IBV_WR_RDMA_READ",
        /// IBV_WR_ATOMIC_CMP_AND_SWP
        AtomicCmpAndSwp = 5 => "IBV_WR_ATOMIC_CMP_AND_SWP",
        /// IBV_WR_ATOMIC_FETCH_AND_ADD
        AtomicFetchAndAdd = 6 => "IBV_WR_ATOMIC_FETCH_AND_ADD",
    }
}

ib_enum! {
    /// `enum ibv_qp_type` (RC and UD).
    QpType: u32 {
        /// IBV_QPT_RC
        Rc = 2 => "RC",
        /// IBV_QPT_UD
        Ud = 4 => "UD",
    }
}

ib_enum! {
    /// `enum ibv_qp_state`.
    QpState: u32 {
        /// IBV_QPS_RESET
        Reset = 0 => "RESET",
        /// IBV_QPS_INIT
        Init = 1 => "INIT",
        /// IBV_QPS_RTR
        Rtr = 2 => "RTR",
        /// IBV_QPS_RTS
        Rts = 3 => "RTS",
        /// IBV_QPS_SQD
        Sqd = 4 => "SQD",
        /// IBV_QPS_SQE
        Sqe = 5 => "SQE",
        /// IBV_QPS_ERR
        Err = 6 => "ERR",
    }
}

ib_enum! {
    /// `enum ibv_mtu`.
    Mtu: u32 {
        /// IBV_MTU_256
        Mtu256 = 1 => "256",
        /// IBV_MTU_512
        Mtu512 = 2 => "512",
        /// IBV_MTU_1024
        Mtu1024 = 3 => "1024",
        /// IBV_MTU_2048
        Mtu2048 = 4 => "2048",
        /// IBV_MTU_4096
        Mtu4096 = 5 => "4096",
    }
}

impl Mtu {
    /// Payload bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

ib_enum! {
    /// `enum ibv_port_state`.
    PortState: u32 {
        /// IBV_PORT_NOP
        Nop = 0 => "PORT_NOP",
        /// IBV_PORT_DOWN
        Down = 1 => "PORT_DOWN",
        /// IBV_PORT_INIT
        Init = 2 => "PORT_INIT",
        /// IBV_PORT_ARMED
        Armed = 3 => "PORT_ARMED",
        /// IBV_PORT_ACTIVE
        Active = 4 => "PORT_ACTIVE",
    }
}

/// `enum ibv_access_flags` (bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct AccessFlags(pub u32);

impl AccessFlags {
    /// IBV_ACCESS_LOCAL_WRITE.
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// IBV_ACCESS_REMOTE_WRITE.
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// IBV_ACCESS_REMOTE_READ.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// IBV_ACCESS_REMOTE_ATOMIC.
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);
    /// Whether every flag of `o` is set.
    pub fn contains(self, o: AccessFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, o: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | o.0)
    }
}

/// `enum ibv_send_flags` (bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct SendFlags(pub u32);

impl SendFlags {
    /// IBV_SEND_FENCE.
    pub const FENCE: SendFlags = SendFlags(1);
    /// IBV_SEND_SIGNALED.
    pub const SIGNALED: SendFlags = SendFlags(2);
    /// IBV_SEND_SOLICITED.
    pub const SOLICITED: SendFlags = SendFlags(4);
    /// Whether every flag of `o` is set.
    pub fn contains(self, o: SendFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
}

/// `enum ibv_wc_flags` (bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct WcFlags(pub u32);

impl WcFlags {
    /// IBV_WC_GRH: the first 40 bytes of the receive buffer hold the GRH.
    pub const GRH: WcFlags = WcFlags(1);
    /// IBV_WC_WITH_IMM: `imm_data` is valid.
    pub const WITH_IMM: WcFlags = WcFlags(2);
    /// Whether every flag of `o` is set.
    pub fn contains(self, o: WcFlags) -> bool {
        self.0 & o.0 == o.0
    }
}

/// `enum ibv_qp_attr_mask` (bit set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Hash)]
pub struct QpAttrMask(pub u32);

#[allow(missing_docs)]
impl QpAttrMask {
    pub const STATE: QpAttrMask = QpAttrMask(1 << 0);
    pub const CUR_STATE: QpAttrMask = QpAttrMask(1 << 1);
    pub const EN_SQD_ASYNC_NOTIFY: QpAttrMask = QpAttrMask(1 << 2);
    pub const ACCESS_FLAGS: QpAttrMask = QpAttrMask(1 << 3);
    pub const PKEY_INDEX: QpAttrMask = QpAttrMask(1 << 4);
    pub const PORT: QpAttrMask = QpAttrMask(1 << 5);
    pub const QKEY: QpAttrMask = QpAttrMask(1 << 6);
    pub const AV: QpAttrMask = QpAttrMask(1 << 7);
    pub const PATH_MTU: QpAttrMask = QpAttrMask(1 << 8);
    pub const TIMEOUT: QpAttrMask = QpAttrMask(1 << 9);
    pub const RETRY_CNT: QpAttrMask = QpAttrMask(1 << 10);
    pub const RNR_RETRY: QpAttrMask = QpAttrMask(1 << 11);
    pub const RQ_PSN: QpAttrMask = QpAttrMask(1 << 12);
    pub const MAX_QP_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 13);
    pub const ALT_PATH: QpAttrMask = QpAttrMask(1 << 14);
    pub const MIN_RNR_TIMER: QpAttrMask = QpAttrMask(1 << 15);
    pub const SQ_PSN: QpAttrMask = QpAttrMask(1 << 16);
    pub const MAX_DEST_RD_ATOMIC: QpAttrMask = QpAttrMask(1 << 17);
    pub const PATH_MIG_STATE: QpAttrMask = QpAttrMask(1 << 18);
    pub const CAP: QpAttrMask = QpAttrMask(1 << 19);
    pub const DEST_QPN: QpAttrMask = QpAttrMask(1 << 20);

    /// Whether every bit of `o` is set.
    pub fn contains(self, o: QpAttrMask) -> bool {
        self.0 & o.0 == o.0
    }
}

impl std::ops::BitOr for QpAttrMask {
    type Output = QpAttrMask;
    fn bitor(self, o: QpAttrMask) -> QpAttrMask {
        QpAttrMask(self.0 | o.0)
    }
}

/// A 128-bit GID (`union ibv_gid`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The IP address a RoCEv2 GID stands for.
    pub fn to_ip(self) -> std::net::IpAddr {
        let v6 = std::net::Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => v4.into(),
            None => v6.into(),
        }
    }

    /// The RoCEv2 GID of an IP address.
    pub fn from_ip(ip: std::net::IpAddr) -> Gid {
        match ip {
            std::net::IpAddr::V4(a) => Gid(a.to_ipv6_mapped().octets()),
            std::net::IpAddr::V6(a) => Gid(a.octets()),
        }
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As ibv_devinfo prints it: 8 groups of 4 hex digits.
        for i in 0..8 {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", self.0[2 * i], self.0[2 * i + 1])?;
        }
        Ok(())
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `struct ibv_wc`.
///
/// As with ibverbs, a completion sets only the fields that are valid for it: `wr_id`,
/// `status`, `opcode`, `qp_num` and `wc_flags` always; `byte_len` for receives, READs and
/// atomics; `imm_data` with `WcFlags::WITH_IMM`; `src_qp`, `sl`, `slid` and `pkey_index` for
/// receives; `vendor_err` for errors. Other fields keep what the entry held before the poll.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Wc {
    /// The request's wr_id.
    pub wr_id: u64,
    /// Completion status.
    pub status: WcStatus,
    /// What completed (valid for success; also set for errors when known).
    pub opcode: WcOpcode,
    /// Vendor error syndrome (mlx5: the CQE vendor syndrome).
    pub vendor_err: u32,
    /// Bytes received (or read).
    pub byte_len: u32,
    /// Immediate data (valid with `WcFlags::WITH_IMM`), as a host value of the 32 wire bits.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP (UD).
    pub src_qp: u32,
    /// IBV_WC_* flags.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
}

impl Default for Wc {
    fn default() -> Wc {
        Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: WcFlags(0),
            pkey_index: 0,
            slid: 0,
            sl: 0,
        }
    }
}

/// An entry a CQ poll writes one work completion into: verbs' own [`Wc`], or a binding's entry
/// type (the C ABI's `struct ibv_wc`), so that [`Cq::poll_into`](crate::Cq::poll_into) fills the caller's
/// array with no second copy. Each method is given what its kind of completion carries; an
/// implementation stores it (and may leave what the kind does not set, as [`Wc`] does).
pub trait WcEntry {
    /// A requester success: `status` Success, no `wc_flags`.
    fn send_success(&mut self, wr_id: u64, opcode: WcOpcode, qp_num: u32);
    /// The `byte_len` of the requester success just written, for a READ or an atomic only.
    fn set_byte_len(&mut self, byte_len: u32);
    /// A responder success: every field of `wc` but `vendor_err`.
    fn recv_success(&mut self, wc: &Wc);
    /// An error: every field of `wc` (those an error does not carry at their defaults).
    fn error(&mut self, wc: &Wc);
}

impl WcEntry for Wc {
    #[inline(always)]
    fn send_success(&mut self, wr_id: u64, opcode: WcOpcode, qp_num: u32) {
        self.wr_id = wr_id;
        self.opcode = opcode;
        self.status = WcStatus::Success;
        self.qp_num = qp_num;
        self.wc_flags = WcFlags(0);
    }

    #[inline(always)]
    fn set_byte_len(&mut self, byte_len: u32) {
        self.byte_len = byte_len;
    }

    #[inline(always)]
    fn recv_success(&mut self, wc: &Wc) {
        *self = Wc { vendor_err: self.vendor_err, ..*wc };
    }

    #[inline(always)]
    fn error(&mut self, wc: &Wc) {
        *self = *wc;
    }
}

/// The global routing part of an address (`struct ibv_global_route`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit (IPv4 TTL / IPv6 hop limit).
    pub hop_limit: u8,
    /// Traffic class (IP TOS).
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr` (RoCE: always global).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// Routing.
    pub grh: GlobalRoute,
    /// Service level.
    pub sl: u8,
    /// Port (1).
    pub port_num: u8,
    /// Destination MAC; `None`: resolved from the GID (link-local EUI-64) or the context's
    /// neighbour table.
    pub dmac: Option<[u8; 6]>,
}

/// `struct ibv_qp_cap`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Send WRs.
    pub max_send_wr: u32,
    /// Receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Inline bytes per send WR.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_attr` (the fields RC and UD use).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// Target state.
    pub qp_state: Option<QpState>,
    /// Path MTU.
    pub path_mtu: Option<Mtu>,
    /// Q_Key (UD).
    pub qkey: u32,
    /// Expected receive PSN.
    pub rq_psn: u32,
    /// First send PSN.
    pub sq_psn: u32,
    /// Remote QP number (RC).
    pub dest_qp_num: u32,
    /// Remote access flags.
    pub qp_access_flags: AccessFlags,
    /// Capabilities (query only).
    pub cap: QpCap,
    /// Address vector (RC).
    pub ah_attr: AhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Outstanding RDMA READ/atomic as initiator.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomic as responder.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries (7 = infinite).
    pub rnr_retry: u8,
}

/// `struct ibv_qp_init_attr`.
#[derive(Clone, Copy, Debug, Default)]
pub struct QpInitCap {
    /// Capabilities requested.
    pub cap: QpCap,
    /// Signal every send WR (sq_sig_all).
    pub sq_sig_all: bool,
}

/// `struct ibv_device_attr` (the fields a RoCE user reads).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version "major.minor.sub".
    pub fw_ver: String,
    /// Node GUID.
    pub node_guid: u64,
    /// System image GUID.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Page sizes supported (bit mask).
    pub page_size_cap: u64,
    /// PCI vendor ID.
    pub vendor_id: u32,
    /// PCI device ID.
    pub vendor_part_id: u32,
    /// Hardware version.
    pub hw_ver: u32,
    /// QPs.
    pub max_qp: u32,
    /// WRs per queue.
    pub max_qp_wr: u32,
    /// SGEs per WR.
    pub max_sge: u32,
    /// CQs.
    pub max_cq: u32,
    /// CQEs per CQ.
    pub max_cqe: u32,
    /// MRs.
    pub max_mr: u32,
    /// PDs.
    pub max_pd: u32,
    /// Outstanding READ/atomic per QP as responder.
    pub max_qp_rd_atom: u32,
    /// Outstanding READ/atomic per QP as initiator.
    pub max_qp_init_rd_atom: u32,
    /// SRQs.
    pub max_srq: u32,
    /// WRs per SRQ.
    pub max_srq_wr: u32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: u32,
    /// Physical ports.
    pub phys_port_cnt: u8,
    /// Atomic capability (IBV_ATOMIC_HCA = 1).
    pub atomic_cap: u32,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
}

/// `struct ibv_port_attr` (RoCE fields).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Port state.
    pub state: PortState,
    /// Largest MTU.
    pub max_mtu: Mtu,
    /// Active MTU.
    pub active_mtu: Mtu,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0 on Ethernet).
    pub lid: u16,
    /// Link layer: "Ethernet".
    pub link_layer: &'static str,
    /// Physical state (5 = LinkUp, 3 = Disabled).
    pub phys_state: u8,
    /// Max message size.
    pub max_msg_sz: u32,
    /// Active link width in the IB encoding (`IBV_WIDTH_*`: 1 1X, 16 2X, 2 4X, 4 8X, 8 12X), from
    /// the Ethernet link mode the port operates in; 0 while the link is down.
    pub active_width: u8,
    /// Active per-lane speed in the IB encoding (`IBV_SPEED_*`: 1 SDR, 2 DDR, 4 QDR, 16 FDR,
    /// 32 EDR, 64 HDR, 128 NDR); 0 while the link is down.
    pub active_speed: u8,
}
