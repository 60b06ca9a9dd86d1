//! Open enumerations of the mlx5 interface: command opcodes and statuses, WQE and CQE opcodes,
//! CQE syndromes, event types, QP states, MTU, capability types, register ids and the like.
//!
//! Each is a newtype over the field's integer type declared with [`crate::open_enum!`]: a value
//! the device or driver produces that we do not know survives unchanged and prints as
//! `Unknown(0x..)`. Constant names are the PRM / Linux names without their `MLX5_..._` prefix.
//!
//! Bit sets (MKEY access flags, supported ISSI versions, atomic operations and sizes, RoCE
//! versions and network headers, QP optional-parameter mask, MODIFY_CQ field selects) are
//! [`MkeyAccess`], [`SupportedIssi`], [`AtomicOps`], [`AtomicSize`], [`RoceVersionCaps`],
//! [`RoceL3TypeCaps`], [`QpOptParam`], [`CqModifyFields`] and [`CqResizeFields`]: they print the
//! names of the set bits and any remaining bits as `Unknown(0x..)`.

crate::open_enum! {
    /// Command opcode: the 16-bit `opcode` at byte 0x00 of every command input
    /// (`MLX5_CMD_OP_*`). Linux's `MLX5_CMD_OP_2ERR_QP` and `MLX5_CMD_OP_2RST_QP` start with a
    /// digit and are spelled [`CmdOpcode::QP_2ERR`] and [`CmdOpcode::QP_2RST`] here.
    pub struct CmdOpcode(u16) {
        QUERY_HCA_CAP = 0x100,
        QUERY_ADAPTER = 0x101,
        INIT_HCA = 0x102,
        TEARDOWN_HCA = 0x103,
        ENABLE_HCA = 0x104,
        DISABLE_HCA = 0x105,
        QUERY_PAGES = 0x107,
        MANAGE_PAGES = 0x108,
        SET_HCA_CAP = 0x109,
        QUERY_ISSI = 0x10a,
        SET_ISSI = 0x10b,
        SET_DRIVER_VERSION = 0x10d,
        QUERY_SF_PARTITION = 0x111,
        ALLOC_SF = 0x113,
        DEALLOC_SF = 0x114,
        SUSPEND_VHCA = 0x115,
        RESUME_VHCA = 0x116,
        QUERY_VHCA_MIGRATION_STATE = 0x117,
        SAVE_VHCA_STATE = 0x118,
        LOAD_VHCA_STATE = 0x119,
        CREATE_MKEY = 0x200,
        QUERY_MKEY = 0x201,
        DESTROY_MKEY = 0x202,
        QUERY_SPECIAL_CONTEXTS = 0x203,
        PAGE_FAULT_RESUME = 0x204,
        ALLOC_MEMIC = 0x205,
        DEALLOC_MEMIC = 0x206,
        MODIFY_MEMIC = 0x207,
        CREATE_EQ = 0x301,
        DESTROY_EQ = 0x302,
        QUERY_EQ = 0x303,
        GEN_EQE = 0x304,
        CREATE_CQ = 0x400,
        DESTROY_CQ = 0x401,
        QUERY_CQ = 0x402,
        MODIFY_CQ = 0x403,
        CREATE_QP = 0x500,
        DESTROY_QP = 0x501,
        RST2INIT_QP = 0x502,
        INIT2RTR_QP = 0x503,
        RTR2RTS_QP = 0x504,
        RTS2RTS_QP = 0x505,
        SQERR2RTS_QP = 0x506,
        /// Move a QP to the error state (Linux `MLX5_CMD_OP_2ERR_QP`).
        QP_2ERR = 0x507,
        /// Move a QP to the reset state (Linux `MLX5_CMD_OP_2RST_QP`).
        QP_2RST = 0x50a,
        QUERY_QP = 0x50b,
        SQD_RTS_QP = 0x50c,
        MAD_IFC = 0x50d,
        INIT2INIT_QP = 0x50e,
        CREATE_PSV = 0x600,
        DESTROY_PSV = 0x601,
        CREATE_SRQ = 0x700,
        DESTROY_SRQ = 0x701,
        QUERY_SRQ = 0x702,
        ARM_RQ = 0x703,
        CREATE_XRC_SRQ = 0x705,
        DESTROY_XRC_SRQ = 0x706,
        QUERY_XRC_SRQ = 0x707,
        ARM_XRC_SRQ = 0x708,
        CREATE_DCT = 0x710,
        DESTROY_DCT = 0x711,
        DRAIN_DCT = 0x712,
        QUERY_DCT = 0x713,
        ARM_DCT_FOR_KEY_VIOLATION = 0x714,
        CREATE_XRQ = 0x717,
        DESTROY_XRQ = 0x718,
        QUERY_XRQ = 0x719,
        ARM_XRQ = 0x71a,
        QUERY_XRQ_DC_PARAMS_ENTRY = 0x725,
        SET_XRQ_DC_PARAMS_ENTRY = 0x726,
        QUERY_XRQ_ERROR_PARAMS = 0x727,
        RELEASE_XRQ_ERROR = 0x729,
        MODIFY_XRQ = 0x72a,
        QUERY_ESW_FUNCTIONS = 0x740,
        QUERY_VPORT_STATE = 0x750,
        MODIFY_VPORT_STATE = 0x751,
        QUERY_ESW_VPORT_CONTEXT = 0x752,
        MODIFY_ESW_VPORT_CONTEXT = 0x753,
        QUERY_NIC_VPORT_CONTEXT = 0x754,
        MODIFY_NIC_VPORT_CONTEXT = 0x755,
        QUERY_ROCE_ADDRESS = 0x760,
        SET_ROCE_ADDRESS = 0x761,
        QUERY_HCA_VPORT_CONTEXT = 0x762,
        MODIFY_HCA_VPORT_CONTEXT = 0x763,
        QUERY_HCA_VPORT_GID = 0x764,
        QUERY_HCA_VPORT_PKEY = 0x765,
        QUERY_VNIC_ENV = 0x76f,
        QUERY_VPORT_COUNTER = 0x770,
        ALLOC_Q_COUNTER = 0x771,
        DEALLOC_Q_COUNTER = 0x772,
        QUERY_Q_COUNTER = 0x773,
        SET_MONITOR_COUNTER = 0x774,
        ARM_MONITOR_COUNTER = 0x775,
        SET_PP_RATE_LIMIT = 0x780,
        QUERY_RATE_LIMIT = 0x781,
        CREATE_SCHEDULING_ELEMENT = 0x782,
        DESTROY_SCHEDULING_ELEMENT = 0x783,
        QUERY_SCHEDULING_ELEMENT = 0x784,
        MODIFY_SCHEDULING_ELEMENT = 0x785,
        CREATE_QOS_PARA_VPORT = 0x786,
        DESTROY_QOS_PARA_VPORT = 0x787,
        ALLOC_PD = 0x800,
        DEALLOC_PD = 0x801,
        ALLOC_UAR = 0x802,
        DEALLOC_UAR = 0x803,
        CONFIG_INT_MODERATION = 0x804,
        ACCESS_REG = 0x805,
        ATTACH_TO_MCG = 0x806,
        DETACH_FROM_MCG = 0x807,
        GET_DROPPED_PACKET_LOG = 0x80a,
        QUERY_MAD_DEMUX = 0x80b,
        SET_MAD_DEMUX = 0x80c,
        NOP = 0x80d,
        ALLOC_XRCD = 0x80e,
        DEALLOC_XRCD = 0x80f,
        ALLOC_TRANSPORT_DOMAIN = 0x816,
        DEALLOC_TRANSPORT_DOMAIN = 0x817,
        QUERY_CONG_STATUS = 0x822,
        MODIFY_CONG_STATUS = 0x823,
        QUERY_CONG_PARAMS = 0x824,
        MODIFY_CONG_PARAMS = 0x825,
        QUERY_CONG_STATISTICS = 0x826,
        ADD_VXLAN_UDP_DPORT = 0x827,
        DELETE_VXLAN_UDP_DPORT = 0x828,
        SET_L2_TABLE_ENTRY = 0x829,
        QUERY_L2_TABLE_ENTRY = 0x82a,
        DELETE_L2_TABLE_ENTRY = 0x82b,
        SET_WOL_ROL = 0x830,
        QUERY_WOL_ROL = 0x831,
        CREATE_LAG = 0x840,
        MODIFY_LAG = 0x841,
        QUERY_LAG = 0x842,
        DESTROY_LAG = 0x843,
        CREATE_VPORT_LAG = 0x844,
        DESTROY_VPORT_LAG = 0x845,
        CREATE_TIR = 0x900,
        MODIFY_TIR = 0x901,
        DESTROY_TIR = 0x902,
        QUERY_TIR = 0x903,
        CREATE_SQ = 0x904,
        MODIFY_SQ = 0x905,
        DESTROY_SQ = 0x906,
        QUERY_SQ = 0x907,
        CREATE_RQ = 0x908,
        MODIFY_RQ = 0x909,
        DESTROY_RQ = 0x90a,
        QUERY_RQ = 0x90b,
        CREATE_RMP = 0x90c,
        MODIFY_RMP = 0x90d,
        DESTROY_RMP = 0x90e,
        QUERY_RMP = 0x90f,
        SET_DELAY_DROP_PARAMS = 0x910,
        CREATE_TIS = 0x912,
        MODIFY_TIS = 0x913,
        DESTROY_TIS = 0x914,
        QUERY_TIS = 0x915,
        CREATE_RQT = 0x916,
        MODIFY_RQT = 0x917,
        DESTROY_RQT = 0x918,
        QUERY_RQT = 0x919,
        SET_FLOW_TABLE_ROOT = 0x92f,
        CREATE_FLOW_TABLE = 0x930,
        DESTROY_FLOW_TABLE = 0x931,
        QUERY_FLOW_TABLE = 0x932,
        CREATE_FLOW_GROUP = 0x933,
        DESTROY_FLOW_GROUP = 0x934,
        QUERY_FLOW_GROUP = 0x935,
        SET_FLOW_TABLE_ENTRY = 0x936,
        QUERY_FLOW_TABLE_ENTRY = 0x937,
        DELETE_FLOW_TABLE_ENTRY = 0x938,
        ALLOC_FLOW_COUNTER = 0x939,
        DEALLOC_FLOW_COUNTER = 0x93a,
        QUERY_FLOW_COUNTER = 0x93b,
        MODIFY_FLOW_TABLE = 0x93c,
        ALLOC_PACKET_REFORMAT_CONTEXT = 0x93d,
        DEALLOC_PACKET_REFORMAT_CONTEXT = 0x93e,
        QUERY_PACKET_REFORMAT_CONTEXT = 0x93f,
        ALLOC_MODIFY_HEADER_CONTEXT = 0x940,
        DEALLOC_MODIFY_HEADER_CONTEXT = 0x941,
        QUERY_MODIFY_HEADER_CONTEXT = 0x942,
        FPGA_CREATE_QP = 0x960,
        FPGA_MODIFY_QP = 0x961,
        FPGA_QUERY_QP = 0x962,
        FPGA_DESTROY_QP = 0x963,
        FPGA_QUERY_QP_COUNTERS = 0x964,
        CREATE_GENERAL_OBJECT = 0xa00,
        MODIFY_GENERAL_OBJECT = 0xa01,
        QUERY_GENERAL_OBJECT = 0xa02,
        DESTROY_GENERAL_OBJECT = 0xa03,
        CREATE_UCTX = 0xa04,
        DESTROY_UCTX = 0xa06,
        CREATE_UMEM = 0xa08,
        DESTROY_UMEM = 0xa0a,
        SYNC_STEERING = 0xb00,
        QUERY_VHCA_STATE = 0xb0d,
        MODIFY_VHCA_STATE = 0xb0e,
        SYNC_CRYPTO = 0xb12,
        ALLOW_OTHER_VHCA_ACCESS = 0xb16,
        GENERATE_WQE = 0xb17,
        QUERY_VUID = 0xb22,
    }

    /// Command status: the `status` byte at 0x00 of every command output (`MLX5_CMD_STAT_*`).
    pub struct CmdStatus(u8) {
        OK = 0x00,
        /// Internal error.
        INT_ERR = 0x01,
        /// Bad operation.
        BAD_OP_ERR = 0x02,
        /// Bad parameter.
        BAD_PARAM_ERR = 0x03,
        /// Bad system state.
        BAD_SYS_STATE_ERR = 0x04,
        /// Bad resource.
        BAD_RES_ERR = 0x05,
        /// Resource busy.
        RES_BUSY = 0x06,
        /// Limits exceeded.
        LIM_ERR = 0x08,
        /// Bad resource state.
        BAD_RES_STATE_ERR = 0x09,
        /// Bad index.
        IX_ERR = 0x0a,
        /// No resources.
        NO_RES_ERR = 0x0f,
        BAD_QP_STATE_ERR = 0x10,
        /// Bad packet (discarded).
        BAD_PKT_ERR = 0x30,
        /// Too many outstanding CQEs.
        BAD_SIZE_OUTS_CQES_ERR = 0x40,
        /// Bad input length.
        BAD_INP_LEN_ERR = 0x50,
        /// Bad output length.
        BAD_OUTP_LEN_ERR = 0x51,
    }

    /// Command delivery status: `status_own` bits 7:1 of a command queue entry
    /// (`MLX5_CMD_DELIVERY_STAT_*`).
    pub struct DeliveryStatus(u8) {
        OK = 0x00,
        /// Entry or mailbox signature error.
        SIGNAT_ERR = 0x01,
        /// Token error.
        TOK_ERR = 0x02,
        /// Bad mailbox block number.
        BAD_BLK_NUM_ERR = 0x03,
        /// Output pointer not aligned to the block size.
        OUT_PTR_ALIGN_ERR = 0x04,
        /// Input pointer not aligned to the block size.
        IN_PTR_ALIGN_ERR = 0x05,
        /// Firmware internal error.
        FW_ERR = 0x06,
        /// Command input length error.
        IN_LENGTH_ERR = 0x07,
        /// Command output length error.
        OUT_LENGTH_ERR = 0x08,
        /// Reserved fields not cleared.
        RES_FLD_NOT_CLR_ERR = 0x09,
        /// Bad command descriptor type.
        CMD_DESCR_ERR = 0x10,
    }

    /// Send WQE opcode: bits 7:0 of the control segment's `opmod_idx_opcode`
    /// (`MLX5_OPCODE_*`, Linux `device.h` and rdma-core `mlx5dv.h`).
    pub struct WqeOpcode(u8) {
        NOP = 0x00,
        /// Send with invalidate.
        SEND_INVAL = 0x01,
        RDMA_WRITE = 0x08,
        RDMA_WRITE_IMM = 0x09,
        SEND = 0x0a,
        SEND_IMM = 0x0b,
        /// Large send offload (rdma-core `MLX5_OPCODE_TSO`).
        LSO = 0x0e,
        RDMA_READ = 0x10,
        /// Atomic compare-and-swap.
        ATOMIC_CS = 0x11,
        /// Atomic fetch-and-add.
        ATOMIC_FA = 0x12,
        ATOMIC_MASKED_CS = 0x14,
        ATOMIC_MASKED_FA = 0x15,
        BIND_MW = 0x18,
        FMR = 0x19,
        LOCAL_INVAL = 0x1b,
        CONFIG_CMD = 0x1f,
        SET_PSV = 0x20,
        GET_PSV = 0x21,
        CHECK_PSV = 0x22,
        DUMP = 0x23,
        /// User-mode memory registration.
        UMR = 0x25,
        RGET_PSV = 0x26,
        RCHECK_PSV = 0x27,
        TAG_MATCHING = 0x28,
        /// Enhanced multi-packet send WQE.
        ENHANCED_MPSW = 0x29,
        FLOW_TBL_ACCESS = 0x2c,
        ACCESS_ASO = 0x2d,
        MMO = 0x2f,
    }

    /// CQE opcode: `op_own` bits 7:4 of a CQE (`MLX5_CQE_*`).
    pub struct CqeOpcode(u8) {
        /// Requester (send side) completion.
        REQ = 0,
        /// Responder: RDMA write with immediate.
        RESP_WR_IMM = 1,
        /// Responder: send.
        RESP_SEND = 2,
        /// Responder: send with immediate.
        RESP_SEND_IMM = 3,
        /// Responder: send with invalidate.
        RESP_SEND_INV = 4,
        RESIZE_CQ = 5,
        NO_PACKET = 6,
        /// Signature error.
        SIG_ERR = 12,
        /// Requester error (an [`crate::plain::err_cqe`]).
        REQ_ERR = 13,
        /// Responder error (an [`crate::plain::err_cqe`]).
        RESP_ERR = 14,
        /// Not yet written by the device.
        INVALID = 15,
    }

    /// Error CQE syndrome: the `syndrome` byte at 0x37 of an error CQE
    /// (`MLX5_CQE_SYNDROME_*`).
    pub struct CqeSyndrome(u8) {
        LOCAL_LENGTH_ERR = 0x01,
        LOCAL_QP_OP_ERR = 0x02,
        LOCAL_PROT_ERR = 0x04,
        /// Work request flushed because the QP is in the error state.
        WR_FLUSH_ERR = 0x05,
        MW_BIND_ERR = 0x06,
        BAD_RESP_ERR = 0x10,
        LOCAL_ACCESS_ERR = 0x11,
        REMOTE_INVAL_REQ_ERR = 0x12,
        REMOTE_ACCESS_ERR = 0x13,
        REMOTE_OP_ERR = 0x14,
        /// Transport retry counter exceeded.
        TRANSPORT_RETRY_EXC_ERR = 0x15,
        /// RNR retry counter exceeded.
        RNR_RETRY_EXC_ERR = 0x16,
        REMOTE_ABORTED_ERR = 0x22,
    }

    /// Event type: the EQE `type` byte at 0x01, and the bit number in CREATE_EQ's
    /// `event_bitmask` (`MLX5_EVENT_TYPE_*`).
    pub struct EventType(u8) {
        /// Completion event.
        COMP = 0x00,
        PATH_MIG = 0x01,
        /// Communication established.
        COMM_EST = 0x02,
        SQ_DRAINED = 0x03,
        CQ_ERROR = 0x04,
        /// Work queue catastrophic error.
        WQ_CATAS_ERROR = 0x05,
        PATH_MIG_FAILED = 0x07,
        INTERNAL_ERROR = 0x08,
        PORT_CHANGE = 0x09,
        /// Command completion.
        CMD = 0x0a,
        PAGE_REQUEST = 0x0b,
        PAGE_FAULT = 0x0c,
        NIC_VPORT_CHANGE = 0x0d,
        ESW_FUNCTIONS_CHANGED = 0x0e,
        VHCA_STATE_CHANGE = 0x0f,
        /// Invalid request on a local work queue.
        WQ_INVAL_REQ_ERROR = 0x10,
        /// Local access violation on a work queue.
        WQ_ACCESS_ERROR = 0x11,
        SRQ_CATAS_ERROR = 0x12,
        SRQ_LAST_WQE = 0x13,
        SRQ_RQ_LIMIT = 0x14,
        GPIO_EVENT = 0x15,
        PORT_MODULE_EVENT = 0x16,
        TEMP_WARN_EVENT = 0x17,
        XRQ_ERROR = 0x18,
        REMOTE_CONFIG = 0x19,
        /// Doorbell / BlueFlame congestion.
        DB_BF_CONGESTION = 0x1a,
        STALL_EVENT = 0x1b,
        DCT_DRAINED = 0x1c,
        DCT_KEY_VIOLATION = 0x1d,
        FPGA_ERROR = 0x20,
        FPGA_QP_ERROR = 0x21,
        GENERAL_EVENT = 0x22,
        MONITOR_COUNTER = 0x24,
        PPS_EVENT = 0x25,
        DEVICE_TRACER = 0x26,
    }

    /// Port-change event sub-type: the EQE `sub_type` byte of a PORT_CHANGE event
    /// (`MLX5_PORT_CHANGE_SUBTYPE_*`).
    pub struct PortChangeSubtype(u8) {
        DOWN = 1,
        ACTIVE = 4,
        INITIALIZED = 5,
        LID = 6,
        PKEY = 7,
        GUID = 8,
        /// Client re-register.
        CLIENT_REREG = 9,
    }

    /// Path migration state: the `pm_state` field of the QPC (`MLX5_QP_PM_*`).
    pub struct QpPmState(u8) {
        ARMED = 0x0,
        REARM = 0x1,
        RESERVED = 0x2,
        /// No alternate path armed: what a driver without path migration writes.
        MIGRATED = 0x3,
    }

    /// QP state: the `state` field of the QPC (`MLX5_QP_STATE_*`).
    pub struct QpState(u8) {
        /// Reset.
        RST = 0,
        INIT = 1,
        /// Ready to receive.
        RTR = 2,
        /// Ready to send.
        RTS = 3,
        /// Send queue error.
        SQER = 4,
        /// Send queue drained.
        SQD = 5,
        ERR = 6,
        SQ_DRAINING = 7,
        SUSPENDED = 9,
    }

    /// QP service type: the `st` field of the QPC (`MLX5_QP_ST_*`).
    pub struct QpServiceType(u8) {
        /// Reliable connected.
        RC = 0x0,
        /// Unreliable connected.
        UC = 0x1,
        /// Unreliable datagram.
        UD = 0x2,
        XRC = 0x3,
        MLX = 0x4,
        /// Dynamically connected initiator.
        DCI = 0x5,
        /// Dynamically connected target.
        DCT = 0x6,
        QP0 = 0x7,
        QP1 = 0x8,
        RAW_ETHERTYPE = 0x9,
        RAW_IPV6 = 0xa,
        SNIFFER = 0xb,
        REG_UMR = 0xc,
        PTP_1588 = 0xd,
        SYNC_UMR = 0xe,
    }

    /// Path MTU: the QPC `mtu` field (IB encoding, `IB_MTU_*`).
    pub struct IbMtu(u8) {
        MTU_256 = 1,
        MTU_512 = 2,
        MTU_1024 = 3,
        MTU_2048 = 4,
        MTU_4096 = 5,
    }

    /// HCA capability type: bits 15:1 of QUERY_HCA_CAP / SET_HCA_CAP `op_mod`
    /// (`MLX5_CAP_*`, Linux `enum mlx5_cap_type`).
    pub struct HcaCapType(u16) {
        GENERAL = 0x0,
        ETHERNET_OFFLOADS = 0x1,
        /// On-demand paging.
        ODP = 0x2,
        ATOMIC = 0x3,
        ROCE = 0x4,
        IPOIB_OFFLOADS = 0x5,
        IPOIB_ENHANCED_OFFLOADS = 0x6,
        FLOW_TABLE = 0x7,
        ESWITCH_FLOW_TABLE = 0x8,
        ESWITCH = 0x9,
        VECTOR_CALC = 0xb,
        QOS = 0xc,
        DEBUG = 0xd,
        DEV_MEM = 0xf,
        TLS = 0x11,
        VDPA_EMULATION = 0x13,
        DEV_EVENT = 0x14,
        IPSEC = 0x15,
        CRYPTO = 0x1a,
        /// General device capabilities, second page (`cmd_hca_cap_2`).
        GENERAL_2 = 0x20,
        PORT_SELECTION = 0x25,
    }

    /// QUERY_PAGES `op_mod`: which page request is queried (Linux `MLX5_BOOT_PAGES`,
    /// `MLX5_INIT_PAGES`, `MLX5_POST_INIT_PAGES`).
    pub struct PagesOpMod(u16) {
        /// Pages needed before INIT_HCA's capability setup.
        BOOT = 1,
        /// Pages needed by INIT_HCA.
        INIT = 2,
        /// Pages needed after initialization (Linux `MLX5_POST_INIT_PAGES`).
        REGULAR = 3,
    }

    /// MANAGE_PAGES `op_mod` (Linux `MLX5_PAGES_*`; PRM: allocation fail, allocation success,
    /// HCA return pages).
    pub struct ManagePagesOpMod(u16) {
        /// The driver could not allocate the pages firmware asked for.
        CANT_GIVE = 0,
        /// Hand pages to firmware.
        GIVE = 1,
        /// Take pages back from firmware.
        TAKE = 2,
    }

    /// TEARDOWN_HCA input `profile` (`MLX5_TEARDOWN_HCA_IN_PROFILE_*`).
    pub struct TeardownProfile(u16) {
        GRACEFUL_CLOSE = 0x0,
        FORCE_CLOSE = 0x1,
        PREPARE_FAST_TEARDOWN = 0x2,
    }

    /// ACCESS_REG `register_id` (`MLX5_REG_*`, Linux `driver.h`).
    pub struct AccessRegId(u16) {
        QPTS = 0x4002,
        QETCR = 0x4005,
        QTCT = 0x400a,
        QPDPM = 0x4013,
        QCAM = 0x4019,
        DCBX_PARAM = 0x4020,
        DCBX_APP = 0x4021,
        FPGA_CAP = 0x4022,
        FPGA_CTRL = 0x4023,
        FPGA_ACCESS_REG = 0x4024,
        CORE_DUMP = 0x402e,
        /// Port capabilities.
        PCAP = 0x5001,
        /// Port module mapping.
        PMLP = 0x5002,
        /// Port MTU.
        PMTU = 0x5003,
        /// Port type and speed.
        PTYS = 0x5004,
        /// Port administrative and operational status.
        PAOS = 0x5006,
        PFCC = 0x5007,
        PPCNT = 0x5008,
        PUDE = 0x5009,
        PPTB = 0x500b,
        PBMC = 0x500c,
        PELC = 0x500e,
        PVLC = 0x500f,
        PMPE = 0x5010,
        PMAOS = 0x5012,
        PPLM = 0x5023,
        PDDR = 0x5031,
        PPHCR = 0x503e,
        PCMR = 0x5041,
        PCAM = 0x507f,
        NODE_DESC = 0x6001,
        /// Host endianness (written once during bring-up).
        HOST_ENDIANNESS = 0x7004,
        MTCAP = 0x9009,
        MTMP = 0x900a,
        MCIA = 0x9014,
        MNVDA = 0x9024,
        MFRL = 0x9028,
        MLCR = 0x902b,
        MRTC = 0x902d,
        MTRC_CAP = 0x9040,
        MTRC_CONF = 0x9041,
        MTRC_STDB = 0x9042,
        MTRC_CTRL = 0x9043,
        MPEIN = 0x9050,
        MPCNT = 0x9051,
        MTPPS = 0x9053,
        MTPPSE = 0x9054,
        MTUTC = 0x9055,
        MPEGC = 0x9056,
        MPIR = 0x9059,
        MCQS = 0x9060,
        MCQI = 0x9061,
        MCC = 0x9062,
        MCDA = 0x9063,
        MCAM = 0x907f,
        MSECQ = 0x9155,
        MSEES = 0x9156,
        MIRC = 0x9162,
        MTPTM = 0x9180,
        MTCTR = 0x9181,
        MRTCQ = 0x9182,
        SBCAM = 0xb01f,
        RESOURCE_DUMP = 0xc000,
        NIC_CAP = 0xc00d,
        /// Default timeouts register.
        DTOR = 0xc00e,
        VHCA_ICM_CTRL = 0xc010,
    }

    /// ACCESS_REG `op_mod`: the direction of the access (Linux `mlx5_core_access_reg`'s
    /// `write` argument, inverted).
    pub struct AccessRegOpMod(u16) {
        WRITE = 0,
        READ = 1,
    }

    /// PAOS `admin_status` and `oper_status` (Linux `enum mlx5_port_status`).
    pub struct PortStatus(u8) {
        UP = 1,
        DOWN = 2,
    }

    /// QUERY_VPORT_STATE `state`: the vport's operational state (Linux `MLX5_VPORT_STATE_*`).
    pub struct VportState(u8) {
        DOWN = 0,
        UP = 1,
    }

    /// QUERY_VPORT_STATE `admin_state` and MODIFY_VPORT_STATE's (Linux
    /// `MLX5_VPORT_ADMIN_STATE_*`).
    pub struct VportAdminState(u8) {
        DOWN = 0,
        UP = 1,
        /// Follows the uplink.
        AUTO = 2,
    }

    /// `hca_vport_context.port_state` and `vport_state`: the InfiniBand port states (Linux
    /// `enum ib_port_state`), which RoCE ports report too.
    pub struct IbPortState(u8) {
        DOWN = 1,
        INIT = 2,
        ARMED = 3,
        ACTIVE = 4,
    }

    /// `hca_vport_context.port_physical_state` (Linux `enum ib_port_phys_state`).
    pub struct PortPhysicalState(u8) {
        SLEEP = 1,
        /// Enabled, with no link partner: the cable is out.
        POLLING = 2,
        /// Administratively down.
        DISABLED = 3,
        PORT_CONFIGURATION_TRAINING = 4,
        LINK_UP = 5,
        LINK_ERROR_RECOVERY = 6,
        PHY_TEST = 7,
    }

    /// PTYS `proto_mask`: which protocol's fields a PTYS access is about (`MLX5_PTYS_*`).
    pub struct PtysProto(u8) {
        /// InfiniBand.
        IB = 1 << 0,
        /// Ethernet.
        EN = 1 << 2,
    }

    /// An Ethernet link mode: its bit number in PTYS `eth_proto_capability`, `_admin` and
    /// `_oper` (Linux `enum mlx5e_link_mode`, `MLX5E_*`).
    pub struct EthLinkMode(u8) {
        SGMII_100M = 0,
        BASE_1000_CX_SGMII = 1,
        BASE_1000_KX = 2,
        BASE_10G_CX4 = 3,
        BASE_10G_KX4 = 4,
        BASE_10G_KR = 5,
        BASE_20G_KR2 = 6,
        BASE_40G_CR4 = 7,
        BASE_40G_KR4 = 8,
        BASE_56G_R4 = 9,
        BASE_10G_CR = 12,
        BASE_10G_SR = 13,
        BASE_10G_ER = 14,
        BASE_40G_SR4 = 15,
        BASE_40G_LR4 = 16,
        BASE_50G_SR2 = 18,
        BASE_100G_CR4 = 20,
        BASE_100G_SR4 = 21,
        BASE_100G_KR4 = 22,
        BASE_100G_LR4 = 23,
        BASE_100_TX = 24,
        BASE_1000_T = 25,
        BASE_10G_T = 26,
        BASE_25G_CR = 27,
        BASE_25G_KR = 28,
        BASE_25G_SR = 29,
        BASE_50G_CR2 = 30,
        BASE_50G_KR2 = 31,
    }

    /// An extended Ethernet link mode: its bit number in PTYS `ext_eth_proto_*` (Linux
    /// `enum mlx5e_ext_link_mode`, `MLX5E_*`).
    pub struct ExtEthLinkMode(u8) {
        SGMII_100M = 0,
        BASE_1000_X_SGMII = 1,
        BASE_5G_R = 3,
        XFI_XAUI_1_10G = 4,
        XLAUI_4_XLPPI_4_40G = 5,
        AUI_1_25G_CR_KR = 6,
        AUI_2_LAUI_2_50G_CR2_KR2 = 7,
        AUI_1_LAUI_1_50G_CR_KR = 8,
        CAUI_4_100G_CR4_KR4 = 9,
        AUI_2_100G_CR2_KR2 = 10,
        AUI_1_100G_CR_KR = 11,
        AUI_4_200G_CR4_KR4 = 12,
        AUI_2_200G_CR2_KR2 = 13,
        AUI_8_400G = 15,
        AUI_4_400G_CR4_KR4 = 16,
        AUI_2_400G_CR2_KR2 = 17,
        AUI_8_800G_CR8_KR8 = 19,
    }

    /// Health syndrome: the health buffer `synd` byte (`MLX5_HEALTH_SYNDR_*`).
    pub struct HealthSyndrome(u8) {
        /// Firmware internal error.
        FW_ERR = 0x1,
        /// Internal RISC not responding.
        IRISC_ERR = 0x7,
        HW_UNRECOVERABLE_ERR = 0x8,
        /// Firmware CRC error.
        CRC_ERR = 0x9,
        /// ICM fetch PCI error.
        FETCH_PCI_ERR = 0xa,
        /// Hardware fatal error.
        HW_FTL_ERR = 0xb,
        ASYNC_EQ_OVERRUN_ERR = 0xc,
        EQ_ERR = 0xd,
        /// Invalid EQ referenced.
        EQ_INV = 0xe,
        FFSER_ERR = 0xf,
        HIGH_TEMP = 0x10,
    }

    /// NIC interface mode: `cmdq_addr_l_sz` bits 10:8 of the initialization segment
    /// (`MLX5_NIC_IFC_*`).
    pub struct NicInterface(u8) {
        /// Full driver (the normal operating mode).
        FULL = 0,
        /// Written by the driver at the end of fast teardown.
        DISABLED = 1,
        NO_DRAM_NIC = 2,
        /// Older kernels' name for value 3.
        INVALID = 3,
        /// Software reset; also what an all-ones read of a dead function yields.
        SW_RESET = 7,
    }

    /// Receive queue type: the QPC `rq_type` field (Linux `qp.h`).
    pub struct RqType(u8) {
        /// Regular receive queue.
        NON_ZERO_RQ = 0x0,
        /// Receives from the SRQ named in the QPC.
        SRQ_RQ = 0x1,
        CRQ_RQ = 0x2,
        /// No receive queue.
        ZERO_LEN_RQ = 0x3,
    }

    /// CQ status: the `status` field of the CQC (`MLX5_CQC_STATUS_*`, Linux `mlx5_ifc.h`).
    pub struct CqStatus(u8) {
        OK = 0x0,
        /// The CQ overflowed.
        CQ_OVERFLOW = 0x9,
        /// Writing a CQE failed.
        CQ_WRITE_FAIL = 0xa,
    }

    /// CQ arm state: the `st` field of the CQC (`MLX5_CQC_ST_*`, Linux `mlx5_ifc.h`).
    pub struct CqState(u8) {
        /// Armed for the next solicited completion.
        SOLICITED_NOTIFICATION_REQUEST_ARMED = 0x6,
        /// Armed for the next completion.
        NOTIFICATION_REQUEST_ARMED = 0x9,
        /// Not armed: the last arm request has fired (or none was made).
        FIRED = 0xa,
    }

    /// Memory key access mode: the 5-bit value split over the mkey context's `access_mode_4_2`
    /// and `access_mode_1_0` fields (`MLX5_MKC_ACCESS_MODE_*`, Linux `mlx5_ifc.h`).
    pub struct MkcAccessMode(u8) {
        /// Physical addresses, no translation.
        PA = 0x0,
        /// Translation through the MTT entries that follow the context.
        MTT = 0x1,
        /// Indirect key through KLM entries.
        KLMS = 0x2,
        /// Indirect key through fixed-size KSM entries.
        KSM = 0x3,
        /// Software-managed ICM.
        SW_ICM = 0x4,
        /// On-device memory (MEMIC).
        MEMIC = 0x5,
        /// A key of another function (cross-VHCA).
        CROSSING = 0x6,
    }

    /// CQ error syndrome: the `syndrome` byte of a CQ_ERROR event's [`crate::plain::eqe_cq_err`]
    /// (`MLX5_CQ_ERROR_SYNDROME_*`, Linux `mlx5_ifc.h`).
    pub struct CqErrorSyndrome(u8) {
        /// More CQEs than the CQ holds (consumer index not advanced).
        CQ_OVERRUN = 0x1,
        /// The CQ buffer or doorbell record could not be accessed.
        CQ_ACCESS_VIOLATION_ERROR = 0x2,
    }

    /// EQ status: the `status` field of the EQC (`MLX5_EQC_STATUS_*`, Linux `mlx5_ifc.h`).
    pub struct EqStatus(u8) {
        OK = 0x0,
        /// Writing an EQE failed (the EQ overran).
        EQ_WRITE_FAILURE = 0xa,
    }

    /// EQ arm state: the `st` field of the EQC (`MLX5_EQC_ST_*`, Linux `mlx5_ifc.h`).
    pub struct EqState(u8) {
        /// Armed: the next EQE raises the interrupt.
        ARMED = 0x9,
        /// Not armed: the interrupt has fired (or the EQ was never armed).
        FIRED = 0xa,
    }

    /// SRQ state: the `state` field of the SRQ context (`MLX5_SRQC_STATE_*`, Linux
    /// `mlx5_ifc.h`).
    pub struct SrqState(u8) {
        GOOD = 0x0,
        ERROR = 0x1,
    }

    /// MODIFY_CQ `op_mod`. Linux names only the resize value (`MLX5_CQ_OPMOD_RESIZE`,
    /// `cq.h`); `MODIFY` (moderation and other context fields, op_mod 0) is a descriptive name.
    pub struct ModifyCqOpMod(u16) {
        /// Modify the fields named in `modify_field_select` ([`CqModifyFields`]).
        MODIFY = 0x0,
        /// Resize the CQ: the fields named in `resize_field_select` ([`CqResizeFields`]).
        RESIZE = 0x1,
    }

    /// Requester 8-byte atomic result endianness: `atomic_caps.atomic_req_8B_endianness_mode`
    /// (`MLX5_ATOMIC_REQ_MODE_*`, Linux `drivers/net/ethernet/mellanox/mlx5/core/main.c`).
    pub struct AtomicReqMode(u8) {
        /// Big-endian original values.
        BE = 0x0,
        /// Original values in host byte order.
        HOST_ENDIANNESS = 0x1,
    }

    /// RoCE version of a GID table entry: `roce_addr_layout.roce_version`
    /// (`MLX5_ROCE_VERSION_*`, Linux `device.h`).
    pub struct RoceVersion(u8) {
        VERSION_1 = 0,
        VERSION_2 = 2,
    }

    /// L3 address type of a GID table entry: `roce_addr_layout.roce_l3_type`
    /// (`MLX5_ROCE_L3_TYPE_*`, Linux `device.h`).
    pub struct RoceL3Type(u8) {
        IPV4 = 0,
        IPV6 = 1,
    }

    /// ARM_RQ `op_mod`: which kind of receive queue is armed (`MLX5_ARM_RQ_IN_OP_MOD_*`, Linux
    /// `mlx5_ifc.h`).
    pub struct ArmRqOpMod(u16) {
        /// Shared receive queue.
        SRQ = 0x1,
    }
}

