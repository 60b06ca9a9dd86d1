//! The FFI boundary: every function C calls, and the objects behind the C handles. The only
//! place in the crate with `unsafe`; every block says why it is sound.
//!
//! # Objects
//!
//! Each C handle is the first field of a Rust object (`#[repr(C)]`), so the handle's address
//! is the object's: `UContext` (the `verbs_context` that holds the `ibv_context`, then the
//! `umlx_verbs::Context`), `UPd`, `UMr`, `UChannel`, `UCq`, `UQp`, `UAh`. The C structure sits in
//! an `UnsafeCell` (C may read it any time; the library writes it only at creation and
//! through raw pointers); the verbs object that a data-path call needs mutably (`Cq`, `Qp`) is
//! in an `UnsafeCell` too, and reached by `&mut` only inside that call.
//!
//! # The contract with C
//!
//! Every exported function is `unsafe extern "C"`: its pointers are the ones the ibverbs
//! documentation describes (handles this library returned and the caller has not destroyed,
//! buffers of the stated length). What the library can check it checks before use: NULL,
//! `num_sge` against the queue's limit, `num_entries`, a tag in each object that tells a handle
//! of the right kind from a stray pointer on the control path. As with rdma-core's mlx5 in its
//! single-threaded mode, one QP's (one CQ's) data-path calls are not made from two threads at
//! once; different QPs and CQs are independent.
#![allow(unsafe_code)]
#![allow(clippy::missing_safety_doc)] // the contract above is every function's

mod compat;
mod datapath;
mod direct;
mod events;
mod objects;
mod qp_ex;

use crate::abi::*;
use crate::convert;
use crate::devices::{DeviceEntry, DeviceSpec, parse_devices, parse_ips, parse_sim_index};
use libc::{EINVAL, EIO, ENOMEM, EOPNOTSUPP, c_char, c_int, c_void, size_t};
use std::cell::UnsafeCell;
use std::ffi::{CStr, CString};
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use umlx_verbs::simwire::{SimWire, SimWireOptions};
use umlx_verbs::{Backend, Context, PortState, WcStatus};

// Each exported function's symbol version (`.symver` directives generated from exports.txt by
// build.rs). Not in the test harness, which has no version script to define the nodes.
#[cfg(not(test))]
include!(concat!(env!("OUT_DIR"), "/symver.rs"));

// ---------------------------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------------------------

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for the
    // thread's lifetime.
    unsafe { *libc::__errno_location() = e };
}

/// NULL with `errno` set, the failure of a call that returns a pointer.
pub(crate) fn fail<T>(e: c_int) -> *mut T {
    set_errno(e);
    null_mut()
}

