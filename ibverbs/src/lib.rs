//! umlx-ibverbs: `libibverbs.so.1`, the C ABI of rdma-core's `<infiniband/verbs.h>` over
//! `umlx-verbs`, so that unmodified ibverbs programs (`ibv_devices`, `ibv_devinfo`,
//! `ibv_rc_pingpong`, `ibv_ud_pingpong`, `ibv_srq_pingpong`) run on umlx through `LD_LIBRARY_PATH`.
//!
//! - [`abi`]: the C structures, declared once from the public header, their layout pinned
//!   by compile-time asserts.
//! - [`devices`]: the device list from `UMLX_DEVICES` (`sim`, `sim:udp:LOCAL,PEER`,
//!   `pci:0000:3b:00.0`) and the port addresses from `UMLX_IP`.
//! - `convert`: C attributes to and from `umlx-verbs` types (values, no pointers).
//! - `ffi`: the exported functions and the objects behind the C handles, the only module
//!   with `unsafe`. The ops table the header's inline `ibv_post_send`, `ibv_post_recv`,
//!   `ibv_poll_cq` and `ibv_req_notify_cq` call leads straight into the verbs data path.
//!
//! Symbol versions come from `exports.txt` (see `build.rs`). Set `UMLX_DEBUG=1` to have the
//! reason of each failed call on stderr (the call itself answers with the errno rdma-core
//! would).

#![deny(unsafe_code)]

pub mod abi;
mod convert;
pub mod devices;
mod ffi;