impl MkcAccessMode {
    /// The mkey context's `access_mode_1_0` value (bits 1:0 of the mode).
    pub const fn bits_1_0(self) -> u8 {
        self.0 & 0x3
    }

    /// The mkey context's `access_mode_4_2` value (bits 4:2 of the mode).
    pub const fn bits_4_2(self) -> u8 {
        (self.0 >> 2) & 0x7
    }

    /// The mode carried in an mkey context's `access_mode_4_2` and `access_mode_1_0` fields.
    pub const fn from_fields(access_mode_4_2: u8, access_mode_1_0: u8) -> Self {
        Self(((access_mode_4_2 & 0x7) << 2) | (access_mode_1_0 & 0x3))
    }
}

/// Vendor error syndrome (err_cqe `vendor_err_synd`) of an ODP page fault
/// (`MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`).
pub const CQE_VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;

impl CmdStatus {
    /// The positive errno rdma-core and Linux map this status to (`mlx5_cmd_status_to_err`;
    /// Linux returns it negated). Unknown statuses map to EIO.
    pub const fn errno(self) -> i32 {
        const EIO: i32 = 5;
        const EAGAIN: i32 = 11;
        const ENOMEM: i32 = 12;
        const EBUSY: i32 = 16;
        const EINVAL: i32 = 22;
        match self {
            Self::OK => 0,
            Self::INT_ERR | Self::BAD_SYS_STATE_ERR => EIO,
            Self::BAD_OP_ERR
            | Self::BAD_PARAM_ERR
            | Self::BAD_RES_ERR
            | Self::BAD_RES_STATE_ERR
            | Self::IX_ERR
            | Self::BAD_QP_STATE_ERR
            | Self::BAD_PKT_ERR
            | Self::BAD_SIZE_OUTS_CQES_ERR => EINVAL,
            Self::RES_BUSY => EBUSY,
            Self::LIM_ERR => ENOMEM,
            Self::NO_RES_ERR => EAGAIN,
            Self::BAD_INP_LEN_ERR | Self::BAD_OUTP_LEN_ERR => EIO,
            _ => EIO,
        }
    }

