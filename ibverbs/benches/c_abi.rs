//! The data path through the C ABI beside the Rust API: instructions per `ibv_post_send`
//! (1 WR), `ibv_post_recv` and `ibv_poll_cq` (16 CQEs) as an unmodified C program makes them,
//! next to `umlx bench datapath`'s figures for the same operations (issue #16: at most 10
//! instructions above the Rust API's).
//!
//! `cargo bench -p umlx-ibverbs --bench c_abi [-- --json] [-- --no-instructions]`
//!
//! What a C program gets: the built `libibverbs.so` is loaded with `dlopen` (`UMLX_LIBIBVERBS`,
//! default the one cargo built beside this bench in `deps`), its functions resolved with
//! `dlvsym` at the symbol versions rdma-core gives them, the default device opened with
//! `ibv_open_device` (`UMLX_DEVICES` unset: the embedded sim), and the data path called as the
//! header's inline functions do, through the context's ops table
//! (`qp->context->ops.post_send(qp, wr, &bad)`). The structures are `ibverbs::abi`'s.
//!
//! The method is `umlx bench datapath`'s: `OPS` operations per run on an RC QP connected to
//! itself, one RDMA WRITE of one SGE (64 bytes) per post, receive WRs of one SGE, CQEs written by
//! the device model for the poll; ns the median of `RUNS` runs; instructions counted by
//! callgrind inside the kernel function only (`--toggle-collect`), in a child process. The post
//! kernels run with `UMLX_SIM_PLAIN_DOORBELLS=1` (doorbells are plain stores, as the Rust
//! figures' `SimBackend::with_plain_doorbells`); the poll kernel on a sim that executes the
//! WRITEs. The Rust API's figures come from running `umlx bench datapath --json` (`UMLX_BIN`,
//! default `umlx` next to this bench's `deps` directory: `cargo build --release -p umlx-tools`).
//!
//! Every run checks its results: each post returned 0, each poll returned a full batch of
//! successful RDMA WRITE completions with the posted `wr_id`.

use ibverbs::abi::*;
use libc::{c_char, c_int, c_void};
use std::ffi::{CStr, CString};
use std::hint::black_box;
use std::path::PathBuf;
use std::process::Command;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Operations per measured run (as `umlx bench datapath`).
const OPS: usize = 2048;
/// Runs per ns figure (median taken).
const RUNS: usize = 15;
/// The most the C ABI may cost above the Rust API, in instructions per operation.
const TARGET_ABOVE: f64 = 10.0;
/// The memory region: 64 KiB, the WRITEs' source at 0 and destination at 4096, as the Rust
/// bench; the poll setup's progress markers at `MARK`.
const MR_LEN: usize = 1 << 16;
const MARK: usize = 32768;

/// Values from `<infiniband/verbs.h>` the setup needs that `ibverbs::abi` does not declare
/// (the library itself never looks at them).
mod hdr {
    use libc::c_int;
    pub const QPS_RESET: u32 = 0;
    pub const QPS_INIT: u32 = 1;
    pub const QPS_RTR: u32 = 2;
    pub const QPS_RTS: u32 = 3;
    pub const QP_STATE: c_int = 1 << 0;
    pub const QP_ACCESS_FLAGS: c_int = 1 << 3;
    pub const QP_PKEY_INDEX: c_int = 1 << 4;
    pub const QP_PORT: c_int = 1 << 5;
    pub const QP_AV: c_int = 1 << 7;
    pub const QP_PATH_MTU: c_int = 1 << 8;
    pub const QP_TIMEOUT: c_int = 1 << 9;
    pub const QP_RETRY_CNT: c_int = 1 << 10;
    pub const QP_RNR_RETRY: c_int = 1 << 11;
    pub const QP_RQ_PSN: c_int = 1 << 12;
    pub const QP_MAX_QP_RD_ATOMIC: c_int = 1 << 13;
    pub const QP_MIN_RNR_TIMER: c_int = 1 << 15;
    pub const QP_SQ_PSN: c_int = 1 << 16;
    pub const QP_MAX_DEST_RD_ATOMIC: c_int = 1 << 17;
    pub const QP_DEST_QPN: c_int = 1 << 20;
    pub const ACCESS_LOCAL_WRITE: c_int = 1;
    pub const ACCESS_REMOTE_WRITE: c_int = 2;
    pub const WC_SUCCESS: u32 = 0;
    pub const WC_RDMA_WRITE: u32 = 1;
    /// The RoCEv2 GID of the port's IPv4 address (`Context::default_gid` on the Rust side).
    pub const GID_INDEX: u8 = 1;
}

