//! The sim firmware's command syndromes.
//!
//! A real adapter's syndrome is an opaque 32-bit firmware code that drivers only log. The sim's
//! syndromes are structured so that a log line says what went wrong: the high 16 bits are the
//! command opcode, the low 16 bits one of the reasons below. [`describe`] turns a syndrome back
//! into words.

/// Input shorter than the command's input structure.
pub const BAD_INPUT_LEN: u16 = 0x01;
/// Output buffer shorter than the command's output.
pub const BAD_OUTPUT_LEN: u16 = 0x02;
/// Unsupported op_mod.
pub const BAD_OP_MOD: u16 = 0x03;
/// The HCA is not enabled (ENABLE_HCA not yet executed).
pub const HCA_NOT_ENABLED: u16 = 0x04;
/// The HCA is not initialized (INIT_HCA not yet executed, or torn down).
pub const HCA_NOT_INITIALIZED: u16 = 0x05;
/// Boot pages were not all given.
pub const MISSING_BOOT_PAGES: u16 = 0x06;
/// Init pages were not all given.
pub const MISSING_INIT_PAGES: u16 = 0x07;
/// ISSI not supported.
pub const BAD_ISSI: u16 = 0x08;
/// The object number names no object.
pub const NO_SUCH_OBJECT: u16 = 0x09;
/// A size or count exceeds the device's limits.
pub const EXCEEDS_LIMIT: u16 = 0x0a;
/// The object is in the wrong state for this command.
pub const BAD_STATE: u16 = 0x0b;
/// A page address is zero or not 4 KiB aligned.
pub const BAD_PAGE_ADDRESS: u16 = 0x0c;
/// A page address is not mapped for device read and write in the IOMMU.
pub const PAGE_NOT_MAPPED: u16 = 0x0d;
/// A page was given twice.
pub const DUPLICATE_PAGE: u16 = 0x0e;
/// SET_HCA_CAP changed a capability that cannot be set, or beyond its maximum.
pub const CAP_NOT_SETTABLE: u16 = 0x0f;
/// A context field holds an invalid value.
pub const BAD_FIELD_VALUE: u16 = 0x10;
/// The object is still referenced by another object.
pub const OBJECT_IN_USE: u16 = 0x11;
/// ACCESS_REG names a register the device does not implement.
pub const BAD_REGISTER: u16 = 0x12;
/// Failure injected by the hostile-device configuration.
pub const INJECTED: u16 = 0x13;
/// The HCA is already enabled or initialized.
pub const ALREADY_DONE: u16 = 0x14;
/// No free object numbers (or resources) are left.
pub const NO_RESOURCES: u16 = 0x15;
/// A buffer (PAS, MTT, doorbell record) is not reachable through the IOMMU.
pub const BUFFER_NOT_MAPPED: u16 = 0x16;
/// The QP state transition is not allowed from the current state.
pub const BAD_QP_STATE: u16 = 0x17;
/// A required attribute for the transition is missing or invalid.
pub const BAD_QP_ATTRIBUTE: u16 = 0x18;
/// The referenced PD, CQ, EQ, UAR or SRQ does not exist.
pub const BAD_REFERENCE: u16 = 0x19;

/// A QP modify command's `opt_param_mask` names a parameter that is not optional in that
/// transition for the QP's service type.
pub const BAD_OPT_PARAM: u16 = 0x1a;

/// Builds a syndrome from an opcode and a reason.
pub const fn make(opcode: u16, reason: u16) -> u32 {
    ((opcode as u32) << 16) | reason as u32
}

/// Words for a syndrome produced by the sim (`None` for an unknown reason).
pub fn describe(syndrome: u32) -> Option<&'static str> {
    Some(match (syndrome & 0xffff) as u16 {
        BAD_INPUT_LEN => "input shorter than the command's input structure",
        BAD_OUTPUT_LEN => "output buffer shorter than the command's output",
        BAD_OP_MOD => "unsupported op_mod",
        HCA_NOT_ENABLED => "HCA not enabled (ENABLE_HCA first)",
        HCA_NOT_INITIALIZED => "HCA not initialized (INIT_HCA first)",
        MISSING_BOOT_PAGES => "boot pages missing (QUERY_PAGES boot + MANAGE_PAGES give)",
        MISSING_INIT_PAGES => "init pages missing (QUERY_PAGES init + MANAGE_PAGES give)",
        BAD_ISSI => "ISSI not supported",
        NO_SUCH_OBJECT => "no such object",
        EXCEEDS_LIMIT => "exceeds the device's limits",
        BAD_STATE => "object in the wrong state",
        BAD_PAGE_ADDRESS => "page address zero or not 4 KiB aligned",
        PAGE_NOT_MAPPED => "page not mapped in the IOMMU",
        DUPLICATE_PAGE => "page given twice",
        CAP_NOT_SETTABLE => "capability not settable or beyond its maximum",
        BAD_FIELD_VALUE => "invalid context field value",
        OBJECT_IN_USE => "object still referenced",
        BAD_REGISTER => "unknown register",
        INJECTED => "failure injected by the hostile-device configuration",
        ALREADY_DONE => "already enabled or initialized",
        NO_RESOURCES => "no free resources",
        BUFFER_NOT_MAPPED => "buffer not reachable through the IOMMU",
        BAD_QP_STATE => "QP transition not allowed from the current state",
        BAD_QP_ATTRIBUTE => "QP attribute missing or invalid for the transition",
        BAD_REFERENCE => "referenced PD/CQ/EQ/UAR/SRQ does not exist",
        BAD_OPT_PARAM => "opt_param_mask names a parameter that is not optional in this QP transition",
        _ => return None,
    })
}