    /// Whether the command succeeded.
    pub const fn is_ok(self) -> bool {
        self.0 == 0
    }
}

impl DeliveryStatus {
    /// The delivery status carried in a command entry's `status_own` byte (bits 7:1).
    pub const fn from_status_own(status_own: u8) -> Self {
        Self(status_own >> 1)
    }
}

impl CqeOpcode {
    /// The opcode carried in a CQE's `op_own` byte (bits 7:4).
    pub const fn from_op_own(op_own: u8) -> Self {
        Self(op_own >> 4)
    }

    /// Whether this opcode marks an error CQE (SIG_ERR, REQ_ERR or RESP_ERR).
    pub const fn is_error(self) -> bool {
        matches!(self.0, 12..=14)
    }
}

impl IbMtu {
    /// The MTU in bytes, or `None` for a value outside 1..=5.
    pub const fn bytes(self) -> Option<u32> {
        match self.0 {
            1..=5 => Some(128 << self.0),
            _ => None,
        }
    }

    /// The encoding of an MTU given in bytes (256, 512, 1024, 2048 or 4096).
    pub const fn from_bytes(bytes: u32) -> Option<Self> {
        match bytes {
            256 => Some(Self::MTU_256),
            512 => Some(Self::MTU_512),
            1024 => Some(Self::MTU_1024),
            2048 => Some(Self::MTU_2048),
            4096 => Some(Self::MTU_4096),
            _ => None,
        }
    }
}

