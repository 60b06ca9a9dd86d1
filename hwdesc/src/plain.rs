//! Byte-layout structures of BAR0 and the data path: the initialization segment, the command
//! queue entry and mailbox block, the EQE and its event payloads, the CQE, the send/receive WQE
//! segments and the doorbell records. Each is a `#[repr(C)]` struct of big-endian fields with
//! every byte offset checked at compile time by [`crate::plain!`].
//!
//! Field names follow the Linux (`include/linux/mlx5/device.h`, `qp.h`) and rdma-core
//! (`mlx5dv.h`, `mlx5_vfio.h`, `wqe.h`) structures. Where the C name is a Rust keyword a trailing
//! underscore is added (`type_`, `in_`). Byte arrays longer than 32 bytes are [`Bytes`], which
//! behaves like `[u8; N]` but also implements `Default`.
//!
//! The constants next to the structures (UAR page offsets, ownership values, WQE flag bits) are
//! the numeric values the driver and the device model must agree on.

use crate::{U16, U32, U64};
use bitfield_struct::bitfield;
use core::fmt;
use core::ops::{Deref, DerefMut};
use zerocopy::byteorder::big_endian::I32;

/// A byte array of any length usable as a plain-structure field (`[u8; N]` only implements
/// `Default` up to 32 elements). Dereferences to `[u8; N]`.
#[repr(transparent)]
#[derive(
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::KnownLayout,
    zerocopy::Immutable,
    zerocopy::Unaligned,
)]
pub struct Bytes<const N: usize>(pub [u8; N]);

impl<const N: usize> Default for Bytes<N> {
    fn default() -> Self {
        Bytes([0; N])
    }
}

impl<const N: usize> Deref for Bytes<N> {
    type Target = [u8; N];
    fn deref(&self) -> &[u8; N] {
        &self.0
    }
}

impl<const N: usize> DerefMut for Bytes<N> {
    fn deref_mut(&mut self) -> &mut [u8; N] {
        &mut self.0
    }
}

impl<const N: usize> From<[u8; N]> for Bytes<N> {
    fn from(b: [u8; N]) -> Self {
        Bytes(b)
    }
}

impl<const N: usize> fmt::Debug for Bytes<N> {
    /// Prints `[0; N]` when all bytes are zero, else the bytes in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.iter().all(|&b| b == 0) {
            return write!(f, "[0; {N}]");
        }
        f.write_str("[")?;
        for (i, b) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "{b:02x}")?;
        }
        f.write_str("]")
    }
}

// ---------------------------------------------------------------------------------------------
// BAR0 initialization segment
// ---------------------------------------------------------------------------------------------

crate::plain! {
    /// Firmware health buffer inside the initialization segment (`health_buffer`, BAR0 0x200).
    /// The layout is the one in rdma-core `mlx5_vfio.h` and older Linux `device.h`; newer kernels
    /// read `assert_var[5]` as `assert_var[6]` (one of the reserved words), name dword 0x2c `time`
    /// and treat byte 0x38 as `rfr_severity`.
    struct health_buffer[64] {
        /// Firmware assert variables.
        assert_var @ 0x00: [U32; 5],
        /// Reserved.
        rsvd0 @ 0x14: [u8; 12],
        /// Assert exit pointer.
        assert_exit_ptr @ 0x20: U32,
        /// Assert caller return address.
        assert_callra @ 0x24: U32,
        /// Reserved.
        rsvd1 @ 0x28: [u8; 8],
        /// Firmware version; all ones means the PCI function no longer answers.
        fw_ver @ 0x30: U32,
        /// Hardware id.
        hw_id @ 0x34: U32,
        /// Bit 31 (`RFR_BIT`): recovery flow required.
        rfr @ 0x38: U32,
        /// Index of the internal RISC that asserted.
        irisc_index @ 0x3c: u8,
        /// Health syndrome, 0 when healthy (see `enums::HealthSyndrome`).
        synd @ 0x3d: u8,
        /// Extended syndrome.
        ext_synd @ 0x3e: U16,
    }

    /// The initialization segment at BAR0 offset 0 (`mlx5_init_seg`, 0x2010 bytes). The
    /// `cmd_exec_to`/`cmd_q_init_to` and `real_time_h/l` registers exist only in newer kernels'
    /// copy of the structure (older copies and rdma-core show them as reserved).
    struct init_seg[0x2010] {
        /// bits 15:0 firmware major, bits 31:16 firmware minor (PRM `initial_seg.fw_rev_major`,
        /// `fw_rev_minor`).
        fw_rev @ 0x0000: U32,
        /// bits 31:16 command interface revision (must be [`iseg::CMDIF_REV`]), bits 15:0
        /// firmware sub-minor.
        cmdif_rev_fw_sub @ 0x0004: U32,
        /// Reserved.
        rsvd0 @ 0x0008: [u8; 8],
        /// Command queue DMA address bits 63:32.
        cmdq_addr_h @ 0x0010: U32,
        /// bits 31:12 queue address, bits 10:8 `nic_interface`, bits 7:4 `log_cmdq_size`,
        /// bits 3:0 `log_cmdq_stride`.
        cmdq_addr_l_sz @ 0x0014: U32,
        /// Command doorbell: bit `n` hands slot `n` to the device.
        cmd_dbell @ 0x0018: U32,
        /// Reserved.
        rsvd1 @ 0x001c: Bytes<0x1e0>,
        /// bit31 firmware still initializing; bit30 firmware reset supported.
        initializing @ 0x01fc: U32,
        /// Firmware health buffer.
        health @ 0x0200: health_buffer,
        /// Reserved.
        rsvd2 @ 0x0240: Bytes<0xdb8>,
        /// Command execution timeout (newer kernels; 0 = not reported).
        cmd_exec_to @ 0x0ff8: U32,
        /// Firmware initialization timeout (newer kernels; 0 = not reported).
        cmd_q_init_to @ 0x0ffc: U32,
        /// Free-running internal timer, upper 32 bits.
        internal_timer_h @ 0x1000: U32,
        /// Free-running internal timer, lower 32 bits.
        internal_timer_l @ 0x1004: U32,
        /// Reserved.
        rsvd3 @ 0x1008: [u8; 8],
        /// bits 31:24 health syndrome (PRM `initial_seg.health_syndrome`), bits 23:0 health
        /// counter the firmware keeps incrementing (PRM `initial_seg.health_counter`).
        health_counter @ 0x1010: U32,
        /// Reserved.
        rsvd4 @ 0x1014: Bytes<0x2c>,
        /// Real-time clock, upper 32 bits.
        real_time_h @ 0x1040: U32,
        /// Real-time clock, lower 32 bits.
        real_time_l @ 0x1044: U32,
        /// Reserved.
        rsvd5 @ 0x1048: Bytes<0xfb8>,
        /// IEEE 1588 clock.
        ieee1588_clk @ 0x2000: U64,
        /// IEEE 1588 clock type.
        ieee1588_clk_type @ 0x2008: U32,
        /// Clear INTx (Linux and rdma-core place it here; DPDK names a `clear_int` bit at 0x100c).
        clr_intx @ 0x200c: U32,
    }
}

