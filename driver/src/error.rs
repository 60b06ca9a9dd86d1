//! The driver's error type: every failure says what failed, on which object, and what to do.

use std::fmt;

/// Result alias for the driver.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in the driver.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    Os {
        /// What we were doing (e.g. "VFIO_IOMMU_MAP_DMA iova 0x10000 len 0x200000").
        op: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The PCI device is not usable as asked; `hint` says how to fix it.
    Device {
        /// The device (`pci:0000:3b:00.0`).
        device: String,
        /// What is wrong.
        problem: String,
        /// What the user should do.
        hint: String,
    },
    /// Locked-memory limit too low for the DMA memory asked for.
    MemlockLimit {
        /// Bytes we need to pin.
        needed: u64,
        /// The current RLIMIT_MEMLOCK soft limit in bytes.
        limit: u64,
    },
    /// The IOVA space or DMA memory is exhausted.
    NoIova {
        /// Bytes asked for.
        len: u64,
    },
    /// An argument is invalid; the message says which and why.
    InvalidArgument(String),
    /// An access falls outside the object it addresses (DMA memory, config space, a BAR).
    OutOfBounds {
        /// What was accessed ("DMA memory", "config space of pci:0000:3b:00.0").
        object: String,
        /// Byte offset of the access.
        offset: u64,
        /// Length of the access in bytes.
        len: u64,
        /// Size of the object in bytes.
        size: u64,
    },
    /// A firmware command completed with a delivery error or a non-OK status.
    Command {
        /// The device.
        device: String,
        /// Command opcode.
        opcode: umlx_hwdesc::enums::CmdOpcode,
        /// Command op_mod.
        op_mod: u16,
        /// Delivery status of the command queue entry.
        delivery: umlx_hwdesc::enums::DeliveryStatus,
        /// Command status from the output header.
        status: umlx_hwdesc::enums::CmdStatus,
        /// Firmware syndrome.
        syndrome: u32,
    },
    /// A firmware command did not complete in time.
    CommandTimeout {
        /// The device.
        device: String,
        /// Command opcode.
        opcode: umlx_hwdesc::enums::CmdOpcode,
        /// Command op_mod.
        op_mod: u16,
        /// How long we waited.
        waited: std::time::Duration,
    },
    /// The device hit a fatal error (health syndrome, stopped health counter, dead PCI link);
    /// every object reports it from now on.
    DeviceFatal {
        /// The device.
        device: String,
        /// What the health check saw.
        reason: String,
    },
    /// The firmware answered something impossible (a bad response).
    Firmware {
        /// The device.
        device: String,
        /// What was wrong with the response.
        problem: String,
    },
    /// An object was used in a state that does not allow the operation.
    WrongState {
        /// The object (e.g. "QP 0x105").
        object: String,
        /// What was asked and why it is refused.
        problem: String,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Os { op, source } => write!(f, "{op}: {source}"),
            Error::Device { device, problem, hint } => write!(f, "{device}: {problem} (fix: {hint})"),
            Error::MemlockLimit { needed, limit } => write!(
                f,
                "RLIMIT_MEMLOCK is {limit} bytes but {needed} bytes must be pinned for DMA (fix: `ulimit -l unlimited`, or raise memlock in /etc/security/limits.conf)"
            ),
            Error::NoIova { len } => write!(f, "no free IOVA range of {len:#x} bytes"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::Command { device, opcode, op_mod, delivery, status, syndrome } => {
                if delivery.0 != 0 {
                    write!(f, "{device}: command {opcode} (op_mod {op_mod:#x}) failed delivery: {delivery}")
                } else {
                    write!(
                        f,
                        "{device}: command {opcode} (op_mod {op_mod:#x}) failed: status {status} ({:#04x}), syndrome {syndrome:#010x}",
                        status.0
                    )
                }
            }
            Error::CommandTimeout { device, opcode, op_mod, waited } => write!(
                f,
                "{device}: command {opcode} (op_mod {op_mod:#x}) did not complete within {waited:?} (fix: check the device's health; reset it)"
            ),
            Error::DeviceFatal { device, reason } => {
                write!(f, "{device}: device in fatal error state: {reason} (fix: reset the device and open it again)")
            }
            Error::Firmware { device, problem } => write!(f, "{device}: bad firmware response: {problem}"),
            Error::WrongState { object, problem } => write!(f, "{object}: {problem}"),
            Error::OutOfBounds { object, offset, len, size } => write!(
                f,
                "{object}: access of {len:#x} bytes at offset {offset:#x} is outside its {size:#x} bytes (a driver bug: check the offset computation)"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Error {
    /// Wraps the last OS error with a description of the operation.
    pub fn last_os(op: impl Into<String>) -> Error {
        Error::Os { op: op.into(), source: std::io::Error::last_os_error() }
    }
}