impl HcaCapType {
    /// The QUERY_HCA_CAP / SET_HCA_CAP `op_mod` for this type: `type << 1 | current`, where
    /// `current` selects the current values (1) rather than the maximum ones (0).
    pub const fn op_mod(self, current: bool) -> u16 {
        (self.0 << 1) | current as u16
    }

    /// The capability type and the current/maximum selector encoded in an `op_mod`.
    pub const fn from_op_mod(op_mod: u16) -> (Self, bool) {
        (Self(op_mod >> 1), op_mod & 1 != 0)
    }
}

/// Declares a bit-set newtype whose `Display` lists the named bits that are set and any
/// remaining bits as `Unknown(0x..)`.
macro_rules! flag_set {
    (
        $(#[$m:meta])*
        pub struct $name:ident($repr:ty) {
            $($(#[$vm:meta])* $v:ident = $val:expr),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $repr);
        #[allow(missing_docs)]
        impl $name {
            $($(#[$vm])* pub const $v: $name = $name($val);)*
            /// Every named flag with its name, in bit order.
            pub const NAMED: &'static [(&'static str, $name)] = &[$((stringify!($v), $name($val))),*];
            /// The union of every named flag.
            pub const ALL_KNOWN: $name = $name(0 $(| $val)*);
            /// No flag set.
            pub const fn empty() -> Self {
                $name(0)
            }
            /// The raw bits.
            pub const fn bits(self) -> $repr {
                self.0
            }
            /// Whether no bit is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }
            /// Whether every bit of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }
            /// Whether any bit of `other` is set in `self`.
            pub const fn intersects(self, other: Self) -> bool {
                self.0 & other.0 != 0
            }
            /// `self` with the bits of `other` added.
            pub const fn union(self, other: Self) -> Self {
                $name(self.0 | other.0)
            }
            /// `self` with the bits of `other` removed.
            pub const fn difference(self, other: Self) -> Self {
                $name(self.0 & !other.0)
            }
            /// The bits that are not named flags.
            pub const fn unknown_bits(self) -> $repr {
                self.0 & !Self::ALL_KNOWN.0
            }
        }
        impl core::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                $name(self.0 | rhs.0)
            }
        }
        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: Self) {
                self.0 |= rhs.0;
            }
        }
        impl core::ops::BitAnd for $name {
            type Output = Self;
            fn bitand(self, rhs: Self) -> Self {
                $name(self.0 & rhs.0)
            }
        }
        impl core::ops::BitAndAssign for $name {
            fn bitand_assign(&mut self, rhs: Self) {
                self.0 &= rhs.0;
            }
        }
        impl core::fmt::Display for $name {
            /// `A | B | Unknown(0x..)`, or `(empty)` when no bit is set.
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                if self.0 == 0 {
                    return f.write_str("(empty)");
                }
                let mut first = true;
                for (n, v) in Self::NAMED {
                    if self.0 & v.0 == v.0 {
                        if !first {
                            f.write_str(" | ")?;
                        }
                        f.write_str(n)?;
                        first = false;
                    }
                }
                let rest = self.unknown_bits();
                if rest != 0 {
                    if !first {
                        f.write_str(" | ")?;
                    }
                    write!(f, "Unknown({:#x})", rest)?;
                }
                Ok(())
            }
        }
        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Display::fmt(self, f)
            }
        }
        impl From<$repr> for $name {
            fn from(v: $repr) -> Self {
                $name(v)
            }
        }
        impl From<$name> for $repr {
            fn from(v: $name) -> $repr {
                v.0
            }
        }
    };
}