/// Byte offsets of the initialization-segment registers in BAR0 (taken from [`init_seg`]), and
/// their bit positions.
pub mod iseg {
    use super::{health_buffer, init_seg};

    /// `fw_rev`.
    pub const FW_REV: usize = init_seg::fw_rev;
    /// `cmdif_rev_fw_sub`.
    pub const CMDIF_REV_FW_SUB: usize = init_seg::cmdif_rev_fw_sub;
    /// `cmdq_addr_h`.
    pub const CMDQ_ADDR_H: usize = init_seg::cmdq_addr_h;
    /// `cmdq_addr_l_sz`.
    pub const CMDQ_ADDR_L_SZ: usize = init_seg::cmdq_addr_l_sz;
    /// `cmd_dbell`.
    pub const CMD_DBELL: usize = init_seg::cmd_dbell;
    /// `initializing`.
    pub const INITIALIZING: usize = init_seg::initializing;
    /// Start of the health buffer.
    pub const HEALTH: usize = init_seg::health;
    /// Health buffer `fw_ver`.
    pub const HEALTH_FW_VER: usize = init_seg::health + health_buffer::fw_ver;
    /// Health buffer `rfr`.
    pub const HEALTH_RFR: usize = init_seg::health + health_buffer::rfr;
    /// Health buffer `synd` (one byte).
    pub const HEALTH_SYND: usize = init_seg::health + health_buffer::synd;
    /// The big-endian dword holding the health buffer's `irisc_index` (bits 31:24), `synd`
    /// (bits 23:16) and `ext_synd` (bits 15:0).
    pub const HEALTH_SYND_DWORD: usize = init_seg::health + health_buffer::irisc_index;
    /// `cmd_exec_to` (newer kernels).
    pub const CMD_EXEC_TO: usize = init_seg::cmd_exec_to;
    /// `cmd_q_init_to` (newer kernels).
    pub const CMD_Q_INIT_TO: usize = init_seg::cmd_q_init_to;
    /// `internal_timer_h`.
    pub const INTERNAL_TIMER_H: usize = init_seg::internal_timer_h;
    /// `internal_timer_l`.
    pub const INTERNAL_TIMER_L: usize = init_seg::internal_timer_l;
    /// `health_counter`.
    pub const HEALTH_COUNTER: usize = init_seg::health_counter;
    /// `real_time_h`.
    pub const REAL_TIME_H: usize = init_seg::real_time_h;
    /// `real_time_l`.
    pub const REAL_TIME_L: usize = init_seg::real_time_l;
    /// `ieee1588_clk`.
    pub const IEEE1588_CLK: usize = init_seg::ieee1588_clk;
    /// `ieee1588_clk_type`.
    pub const IEEE1588_CLK_TYPE: usize = init_seg::ieee1588_clk_type;
    /// `clr_intx`.
    pub const CLR_INTX: usize = init_seg::clr_intx;
    /// Size of the initialization segment.
    pub const SIZE: usize = init_seg::SIZE;