/// Whether `UMLX_DEBUG` asks for the reason of each failure on stderr.
fn debug() -> bool {
    static DEBUG: OnceLock<bool> = OnceLock::new();
    *DEBUG.get_or_init(|| std::env::var("UMLX_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// The errno of a verbs error, with its message on stderr under `UMLX_DEBUG`.
pub(crate) fn errno_of(call: &str, e: &umlx_verbs::Error) -> c_int {
    if debug() {
        eprintln!("umlx: {call}: {e}");
    }
    e.errno()
}

/// Says why a call failed (under `UMLX_DEBUG`) and gives its errno back.
pub(crate) fn refuse(call: &str, errno: c_int, why: &str) -> c_int {
    if debug() {
        eprintln!("umlx: {call}: {why}");
    }
    errno
}

/// Runs a control-path call, turning a panic into EIO instead of unwinding into C.
pub(crate) fn guard<R>(call: &str, on_panic: R, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            if debug() {
                eprintln!("umlx: {call}: internal error (panic)");
            }
            set_errno(EIO);
            on_panic
        }
    }
}

/// Whether a descriptor is in non-blocking mode (the program may set it on a channel's or a
/// context's fd; the calls that wait then answer EAGAIN instead).
pub(crate) fn nonblocking(fd: c_int) -> bool {
    // SAFETY: fcntl F_GETFL reads no memory.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// The tags that tell handles apart (checked on the control path).
pub(crate) mod tag {
    pub const CONTEXT: u64 = u64::from_be_bytes(*b"umlxCTX\0");
    pub const PD: u64 = u64::from_be_bytes(*b"umlxPD\0\0");
    pub const MR: u64 = u64::from_be_bytes(*b"umlxMR\0\0");
    pub const CHANNEL: u64 = u64::from_be_bytes(*b"umlxCHAN");
    pub const CQ: u64 = u64::from_be_bytes(*b"umlxCQ\0\0");
    pub const QP: u64 = u64::from_be_bytes(*b"umlxQP\0\0");
    pub const AH: u64 = u64::from_be_bytes(*b"umlxAH\0\0");
    pub const SRQ: u64 = u64::from_be_bytes(*b"umlxSRQ\0");
    /// What a destroyed object's tag becomes.
    pub const DEAD: u64 = 0;
}

// ---------------------------------------------------------------------------------------------
// Devices.
// ---------------------------------------------------------------------------------------------

/// A device of the list: lives as long as the process, so its `ibv_device` stays valid after
/// `ibv_free_device_list` (as programs that open a device and free the list expect).
#[repr(C)]
pub(crate) struct UDevice {
    ibv: ibv_device,
    entry: DeviceEntry,
    /// The node GUID of the last context opened on it (0: none yet).
    guid: AtomicU64,
}

// SAFETY: `ibv_device` holds only integers, character arrays and (NULL) function pointers;
// it is written once, before the device is shared, and only read afterwards.
unsafe impl Sync for UDevice {}
// SAFETY: as above.
unsafe impl Send for UDevice {}

/// The devices `UMLX_DEVICES` names, read once per process.
fn devices() -> &'static [UDevice] {
    static DEVICES: OnceLock<Vec<UDevice>> = OnceLock::new();
    DEVICES.get_or_init(|| {
        let (entries, problems) = parse_devices(std::env::var("UMLX_DEVICES").ok().as_deref());
        for p in problems {
            eprintln!("umlx: UMLX_DEVICES: {p} (left out)");
        }
        entries
            .into_iter()
            .map(|entry| {
                let mut ibv = ibv_device {
                    _ops: _ibv_device_ops { _dummy1: None, _dummy2: None },
                    node_type: IBV_NODE_CA,
                    transport_type: IBV_TRANSPORT_IB,
                    name: [0; IBV_SYSFS_NAME_MAX],
                    dev_name: [0; IBV_SYSFS_NAME_MAX],
                    dev_path: [0; IBV_SYSFS_PATH_MAX],
                    ibdev_path: [0; IBV_SYSFS_PATH_MAX],
                };
                convert::put_cstr(&mut ibv.name, &entry.name);
                convert::put_cstr(&mut ibv.dev_name, &entry.name);
                convert::put_cstr(&mut ibv.dev_path, &format!("{SYSFS_VERBS}/{}", entry.name));
                convert::put_cstr(&mut ibv.ibdev_path, &format!("{SYSFS_IB}/{}", entry.name));
                UDevice { ibv, entry, guid: AtomicU64::new(0) }
            })
            .collect()
    })
}

const SYSFS_IB: &str = "/sys/class/infiniband";
const SYSFS_VERBS: &str = "/sys/class/infiniband_verbs";

/// The device behind a handle this library gave out.
fn device(dev: *mut ibv_device) -> Option<&'static UDevice> {
    devices().iter().find(|d| std::ptr::eq(&d.ibv, dev.cast_const()))
}