flag_set! {
    /// MKEY access rights: the access bits of the mkey context byte 0x02 (`mkc` `umr_en`, `a`,
    /// `rw`, `rr`, `lw`, `lr`; Linux `MLX5_PERM_*`). Bits 1:0 of that byte are
    /// `access_mode_1_0`, not access rights, and print as unknown if left in.
    pub struct MkeyAccess(u8) {
        LOCAL_READ = 1 << 2,
        LOCAL_WRITE = 1 << 3,
        REMOTE_READ = 1 << 4,
        REMOTE_WRITE = 1 << 5,
        /// Remote atomic.
        ATOMIC = 1 << 6,
        /// Allow UMR to modify this key.
        UMR_EN = 1 << 7,
    }
}

flag_set! {
    /// ISSI versions the device supports: `query_issi_out.supported_issi_dw0`, where bit `n`
    /// set means ISSI `n` is supported (Linux `mlx5_core_set_issi` and rdma-core
    /// `mlx5_vfio_set_issi` test `1 << 1` and `1 << 0`; neither names the bits).
    pub struct SupportedIssi(u32) {
        /// ISSI 0.
        ISSI_0 = 1 << 0,
        /// ISSI 1, the version umlx and Linux set.
        ISSI_1 = 1 << 1,
    }
}