    /// Mask of the firmware major version in `fw_rev` (bits 15:0; PRM `fw_rev_major`).
    pub const FW_REV_MAJOR_MASK: u32 = 0xffff;
    /// Shift of the firmware minor version in `fw_rev` (bits 31:16; PRM `fw_rev_minor`).
    pub const FW_REV_MINOR_SHIFT: u32 = 16;
    /// Mask of the firmware sub-minor version in `cmdif_rev_fw_sub` (bits 15:0; PRM
    /// `fw_rev_subminor`).
    pub const FW_SUB_MINOR_MASK: u32 = 0xffff;
    /// Shift of the health buffer `synd` byte in the [`HEALTH_SYND_DWORD`] register value.
    pub const HEALTH_SYND_SHIFT: u32 = 8 * (HEALTH_SYND_DWORD + 4 - HEALTH_SYND - 1) as u32;
    /// The only command interface revision drivers accept (`cmdif_rev_fw_sub` bits 31:16).
    pub const CMDIF_REV: u32 = 5;
    /// Shift of the command interface revision in `cmdif_rev_fw_sub`.
    pub const CMDIF_REV_SHIFT: u32 = 16;
    /// `initializing` bit 31: firmware not ready yet.
    pub const INITIALIZING_BIT: u32 = 31;
    /// `initializing` bit 30: firmware reset supported (`MLX5_FW_RESET_SUPPORTED_OFFSET`).
    pub const FW_RESET_SUPPORTED_BIT: u32 = 30;
    /// Shift of `nic_interface` in `cmdq_addr_l_sz` (`MLX5_NIC_IFC_OFFSET`).
    pub const NIC_IFC_SHIFT: u32 = 8;
    /// Mask of `nic_interface` after the shift (3 bits, as newer kernels and rdma-core read it).
    pub const NIC_IFC_MASK: u32 = 0x7;
    /// Shift of `log_cmdq_size` in `cmdq_addr_l_sz`.
    pub const LOG_CMDQ_SIZE_SHIFT: u32 = 4;
    /// Mask of `log_cmdq_size` and `log_cmdq_stride` after the shift.
    pub const LOG_CMDQ_MASK: u32 = 0xf;
    /// Mask of the queue address bits in `cmdq_addr_l_sz` (4 KiB aligned).
    pub const CMDQ_ADDR_L_MASK: u32 = 0xffff_f000;
    /// Mask of the 24-bit `health_counter`.
    pub const HEALTH_COUNTER_MASK: u32 = 0x00ff_ffff;
    /// Shift of the health syndrome in the `health_counter` register (bits 31:24; PRM
    /// `initial_seg.health_syndrome`, an `enums::HealthSyndrome` value). Linux and rdma-core
    /// read the syndrome from the health buffer's `synd` instead.
    pub const HEALTH_COUNTER_SYNDROME_SHIFT: u32 = 24;
    /// Health buffer `rfr` bit 31: recovery flow required (`MLX5_RFR_OFFSET`).
    pub const RFR_BIT: u32 = 31;
    /// `cmd_exec_to` / `cmd_q_init_to`: bits 19:0 hold the count of time units (Linux
    /// `lib/tout.c` `tout_convert_iseg_to_ms`).
    pub const TO_VALUE_MASK: u32 = 0x000f_ffff;
    /// `cmd_exec_to` / `cmd_q_init_to`: the unit is `(reg >> TO_MULTIPLIER_SHIFT) &
    /// TO_MULTIPLIER_MASK`: 0 milliseconds, 1 seconds, 2 minutes, 3 hours.
    pub const TO_MULTIPLIER_SHIFT: u32 = 29;
    /// Mask of the time unit after the shift (Linux keeps two bits).
    pub const TO_MULTIPLIER_MASK: u32 = 0x3;
}

// ---------------------------------------------------------------------------------------------
// Command queue
// ---------------------------------------------------------------------------------------------

crate::plain! {
    /// One command queue entry (`mlx5_cmd_layout`, 64 bytes).
    struct cmd_layout[64] {
        /// Transport type, always [`cmd::PCI_CMD_XPORT`].
        type_ @ 0x00: u8,
        /// Reserved.
        rsvd0 @ 0x01: [u8; 3],
        /// Total input length in bytes.
        inlen @ 0x04: U32,
        /// DMA address of the first input mailbox block.
        in_ptr @ 0x08: U64,
        /// First 16 bytes of the input (C name `in`).
        in_ @ 0x10: [u8; 16],
        /// First 16 bytes of the output, written by the device.
        out @ 0x20: [u8; 16],
        /// DMA address of the first output mailbox block.
        out_ptr @ 0x30: U64,
        /// Total output length in bytes.
        outlen @ 0x38: U32,
        /// Command token, repeated in every mailbox block.
        token @ 0x3c: u8,
        /// Entry signature.
        sig @ 0x3d: u8,
        /// Reserved.
        rsvd1 @ 0x3e: u8,
        /// bit0 ownership ([`cmd::CMD_OWNER_HW`] while the device owns it), bits 7:1 delivery
        /// status (`enums::DeliveryStatus`).
        status_own @ 0x3f: u8,
    }

    /// One mailbox block of a command input or output chain (`mlx5_cmd_prot_block`, 576 bytes).
    struct cmd_prot_block[576] {
        /// Message bytes carried by this block.
        data @ 0x000: Bytes<512>,
        /// Reserved.
        rsvd0 @ 0x200: Bytes<48>,
        /// DMA address of the next block, 0 in the last one.
        next @ 0x230: U64,
        /// Block number, counting from 0.
        block_num @ 0x238: U32,
        /// Reserved.
        rsvd1 @ 0x23c: u8,
        /// Command token.
        token @ 0x23d: u8,
        /// Signature over bytes 0x200..0x23e.
        ctrl_sig @ 0x23e: u8,
        /// Signature over the whole block.
        sig @ 0x23f: u8,
    }
}

/// Command interface constants.
pub mod cmd {
    /// `status_own` bit 0 value while the device owns the entry.
    pub const CMD_OWNER_HW: u8 = 0x1;
    /// Mask of the ownership bit in `status_own`.
    pub const CMD_OWNER_MASK: u8 = 0x1;
    /// Shift of the delivery status in `status_own`.
    pub const DELIVERY_STATUS_SHIFT: u32 = 1;
    /// Command entry `type` for PCI transport (`MLX5_PCI_CMD_XPORT`).
    pub const PCI_CMD_XPORT: u8 = 7;
    /// Data bytes per mailbox block (`MLX5_CMD_DATA_BLOCK_SIZE`).
    pub const CMD_DATA_BLOCK_SIZE: usize = 512;
    /// Bytes of input and output carried inline in the entry.
    pub const CMD_INLINE_SIZE: usize = 16;
    /// Maximum number of command queue slots (`MLX5_MAX_COMMANDS`).
    pub const MAX_COMMANDS: usize = 32;
}

// ---------------------------------------------------------------------------------------------
// Event queue entries
// ---------------------------------------------------------------------------------------------

/// An EQE's event payload (`eqe.data`), laid out by one of the `eqe_*` structures.
pub type EqeData = [u8; 28];