// ---------------------------------------------------------------------------------------------
// The library, as dlopen gives it.
// ---------------------------------------------------------------------------------------------

/// The exported functions the bench calls, resolved at their rdma-core symbol versions.
struct Lib {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut *mut ibv_device,
    free_device_list: unsafe extern "C" fn(*mut *mut ibv_device),
    get_device_name: unsafe extern "C" fn(*mut ibv_device) -> *const c_char,
    open_device: unsafe extern "C" fn(*mut ibv_device) -> *mut ibv_context,
    query_device: unsafe extern "C" fn(*mut ibv_context, *mut ibv_device_attr) -> c_int,
    query_port: unsafe extern "C" fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int,
    query_gid: unsafe extern "C" fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int,
    alloc_pd: unsafe extern "C" fn(*mut ibv_context) -> *mut ibv_pd,
    reg_mr: unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr,
    create_cq: unsafe extern "C" fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int) -> *mut ibv_cq,
    create_qp: unsafe extern "C" fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp,
    modify_qp: unsafe extern "C" fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int,
}

/// Where the cdylib is: `UMLX_LIBIBVERBS`, or the `libibverbs.so` cargo built beside this
/// bench (`target/release/deps/`: built from the same sources with the same profile for the
/// bench's `ibverbs` dependency; `cargo bench` does not copy it up to `target/release/`).
fn lib_path() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("UMLX_LIBIBVERBS") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    Ok(exe.parent().ok_or("no directory above the bench")?.join("libibverbs.so"))
}

/// The last `dlerror` message.
fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated message valid until the next dl* call
    // on this thread, copied right away.
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        return "unknown dl error".into();
    }
    // SAFETY: as above, non-NULL.
    unsafe { CStr::from_ptr(e) }.to_string_lossy().into_owned()
}

/// `dlvsym(handle, name, version)` as a function pointer of type `F`.
///
/// # Safety
///
/// `F` is the C signature the library's `name@version` has.
unsafe fn sym<F: Copy>(handle: *mut c_void, name: &str, version: &str) -> Result<F, String> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let (n, v) = (CString::new(name).unwrap(), CString::new(version).unwrap());
    // SAFETY: a handle from dlopen and two NUL-terminated strings.
    let p = unsafe { libc::dlvsym(handle, n.as_ptr(), v.as_ptr()) };
    if p.is_null() {
        return Err(format!("{name}@{version}: {}", dlerror()));
    }
    // SAFETY: a non-NULL function address of the signature `F` (the function's contract), and
    // `F` is pointer-sized (checked above).
    Ok(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
}