flag_set! {
    /// Atomic operations the device supports: `atomic_caps.atomic_operations`
    /// (`MLX5_ATOMIC_OPS_*`, Linux `device.h`).
    pub struct AtomicOps(u16) {
        /// 8-byte compare-and-swap.
        CMP_SWAP = 1 << 0,
        /// 8-byte fetch-and-add.
        FETCH_ADD = 1 << 1,
        /// Extended (masked) compare-and-swap.
        EXTENDED_CMP_SWAP = 1 << 2,
        /// Extended (masked) fetch-and-add.
        EXTENDED_FETCH_ADD = 1 << 3,
    }
}

flag_set! {
    /// RoCE versions the device supports: `roce_cap.roce_version`, bit n for version n
    /// (`MLX5_ROCE_VERSION_1_CAP`, `MLX5_ROCE_VERSION_2_CAP`, Linux `device.h`).
    pub struct RoceVersionCaps(u8) {
        /// RoCE v1 (Ethernet, GRH).
        VERSION_1 = 1 << 0,
        /// RoCE v2 (UDP/IP).
        VERSION_2 = 1 << 2,
    }
}

flag_set! {
    /// Network headers the device's RoCE supports: `roce_cap.l3_type`
    /// (`MLX5_ROCE_L3_TYPE_IPV4_CAP`, `MLX5_ROCE_L3_TYPE_IPV6_CAP`, Linux `device.h`).
    pub struct RoceL3TypeCaps(u8) {
        /// IPv4.
        IPV4 = 1 << 1,
        /// IPv6.
        IPV6 = 1 << 2,
    }
}