crate::plain! {
    /// Event queue entry (`mlx5_eqe`, 64 bytes). The event payload is `data`; the `eqe_*`
    /// structures below give its layouts (their offsets are relative to `data`, EQE byte 0x20).
    struct eqe[64] {
        /// Reserved.
        rsvd0 @ 0x00: u8,
        /// Event type (`enums::EventType`; C name `type`).
        type_ @ 0x01: u8,
        /// Reserved.
        rsvd1 @ 0x02: u8,
        /// Event sub-type (e.g. `enums::PortChangeSubtype`).
        sub_type @ 0x03: u8,
        /// Reserved.
        rsvd2 @ 0x04: [u8; 28],
        /// Event payload.
        data @ 0x20: EqeData,
        /// Reserved.
        rsvd3 @ 0x3c: U16,
        /// Entry signature.
        signature @ 0x3e: u8,
        /// bit0 ownership: valid for software when it equals the consumer counter's wrap bit.
        owner @ 0x3f: u8,
    }

    /// Completion event payload (`mlx5_eqe_comp`; event type COMP).
    struct eqe_comp[28] {
        /// Reserved.
        rsvd @ 0x00: [u8; 24],
        /// bits 23:0 CQ number.
        cqn @ 0x18: U32,
    }

    /// Command-completion event payload (`mlx5_eqe_cmd`; event type CMD).
    struct eqe_cmd[28] {
        /// Bit mask of the command slots that completed.
        vector @ 0x00: U32,
        /// Reserved.
        rsvd @ 0x04: [u8; 24],
    }

    /// Page-request event payload (`mlx5_eqe_page_req`; event type PAGE_REQUEST).
    struct eqe_page_req[28] {
        /// bit15 embedded-CPU function, bit14 release all pages.
        ec_function @ 0x00: U16,
        /// Function id.
        func_id @ 0x02: U16,
        /// Signed: > 0 give that many pages, < 0 take that many back.
        num_pages @ 0x04: I32,
        /// Reserved.
        rsvd1 @ 0x08: [u8; 20],
    }

    /// Port-state-change event payload (`mlx5_eqe_port_state`; event type PORT_CHANGE).
    struct eqe_port_state[9] {
        /// Reserved.
        rsvd0 @ 0x00: [u8; 8],
        /// bits 7:4 port number.
        port @ 0x08: u8,
    }

    /// CQ-error event payload (`mlx5_eqe_cq_err`; event type CQ_ERROR).
    struct eqe_cq_err[12] {
        /// bits 23:0 CQ number.
        cqn @ 0x00: U32,
        /// Reserved.
        rsvd1 @ 0x04: [u8; 7],
        /// Error syndrome.
        syndrome @ 0x0b: u8,
    }

    /// QP/SRQ affiliated event payload (`mlx5_eqe_qp_srq`; path migration, WQ errors, SRQ
    /// events).
    struct eqe_qp_srq[28] {
        /// Reserved.
        rsvd1 @ 0x00: [u8; 20],
        /// Queue type (0 QP, 1 RQ, 2 SQ, 6 DCT; `MLX5_EVENT_QUEUE_TYPE_*`; C name `type`).
        type_ @ 0x14: u8,
        /// Reserved.
        rsvd2 @ 0x15: [u8; 3],
        /// bits 23:0 QP or SRQ number.
        qp_srq_n @ 0x18: U32,
    }
}

/// Event queue constants.
pub mod eq {
    /// Value software writes into every EQE `owner` byte before CREATE_EQ
    /// (`MLX5_EQE_OWNER_INIT_VAL`).
    pub const EQE_OWNER_INIT_VAL: u8 = 0x1;
    /// Mask of the ownership bit in the EQE `owner` byte (bit 0, PRM `eqe.owner`; Linux
    /// `next_eqe_sw` tests it with `& 1`).
    pub const EQE_OWNER_MASK: u8 = 0x1;
    /// Shift of the port number in `eqe_port_state.port` (bits 7:4; Linux reads
    /// `(port >> 4) & 0xf`).
    pub const PORT_STATE_PORT_SHIFT: u32 = 4;
    /// Mask of the port number after the shift.
    pub const PORT_STATE_PORT_MASK: u8 = 0xf;
    /// Size of one EQE.
    pub const EQE_SIZE: usize = super::eqe::SIZE;
    /// Byte offset of the event payload inside an EQE.
    pub const EQE_DATA_OFFSET: usize = super::eqe::data;
    /// Extra EQEs allocated beyond the requested count (`MLX5_NUM_SPARE_EQE`).
    pub const NUM_SPARE_EQE: u32 = 0x80;
    /// Shift of the EQ number in an EQ doorbell value.
    pub const DB_EQN_SHIFT: u32 = 24;
    /// Mask of the consumer index in an EQ doorbell value.
    pub const DB_CI_MASK: u32 = 0x00ff_ffff;
    /// `eqe_qp_srq.type_` of a QP event (`MLX5_EVENT_QUEUE_TYPE_QP`).
    pub const EVENT_QUEUE_TYPE_QP: u8 = 0;
    /// `eqe_qp_srq.type_` of an RQ event (`MLX5_EVENT_QUEUE_TYPE_RQ`).
    pub const EVENT_QUEUE_TYPE_RQ: u8 = 1;
    /// `eqe_qp_srq.type_` of an SQ event (`MLX5_EVENT_QUEUE_TYPE_SQ`).
    pub const EVENT_QUEUE_TYPE_SQ: u8 = 2;
    /// `eqe_qp_srq.type_` of a DCT event (`MLX5_EVENT_QUEUE_TYPE_DCT`).
    pub const EVENT_QUEUE_TYPE_DCT: u8 = 6;
}

// ---------------------------------------------------------------------------------------------
// Completion queue entries
// ---------------------------------------------------------------------------------------------