/// `ibv_get_device_list`: the devices `UMLX_DEVICES` names (default: one sim), as a
/// NULL-terminated array freed by `ibv_free_device_list`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut ibv_device {
    guard("ibv_get_device_list", null_mut(), || {
        let devs = devices();
        // SAFETY: calloc of n+1 pointer slots (checked multiplication inside calloc); NULL on
        // failure, handled below.
        let list =
            unsafe { libc::calloc(devs.len() + 1, std::mem::size_of::<*mut ibv_device>()) }.cast::<*mut ibv_device>();
        if list.is_null() {
            return fail(ENOMEM);
        }
        for (i, d) in devs.iter().enumerate() {
            // SAFETY: `list` has devs.len() + 1 slots; i < devs.len().
            unsafe { list.add(i).write(std::ptr::from_ref(&d.ibv).cast_mut()) };
        }
        if !num_devices.is_null() {
            // SAFETY: the caller passes NULL or a pointer to an int.
            unsafe { num_devices.write(devs.len() as c_int) };
        }
        list
    })
}

/// `ibv_free_device_list`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // SAFETY: `list` came from `ibv_get_device_list`'s calloc (or is NULL, which free ignores).
    unsafe { libc::free(list.cast()) };
}

/// `ibv_get_device_name`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_name(dev: *mut ibv_device) -> *const c_char {
    match device(dev) {
        Some(d) => d.ibv.name.as_ptr(),
        None => fail::<c_char>(EINVAL),
    }
}

/// `ibv_get_device_index`: umlx devices have no kernel index.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_index(_dev: *mut ibv_device) -> c_int {
    -1
}

/// `ibv_get_device_guid` (network order). A sim's GUID follows from its number; for the
/// automatic wire that is the slot a process opening it now would get, unless this process
/// has it open. A PCI function is opened to read it, unless it is open already.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_device_guid(dev: *mut ibv_device) -> u64 {
    let Some(d) = device(dev) else {
        set_errno(EINVAL);
        return 0;
    };
    guard("ibv_get_device_guid", 0, || {
        let known = d.guid.load(Ordering::Relaxed);
        if known != 0 {
            return known.to_be();
        }
        let guid = match &d.entry.spec {
            DeviceSpec::Sim(wire) => {
                let index = parse_sim_index(std::env::var("UMLX_SIM_INDEX").ok().as_deref()).ok().flatten();
                let slot = match wire {
                    SimWire::Auto => SimWire::auto_slot_free_now(),
                    SimWire::Udp(..) => 0,
                };
                umlx_sim::SimConfig::numbered(index.unwrap_or(slot)).node_guid
            }
            DeviceSpec::Pci(_) => match open_context(d).and_then(|c| c.query_device()) {
                Ok(a) => a.node_guid,
                Err(e) => {
                    set_errno(errno_of("ibv_get_device_guid", &e));
                    return 0;
                }
            },
        };
        guid.to_be()
    })
}

/// Opens the device an entry names.
fn open_context(d: &UDevice) -> Result<Context, umlx_verbs::Error> {
    let invalid = |e| umlx_verbs::Error::new(umlx_verbs::ErrorKind::InvalidArgument, e);
    let ips = parse_ips(std::env::var("UMLX_IP").ok().as_deref()).map_err(invalid)?;
    match &d.entry.spec {
        DeviceSpec::Sim(wire) => Context::open_sim_on_wire(&SimWireOptions {
            wire: wire.clone(),
            index: parse_sim_index(std::env::var("UMLX_SIM_INDEX").ok().as_deref()).map_err(invalid)?,
            ips,
            pcap: std::env::var("UMLX_PCAP").ok().filter(|p| !p.is_empty()),
            plain_doorbells: crate::devices::parse_plain_doorbells(
                std::env::var("UMLX_SIM_PLAIN_DOORBELLS").ok().as_deref(),
            ),
        }),
        DeviceSpec::Pci(pci) => Context::open_pci(pci, ips),
    }
}

// ---------------------------------------------------------------------------------------------
// Contexts.
// ---------------------------------------------------------------------------------------------

