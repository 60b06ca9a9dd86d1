//! The verbs API's one error type: a kind that code can match ([`ErrorKind`]), the errno
//! ibverbs would return ([`Error::errno`]), and a message that names the object and the fix.
//!
//! A failed post (`post_send`, `post_recv`) builds its error without allocating: the data path
//! may see a full queue many times a second. Every other error carries its message, and the
//! driver error it came from when there is one ([`Error::driver_error`]).

use crate::types::QpState;
use std::fmt;
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus};

/// What kind of failure an [`Error`] is. New kinds may be added: match with a `_` arm.
///
/// ```
/// use umlx_verbs::{Error, ErrorKind};
/// let e = Error::new(ErrorKind::QueueFull, "send queue of QP 0x12 (64 WQEs)");
/// assert_eq!(e.kind(), ErrorKind::QueueFull);
/// assert_eq!(e.errno(), libc::ENOMEM);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument is invalid: a value out of range, an attribute a transition cannot take, a
    /// work request the QP type cannot carry (EINVAL).
    InvalidArgument,
    /// A work queue or a resource table is full (ENOMEM).
    QueueFull,
    /// The object is in a state that does not allow the operation, e.g. a post to a QP in
    /// RESET or a transition the QP state machine does not have (EINVAL).
    WrongState,
    /// umlx or the device does not implement the operation (EOPNOTSUPP).
    NotSupported,
    /// The device is in its fatal error state: reset it and open it again (EIO).
    DeviceFatal,
    /// A firmware command failed with this status and syndrome (the status's errno, as
    /// Linux's `cmd_status_to_err`).
    CommandFailed {
        /// The command.
        opcode: CmdOpcode,
        /// The firmware's status.
        status: CmdStatus,
        /// The firmware's syndrome (what NVIDIA support asks for).
        syndrome: u32,
    },
    /// A firmware command did not complete in time (ETIMEDOUT).
    CommandTimeout {
        /// The command.
        opcode: CmdOpcode,
    },
    /// The device cannot be opened: missing, not bound to `vfio-pci`, not an mlx5 function, or
    /// its IOMMU group is not usable (ENODEV).
    NoDevice,
    /// Memory cannot be pinned or mapped for DMA: the locked-memory limit, or no IOVA space
    /// (ENOMEM).
    OutOfMemory,
    /// The device answered in a way the driver cannot use: a malformed firmware response
    /// (EPROTO).
    Firmware,
    /// A system call failed (its errno).
    Os,
}

/// Why a post failed, kept in two bytes so that a failed post does not allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PostWhy {
    QueueFull,
    TooManySges,
    InlineTooLarge,
    WrongState,
    WrongQpType,
    NoRecvQueue,
    AtomicLength,
    DeviceFatal,
}

impl PostWhy {
    fn kind(self) -> ErrorKind {
        match self {
            PostWhy::QueueFull => ErrorKind::QueueFull,
            PostWhy::WrongState => ErrorKind::WrongState,
            PostWhy::DeviceFatal => ErrorKind::DeviceFatal,
            _ => ErrorKind::InvalidArgument,
        }
    }

    fn what(self) -> &'static str {
        match self {
            PostWhy::QueueFull => "the queue is full: poll completions before posting more",
            PostWhy::TooManySges => "more SGEs than the queue was created with",
            PostWhy::InlineTooLarge => "more inline data than the QP was created with (max_inline_data)",
            PostWhy::WrongState => "the QP is in a state that does not accept this post",
            PostWhy::WrongQpType => "the request does not fit the QP type (UdSendWr on a UD QP, SendWr otherwise)",
            PostWhy::NoRecvQueue => "the QP takes its receives from an SRQ: post to the SRQ",
            PostWhy::AtomicLength => "an atomic's result buffer must be one SGE of 8 bytes",
            PostWhy::DeviceFatal => "the device is in its fatal error state: nothing is posted",
        }
    }
}

/// One word either way, so that `Result<(), Error>` is a pair of scalars that a post returns
/// in two registers.
enum Repr {
    /// A failed post, packed without allocating: the work request's index in bits 0..32, the
    /// [`PostWhy`] in 32..40, the QP state's value in 40..48.
    Post(u64),
    /// Anything else.
    Full(Box<Full>),
}

/// Every [`PostWhy`], by its packed value.
const POST_WHYS: [PostWhy; 8] = [
    PostWhy::QueueFull,
    PostWhy::TooManySges,
    PostWhy::InlineTooLarge,
    PostWhy::WrongState,
    PostWhy::WrongQpType,
    PostWhy::NoRecvQueue,
    PostWhy::AtomicLength,
    PostWhy::DeviceFatal,
];