crate::plain! {
    /// 64-byte completion queue entry (`mlx5_cqe64`). In a 128-byte CQE this is the second half.
    struct cqe64[64] {
        /// Reserved (Ethernet: packet information).
        rsvd0 @ 0x00: [u8; 2],
        /// WQE id.
        wqe_id @ 0x02: U16,
        /// Reserved (Ethernet: LRO and RSS fields).
        rsvd4 @ 0x04: [u8; 13],
        /// bits 6:0 destination LID path bits.
        ml_path @ 0x11: u8,
        /// Reserved (Ethernet: checksum).
        rsvd20 @ 0x12: [u8; 4],
        /// Source LID.
        slid @ 0x16: U16,
        /// bits 23:0 source QPN (UD), bits 27:24 SL, bits 29:28 GRH indication.
        flags_rqpn @ 0x18: U32,
        /// Header-data-split / IP extension bits.
        hds_ip_ext @ 0x1c: u8,
        /// L4/L3 header type bits.
        l4_hdr_type_etc @ 0x1d: u8,
        /// VLAN information.
        vlan_info @ 0x1e: U16,
        /// bits 23:0 SRQ number or user index.
        srqn_uidx @ 0x20: U32,
        /// Immediate data, invalidated rkey, or P_Key index (low 16 bits).
        imm_inval_pkey @ 0x24: U32,
        /// Application.
        app @ 0x28: u8,
        /// Application operation.
        app_op @ 0x29: u8,
        /// Application information.
        app_info @ 0x2a: U16,
        /// Bytes received (responder) or read (RDMA read requester).
        byte_cnt @ 0x2c: U32,
        /// Completion timestamp.
        timestamp @ 0x30: U64,
        /// bits 23:0 local QPN; requester CQE: bits 31:24 completed WQE opcode.
        sop_drop_qpn @ 0x38: U32,
        /// WQE counter of the completed WQE.
        wqe_counter @ 0x3c: U16,
        /// Entry signature.
        signature @ 0x3e: u8,
        /// bits 7:4 opcode, bits 3:2 format, bit1 solicited event, bit0 owner ([`CqeOpOwn`]).
        op_own @ 0x3f: u8,
    }

    /// Error CQE (`mlx5_err_cqe`, 64 bytes; opcodes REQ_ERR and RESP_ERR).
    struct err_cqe[64] {
        /// Reserved.
        rsvd0 @ 0x00: [u8; 32],
        /// SRQ number.
        srqn @ 0x20: U32,
        /// Reserved.
        rsvd1 @ 0x24: [u8; 18],
        /// Vendor error syndrome.
        vendor_err_synd @ 0x36: u8,
        /// Error syndrome (`enums::CqeSyndrome`).
        syndrome @ 0x37: u8,
        /// bits 31:24 send WQE opcode, bits 23:0 QPN.
        s_wqe_opcode_qpn @ 0x38: U32,
        /// WQE counter.
        wqe_counter @ 0x3c: U16,
        /// Entry signature.
        signature @ 0x3e: u8,
        /// Opcode and owner, as in [`cqe64`].
        op_own @ 0x3f: u8,
    }
}

/// The CQE `op_own` byte: bit0 owner, bit1 solicited event, bits 3:2 format, bits 7:4 opcode
/// (`enums::CqeOpcode`).
#[bitfield(u8)]
#[derive(PartialEq, Eq)]
pub struct CqeOpOwn {
    /// Ownership bit, compared with the consumer counter's wrap bit.
    pub owner: bool,
    /// Solicited event.
    pub solicited: bool,
    /// CQE format: 0 none, 1 inline-32 scatter, 2 inline-64 scatter, 3 compressed.
    #[bits(2)]
    pub format: u8,
    /// CQE opcode.
    #[bits(4)]
    pub opcode: u8,
}

/// Completion queue constants.
pub mod cq {
    /// Value software writes into every CQE `op_own` byte before use (opcode INVALID, owner 0).
    pub const CQE_OP_OWN_INVALID: u8 = 0xf0;
    /// Mask of the ownership bit in `op_own` (`MLX5_CQE_OWNER_MASK`).
    pub const CQE_OWNER_MASK: u8 = 0x1;
    /// Shift of the opcode in `op_own`.
    pub const CQE_OPCODE_SHIFT: u32 = 4;
    /// Mask of the 24-bit QP, SRQ and CQ numbers in CQE and EQE fields.
    pub const NUM_MASK_24: u32 = 0x00ff_ffff;
    /// Shift of the completed send WQE opcode in a requester CQE's `sop_drop_qpn` (and an
    /// error CQE's `s_wqe_opcode_qpn`), bits 31:24.
    pub const SOP_WQE_OPCODE_SHIFT: u32 = 24;
    /// Shift of the service level in `flags_rqpn` (bits 27:24).
    pub const FLAGS_RQPN_SL_SHIFT: u32 = 24;
    /// Mask of the service level after the shift.
    pub const FLAGS_RQPN_SL_MASK: u32 = 0xf;
    /// Shift of the GRH indication in `flags_rqpn` (bits 29:28; non-zero: a GRH was received).
    pub const FLAGS_RQPN_GRH_SHIFT: u32 = 28;
    /// Mask of the GRH indication after the shift.
    pub const FLAGS_RQPN_GRH_MASK: u32 = 0x3;
    /// Shift of the RoCE L3 header type in `flags_rqpn` on an Ethernet port (bits 25:24, where
    /// InfiniBand reports the SL; Linux `mlx5_ib` `handle_responder`).
    pub const FLAGS_RQPN_ROCE_L3_TYPE_SHIFT: u32 = 24;
    /// Mask of the RoCE L3 header type after the shift.
    pub const FLAGS_RQPN_ROCE_L3_TYPE_MASK: u32 = 0x3;
    /// RoCE L3 header type: RoCE v1 GRH (`MLX5_CQE_ROCE_L3_HEADER_TYPE_GRH`).
    pub const ROCE_L3_HEADER_TYPE_GRH: u8 = 0;
    /// RoCE L3 header type: IPv6 (`MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV6`).
    pub const ROCE_L3_HEADER_TYPE_IPV6: u8 = 1;
    /// RoCE L3 header type: IPv4 (`MLX5_CQE_ROCE_L3_HEADER_TYPE_IPV4`).
    pub const ROCE_L3_HEADER_TYPE_IPV4: u8 = 2;
}