/// An open device: the `verbs_context` (with the `ibv_context` programs hold at its end), then
/// the verbs context.
#[repr(C)]
pub(crate) struct UContext {
    vctx: UnsafeCell<verbs_context>,
    tag: AtomicU64,
    pub(crate) ctx: Context,
    device: &'static UDevice,
    /// The async event eventfd whose number `async_fd` holds, kept open as long as the context.
    pub(crate) async_fd: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    /// The handles of its CQs, QPs and SRQs, for the events that name them.
    pub(crate) handles: events::Handles,
}

/// The operations the header's inline verbs call.
fn context_ops() -> ibv_context_ops {
    ibv_context_ops {
        poll_cq: Some(datapath::poll_cq),
        req_notify_cq: Some(datapath::req_notify_cq),
        post_send: Some(datapath::post_send),
        post_recv: Some(datapath::post_recv),
        post_srq_recv: Some(datapath::post_srq_recv),
        ..Default::default()
    }
}

impl UContext {
    /// The `ibv_context` handle.
    pub(crate) fn handle(&self) -> *mut ibv_context {
        // SAFETY: a field projection of the cell's own pointer, no reference created.
        unsafe { &raw mut (*self.vctx.get()).context }
    }
}

/// The context behind a handle, after checking its tag.
///
/// # Safety
///
/// `ctx` is NULL or a handle from `ibv_open_device` not yet closed.
pub(crate) unsafe fn ucontext<'a>(ctx: *mut ibv_context) -> Option<&'a UContext> {
    if ctx.is_null() {
        return None;
    }
    let off = std::mem::offset_of!(verbs_context, context);
    // SAFETY: a context handle is the `context` field of the `verbs_context` at the start of a
    // live UContext (repr(C), UnsafeCell is transparent): stepping back `off` bytes gives the
    // UContext, within the same allocation.
    let u = unsafe { &*ctx.cast::<u8>().sub(off).cast::<UContext>() };
    (u.tag.load(Ordering::Relaxed) == tag::CONTEXT).then_some(u)
}

/// `ibv_open_device`: brings the device up (a sim: created and connected to its wire).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_open_device(dev: *mut ibv_device) -> *mut ibv_context {
    let Some(d) = device(dev) else { return fail(EINVAL) };
    guard("ibv_open_device", null_mut(), || {
        let ctx = match open_context(d) {
            Ok(c) => c,
            Err(e) => return fail(errno_of("ibv_open_device", &e)),
        };
        if let Ok(a) = ctx.query_device() {
            d.guid.store(a.node_guid, Ordering::Relaxed);
        }
        new_context(ctx, d)
    })
}

/// The C context over an open verbs context.
fn new_context(ctx: Context, d: &'static UDevice) -> *mut ibv_context {
    let dev = std::ptr::from_ref(&d.ibv).cast_mut();
    {
        let vectors = ctx.hca().backend().irq_count().saturating_sub(1);
        let async_owned = ctx.async_fd();
        let async_fd = async_owned.as_ref().map_or(-1, |f| std::os::fd::AsRawFd::as_raw_fd(&**f));
        let u = Box::new(UContext {
            vctx: UnsafeCell::new(verbs_context {
                query_port: Some(query_port_ex),
                advise_mr: None,
                alloc_null_mr: None,
                read_counters: None,
                attach_counters_point_flow: None,
                create_counters: None,
                destroy_counters: None,
                reg_dm_mr: None,
                alloc_dm: None,
                free_dm: None,
                modify_flow_action_esp: None,
                destroy_flow_action: None,
                create_flow_action_esp: None,
                modify_qp_rate_limit: None,
                alloc_parent_domain: None,
                dealloc_td: None,
                alloc_td: None,
                modify_cq: None,
                post_srq_ops: None,
                destroy_rwq_ind_table: None,
                create_rwq_ind_table: None,
                destroy_wq: None,
                modify_wq: None,
                create_wq: None,
                query_rt_values: None,
                create_cq_ex: None,
                priv_: null_mut(),
                query_device_ex: Some(query_device_ex),
                ibv_destroy_flow: None,
                abi_placeholder2: None,
                ibv_create_flow: None,
                abi_placeholder1: None,
                open_qp: None,
                create_qp_ex: Some(objects::create_qp_ex),
                get_srq_num: None,
                create_srq_ex: None,
                open_xrcd: None,
                close_xrcd: None,
                abi_placeholder3: 0,
                sz: std::mem::size_of::<verbs_context>(),
                context: ibv_context {
                    device: dev,
                    ops: context_ops(),
                    cmd_fd: -1,
                    async_fd,
                    num_comp_vectors: vectors as c_int,
                    mutex: libc::PTHREAD_MUTEX_INITIALIZER,
                    abi_compat: VERBS_ABI_IS_EXTENDED as *mut c_void,
                },
            }),
            tag: AtomicU64::new(tag::CONTEXT),
            ctx,
            device: d,
            async_fd: async_owned,
            handles: Default::default(),
        });
        let raw = Box::into_raw(u);
        // SAFETY: a field projection of the new allocation through its raw pointer, so the
        // handle keeps the provenance `ibv_close_device` frees it with.
        unsafe { &raw mut (*UnsafeCell::raw_get(&raw const (*raw).vctx)).context }
    }
}