impl Repr {
    /// The index, reason and QP state of a failed post.
    fn post(&self) -> Option<(u32, PostWhy, QpState)> {
        match self {
            Repr::Post(w) => Some((
                *w as u32,
                POST_WHYS[((*w >> 32) as u8 as usize) % POST_WHYS.len()],
                QpState::from_value((*w >> 40) as u8 as u32).unwrap_or(QpState::Err),
            )),
            Repr::Full(_) => None,
        }
    }
}

struct Full {
    kind: ErrorKind,
    message: String,
    driver: Option<umlx_driver::Error>,
}

/// The error of every fallible verbs call.
///
/// Match on [`Error::kind`]; [`Error::errno`] is what ibverbs would return; `Display` says
/// what failed, on which object, and what to do.
///
/// ```
/// # fn main() -> Result<(), umlx_verbs::Error> {
/// use umlx_verbs::{Context, ErrorKind};
/// let ctx = Context::open_sim(Default::default())?;
/// match ctx.query_port(2) {
///     Err(e) if e.kind() == ErrorKind::InvalidArgument => assert_eq!(e.errno(), libc::EINVAL),
///     other => panic!("port 2 of a one-port device: {other:?}"),
/// }
/// # Ok(()) }
/// ```
pub struct Error {
    repr: Repr,
}

impl Error {
    /// An error of `kind` with `message` (what failed, on which object, and the fix).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { repr: Repr::Full(Box::new(Full { kind, message: message.into(), driver: None })) }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidArgument, message)
    }

    pub(crate) fn wrong_state(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::WrongState, message)
    }

    /// A failed post of work request `index` (no allocation).
    #[cold]
    pub(crate) fn post(index: usize, why: PostWhy, state: QpState) -> Error {
        let index = index.min(u32::MAX as usize) as u64;
        let why = POST_WHYS.iter().position(|w| *w == why).unwrap_or(0) as u64;
        Error { repr: Repr::Post(index | why << 32 | (state as u64) << 40) }
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match (&self.repr, self.repr.post()) {
            (_, Some((_, why, _))) => why.kind(),
            (Repr::Full(f), None) => f.kind,
            (Repr::Post(_), None) => ErrorKind::InvalidArgument,
        }
    }

    /// The errno ibverbs returns for this failure (`libc` constants).
    pub fn errno(&self) -> i32 {
        match self.kind() {
            ErrorKind::InvalidArgument | ErrorKind::WrongState => libc::EINVAL,
            ErrorKind::QueueFull | ErrorKind::OutOfMemory => libc::ENOMEM,
            ErrorKind::NotSupported => libc::EOPNOTSUPP,
            ErrorKind::DeviceFatal => libc::EIO,
            ErrorKind::CommandFailed { status, .. } => status.errno(),
            ErrorKind::CommandTimeout { .. } => libc::ETIMEDOUT,
            ErrorKind::NoDevice => libc::ENODEV,
            ErrorKind::Firmware => libc::EPROTO,
            ErrorKind::Os => match self.driver_error() {
                Some(umlx_driver::Error::Os { source, .. }) => source.raw_os_error().unwrap_or(libc::EIO),
                _ => libc::EIO,
            },
        }
    }

    /// For a failed post: the index of the first work request that was not posted (ibverbs'
    /// `bad_wr`); the ones before it were posted.
    pub fn work_request(&self) -> Option<usize> {
        self.repr.post().map(|(index, _, _)| index as usize)
    }

    /// For a post refused because of the QP's state: that state.
    pub fn qp_state(&self) -> Option<QpState> {
        match self.repr.post() {
            Some((_, PostWhy::WrongState, state)) => Some(state),
            _ => None,
        }
    }

    /// The driver error this one came from (command, VFIO, DMA, device health), if any.
    pub fn driver_error(&self) -> Option<&umlx_driver::Error> {
        match &self.repr {
            Repr::Full(f) => f.driver.as_ref(),
            Repr::Post(_) => None,
        }
    }
}

/// The kind of a driver error.
fn driver_kind(e: &umlx_driver::Error) -> ErrorKind {
    use umlx_driver::Error as D;
    match e {
        D::InvalidArgument(_) | D::OutOfBounds { .. } => ErrorKind::InvalidArgument,
        D::Command { opcode, status, syndrome, delivery, .. } if delivery.0 == 0 => {
            ErrorKind::CommandFailed { opcode: *opcode, status: *status, syndrome: *syndrome }
        }
        D::Command { .. } | D::Firmware { .. } => ErrorKind::Firmware,
        D::CommandTimeout { opcode, .. } => ErrorKind::CommandTimeout { opcode: *opcode },
        D::DeviceFatal { .. } => ErrorKind::DeviceFatal,
        D::Device { .. } => ErrorKind::NoDevice,
        D::MemlockLimit { .. } | D::NoIova { .. } => ErrorKind::OutOfMemory,
        D::WrongState { .. } => ErrorKind::WrongState,
        _ => ErrorKind::Os,
    }
}