// ---------------------------------------------------------------------------------------------
// Work queue entry segments
// ---------------------------------------------------------------------------------------------

crate::plain! {
    /// Control segment, first in every send WQE (`mlx5_wqe_ctrl_seg`, 16 bytes).
    struct wqe_ctrl_seg[16] {
        /// bits 31:24 opcode modifier, bits 23:8 WQE index, bits 7:0 opcode
        /// (`enums::WqeOpcode`).
        opmod_idx_opcode @ 0x00: U32,
        /// bits 31:8 QP number, bits 5:0 WQE size in 16-byte units.
        qpn_ds @ 0x04: U32,
        /// Optional WQE signature.
        signature @ 0x08: u8,
        /// DCI stream channel (reserved otherwise).
        dci_stream_channel_id @ 0x09: U16,
        /// bits 7:5 fence mode, bits 3:2 completion request, bit1 solicited ([`FmCeSe`]).
        fm_ce_se @ 0x0b: u8,
        /// Immediate data, invalidated rkey, or mkey.
        imm @ 0x0c: U32,
    }

    /// Remote address segment (`mlx5_wqe_raddr_seg`, 16 bytes).
    struct wqe_raddr_seg[16] {
        /// Remote virtual address.
        raddr @ 0x00: U64,
        /// Remote key.
        rkey @ 0x08: U32,
        /// Reserved.
        reserved @ 0x0c: U32,
    }

    /// Data (pointer) segment of a send or receive WQE (`mlx5_wqe_data_seg`, 16 bytes).
    struct wqe_data_seg[16] {
        /// Length in bytes.
        byte_count @ 0x00: U32,
        /// Local key.
        lkey @ 0x04: U32,
        /// Address.
        addr @ 0x08: U64,
    }

    /// Inline data segment header (`mlx5_wqe_inline_seg`); the data follows it directly.
    struct wqe_inline_seg[4] {
        /// Data length ORed with [`wqe::INLINE_SEG`].
        byte_count @ 0x00: U32,
    }

    /// Atomic segment (`mlx5_wqe_atomic_seg`, 16 bytes).
    struct wqe_atomic_seg[16] {
        /// Swap value (compare-and-swap) or add value (fetch-and-add).
        swap_add @ 0x00: U64,
        /// Compare value (compare-and-swap only).
        compare @ 0x08: U64,
    }

    /// Masked atomic segment (`mlx5_wqe_masked_atomic_seg`, 32 bytes).
    struct wqe_masked_atomic_seg[32] {
        /// Swap or add value.
        swap_add @ 0x00: U64,
        /// Compare value.
        compare @ 0x08: U64,
        /// Swap or add mask.
        swap_add_mask @ 0x10: U64,
        /// Compare mask.
        compare_mask @ 0x18: U64,
    }

    /// UD address vector / datagram segment (`mlx5_wqe_av`, 48 bytes). For DC the first eight
    /// bytes are one 64-bit `dc_key` instead of `qkey` + `reserved`.
    struct wqe_av[48] {
        /// Q_Key.
        qkey @ 0x00: U32,
        /// Reserved.
        reserved @ 0x04: U32,
        /// Destination QPN ORed with [`wqe::EXTENDED_UD_AV`].
        dqp_dct @ 0x08: U32,
        /// bits 7:4 static rate; bits 3:0 SL (IB) or bits 3:1 SL (RoCE).
        stat_rate_sl @ 0x0c: u8,
        /// IB source path bits.
        fl_mlid @ 0x0d: u8,
        /// Destination LID (IB) or UDP source port (RoCE v2).
        rlid @ 0x0e: U16,
        /// Reserved.
        reserved0 @ 0x10: [u8; 4],
        /// Destination MAC (RoCE).
        rmac @ 0x14: [u8; 6],
        /// Traffic class.
        tclass @ 0x1a: u8,
        /// Hop limit.
        hop_limit @ 0x1b: u8,
        /// bit30 GRH present, bits 27:20 source GID index, bits 19:0 flow label.
        grh_gid_fl @ 0x1c: U32,
        /// Destination GID.
        rgid @ 0x20: [u8; 16],
    }

    /// "Next" segment at the head of every SRQ WQE (`mlx5_wqe_srq_next_seg`, 16 bytes).
    struct wqe_srq_next_seg[16] {
        /// Reserved.
        rsvd0 @ 0x00: [u8; 2],
        /// Index of the next WQE in the SRQ free list.
        next_wqe_index @ 0x02: U16,
        /// Optional WQE signature.
        signature @ 0x04: u8,
        /// Reserved.
        rsvd1 @ 0x05: [u8; 11],
    }
}

/// The control segment `fm_ce_se` byte: bit1 solicited event, bits 3:2 completion request,
/// bits 7:5 fence mode.
#[bitfield(u8)]
#[derive(PartialEq, Eq)]
pub struct FmCeSe {
    #[bits(1)]
    __: u8,
    /// Solicited event.
    pub se: bool,
    /// Completion request: 0 none (unless the QP signals all), 2 CQE, 3 CQE and EQE.
    #[bits(2)]
    pub ce: u8,
    #[bits(1)]
    __: u8,
    /// Fence mode: 0 none, 1 initiator small, 2 fence, 3 strong ordering, 4 small and fence.
    #[bits(3)]
    pub fm: u8,
}