/// `ibv_close_device`. The device is torn down once the objects still open on it are gone.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_close_device(ctx: *mut ibv_context) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return EINVAL };
    u.tag.store(tag::DEAD, Ordering::Relaxed);
    let off = std::mem::offset_of!(verbs_context, context);
    guard("ibv_close_device", EIO, || {
        // SAFETY: the handle is `off` bytes into the UContext `ibv_open_device` boxed, with that
        // allocation's provenance; the caller gives it up with this call (the tag, cleared
        // above, refuses a stale handle).
        unsafe { drop(Box::from_raw(ctx.cast::<u8>().sub(off).cast::<UContext>())) };
        0
    })
}

/// `ibv_query_device`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return EINVAL };
    if attr.is_null() {
        return EINVAL;
    }
    guard("ibv_query_device", EIO, || match u.ctx.query_device() {
        Ok(d) => {
            // SAFETY: `attr` points to a `struct ibv_device_attr` (checked non-NULL).
            unsafe { attr.write(convert::device_attr(&d)) };
            0
        }
        Err(e) => errno_of("ibv_query_device", &e),
    })
}

/// `verbs_context.query_device_ex`: the device attributes and no extended capabilities.
unsafe extern "C" fn query_device_ex(
    ctx: *mut ibv_context,
    input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: size_t,
) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return EINVAL };
    // SAFETY: `input` is NULL or points to the input structure.
    if !input.is_null() && unsafe { (*input).comp_mask } != 0 {
        return EINVAL;
    }
    if attr.is_null() || attr_size < std::mem::size_of::<ibv_device_attr>() {
        return EINVAL;
    }
    guard("ibv_query_device_ex", EIO, || match u.ctx.query_device() {
        Ok(d) => {
            let ex = ibv_device_attr_ex { orig_attr: convert::device_attr(&d), comp_mask: 0, ext: [0; 20] };
            let n = attr_size.min(std::mem::size_of::<ibv_device_attr_ex>());
            // SAFETY: `attr` has `attr_size` bytes (the header passes sizeof its structure);
            // the library writes the first `n` of them and zeroes any newer tail it does not
            // know, as every capability there is absent.
            unsafe {
                std::ptr::copy_nonoverlapping(std::ptr::from_ref(&ex).cast::<u8>(), attr.cast::<u8>(), n);
                std::ptr::write_bytes(attr.cast::<u8>().add(n), 0, attr_size - n);
            }
            0
        }
        Err(e) => errno_of("ibv_query_device_ex", &e),
    })
}

/// The port attributes in C form.
fn port_attr_of(u: &UContext, port: u8) -> Result<ibv_port_attr, c_int> {
    u.ctx.query_port(port).map(|p| convert::port_attr(&p)).map_err(|e| errno_of("ibv_query_port", &e))
}

