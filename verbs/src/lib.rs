//! umlx-verbs: the ibverbs-compatible API over the umlx user-mode mlx5 driver.
//!
//! ibverbs concepts, names and numeric values with a Rust shape on top:
//! - One type per object ([`Context`], [`Pd`], [`Cq`], [`Qp`], [`Mr`], [`Srq`]) whichever device
//!   is open: a ConnectX bound to `vfio-pci` or the embedded software ConnectX.
//! - Owned handles that keep their parents alive (a `Qp` holds its `Pd` and CQs); registered
//!   memory that cannot be freed or moved while the NIC may touch it (a `Mr` owns its memory and
//!   hands out copies, never references).
//! - Work requests that cannot say something invalid ([`SendWr`], [`UdSendWr`], [`Payload`]);
//!   QP attributes whose mask follows the fields set ([`ModifyQp`]); one call from RESET to RTS
//!   ([`Qp::connect`]).
//! - One [`Error`] with a [`ErrorKind`] to match and the errno ibverbs returns; a failed post
//!   names its work request and allocates nothing.
//! - With the `tokio` feature, completions awaited: `AsyncCq` (`acq.next().await`, a `Stream`).
//!
//! ```
//! # fn main() -> Result<(), umlx_verbs::Error> {
//! use umlx_verbs::*;
//! let ctx = Context::open_sim(Default::default())?; // or Context::open_pci("0000:3b:00.0", ips)?
//! let pd = ctx.alloc_pd()?;
//! let mut cq = ctx.create_cq(64, None)?;
//! let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE)?;
//! let mut qp = pd.create_qp(QpType::Rc, &cq).build()?;
//! let gid = ctx.default_gid().expect("an IPv4 GID").1;
//! qp.connect(&RcPeer { qp_num: qp.qp_num(), psn: 7, gid }, &ConnectParams { sq_psn: 7, ..Default::default() })?;
//! qp.post_recv(&[RecvWr { wr_id: 2, sg_list: &[mr.sge(2048, 64)] }])?;
//! mr.write(0, b"hello")?;
//! qp.post_send(&[SendWr::new(1, SendOp::Send { data: Payload::Sges(&[mr.sge(0, 5)]), imm: None }).signaled()])?;
//! let mut wc = [Wc::default(); 2];
//! let mut n = 0;
//! while n < 2 {
//!     n += cq.poll(&mut wc[n..]);
//! }
//! assert_eq!(mr.to_vec(2048, 5)?, b"hello");
//! # Ok(()) }
//! ```
//!
//! | umlx | ibverbs |
//! |---|---|
//! | [`devices`] | `ibv_get_device_list` |
//! | [`Context::open`], `Context::open_sim`, [`Context::open_pci`] / drop | `ibv_open_device` / `ibv_close_device` |
//! | [`Context::query_device`], [`Context::query_port`], [`Context::query_gid`] | `ibv_query_device`, `ibv_query_port`, `ibv_query_gid` |
//! | [`Context::alloc_pd`] / drop | `ibv_alloc_pd` / `ibv_dealloc_pd` |
//! | [`Pd::reg_mr`], [`Pd::reg_external`], [`Pd::alloc_mr`] / drop | `ibv_reg_mr` / `ibv_dereg_mr` |
//! | [`Context::create_comp_channel`] | `ibv_create_comp_channel` |
//! | [`Context::create_cq`] / drop, [`Cq::resize`] | `ibv_create_cq` / `ibv_destroy_cq`, `ibv_resize_cq` |
//! | [`Cq::poll`], [`Cq::req_notify`], [`CompChannel::get_cq_event`] ([`CqEvent`]), [`Cq::ack_events`] | `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_get_cq_event`, `ibv_ack_cq_events` |
//! | [`Cq::set_event_context`], [`CqEvent::context`] | `cq_context` |
//! | [`Pd::create_qp`] ([`QpBuilder`]) / drop | `ibv_create_qp` (`struct ibv_qp_init_attr`) / `ibv_destroy_qp` |
//! | [`Qp::modify`] ([`ModifyQp`]), [`Qp::query`] | `ibv_modify_qp`, `ibv_query_qp` |
//! | [`Qp::connect`], [`Qp::ud_to_rts`] | the INIT, RTR and RTS `ibv_modify_qp` calls |
//! | [`Qp::post_send`] ([`SendWr`]), [`Qp::post_send_ud`] ([`UdSendWr`]), [`Qp::post_recv`] ([`RecvWr`]) | `ibv_post_send`, `ibv_post_recv` |
//! | [`Pd::create_ah`] | `ibv_create_ah` |
//! | [`Pd::create_srq`], [`Srq::post_recv`], [`Srq::arm`] | `ibv_create_srq`, `ibv_post_srq_recv`, `ibv_modify_srq` (limit) |
//! | [`Context::get_async_event`] | `ibv_get_async_event` |
//! | `Context::open_sim_on_wire` (`simwire`) | a software ConnectX on the loopback wire the tools and `libibverbs.so.1` share |
//! | [`Error::errno`], [`Error::work_request`] | the returned errno, `bad_wr` |

#![forbid(unsafe_code)]

/// The README's code blocks, compiled and run as doctests (the "verbs API in ten lines").
#[cfg(all(doctest, feature = "sim"))]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

#[cfg(feature = "tokio")]
mod async_cq;
mod context;
mod cq;
mod error;
mod modify;
mod mr;
mod qp;
#[cfg(feature = "sim")]
pub mod simwire;
pub mod types;
mod wr;

#[cfg(feature = "tokio")]
pub use async_cq::AsyncCq;
pub use context::{AsyncEvent, Context, DeviceKind, DeviceListEntry, devices};
pub use cq::{CompChannel, Cq, CqEvent};
pub use modify::{ConnectParams, ModifyQp, RcPeer};
pub use mr::Mr;
pub use qp::{Ah, Pd, Qp, QpBuilder, Srq};
pub use types::*;
pub use umlx_driver::AnyBackend;
#[cfg(feature = "sim")]
pub use umlx_driver::SimBackend;
pub use umlx_driver::backend::Backend;
pub use umlx_driver::dma::ExternalBuffer;
pub use umlx_driver::vfio::VfioBackend;
/// The mlx5 event types an [`AsyncEvent`] carries, and the sub-types of a port change.
pub use umlx_hwdesc::enums::{EventType, PortChangeSubtype};
pub use wr::{OneSgeOp, Payload, RecvWr, Remote, SendOp, SendWr, Sge, SimpleWqeSource, UdDest, UdSendWr};

/// The backend every verbs object is built on: an adapter or a software ConnectX, chosen when
/// the context is opened.
pub(crate) type Dev = AnyBackend;

pub use error::{Error, ErrorKind, Result};
