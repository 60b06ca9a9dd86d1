//! umlx-verbs: the ibverbs-compatible API over the umlx user-mode mlx5 driver.
//!
//! ibverbs concepts, names and numeric values with a Rust shape on top: owned handles that keep
//! their parents alive (a `Qp` holds its `Pd` and CQs), registered memory that cannot be freed
//! or moved while the NIC may touch it (a `Mr` owns its memory and hands out copies, never
//! references), errors as values ([`Error`], with ibverbs errno values for the data path).
//!
//! | umlx | ibverbs |
//! |---|---|
//! | [`devices`] | `ibv_get_device_list` |
//! | [`Context::open`] / drop | `ibv_open_device` / `ibv_close_device` |
//! | [`Context::query_device`], [`Context::query_port`], [`Context::query_gid`] | `ibv_query_device`, `ibv_query_port`, `ibv_query_gid` |
//! | [`Context::alloc_pd`] / drop | `ibv_alloc_pd` / `ibv_dealloc_pd` |
//! | [`Pd::reg_mr`], [`Pd::alloc_mr`] / drop | `ibv_reg_mr` / `ibv_dereg_mr` |
//! | [`Context::create_comp_channel`] | `ibv_create_comp_channel` |
//! | [`Context::create_cq`] / drop | `ibv_create_cq` / `ibv_destroy_cq` |
//! | [`Cq::poll`], [`Cq::req_notify`], [`CompChannel::get_cq_event`], [`Cq::ack_events`] | `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events` |
//! | [`Pd::create_qp`] / drop, [`Qp::modify`], [`Qp::query`] | `ibv_create_qp` / `ibv_destroy_qp`, `ibv_modify_qp`, `ibv_query_qp` |
//! | [`Qp::post_send`], [`Qp::post_recv`] | `ibv_post_send`, `ibv_post_recv` |
//! | [`Pd::create_ah`] | `ibv_create_ah` |
//! | [`Pd::create_srq`], [`Srq::post_recv`], [`Srq::arm`] | `ibv_create_srq`, `ibv_post_srq_recv`, `ibv_modify_srq` (limit) |
//! | [`Context::get_async_event`] | `ibv_get_async_event` |

#![forbid(unsafe_code)]

mod context;
mod cq;
mod mr;
mod qp;
pub mod types;

pub use context::{AsyncEvent, Context, DeviceKind, DeviceListEntry, devices};
pub use cq::{CompChannel, Cq};
pub use mr::Mr;
pub use qp::{Ah, Pd, PostFailure, PostFailureKind, Qp, Srq};
pub use types::*;
pub use umlx_driver::AnyBackend;
#[cfg(feature = "sim")]
pub use umlx_driver::SimBackend;
pub use umlx_driver::backend::Backend;
pub use umlx_driver::vfio::VfioBackend;

/// The backend every verbs object is built on: an adapter or a software ConnectX, chosen when
/// the context is opened.
pub(crate) type Dev = AnyBackend;

/// Errors of the verbs API.
#[derive(Debug)]
pub enum Error {
    /// The driver failed (command error, device fatal, DMA, VFIO...).
    Driver(umlx_driver::Error),
    /// An argument is invalid (EINVAL), with what and why.
    Invalid(String),
    /// A queue is full (ENOMEM), naming the queue.
    QueueFull(String),
    /// The object is in the wrong state for the operation (EINVAL), with the state.
    WrongState(String),
}

impl Error {
    /// The errno ibverbs would return.
    pub fn errno(&self) -> i32 {
        match self {
            Error::QueueFull(_) => 12,
            Error::Invalid(_) | Error::WrongState(_) => 22,
            Error::Driver(umlx_driver::Error::Command { status, .. }) => status.errno(),
            Error::Driver(_) => 5,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Driver(e) => write!(f, "{e}"),
            Error::Invalid(m) => write!(f, "invalid argument: {m}"),
            Error::QueueFull(m) => write!(f, "queue full: {m}"),
            Error::WrongState(m) => write!(f, "wrong state: {m}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Driver(e) => Some(e),
            _ => None,
        }
    }
}

impl From<umlx_driver::Error> for Error {
    fn from(e: umlx_driver::Error) -> Error {
        Error::Driver(e)
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;