impl Lib {
    /// Loads the cdylib (for the process's life: the handle is never closed).
    fn load() -> Result<Lib, String> {
        let path = lib_path()?;
        let c = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: a NUL-terminated path; loading runs no constructor of ours that could fail.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(format!(
                "dlopen {}: {} (build it: cargo build --release -p umlx-ibverbs)",
                path.display(),
                dlerror()
            ));
        }
        const V: &str = "IBVERBS_1.1";
        // SAFETY: each type is the function's prototype in <infiniband/verbs.h>, which
        // `ibverbs::abi`'s structures follow.
        unsafe {
            Ok(Lib {
                get_device_list: sym(h, "ibv_get_device_list", V)?,
                free_device_list: sym(h, "ibv_free_device_list", V)?,
                get_device_name: sym(h, "ibv_get_device_name", V)?,
                open_device: sym(h, "ibv_open_device", V)?,
                query_device: sym(h, "ibv_query_device", V)?,
                query_port: sym(h, "ibv_query_port", V)?,
                query_gid: sym(h, "ibv_query_gid", V)?,
                alloc_pd: sym(h, "ibv_alloc_pd", V)?,
                reg_mr: sym(h, "ibv_reg_mr", V)?,
                create_cq: sym(h, "ibv_create_cq", V)?,
                create_qp: sym(h, "ibv_create_qp", V)?,
                modify_qp: sym(h, "ibv_modify_qp", V)?,
            })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Setup: the default device, an RC QP connected to itself.
// ---------------------------------------------------------------------------------------------

/// Everything a kernel runs on. The objects live as long as the process (the child exits
/// after its runs), so nothing is destroyed.
struct Bench {
    lib: Lib,
    ctx: *mut ibv_context,
    cq: *mut ibv_cq,
    qp: *mut ibv_qp,
    mr: *mut ibv_mr,
    /// The registered memory (`MR_LEN` bytes, page-aligned, never freed).
    buf: *mut u8,
    gid: ibv_gid,
    mtu: u32,
    rd_atomic: u8,
}

fn check_rc(call: &str, rc: c_int) -> Result<(), String> {
    if rc != 0 {
        return Err(format!("{call} failed: {rc} (UMLX_DEBUG=1 says why)"));
    }
    Ok(())
}

fn non_null<T>(call: &str, p: *mut T) -> Result<*mut T, String> {
    if p.is_null() {
        return Err(format!("{call} failed: {} (UMLX_DEBUG=1 says why)", std::io::Error::last_os_error()));
    }
    Ok(p)
}

fn setup() -> Result<Bench, String> {
    let lib = Lib::load()?;
    // SAFETY: the calls a C program makes to set up, in order, each with the arguments the
    // header describes: handles this library returned, structures of `ibverbs::abi` (the
    // header's layout), and memory that stays registered for the process's life.
    unsafe {
        let mut n = 0;
        let list = non_null("ibv_get_device_list", (lib.get_device_list)(&mut n))?;
        if n < 1 {
            return Err("ibv_get_device_list: no device".into());
        }
        let dev = *list;
        let name = CStr::from_ptr((lib.get_device_name)(dev)).to_string_lossy().into_owned();
        if !name.starts_with("umlx_sim") {
            return Err(format!(
                "the first device is {name}: the bench measures the embedded sim (unset UMLX_DEVICES)"
            ));
        }
        let ctx = non_null("ibv_open_device", (lib.open_device)(dev))?;
        (lib.free_device_list)(list);
        let mut dattr = ibv_device_attr::default();
        check_rc("ibv_query_device", (lib.query_device)(ctx, &mut dattr))?;
        let mut pattr = ibv_port_attr::default();
        check_rc("ibv_query_port", (lib.query_port)(ctx, 1, &mut pattr))?;
        let mut gid = ibv_gid::default();
        check_rc("ibv_query_gid", (lib.query_gid)(ctx, 1, hdr::GID_INDEX.into(), &mut gid))?;
        let pd = non_null("ibv_alloc_pd", (lib.alloc_pd)(ctx))?;
        let buf = std::alloc::alloc_zeroed(std::alloc::Layout::from_size_align(MR_LEN, 4096).unwrap());
        let mr = non_null(
            "ibv_reg_mr",
            (lib.reg_mr)(pd, buf.cast(), MR_LEN, hdr::ACCESS_LOCAL_WRITE | hdr::ACCESS_REMOTE_WRITE),
        )?;
        let cq = non_null("ibv_create_cq", (lib.create_cq)(ctx, 4 * OPS as c_int, null_mut(), null_mut(), 0))?;
        let mut init = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: null_mut(),
            cap: ibv_qp_cap {
                max_send_wr: OPS as u32,
                max_recv_wr: OPS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: qpt::RC,
            sq_sig_all: 0,
        };
        let qp = non_null("ibv_create_qp", (lib.create_qp)(pd, &mut init))?;
        let rd_atomic = dattr.max_qp_rd_atom.min(dattr.max_qp_init_rd_atom).clamp(1, 16) as u8;
        let b = Bench { lib, ctx, cq, qp, mr, buf, gid, mtu: pattr.active_mtu, rd_atomic };
        connect(&b)?;
        Ok(b)
    }
}

/// RESET → INIT → RTR → RTS, connected to itself (PSN 0, the port's RoCEv2 IPv4 GID), with the
/// attributes the Rust bench's `ConnectParams::default()` gives.
fn connect(b: &Bench) -> Result<(), String> {
    use hdr::*;
    // SAFETY: the live QP handle and attribute structures on the stack.
    let modify = |a: &mut ibv_qp_attr, mask| unsafe { check_rc("ibv_modify_qp", (b.lib.modify_qp)(b.qp, a, mask)) };
    modify(&mut ibv_qp_attr { qp_state: QPS_RESET, ..Default::default() }, QP_STATE)?;
    modify(
        &mut ibv_qp_attr {
            qp_state: QPS_INIT,
            port_num: 1,
            pkey_index: 0,
            qp_access_flags: access::BASIC,
            ..Default::default()
        },
        QP_STATE | QP_PORT | QP_PKEY_INDEX | QP_ACCESS_FLAGS,
    )?;
    // SAFETY: reading the QP handle's own field.
    let qpn = unsafe { (*b.qp).qp_num };
    let ah = ibv_ah_attr {
        grh: ibv_global_route { dgid: b.gid, flow_label: 0, sgid_index: GID_INDEX, hop_limit: 64, traffic_class: 0 },
        is_global: 1,
        port_num: 1,
        ..Default::default()
    };
    modify(
        &mut ibv_qp_attr {
            qp_state: QPS_RTR,
            path_mtu: b.mtu,
            dest_qp_num: qpn,
            rq_psn: 0,
            max_dest_rd_atomic: b.rd_atomic,
            min_rnr_timer: 12,
            ah_attr: ah,
            ..Default::default()
        },
        QP_STATE | QP_AV | QP_PATH_MTU | QP_DEST_QPN | QP_RQ_PSN | QP_MAX_DEST_RD_ATOMIC | QP_MIN_RNR_TIMER,
    )?;
    modify(
        &mut ibv_qp_attr {
            qp_state: QPS_RTS,
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: b.rd_atomic,
            ..Default::default()
        },
        QP_STATE | QP_SQ_PSN | QP_TIMEOUT | QP_RETRY_CNT | QP_RNR_RETRY | QP_MAX_QP_RD_ATOMIC,
    )
}

/// A 64-byte gather entry at `offset` of the registered memory.
fn sge(b: &Bench, offset: usize, length: u32) -> ibv_sge {
    // SAFETY: reading the MR handle's own field.
    ibv_sge { addr: b.buf as u64 + offset as u64, length, lkey: unsafe { (*b.mr).lkey } }
}

/// An RDMA WRITE of `sg` to `remote_offset` of the registered memory (the Rust bench's WR).
fn write_wr(b: &Bench, sg: &mut ibv_sge, remote_offset: usize, signaled: bool) -> ibv_send_wr {
    ibv_send_wr {
        wr_id: 7,
        next: null_mut(),
        sg_list: sg,
        num_sge: 1,
        opcode: wr_opcode::RDMA_WRITE,
        send_flags: if signaled { send_flags::SIGNALED } else { 0 },
        imm_data: 0,
        wr: send_wr_wr {
            // SAFETY: reading the MR handle's own field.
            rdma: wr_rdma { remote_addr: b.buf as u64 + remote_offset as u64, rkey: unsafe { (*b.mr).rkey } },
        },
        xrc_remote_srqn: 0,
        ext: send_wr_ext { tso: wr_tso { hdr: null_mut(), hdr_sz: 0, mss: 0 } },
    }
}

// ---------------------------------------------------------------------------------------------
// The kernels: the header's inline functions, `qp->context->ops.post_send(qp, wr, bad_wr)`.
// Each returns how many operations succeeded, stopping at the first failure.
// ---------------------------------------------------------------------------------------------

#[inline(never)]
fn c_abi_post_send_single(qp: *mut ibv_qp, wr: *mut ibv_send_wr, n: usize) -> usize {
    for i in 0..n {
        let mut bad = null_mut();
        // SAFETY: a live QP handle whose context's ops table has `post_send` (checked by
        // `ops_present`; the library never changes the table), a valid one-WR chain.
        let rc = unsafe { ((*(*qp).context).ops.post_send.unwrap_unchecked())(qp, black_box(wr), &mut bad) };
        if rc != 0 {
            return i;
        }
    }
    n
}

#[inline(never)]
fn c_abi_post_recv(qp: *mut ibv_qp, wr: *mut ibv_recv_wr, n: usize) -> usize {
    for i in 0..n {
        let mut bad = null_mut();
        // SAFETY: as `c_abi_post_send_single`, with `post_recv`.
        let rc = unsafe { ((*(*qp).context).ops.post_recv.unwrap_unchecked())(qp, black_box(wr), &mut bad) };
        if rc != 0 {
            return i;
        }
    }
    n
}

/// Polls `wc` full, `batch` entries per call; returns the entries filled and the calls made.
#[inline(never)]
fn c_abi_poll_cq(cq: *mut ibv_cq, wc: &mut [ibv_wc], batch: usize) -> (usize, usize) {
    let mut got = 0;
    let mut polls = 0;
    while got < wc.len() && polls < 100_000_000 {
        let want = batch.min(wc.len() - got);
        // SAFETY: a live CQ handle whose context's ops table has `poll_cq` (as above), and
        // `want` writable entries at `wc[got..]`.
        let n = unsafe { ((*(*cq).context).ops.poll_cq.unwrap_unchecked())(cq, want as c_int, wc[got..].as_mut_ptr()) };
        if n < 0 {
            break;
        }
        got += n as usize;
        polls += 1;
    }
    (got, polls)
}

/// The ops table entries the kernels call without a check, as the header's inline functions do.
fn ops_present(b: &Bench) -> Result<(), String> {
    // SAFETY: reading the live context's ops table.
    let ops = unsafe { &(*b.ctx).ops };
    if ops.post_send.is_none() || ops.post_recv.is_none() || ops.poll_cq.is_none() {
        return Err("the context's ops table lacks post_send, post_recv or poll_cq".into());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Runs.
// ---------------------------------------------------------------------------------------------

/// What one kernel measures; the keys are `umlx bench datapath`'s.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kernel {
    PostSend1,
    PostRecv,
    Poll16,
}

impl Kernel {
    const ALL: [Kernel; 3] = [Kernel::PostSend1, Kernel::PostRecv, Kernel::Poll16];

    fn key(self) -> &'static str {
        match self {
            Kernel::PostSend1 => "post_send_1",
            Kernel::PostRecv => "post_recv_1",
            Kernel::Poll16 => "poll_cq_batch16",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kernel::PostSend1 => "post_send, 1 RDMA WRITE (1 SGE)",
            Kernel::PostRecv => "post_recv, 1 SGE",
            Kernel::Poll16 => "poll_cq per CQE, batch 16",
        }
    }

    fn function(self) -> &'static str {
        match self {
            Kernel::PostSend1 => "c_abi_post_send_single",
            Kernel::PostRecv => "c_abi_post_recv",
            Kernel::Poll16 => "c_abi_poll_cq",
        }
    }

    /// Posts measure with plain doorbells, as the Rust figures do; polls need a device that
    /// executes the WRITEs.
    fn plain_doorbells(self) -> bool {
        self != Kernel::Poll16
    }
}

/// Runs kernel `k` `runs` times over `OPS` operations; ns per op of each run.
fn run_kernel(k: Kernel, runs: usize) -> Result<Vec<f64>, String> {
    let b = setup()?;
    ops_present(&b)?;
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let e = match k {
            Kernel::PostSend1 => {
                let mut sg = sge(&b, 0, 64);
                let mut wr = write_wr(&b, &mut sg, 4096, false);
                let t = Instant::now();
                let ok = c_abi_post_send_single(b.qp, &mut wr, OPS);
                let e = t.elapsed();
                check(ok, OPS, k)?;
                e
            }
            Kernel::PostRecv => {
                let mut sg = sge(&b, 0, 64);
                let mut wr = ibv_recv_wr { wr_id: 9, next: null_mut(), sg_list: &mut sg, num_sge: 1 };
                let t = Instant::now();
                let ok = c_abi_post_recv(b.qp, &mut wr, OPS);
                let e = t.elapsed();
                check(ok, OPS, k)?;
                e
            }
            Kernel::Poll16 => poll_run(&b, k)?,
        };
        out.push(e.as_nanos() as f64 / OPS as f64);
        // The rings start over, as in the Rust bench.
        connect(&b)?;
    }
    Ok(out)
}