impl From<umlx_driver::Error> for Error {
    fn from(e: umlx_driver::Error) -> Error {
        // The driver's own "invalid argument: " prefix is the kind's; keep only the message.
        let message = match &e {
            umlx_driver::Error::InvalidArgument(m) => m.clone(),
            e => e.to_string(),
        };
        Error { repr: Repr::Full(Box::new(Full { kind: driver_kind(&e), message, driver: Some(e) })) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((index, why, state)) = self.repr.post() {
            return match why {
                PostWhy::WrongState => {
                    write!(f, "work request {index}: the QP is in state {state}, which does not accept it (EINVAL)")
                }
                _ => write!(f, "work request {index}: {} ({})", why.what(), errno_name(self.errno())),
            };
        }
        match &self.repr {
            Repr::Post(_) => Ok(()),
            Repr::Full(full) => match full.kind {
                ErrorKind::InvalidArgument => write!(f, "invalid argument: {}", full.message),
                ErrorKind::WrongState => write!(f, "wrong state: {}", full.message),
                ErrorKind::QueueFull if full.driver.is_none() => write!(f, "queue full: {}", full.message),
                ErrorKind::NotSupported if full.driver.is_none() => write!(f, "not supported: {}", full.message),
                _ => f.write_str(&full.message),
            },
        }
    }
}

/// The symbolic name of the errno values a post returns.
fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::ENOMEM => "ENOMEM",
        libc::EINVAL => "EINVAL",
        libc::EIO => "EIO",
        _ => "errno",
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind());
        if let Some(i) = self.work_request() {
            d.field("work_request", &i);
        }
        d.field("message", &self.to_string()).finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The message already includes the driver error's text; its own cause (an OS error)
        // is the next link.
        self.driver_error().and_then(|d| std::error::Error::source(d))
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_is_two_words_so_a_post_returns_it_in_registers() {
        assert_eq!(std::mem::size_of::<Error>(), 16);
        assert_eq!(std::mem::size_of::<Result<()>>(), 16);
    }

    #[test]
    fn a_failed_post_names_the_request_kind_and_errno() {
        let e = Error::post(3, PostWhy::QueueFull, QpState::Rts);
        assert_eq!((e.kind(), e.errno(), e.work_request()), (ErrorKind::QueueFull, libc::ENOMEM, Some(3)));
        assert_eq!(e.to_string(), "work request 3: the queue is full: poll completions before posting more (ENOMEM)");
        let e = Error::post(0, PostWhy::WrongState, QpState::Reset);
        assert_eq!((e.kind(), e.errno(), e.qp_state()), (ErrorKind::WrongState, libc::EINVAL, Some(QpState::Reset)));
        assert!(e.to_string().contains("RESET"), "{e}");
        let e = Error::post(1, PostWhy::DeviceFatal, QpState::Rts);
        assert_eq!((e.kind(), e.errno()), (ErrorKind::DeviceFatal, libc::EIO));
    }

    #[test]
    fn a_driver_command_failure_keeps_opcode_status_and_syndrome() {
        use umlx_hwdesc::enums::DeliveryStatus;
        let d = umlx_driver::Error::Command {
            device: "sim:0".into(),
            opcode: CmdOpcode::CREATE_QP,
            op_mod: 0,
            delivery: DeliveryStatus(0),
            status: CmdStatus::BAD_PARAM_ERR,
            syndrome: 0x1234,
        };
        let e = Error::from(d);
        assert_eq!(
            e.kind(),
            ErrorKind::CommandFailed {
                opcode: CmdOpcode::CREATE_QP,
                status: CmdStatus::BAD_PARAM_ERR,
                syndrome: 0x1234
            }
        );
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(e.to_string().contains("0x00001234"), "{e}");
        let e = Error::from(umlx_driver::Error::InvalidArgument("port 3".into()));
        assert_eq!((e.kind(), e.to_string().as_str()), (ErrorKind::InvalidArgument, "invalid argument: port 3"));
        let e = Error::from(umlx_driver::Error::MemlockLimit { needed: 1 << 20, limit: 65536 });
        assert_eq!((e.kind(), e.errno()), (ErrorKind::OutOfMemory, libc::ENOMEM));
    }
}