/// `ibv_query_port@IBVERBS_1.1`: the legacy entry the header falls back to, which writes the
/// older, shorter `struct _compat_ibv_port_attr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_port(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr) -> c_int {
    // SAFETY: as `query_port_ex` with the compat structure's size.
    unsafe { query_port_ex(ctx, port, attr, COMPAT_PORT_ATTR_SIZE) }
}

/// `verbs_context.query_port`: what the header's inline `ibv_query_port` calls.
unsafe extern "C" fn query_port_ex(ctx: *mut ibv_context, port: u8, attr: *mut ibv_port_attr, len: size_t) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return EINVAL };
    if attr.is_null() {
        return EINVAL;
    }
    guard("ibv_query_port", EIO, || match port_attr_of(u, port) {
        Ok(a) => {
            let n = len.min(std::mem::size_of::<ibv_port_attr>());
            // SAFETY: `attr` has `len` bytes; the first `n` get the attributes, a longer
            // (newer) structure's tail is zeroed.
            unsafe {
                std::ptr::copy_nonoverlapping(std::ptr::from_ref(&a).cast::<u8>(), attr.cast::<u8>(), n);
                std::ptr::write_bytes(attr.cast::<u8>().add(n), 0, len - n);
            }
            0
        }
        Err(e) => e,
    })
}

/// `ibv_query_gid`: an entry of the GID table (zeros for an empty one).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid(ctx: *mut ibv_context, port: u8, index: c_int, gid: *mut ibv_gid) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return -1 };
    if gid.is_null() || index < 0 {
        set_errno(EINVAL);
        return -1;
    }
    guard("ibv_query_gid", -1, || match u.ctx.query_gid(port, index as u32) {
        Ok(g) => {
            // SAFETY: `gid` points to a `union ibv_gid` (checked non-NULL).
            unsafe { gid.write(ibv_gid { raw: g.0 }) };
            0
        }
        Err(e) => {
            set_errno(errno_of("ibv_query_gid", &e));
            -1
        }
    })
}

/// The type of a GID: RoCE v2 for every entry the driver programs (the RoCEv2 GIDs of the
/// port's addresses and its link-local GID), v1 for an empty one (as rdma-core answers).
fn gid_is_programmed(u: &UContext, index: u32) -> bool {
    u.ctx.gids().iter().any(|(i, g)| *i == index && g.0 != [0; 16])
}

/// `ibv_query_gid_type` (`IBVERBS_PRIVATE_34`, `<infiniband/driver.h>`; `ibv_devinfo` uses it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_gid_type(ctx: *mut ibv_context, port: u8, index: u32, ty: *mut u32) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return EINVAL };
    if ty.is_null() || port != 1 {
        return EINVAL;
    }
    let t = if gid_is_programmed(u, index) { gid_type_sysfs::ROCE_V2 } else { gid_type_sysfs::IB_ROCE_V1 };
    // SAFETY: `ty` points to an `enum ibv_gid_type_sysfs` (checked non-NULL).
    unsafe { ty.write(t) };
    0
}

/// `ibv_query_pkey`: a RoCE port has one P_Key, the default 0xffff.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_query_pkey(ctx: *mut ibv_context, port: u8, index: c_int, pkey: *mut u16) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return EINVAL };
    if pkey.is_null() {
        return EINVAL;
    }
    let len = match port_attr_of(u, port) {
        Ok(a) => a.pkey_tbl_len as c_int,
        Err(e) => return e,
    };
    if index < 0 || index >= len {
        return EINVAL;
    }
    // SAFETY: `pkey` points to a `__be16` (checked non-NULL).
    unsafe { pkey.write(0xffffu16.to_be()) };
    0
}

/// `ibv_get_pkey_index`: the index of a P_Key (0 for the default one), or -1.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_get_pkey_index(ctx: *mut ibv_context, port: u8, pkey: u16) -> c_int {
    // SAFETY: the caller passes a context handle (checked by tag).
    let Some(u) = (unsafe { ucontext(ctx) }) else { return -EINVAL };
    if port_attr_of(u, port).is_err() {
        return -EINVAL;
    }
    if u16::from_be(pkey) & 0x7fff == 0x7fff { 0 } else { -libc::ENOENT }
}