/// The adapter page: the unit of firmware pages (MANAGE_PAGES), of the physical address (PAS)
/// lists of queue buffers and of the `log_page_size` fields of queue contexts.
pub mod page {
    /// Log2 of the adapter page size (`MLX5_ADAPTER_PAGE_SHIFT`, Linux `device.h`).
    pub const ADAPTER_PAGE_SHIFT: u32 = 12;
    /// The adapter page size, 4 KiB (`MLX5_ADAPTER_PAGE_SIZE`).
    pub const ADAPTER_PAGE_SIZE: usize = 1 << ADAPTER_PAGE_SHIFT;
    /// The parts a queue buffer's page is divided into for its context's `page_offset` (CQC,
    /// QPC, SRQC): the field counts parts of `page size / 64` bytes, so its unit grows with
    /// `log_page_size` (Linux `mlx5_ib.h`: `page_offset_quantized * (page_size / scale) =
    /// page_offset`, with scale 64 where `cq.c`, `qp.c` and `srq.c` fill the field).
    pub const PAGE_OFFSET_PARTS: u64 = 64;

    /// The page size of a queue context's `log_page_size` (as a shift).
    pub const fn page_shift(log_page_size: u64) -> u32 {
        ADAPTER_PAGE_SHIFT + log_page_size as u32
    }

    /// The `log_page_size` of pages of `1 << page_shift` bytes (the inverse of [`page_shift`]).
    pub const fn log_page_size(page_shift: u32) -> u64 {
        (page_shift - ADAPTER_PAGE_SHIFT) as u64
    }

    /// The byte offset a context's `page_offset` names in pages of `1 << page_shift` bytes.
    pub const fn page_offset_bytes(page_offset: u64, page_shift: u32) -> u64 {
        page_offset * ((1u64 << page_shift) / PAGE_OFFSET_PARTS)
    }

    /// The `page_offset` of a buffer that starts `bytes` into its first page (a whole number
    /// of parts) in pages of `1 << page_shift` bytes.
    pub const fn page_offset_field(bytes: u64, page_shift: u32) -> u64 {
        bytes / ((1u64 << page_shift) / PAGE_OFFSET_PARTS)
    }
}

/// Work queue entry constants.
pub mod wqe {
    /// Send WQE basic block size (`MLX5_SEND_WQE_BB`).
    pub const SEND_WQE_BB: usize = 64;
    /// Log2 of [`SEND_WQE_BB`].
    pub const SEND_WQE_SHIFT: u32 = 6;
    /// Unit of the control segment DS count (`MLX5_SEND_WQE_DS`).
    pub const SEND_WQE_DS: usize = 16;
    /// Maximum WQEBBs in one send WQE (`MLX5_SEND_WQE_MAX_WQEBBS`).
    pub const SEND_WQE_MAX_WQEBBS: usize = 16;
    /// Flag ORed into an inline segment's `byte_count` (`MLX5_INLINE_SEG`).
    pub const INLINE_SEG: u32 = 0x8000_0000;
    /// Length mask the kernel applies to an inline segment's `byte_count`.
    pub const INLINE_SEG_BYTE_COUNT_MASK: u32 = 0x3ff;
    /// Key of the data segment that terminates a short receive scatter list
    /// (`MLX5_INVALID_LKEY`).
    pub const INVALID_LKEY: u32 = 0x100;
    /// Flag ORed into the address vector's `dqp_dct` (`MLX5_EXTENDED_UD_AV`).
    pub const EXTENDED_UD_AV: u32 = 0x8000_0000;
    /// Address vector `grh_gid_fl` bit 30: a GRH is present (Linux `create_ib_ah`).
    pub const AV_GRH: u32 = 1 << 30;
    /// Shift of the source GID index (bits 27:20) in `grh_gid_fl`.
    pub const AV_SGID_INDEX_SHIFT: u32 = 20;
    /// Mask of the source GID index after the shift (8 bits).
    pub const AV_SGID_INDEX_MASK: u32 = 0xff;
    /// Mask of the flow label (bits 19:0) in `grh_gid_fl`.
    pub const AV_FLOW_LABEL_MASK: u32 = 0x000f_ffff;
    /// Shift of the SL in `stat_rate_sl` on RoCE (bits 3:1).
    pub const AV_ROCE_SL_SHIFT: u32 = 1;
    /// Mask of the SL before the shift on RoCE (3 bits, the Ethernet priority).
    pub const AV_ROCE_SL_MASK: u8 = 0x7;
    /// `fm_ce_se`: fence mode "small and fence" (`MLX5_WQE_CTRL_FENCE`).
    pub const WQE_CTRL_FENCE: u8 = 4 << 5;
    /// `fm_ce_se`: fence mode "initiator small" (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`).
    pub const WQE_CTRL_INITIATOR_SMALL_FENCE: u8 = 1 << 5;
    /// `fm_ce_se`: fence mode "strong ordering" (`MLX5_FENCE_MODE_STRONG_ORDERING`).
    pub const FENCE_MODE_STRONG_ORDERING: u8 = 3 << 5;
    /// `fm_ce_se`: generate a CQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub const WQE_CTRL_CQ_UPDATE: u8 = 2 << 2;
    /// `fm_ce_se`: generate a CQE and an EQE (`MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE`).
    pub const WQE_CTRL_CQ_UPDATE_AND_EQE: u8 = 3 << 2;
    /// `fm_ce_se`: solicited event (`MLX5_WQE_CTRL_SOLICITED`).
    pub const WQE_CTRL_SOLICITED: u8 = 1 << 1;
    /// Mask of the DS count in `qpn_ds`.
    pub const WQE_CTRL_DS_MASK: u32 = 0x3f;
    /// Shift of the QP number in `qpn_ds`.
    pub const WQE_CTRL_QPN_SHIFT: u32 = 8;
    /// Shift of the WQE index in `opmod_idx_opcode`.
    pub const WQE_CTRL_WQE_INDEX_SHIFT: u32 = 8;
    /// Mask of the 16-bit WQE index after the shift.
    pub const WQE_CTRL_WQE_INDEX_MASK: u32 = 0xffff;
    /// Shift of the opcode modifier in `opmod_idx_opcode`.
    pub const WQE_CTRL_OPMOD_SHIFT: u32 = 24;
    /// Data segment `byte_count` of an atomic's local result buffer (`MLX5_ATOMIC_SIZE`).
    pub const ATOMIC_SIZE: u32 = 8;
    /// Log2 of the unit of the QPC and SRQC `log_rq_stride`: the receive WQE stride is
    /// `1 << (log_rq_stride + RQ_STRIDE_UNIT_SHIFT)` bytes (16-byte units; Linux writes
    /// `wqe_shift - 4`).
    pub const RQ_STRIDE_UNIT_SHIFT: u32 = 4;
}