/// One poll run: the device completes `OPS` signaled WRITEs (untimed), then the kernel polls
/// them 16 at a time (timed). C has no call that counts CQEs without taking them, so the last
/// WRITE of each chain of 32 also stores a marker the setup waits for (the data lands before
/// the ACK that completes it, so a short wait follows); the run counts only if every poll
/// returned a full batch.
fn poll_run(b: &Bench, k: Kernel) -> Result<Duration, String> {
    // Start from an empty CQ (not through the kernel, which callgrind counts).
    let mut scratch = [ibv_wc::default(); 16];
    // SAFETY: the library's poll_cq (the ops table) on the live CQ, 16 writable entries.
    while unsafe { ((*b.ctx).ops.poll_cq.unwrap_unchecked())(b.cq, 16, scratch.as_mut_ptr()) } > 0 {}
    // SAFETY: `MARK` and `MARK + 8` are 8-byte aligned words of the registered memory, which
    // the device accesses atomically too.
    let (src, dst) =
        unsafe { (AtomicU64::from_ptr(b.buf.add(MARK).cast()), AtomicU64::from_ptr(b.buf.add(MARK + 8).cast())) };
    dst.store(0, Ordering::SeqCst);
    let mut sg = sge(b, 0, 64);
    let mut mark_sg = sge(b, MARK, 8);
    for i in 1..=(OPS / 32) as u64 {
        src.store(i, Ordering::SeqCst);
        let mut chain: Vec<ibv_send_wr> = (0..32).map(|_| write_wr(b, &mut sg, 4096, true)).collect();
        chain[31] = write_wr(b, &mut mark_sg, MARK + 8, true);
        for j in 0..31 {
            chain[j].next = &mut chain[j + 1];
        }
        let mut bad = null_mut();
        // SAFETY: the library's post_send (the ops table) on the live QP with a valid chain.
        let rc = unsafe { ((*b.ctx).ops.post_send.unwrap_unchecked())(b.qp, chain.as_mut_ptr(), &mut bad) };
        check_rc("post_send (a chain of 32)", rc)?;
        let start = Instant::now();
        while dst.load(Ordering::SeqCst) != i {
            if start.elapsed() > Duration::from_secs(20) {
                return Err(format!("the device did not complete chain {i}"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    // The last ACK's CQEs (under valgrind too, which runs one thread at a time).
    std::thread::sleep(Duration::from_millis(50));
    let mut wc = vec![ibv_wc::default(); OPS];
    let t = Instant::now();
    let (got, polls) = c_abi_poll_cq(b.cq, &mut wc, 16);
    let e = t.elapsed();
    let good =
        wc[..got].iter().filter(|w| (w.status, w.opcode, w.wr_id) == (hdr::WC_SUCCESS, hdr::WC_RDMA_WRITE, 7)).count();
    check(good, OPS, k)?;
    if polls != OPS / 16 {
        return Err(format!("{}: {polls} polls for {OPS} CQEs: the CQ was not full yet", k.key()));
    }
    Ok(e)
}

fn check(ok: usize, want: usize, k: Kernel) -> Result<(), String> {
    if ok != want {
        return Err(format!("{}: only {ok} of {want} operations succeeded", k.key()));
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

// ---------------------------------------------------------------------------------------------
// The parent: children for each kernel, the Rust figures, the table.
// ---------------------------------------------------------------------------------------------

/// This bench run as a child on kernel `k` (`--kernel KEY --runs N`), under `wrapper` if any.
fn child(k: Kernel, runs: usize, wrapper: &[String]) -> Result<Command, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut c = match wrapper.split_first() {
        Some((w, rest)) => {
            let mut c = Command::new(w);
            c.args(rest).arg(&exe);
            c
        }
        None => Command::new(&exe),
    };
    c.args(["--kernel", k.key(), "--runs", &runs.to_string()]);
    if k.plain_doorbells() {
        c.env("UMLX_SIM_PLAIN_DOORBELLS", "1");
    } else {
        c.env_remove("UMLX_SIM_PLAIN_DOORBELLS");
    }
    Ok(c)
}

/// The wire a child's sim falls back to when both ports of the automatic loopback wire are
/// taken (by other ibverbs programs on the machine): the bench's QP talks only to itself, inside
/// the adapter, so any free port will do.
const FALLBACK_DEVICES: &str = "sim:udp:127.0.0.1:0,127.0.0.1:9";
/// Whether a child had to use [`FALLBACK_DEVICES`].
static FELL_BACK: AtomicBool = AtomicBool::new(false);

/// Runs a child; if it could not open the default device (the automatic wire busy, with
/// `UMLX_DEVICES` unset), once more on [`FALLBACK_DEVICES`].
fn output(mut c: Command) -> Result<std::process::Output, String> {
    let o = c.output().map_err(|e| e.to_string())?;
    if o.status.success()
        || std::env::var_os("UMLX_DEVICES").is_some()
        || !String::from_utf8_lossy(&o.stderr).contains("ibv_open_device failed")
    {
        return Ok(o);
    }
    FELL_BACK.store(true, Ordering::Relaxed);
    c.env("UMLX_DEVICES", FALLBACK_DEVICES).output().map_err(|e| e.to_string())
}

/// Median ns per op of kernel `k` (in a child: the two kinds of sim are opened separately).
fn nanoseconds(k: Kernel) -> Result<f64, String> {
    let out = output(child(k, RUNS, &[])?)?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!("{}: {}", k.key(), String::from_utf8_lossy(&out.stderr).trim()));
    }
    text.lines()
        .find_map(|l| l.strip_prefix("ns "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| format!("{}: no figure from the child", k.key()))
}

/// Instructions per op under callgrind, counting only inside the kernel function (a poll run
/// that found the CQ not yet full is tried again).
fn instructions(k: Kernel) -> Result<f64, String> {
    let mut last = String::new();
    for _ in 0..3 {
        let out = std::env::temp_dir().join(format!("umlx-c-abi-callgrind-{}-{}.out", std::process::id(), k.key()));
        let wrapper = [
            "valgrind".to_string(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", out.display()),
            format!("--toggle-collect=*{}*", k.function()),
            "--quiet".into(),
        ];
        let o = output(child(k, 1, &wrapper)?)?;
        let text = std::fs::read_to_string(&out).ok();
        let _ = std::fs::remove_file(&out);
        if !o.status.success() {
            last = String::from_utf8_lossy(&o.stderr).trim().to_string();
            continue;
        }
        let total: f64 = text
            .as_deref()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("totals: ").or_else(|| l.strip_prefix("summary: "))))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| format!("{}: no callgrind totals", k.key()))?;
        // The child ran the kernel once over OPS operations; to 0.1, the precision of the Rust
        // API's figures from `umlx bench datapath --json` that it is compared with (the
        // kernel's own entry and exit add about 0.01 per operation).
        return Ok((total / OPS as f64 * 10.0).round() / 10.0);
    }
    Err(format!("{} under callgrind: {last}", k.key()))
}

/// The Rust API's figures for the same kernels, from `umlx bench datapath --json`.
#[derive(Default)]
struct RustFigures {
    json: String,
}

impl RustFigures {
    /// `ns` or `instructions` of kernel `key`.
    fn get(&self, key: &str, field: &str) -> Option<f64> {
        let at = self.json.find(&format!("\"{key}\": {{"))?;
        let obj = &self.json[at..at + self.json[at..].find('}')?];
        let v = &obj[obj.find(&format!("\"{field}\": "))? + field.len() + 4..];
        v[..v.find([',', '}']).unwrap_or(v.len())].trim().parse().ok()
    }
}

/// Where `umlx` is: `UMLX_BIN`, or next to this bench's `deps` directory.
fn umlx_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("UMLX_BIN") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    Some(exe.parent()?.parent()?.join("umlx"))
}

fn rust_figures(instr: bool) -> Result<RustFigures, String> {
    let umlx = umlx_path().ok_or("no umlx path")?;
    let mut c = Command::new(&umlx);
    c.args(["bench", "datapath", "--json"]);
    if !instr {
        c.arg("--no-instructions");
    }
    let o =
        c.output().map_err(|e| format!("{}: {e} (build it: cargo build --release -p umlx-tools)", umlx.display()))?;
    if !o.status.success() {
        return Err(format!("umlx bench datapath: {}", String::from_utf8_lossy(&o.stderr).trim()));
    }
    Ok(RustFigures { json: String::from_utf8_lossy(&o.stdout).into_owned() })
}

struct Row {
    k: Kernel,
    rust_ns: Option<f64>,
    c_ns: f64,
    rust_instr: Option<f64>,
    c_instr: Option<f64>,
}

impl Row {
    fn above(&self) -> Option<f64> {
        Some(self.c_instr? - self.rust_instr?)
    }
}

fn fmt_opt(v: Option<f64>, digits: usize) -> String {
    v.map(|v| format!("{v:.digits$}")).unwrap_or_else(|| "n/a".into())
}

fn json_opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.1}")).unwrap_or_else(|| "null".into())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("c_abi: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    if let Some(key) = value("--kernel") {
        // Child mode: run one kernel, print its median ns.
        let k = Kernel::ALL.into_iter().find(|k| k.key() == key).ok_or("unknown kernel")?;
        let runs = value("--runs").and_then(|r| r.parse().ok()).unwrap_or(1);
        println!("ns {:.2}", median(run_kernel(k, runs)?));
        return Ok(());
    }
    let json = args.iter().any(|a| a == "--json");
    let want_instr = !args.iter().any(|a| a == "--no-instructions")
        && Command::new("valgrind").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    let (rust, rust_problem) = match rust_figures(want_instr) {
        Ok(r) => (r, None),
        Err(e) => (RustFigures::default(), Some(e)),
    };
    let mut rows = Vec::new();
    for k in Kernel::ALL {
        let c_ns = nanoseconds(k)?;
        let c_instr = if want_instr { Some(instructions(k)?) } else { None };
        rows.push(Row {
            k,
            rust_ns: rust.get(k.key(), "ns"),
            c_ns,
            rust_instr: rust.get(k.key(), "instructions"),
            c_instr,
        });
    }
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|r| {
                format!(
                    "\"{}\": {{\"rust_instructions\": {}, \"c_abi_instructions\": {}, \"difference\": {}, \"target_difference\": {TARGET_ABOVE:.0}, \"rust_ns\": {}, \"c_abi_ns\": {:.1}}}",
                    r.k.key(),
                    json_opt(r.rust_instr),
                    json_opt(r.c_instr),
                    json_opt(r.above()),
                    json_opt(r.rust_ns),
                    r.c_ns
                )
            })
            .collect();
        println!("{{{}}}", items.join(", "));
    } else {
        println!(
            "{:<32} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9} {:>9}",
            "operation", "Rust API", "C ABI", "difference", "target", "", "Rust ns", "C ABI ns"
        );
        for r in &rows {
            let verdict = match r.above() {
                Some(d) if d <= TARGET_ABOVE => "met",
                Some(_) => "missed",
                None => "",
            };
            println!(
                "{:<32} {:>10} {:>10} {:>10} {:>7} {:>7} {:>9} {:>9.1}",
                r.k.label(),
                fmt_opt(r.rust_instr, 0),
                fmt_opt(r.c_instr, 0),
                r.above().map(|d| format!("{d:+.0}")).unwrap_or_else(|| "n/a".into()),
                format!("<= +{TARGET_ABOVE:.0}"),
                verdict,
                fmt_opt(r.rust_ns, 1),
                r.c_ns
            );
        }
        if want_instr {
            println!("(instructions per operation by callgrind, counted inside the kernel function only)");
        }
    }
    // Notices go with the table, or to stderr beside the JSON.
    let notice = |m: String| if json { eprintln!("{m}") } else { println!("{m}") };
    if !want_instr {
        notice("(instructions: install valgrind to count them with callgrind; ns only)".into());
    }
    if FELL_BACK.load(Ordering::Relaxed) {
        notice(format!("(the automatic wire was busy: some runs used UMLX_DEVICES={FALLBACK_DEVICES})"));
    }
    if let Some(p) = rust_problem {
        notice(format!("(Rust API figures: {p})"));
    }
    Ok(())
}