// ---------------------------------------------------------------------------------------------
// sysfs, strings, fork.
// ---------------------------------------------------------------------------------------------

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` without its trailing newline, NUL
/// terminated; the length, or -1. umlx devices have no sysfs directory: their `board_id` is
/// answered here, anything else of theirs does not exist.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        set_errno(EINVAL);
        return -1;
    }
    // SAFETY: `dir` and `file` are NUL-terminated strings (checked non-NULL).
    let (dir, file) = unsafe { (CStr::from_ptr(dir).to_string_lossy(), CStr::from_ptr(file).to_string_lossy()) };
    let ours = devices().iter().find(|d| dir == format!("{SYSFS_IB}/{}", d.entry.name));
    let content: Vec<u8> = match ours {
        Some(d) if file == "board_id" => match d.entry.spec {
            DeviceSpec::Sim(_) => b"UMLX_SIM".to_vec(),
            DeviceSpec::Pci(_) => b"UMLX_VFIO".to_vec(),
        },
        Some(_) => {
            set_errno(libc::ENOENT);
            return -1;
        }
        None => match std::fs::read(format!("{dir}/{file}")) {
            Ok(c) => c,
            Err(e) => {
                set_errno(e.raw_os_error().unwrap_or(EIO));
                return -1;
            }
        },
    };
    let text = content.strip_suffix(b"\n").unwrap_or(&content);
    let n = text.len().min(size - 1);
    // SAFETY: `buf` has `size` bytes; n + 1 <= size.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
        buf.add(n).write(0);
    }
    n as c_int
}

/// A table of C strings, built once.
fn strings(table: &'static OnceLock<Vec<CString>>, build: impl FnOnce() -> Vec<String>) -> &'static [CString] {
    table.get_or_init(|| build().into_iter().map(|s| CString::new(s).unwrap_or_default()).collect())
}

/// `ibv_wc_status_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_wc_status_str(status: u32) -> *const c_char {
    static TABLE: OnceLock<Vec<CString>> = OnceLock::new();
    let t = strings(&TABLE, || {
        (0..24u32)
            .map(|s| {
                WcStatus::from_value(s)
                    .map(|w| w.name().to_string())
                    .or_else(|| convert::extra_wc_status(s).map(str::to_string))
                    .unwrap_or_default()
            })
            .chain(std::iter::once("unknown".to_string()))
            .collect()
    });
    t.get(status as usize).unwrap_or(&t[t.len() - 1]).as_ptr()
}

/// `ibv_port_state_str`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_port_state_str(state: u32) -> *const c_char {
    static TABLE: OnceLock<Vec<CString>> = OnceLock::new();
    let t = strings(&TABLE, || {
        let mut v: Vec<String> =
            (0..5u32).map(|s| PortState::from_value(s).map_or("", |p| p.name()).to_string()).collect();
        v.push("PORT_ACTIVE_DEFER".into());
        v.push("unknown".into());
        v
    });
    t.get(state as usize).unwrap_or(&t[t.len() - 1]).as_ptr()
}

/// Whether `ibv_fork_init` was called: registrations then keep their pages out of children
/// (`MADV_DONTFORK`).
pub(crate) static FORK_INIT: AtomicBool = AtomicBool::new(false);

/// `ibv_fork_init`.
#[unsafe(no_mangle)]
pub extern "C" fn ibv_fork_init() -> c_int {
    FORK_INIT.store(true, Ordering::Relaxed);
    0
}

/// Why a feature is refused, for the calls that answer EOPNOTSUPP outright.
pub(crate) fn unsupported(call: &str, what: &str) -> c_int {
    refuse(call, EOPNOTSUPP, &format!("{what} is not supported by umlx"))
}

#[cfg(test)]
mod tests;