/// Memory keys: the 32-bit lkey / rkey a WQE carries is the mkey index (CREATE_MKEY's
/// `mkey_index`) above the 8-bit variant the driver chose (mkey context `mkey_7_0`).
pub mod mkey {
    use crate::ifc::mtt;

    /// Shift of the mkey index in a key (Linux `mlx5_idx_to_mkey` / `mlx5_mkey_to_idx`).
    pub const INDEX_SHIFT: u32 = 8;
    /// Mask of the variant (`mkey_7_0`) in a key.
    pub const VARIANT_MASK: u32 = 0xff;

    /// The key of mkey `index` with `variant` in its low byte.
    pub const fn key(index: u32, variant: u8) -> u32 {
        (index << INDEX_SHIFT) | variant as u32
    }

    /// The mkey index a key names (Linux `mlx5_mkey_to_idx`).
    pub const fn index(key: u32) -> u32 {
        key >> INDEX_SHIFT
    }

    /// The variant (`mkey_7_0`) of a key.
    pub const fn variant(key: u32) -> u8 {
        (key & VARIANT_MASK) as u8
    }

    /// An MTT entry ([`mtt`]) read as a big-endian `u64`: the read-enable bit `rd_en`
    /// (rdma-core `MLX5_MTT_READ`).
    pub const MTT_READ: u64 = mtt::rd_en.be_mask(mtt::SIZE_BITS);
    /// The write-enable bit `wr_en` of an MTT entry read as a `u64` (rdma-core `MLX5_MTT_WRITE`).
    pub const MTT_WRITE: u64 = mtt::wr_en.be_mask(mtt::SIZE_BITS);
    /// The page address bits (`ptag_63_32`, `ptag_31_8`) of an MTT entry read as a `u64`.
    pub const MTT_PTAG_MASK: u64 = mtt::ptag_63_32.be_mask(mtt::SIZE_BITS) | mtt::ptag_31_8.be_mask(mtt::SIZE_BITS);
}

// ---------------------------------------------------------------------------------------------
// Doorbell records and UAR pages
// ---------------------------------------------------------------------------------------------

crate::plain! {
    /// QP doorbell record in host memory (8 bytes; dword indices `MLX5_RCV_DBR` = 0 and
    /// `MLX5_SND_DBR` = 1).
    struct qp_dbr[8] {
        /// Receive queue producer counter (`& 0xffff`).
        recv_counter @ 0x00: U32,
        /// Send queue producer counter in WQEBBs (`& 0xffff`).
        send_counter @ 0x04: U32,
    }

    /// CQ doorbell record in host memory (8 bytes; dword indices `MLX5_CQ_SET_CI` = 0 and
    /// `MLX5_CQ_ARM_DB` = 1).
    struct cq_dbr[8] {
        /// Consumer index (`& 0xffffff`).
        set_ci @ 0x00: U32,
        /// Last arm command: `(sn << 28) | cmd | ci`.
        arm @ 0x04: U32,
    }
}

/// Byte offsets inside one 4 KiB UAR page, and the values written there.
pub mod uar {
    /// CQ arm doorbell, one 64-bit write (`MLX5_CQ_DOORBELL`).
    pub const CQ_DOORBELL: usize = 0x20;
    /// EQ consumer-index doorbell that also arms the EQ (`MLX5_EQ_DOORBEL_OFFSET`).
    pub const EQ_DOORBELL_ARM: usize = 0x40;
    /// EQ consumer-index doorbell without arming.
    pub const EQ_DOORBELL_NO_ARM: usize = 0x48;
    /// First BlueFlame / send doorbell register (`MLX5_BF_OFFSET`).
    pub const BF_OFFSET: usize = 0x800;
    /// BlueFlame registers per UAR (`MLX5_BFREGS_PER_UAR`).
    pub const BFREGS_PER_UAR: usize = 4;
    /// Register spacing of doorbell-only (non-write-combining) UARs
    /// (`MLX5_DB_BLUEFLAME_BUFFER_SIZE`).
    pub const DB_BLUEFLAME_BUFFER_SIZE: usize = 0x100;
    /// UAR page size (adapter page).
    pub const UAR_PAGE_SIZE: usize = super::page::ADAPTER_PAGE_SIZE;
    /// CQ arm command: notify on solicited completions only (`MLX5_CQ_DB_REQ_NOT_SOL`).
    pub const CQ_DB_REQ_NOT_SOL: u32 = 1 << 24;
    /// CQ arm command: notify on the next completion (`MLX5_CQ_DB_REQ_NOT`).
    pub const CQ_DB_REQ_NOT: u32 = 0;
    /// Shift of the 2-bit arm sequence number in a CQ arm value.
    pub const CQ_DB_SN_SHIFT: u32 = 28;
}

/// Byte offsets inside the doorbell records.
pub mod dbr {
    /// QP record: receive counter.
    pub const RCV_DBR: usize = super::qp_dbr::recv_counter;
    /// QP record: send counter.
    pub const SND_DBR: usize = super::qp_dbr::send_counter;
    /// CQ record: consumer index.
    pub const CQ_SET_CI: usize = super::cq_dbr::set_ci;
    /// CQ record: last arm value.
    pub const CQ_ARM_DB: usize = super::cq_dbr::arm;
    /// Mask of the QP record's producer counters (`& 0xffff`, in WQEs for the RQ and WQEBBs for
    /// the SQ).
    pub const WQ_COUNTER_MASK: u32 = 0xffff;
}