flag_set! {
    /// QP optional-parameter mask: `opt_param_mask` of the modify-QP commands
    /// (`MLX5_QP_OPTPAR_*`, Linux `qp.h`).
    pub struct QpOptParam(u32) {
        /// Alternate address path.
        ALT_ADDR_PATH = 1 << 0,
        /// Remote read enable.
        RRE = 1 << 1,
        /// Remote atomic enable.
        RAE = 1 << 2,
        /// Remote write enable.
        RWE = 1 << 3,
        PKEY_INDEX = 1 << 4,
        Q_KEY = 1 << 5,
        RNR_TIMEOUT = 1 << 6,
        PRIMARY_ADDR_PATH = 1 << 7,
        /// Send RDMA-read/atomic maximum.
        SRA_MAX = 1 << 8,
        /// Responder RDMA-read/atomic maximum.
        RRA_MAX = 1 << 9,
        /// Path migration state.
        PM_STATE = 1 << 10,
        RETRY_COUNT = 1 << 12,
        RNR_RETRY = 1 << 13,
        ACK_TIMEOUT = 1 << 14,
        /// LAG transmit affinity.
        LAG_TX_AFF = 1 << 15,
        PRI_PORT = 1 << 16,
        SRQN = 1 << 18,
        CQN_RCV = 1 << 19,
        DC_HS = 1 << 20,
        DC_KEY = 1 << 21,
        /// Packet pacing index.
        PP_INDEX = 1 << 22,
        COUNTER_SET_ID = 1 << 25,
    }
}

impl QpOptParam {
    /// The optional parameters a QP modify command (`op`) accepts for a QP of service type
    /// `st`: the table Linux `drivers/infiniband/hw/mlx5/qp.c` keeps as `opt_mask[cur][new][st]`
    /// ("according to firmware spec") and masks every `opt_param_mask` with. RST2INIT, 2ERR and
    /// 2RST have no entry there (no optional parameter); neither has a service type this
    /// table does not list. Parameters of a transition that are not in this set are mandatory
    /// (always read from the context) or not part of that transition. XRC has the RC set
    /// (Linux commit "Fix missing XRC optional parameters"); the packet-pacing and LAG bits of
    /// newer kernels are not listed (umlx sets neither).
    pub const fn allowed(op: CmdOpcode, st: QpServiceType) -> QpOptParam {
        const fn u(bits: &[QpOptParam]) -> QpOptParam {
            let mut v = 0;
            let mut i = 0;
            while i < bits.len() {
                v |= bits[i].0;
                i += 1;
            }
            QpOptParam(v)
        }
        use QpOptParam as P;
        let rc = matches!(st, QpServiceType::RC | QpServiceType::XRC);
        let uc = st.0 == QpServiceType::UC.0;
        let ud = st.0 == QpServiceType::UD.0;
        match op {
            CmdOpcode::INIT2INIT_QP if rc => u(&[P::RRE, P::RAE, P::RWE, P::PKEY_INDEX, P::PRI_PORT]),
            CmdOpcode::INIT2INIT_QP if uc => u(&[P::RWE, P::PKEY_INDEX, P::PRI_PORT]),
            CmdOpcode::INIT2INIT_QP if ud => u(&[P::PKEY_INDEX, P::Q_KEY, P::PRI_PORT]),
            CmdOpcode::INIT2RTR_QP if rc => u(&[P::ALT_ADDR_PATH, P::RRE, P::RAE, P::RWE, P::PKEY_INDEX]),
            CmdOpcode::INIT2RTR_QP if uc => u(&[P::ALT_ADDR_PATH, P::RWE, P::PKEY_INDEX]),
            CmdOpcode::INIT2RTR_QP if ud => u(&[P::PKEY_INDEX, P::Q_KEY]),
            CmdOpcode::RTR2RTS_QP if rc => u(&[P::ALT_ADDR_PATH, P::RRE, P::RAE, P::RWE, P::PM_STATE, P::RNR_TIMEOUT]),
            CmdOpcode::RTR2RTS_QP if uc => u(&[P::ALT_ADDR_PATH, P::RWE, P::PM_STATE]),
            CmdOpcode::RTR2RTS_QP if ud => P::Q_KEY,
            CmdOpcode::RTS2RTS_QP if rc => u(&[P::RRE, P::RAE, P::RWE, P::RNR_TIMEOUT, P::PM_STATE, P::ALT_ADDR_PATH]),
            CmdOpcode::RTS2RTS_QP if uc => u(&[P::RWE, P::PM_STATE, P::ALT_ADDR_PATH]),
            CmdOpcode::RTS2RTS_QP if ud => u(&[P::Q_KEY, P::SRQN, P::CQN_RCV]),
            CmdOpcode::SQERR2RTS_QP | CmdOpcode::SQD_RTS_QP if rc => u(&[P::RNR_TIMEOUT, P::RWE, P::RAE, P::RRE]),
            CmdOpcode::SQERR2RTS_QP | CmdOpcode::SQD_RTS_QP if uc => P::RWE,
            CmdOpcode::SQERR2RTS_QP | CmdOpcode::SQD_RTS_QP if ud => P::Q_KEY,
            _ => P(0),
        }
    }
}

flag_set! {
    /// MODIFY_CQ `modify_field_select` (op_mod [`ModifyCqOpMod::MODIFY`]): the CQ context
    /// fields the command changes (`MLX5_CQ_MODIFY_*`, Linux `cq.h`).
    pub struct CqModifyFields(u32) {
        /// `cq_period`.
        PERIOD = 1 << 0,
        /// `cq_max_count`.
        COUNT = 1 << 1,
        /// `oi` (overrun ignore).
        OVERRUN = 1 << 2,
    }
}

flag_set! {
    /// MODIFY_CQ `resize_field_select` (op_mod [`ModifyCqOpMod::RESIZE`]): the CQ context
    /// fields a resize changes (`MLX5_MODIFY_CQ_MASK_*`, Linux `cq.h`).
    pub struct CqResizeFields(u32) {
        /// `log_cq_size`.
        LOG_SIZE = 1 << 0,
        /// `page_offset`.
        PG_OFFSET = 1 << 1,
        /// `log_page_size`.
        PG_SIZE = 1 << 2,
    }
}

flag_set! {
    /// Atomic operand sizes the device supports: `atomic_caps.atomic_size_qp` (and
    /// `atomic_size_dc`). Linux names only the 8-byte bit (`MLX5_ATOMIC_SIZE_QP_8BYTES`,
    /// `drivers/infiniband/hw/mlx5/main.c`).
    pub struct AtomicSize(u16) {
        /// 8-byte atomic operations (`MLX5_ATOMIC_SIZE_QP_8BYTES`).
        QP_8BYTES = 1 << 3,
    }
}
