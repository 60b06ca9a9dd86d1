//! The HCA: bring-up as a list of small PRM-named steps, command execution (polling during
//! bring-up, event mode afterwards), firmware pages, the async event queue, health, teardown.
//!
//! Bring-up steps, each traced (see [`Hca::trace`]): wait for firmware, program the command
//! queue, enable bus mastering, ENABLE_HCA, QUERY/SET_ISSI, boot pages, host endianness
//! (ACCESS_REG), QUERY/SET_HCA_CAP, init pages, INIT_HCA, RoCE enable on the NIC vport, UAR,
//! the async EQ (command completions, page requests, port changes, CQ and QP/SRQ errors) and
//! its arming, then event mode. Teardown mirrors it: destroy the EQ and UAR, TEARDOWN_HCA,
//! reclaim every firmware page with MANAGE_PAGES TAKE, DISABLE_HCA, unmap everything.

use crate::backend::Backend;
use crate::cmd::{CmdQueue, Slot};
use crate::dma::{DmaBuffer, DmaSpace, dma_rmb};
use crate::pages::FwPages;
use crate::{Error, Result};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use umlx_hwdesc::enums::{
    AccessRegOpMod, AtomicReqMode, CmdOpcode, EventType, HcaCapType, HealthSyndrome, ManagePagesOpMod, NicInterface,
    RoceL3Type, RoceVersion, RoceVersionCaps, SupportedIssi,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::page::ADAPTER_PAGE_SIZE;
use umlx_hwdesc::plain::{eq as eqk, eqe, eqe_cq_err, eqe_page_req, eqe_port_state, eqe_qp_srq, iseg, uar as uark};
use zerocopy::FromBytes;

mod events;
mod health;
pub use events::HEALTH_POLL;
use events::{EqState, EventThread};
pub(crate) use events::{eq_doorbell_offset, eq_doorbell_value, ready_eqe};
pub use health::HEALTH_WINDOW;
use health::Health;

/// How long a command may take before it is a timeout, unless the device reports its own in
/// the init segment (Linux `MLX5_TO_CMD_MS` default, rdma-core `MLX5_CMD_TIMEOUT_MSEC`).
pub const CMD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait for the firmware's `initializing` bit to clear before touching the command
/// queue (Linux `MLX5_TO_FW_PRE_INIT_TIMEOUT_MS`, rdma-core `FW_PRE_INIT_TIMEOUT_MILI`).
pub const FW_INIT_TIMEOUT: Duration = Duration::from_secs(120);
/// How long to wait for `initializing` to clear again after the command queue address is
/// programmed, unless the device reports `cmd_q_init_to` (Linux `MLX5_TO_FW_INIT_MS` default).
pub const FW_CMDQ_INIT_TIMEOUT: Duration = Duration::from_secs(2);
/// Page reclaim at teardown gives up after this long without getting a page back (Linux
/// `MLX5_TO_RECLAIM_PAGES_MS` default).
pub const RECLAIM_TIMEOUT: Duration = Duration::from_secs(5);
/// Pages asked for per MANAGE_PAGES TAKE at teardown: as many addresses as fit in the output
/// mailboxes Linux allocates for it (`optimal_reclaimed_pages`).
const RECLAIM_BATCH: usize = 768;
/// Entries of the async EQ (32 events + 0x80 spare, rounded up, as the Linux driver sizes it).
const ASYNC_EQ_LOG_SIZE: u32 = 8;
/// The MSI-X vector of the async EQ.
pub const ASYNC_VECTOR: u32 = 0;

/// An asynchronous event delivered to the user (port changes, CQ errors, QP/SRQ events).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// Event type.
    pub event_type: EventType,
    /// Sub-type (port change: DOWN/ACTIVE...).
    pub sub_type: u8,
    /// The object number the event names (CQN, QPN, SRQN, port), when it names one.
    pub object: u32,
    /// Event-specific syndrome byte (CQ error).
    pub syndrome: u8,
}

/// Options for opening an HCA.
#[derive(Clone, Debug)]
pub struct HcaOptions {
    /// Use interrupts (eventfd) to wait for command completions after bring-up; otherwise poll.
    pub interrupts: bool,
    /// Command timeout. `None`: the device's `cmd_exec_to` when its init segment reports
    /// timeouts (`cmd_q_init_to` non-zero), else [`CMD_TIMEOUT`], as Linux does. `Some`: this
    /// value whatever the device reports (tests use a short one).
    pub cmd_timeout: Option<Duration>,
    /// Record the bring-up trace.
    pub trace: bool,
    /// IP addresses of the port: each becomes a RoCEv2 GID (after the link-local GID at index
    /// 0). A VFIO function has no netdev, so the user names them.
    pub ips: Vec<std::net::IpAddr>,
    /// Run the device's event thread once it is up: it drains the async EQ when its interrupt
    /// fires (or every few milliseconds without interrupts), serves the firmware's page
    /// requests, checks the device's health every [`HEALTH_POLL`] and queues a fatal event
    /// when it dies, whether or not the program calls into the driver (the work Linux does in
    /// its EQ interrupt handler and health poll). [`Hca::async_event_fd`] is then an eventfd
    /// signalled when a user event is queued. Without it, the program drains the EQ itself
    /// ([`Hca::process_events`] when the async eventfd is readable), as rdma-core's VFIO
    /// provider asks of its programs (`mlx5dv_vfio_process_events`), and a device that dies
    /// while it issues no command is seen at its next call.
    pub event_thread: bool,
}

impl Default for HcaOptions {
    fn default() -> Self {
        HcaOptions { interrupts: true, cmd_timeout: None, trace: true, ips: Vec::new(), event_thread: true }
    }
}

/// One traced bring-up or teardown step.
#[derive(Clone, Debug)]
pub struct TraceStep {
    /// PRM-named step.
    pub step: &'static str,
    /// How long it took.
    pub took: Duration,
    /// Detail (counts, values).
    pub detail: String,
}

/// Capabilities the driver keeps after bring-up (current values).
#[derive(Clone, Debug)]
pub struct Caps {
    /// General capability area.
    pub general: Vec<u8>,
    /// RoCE capability area.
    pub roce: Vec<u8>,
    /// Atomic capability area.
    pub atomic: Vec<u8>,
}

impl Caps {
    /// A general capability field.
    pub fn general_cap(&self, f: umlx_hwdesc::Field) -> u64 {
        f.get(&self.general)
    }

    /// Size of one half of a BlueFlame register: the send doorbell alternates between the two
    /// halves (Linux `mlx5_ib` `bf.buf_size = (1 << log_bf_reg_size) / 2`, rdma-core
    /// `bf_reg_size / 2`). Falls back to [`uark::DB_BLUEFLAME_BUFFER_SIZE`] when the cap reads 0.
    pub fn bf_buf_size(&self) -> usize {
        match self.general_cap(cmd_hca_cap::log_bf_reg_size) {
            0 => uark::DB_BLUEFLAME_BUFFER_SIZE,
            // At most half a UAR page (0x800 bytes of BlueFlame registers).
            l => ((1usize << l.min(11)) / 2).max(8),
        }
    }

    /// The 8-byte atomic result byte order in force: true when the device returns the
    /// original value in host order (`atomic_req_8B_endianness_mode` 1), false for big-endian.
    pub fn atomic_host_endian(&self) -> bool {
        !self.atomic.is_empty()
            && atomic_caps::atomic_req_8B_endianness_mode.get(&self.atomic) == AtomicReqMode::HOST_ENDIANNESS.0 as u64
    }
}

/// One RoCEv2 GID table entry the driver programmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// Index in the table.
    pub index: u32,
    /// The GID (IPv6 address, or IPv4-mapped).
    pub gid: [u8; 16],
    /// Whether the GID is an IPv4-mapped address.
    pub ipv4: bool,
}

/// What the driver learnt of the port at bring-up.
#[derive(Clone, Debug, Default)]
pub struct PortInfo {
    /// Permanent MAC.
    pub mac: [u8; 6],
    /// Ethernet MTU.
    pub mtu: u32,
    /// Node GUID.
    pub node_guid: u64,
    /// The GID table as programmed.
    pub gids: Vec<GidEntry>,
}

struct CmdState<B: Backend> {
    regular: Slot<B>,
}

/// An opened, brought-up HCA. Dropping it tears the device down.
pub struct Hca<B: Backend> {
    backend: Arc<B>,
    space: Arc<DmaSpace<B>>,
    queue: CmdQueue<B>,
    cmd: Mutex<CmdState<B>>,
    page_slot: Mutex<Slot<B>>,
    pages: Mutex<FwPages<B>>,
    eq: Mutex<Option<EqState<B>>>,
    /// Held through a whole `process_events`, the page requests it serves included.
    drain: Mutex<()>,
    events: Mutex<VecDeque<AsyncEvent>>,
    /// The eventfd the program waits on for user events when the event thread runs: signalled
    /// when one is queued (and again when one is taken and more wait).
    events_fd: Option<Arc<OwnedFd>>,
    /// The event thread, while it runs.
    event_thread: Mutex<Option<EventThread>>,
    event_mode: AtomicBool,
    fatal: Mutex<Option<String>>,
    /// Set with `fatal`, for a cheap check on the data path (a plain load).
    fatal_flag: Arc<AtomicBool>,
    health: Mutex<Health>,
    /// The last non-fatal health report (a syndrome without the recovery-flow bit).
    health_report: Mutex<Option<String>>,
    /// The command timeout in force (option, device-reported, or the default).
    cmd_timeout: Duration,
    trace: Mutex<Vec<TraceStep>>,
    opts: HcaOptions,
    caps: Mutex<Option<Caps>>,
    uar: Mutex<Option<u32>>,
    port: Mutex<PortInfo>,
    torn_down: AtomicBool,
}

impl<B: Backend> std::fmt::Debug for Hca<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hca").field("device", &self.backend.name()).finish_non_exhaustive()
    }
}

fn cmd_in(opcode: CmdOpcode, op_mod: u16, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size.max(16)];
    mbox_in::opcode.set(&mut b, opcode.0 as u64);
    mbox_in::op_mod.set(&mut b, op_mod as u64);
    b
}

impl<B: Backend> Hca<B> {
    /// Brings the device up through its firmware and returns the HCA.
    pub fn open(backend: Arc<B>, opts: HcaOptions) -> Result<Arc<OpenHca<B>>> {
        let space = DmaSpace::new(backend.clone());
        let t0 = Instant::now();
        // Step: wait for firmware (before touching the command queue).
        let name = backend.name().to_string();
        wait_fw_ready(&*backend, FW_INIT_TIMEOUT, "before the command queue is programmed")?;
        let cmdif = backend.read32(iseg::CMDIF_REV_FW_SUB) >> iseg::CMDIF_REV_SHIFT;
        if cmdif != iseg::CMDIF_REV {
            return Err(Error::Firmware {
                device: name,
                problem: format!("command interface revision {cmdif}, expected {}", iseg::CMDIF_REV),
            });
        }
        // Step: program the command queue.
        let geometry = backend.read32(iseg::CMDQ_ADDR_L_SZ);
        let (log_size, log_stride) =
            ((geometry >> iseg::LOG_CMDQ_SIZE_SHIFT) & iseg::LOG_CMDQ_MASK, geometry & iseg::LOG_CMDQ_MASK);
        let queue = CmdQueue::new(&backend, &space, log_size, log_stride)?;
        let iova = queue.iova();
        backend.write32(iseg::CMDQ_ADDR_H, (iova >> 32) as u32);
        backend.write32(iseg::CMDQ_ADDR_L_SZ, iova as u32 & iseg::CMDQ_ADDR_L_MASK);
        // Step: the firmware takes the queue address with `initializing` set again; wait for it
        // to clear, for as long as the device says (Linux `mlx5_tout_query_iseg`, then
        // `wait_fw_init(FW_INIT)` in `mlx5_function_enable`).
        let (init_to, exec_to) = device_timeouts(&*backend);
        wait_fw_ready(&*backend, init_to.unwrap_or(FW_CMDQ_INIT_TIMEOUT), "after the command queue was programmed")?;
        let cmd_timeout = opts.cmd_timeout.or(exec_to).unwrap_or(CMD_TIMEOUT);
        let regular = queue.slot(0)?;
        let page_slot = queue.slot(queue.size - 1)?;
        // The program's async event fd: blocking, as a verbs program expects it to be until it
        // asks otherwise (the driver only writes to it).
        let events_fd = if opts.event_thread {
            let fd = crate::event::new_eventfd(false).map_err(|source| Error::Os { op: "eventfd".into(), source })?;
            Some(Arc::new(fd))
        } else {
            None
        };
        let hca = Arc::new(Hca {
            pages: Mutex::new(FwPages::new(space.clone())),
            backend: backend.clone(),
            space,
            queue,
            cmd: Mutex::new(CmdState { regular }),
            page_slot: Mutex::new(page_slot),
            eq: Mutex::new(None),
            drain: Mutex::new(()),
            events: Mutex::new(VecDeque::new()),
            events_fd,
            event_thread: Mutex::new(None),
            event_mode: AtomicBool::new(false),
            fatal: Mutex::new(None),
            fatal_flag: Arc::new(AtomicBool::new(false)),
            health: Mutex::new(Health {
                last_counter: backend.read32(iseg::HEALTH_COUNTER) & iseg::HEALTH_COUNTER_MASK,
                last_change: Instant::now(),
            }),
            health_report: Mutex::new(None),
            cmd_timeout,
            trace: Mutex::new(Vec::new()),
            opts,
            caps: Mutex::new(None),
            uar: Mutex::new(None),
            port: Mutex::new(PortInfo::default()),
            torn_down: AtomicBool::new(false),
        });
        hca.step(
            "wait for firmware + program command queue",
            t0,
            format!("log_cmdq_size {log_size} stride {log_stride} at IOVA {iova:#x}; command timeout {cmd_timeout:?}"),
        );
        let up = hca.bring_up().and_then(|()| if hca.opts.event_thread { hca.start_event_thread() } else { Ok(()) });
        if let Err(e) = up {
            // Leave nothing behind: tear down what was brought up (errors there are secondary).
            let _ = hca.teardown();
            return Err(e);
        }
        Ok(Arc::new(OpenHca { hca }))
    }

    fn step(&self, step: &'static str, since: Instant, detail: String) {
        if self.opts.trace {
            self.trace.lock().unwrap_or_else(|e| e.into_inner()).push(TraceStep {
                step,
                took: since.elapsed(),
                detail,
            });
        }
    }

    /// The bring-up trace so far.
    pub fn trace(&self) -> Vec<TraceStep> {
        self.trace.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<B> {
        &self.backend
    }

    /// The DMA space (IOVA allocator and mapping) of this device.
    pub fn dma_space(&self) -> &Arc<DmaSpace<B>> {
        &self.space
    }

    /// The device name.
    pub fn name(&self) -> &str {
        self.backend.name()
    }

    fn bring_up(self: &Arc<Self>) -> Result<()> {
        // Step: bus mastering (vfio-pci leaves it off).
        let t = Instant::now();
        let mut cmdreg = [0u8; 2];
        self.backend.config_read(4, &mut cmdreg)?;
        let v = u16::from_le_bytes(cmdreg) | 0x6;
        self.backend.config_write(4, &v.to_le_bytes())?;
        self.step("enable bus mastering", t, format!("PCI COMMAND {v:#06x}"));

        let t = Instant::now();
        self.backend.enable_interrupts()?;
        self.step("enable MSI-X vectors", t, format!("{} vectors", self.backend.irq_count()));

        let t = Instant::now();
        self.exec_simple(CmdOpcode::ENABLE_HCA, 0, enable_hca_in::SIZE_BYTES, enable_hca_out::SIZE_BYTES)?;
        self.step("ENABLE_HCA", t, String::new());

        let t = Instant::now();
        let out = self.exec_simple(CmdOpcode::QUERY_ISSI, 0, query_issi_in::SIZE_BYTES, query_issi_out::SIZE_BYTES)?;
        let supported = SupportedIssi(query_issi_out::supported_issi_dw0.get(&out) as u32);
        if !supported.contains(SupportedIssi::ISSI_1) {
            return Err(Error::Firmware {
                device: self.name().into(),
                problem: format!("ISSI 1 not supported (mask {:#x})", supported.bits()),
            });
        }
        let mut inp = cmd_in(CmdOpcode::SET_ISSI, 0, set_issi_in::SIZE_BYTES);
        set_issi_in::current_issi.set(&mut inp, 1);
        self.exec(&inp, set_issi_out::SIZE_BYTES)?;
        self.step("QUERY_ISSI / SET_ISSI", t, "ISSI 1".into());

        let t = Instant::now();
        let n = self.satisfy_pages(umlx_hwdesc::enums::PagesOpMod::BOOT)?;
        self.step("boot pages (QUERY_PAGES + MANAGE_PAGES give)", t, format!("{n} pages"));

        let t = Instant::now();
        let mut inp = cmd_in(CmdOpcode::ACCESS_REG, AccessRegOpMod::WRITE.0, access_register_in::SIZE_BYTES + 16);
        access_register_in::register_id.set(&mut inp, umlx_hwdesc::enums::AccessRegId::HOST_ENDIANNESS.0 as u64);
        // The register data follows the input header: he = 1 on a big-endian host.
        let he = access_register_in::register_data.inner(host_endianness_reg::he);
        he.set(&mut inp, cfg!(target_endian = "big") as u64);
        self.exec(&inp, access_register_out::SIZE_BYTES + 16)?;
        self.step("host endianness (ACCESS_REG)", t, String::new());

        let t = Instant::now();
        let caps = self.query_and_set_caps()?;
        self.step(
            "QUERY_HCA_CAP / SET_HCA_CAP",
            t,
            format!(
                "log_max_qp {} port_type {} roce {}",
                caps.general_cap(cmd_hca_cap::log_max_qp),
                caps.general_cap(cmd_hca_cap::port_type),
                caps.general_cap(cmd_hca_cap::roce)
            ),
        );
        let eth = caps.general_cap(cmd_hca_cap::port_type) == 1;
        *self.caps.lock().unwrap_or_else(|e| e.into_inner()) = Some(caps);

        let t = Instant::now();
        let n = self.satisfy_pages(umlx_hwdesc::enums::PagesOpMod::INIT)?;
        self.step("init pages (QUERY_PAGES + MANAGE_PAGES give)", t, format!("{n} pages"));

        let t = Instant::now();
        self.exec_simple(CmdOpcode::INIT_HCA, 0, init_hca_in::SIZE_BYTES, init_hca_out::SIZE_BYTES)?;
        self.step("INIT_HCA", t, String::new());

        if eth {
            let t = Instant::now();
            let mut inp = cmd_in(CmdOpcode::MODIFY_NIC_VPORT_CONTEXT, 0, modify_nic_vport_context_in::SIZE_BYTES);
            modify_nic_vport_context_in::field_select.inner(modify_nic_vport_field_select::roce_en).set(&mut inp, 1);
            modify_nic_vport_context_in::nic_vport_context.inner(nic_vport_context::roce_en).set(&mut inp, 1);
            self.exec(&inp, modify_nic_vport_context_out::SIZE_BYTES)?;
            self.step("RoCE enable (MODIFY_NIC_VPORT_CONTEXT)", t, String::new());
        }

        let t = Instant::now();
        let port = self.program_gids()?;
        self.step(
            "vport and GID table (QUERY_NIC_VPORT_CONTEXT + SET_ROCE_ADDRESS)",
            t,
            format!(
                "MAC {}, MTU {}, {} GIDs",
                port.mac.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":"),
                port.mtu,
                port.gids.len()
            ),
        );
        *self.port.lock().unwrap_or_else(|e| e.into_inner()) = port;

        let t = Instant::now();
        let uar = self.alloc_uar()?;
        *self.uar.lock().unwrap_or_else(|e| e.into_inner()) = Some(uar);
        self.step("ALLOC_UAR", t, format!("UAR {uar}"));

        let t = Instant::now();
        let eqn = self.create_async_eq(uar)?;
        self.step("async EQ (CREATE_EQ + arm)", t, format!("EQ {eqn}, vector {ASYNC_VECTOR}"));
        if self.opts.interrupts {
            self.event_mode.store(true, Ordering::Release);
        }
        // Serve any page request that arrived meanwhile.
        self.process_events()?;
        Ok(())
    }

    fn query_and_set_caps(&self) -> Result<Caps> {
        let query = |ty: HcaCapType, current: bool| -> Result<Vec<u8>> {
            let inp = cmd_in(CmdOpcode::QUERY_HCA_CAP, ty.op_mod(current), query_hca_cap_in::SIZE_BYTES);
            let out = self.exec(&inp, query_hca_cap_out::SIZE_BYTES)?;
            Ok(query_hca_cap_out::capability.bytes(&out).unwrap_or(&[]).to_vec())
        };
        let set = |ty: HcaCapType, area: &[u8]| -> Result<()> {
            let mut inp = cmd_in(CmdOpcode::SET_HCA_CAP, ty.op_mod(false) & !1, set_hca_cap_in::SIZE_BYTES);
            if let Some(d) = set_hca_cap_in::capability.bytes_mut(&mut inp) {
                d.copy_from_slice(area);
            }
            self.exec(&inp, set_hca_cap_out::SIZE_BYTES).map(|_| ())
        };
        let mut general = query(HcaCapType::GENERAL, true)?;
        let max = query(HcaCapType::GENERAL, false)?;
        cmd_hca_cap::cmdif_checksum.set(&mut general, 0);
        cmd_hca_cap::log_uar_page_sz.set(&mut general, 0);
        // As Linux's default profile: as many QPs as the device allows, up to 2^18 (the
        // firmware's current value may be lower).
        cmd_hca_cap::log_max_qp.set(&mut general, cmd_hca_cap::log_max_qp.get(&max).min(PROFILE_LOG_MAX_QP));
        if let Some(v) = cache_line_128byte(cmd_hca_cap::cache_line_128byte.get(&max), host_cache_line_bytes()) {
            cmd_hca_cap::cache_line_128byte.set(&mut general, v);
        }
        set(HcaCapType::GENERAL, &general)?;
        let general = query(HcaCapType::GENERAL, true)?;
        let mut roce = Vec::new();
        if cmd_hca_cap::roce.get(&general) == 1 {
            roce = query(HcaCapType::ROCE, true)?;
            let roce_max = query(HcaCapType::ROCE, false)?;
            if roce_cap::sw_r_roce_src_udp_port.get(&roce) == 0 && roce_cap::sw_r_roce_src_udp_port.get(&roce_max) == 1
            {
                roce_cap::sw_r_roce_src_udp_port.set(&mut roce, 1);
                set(HcaCapType::ROCE, &roce)?;
                roce = query(HcaCapType::ROCE, true)?;
            }
            require_roce_v2(self.name(), &roce)?;
        }
        let mut atomic = Vec::new();
        if cmd_hca_cap::atomic.get(&general) == 1 {
            atomic = query(HcaCapType::ATOMIC, true)?;
            // Linux `handle_hca_cap_atomic`: when the device can return 8-byte atomic results
            // in host byte order (mode 1), ask for it. Without it (mode 0) the original value an
            // atomic writes into the requester's buffer is big-endian.
            if atomic_caps::supported_atomic_req_8B_endianness_mode_1.get(&atomic) == 1
                && atomic_caps::atomic_req_8B_endianness_mode.get(&atomic) != AtomicReqMode::HOST_ENDIANNESS.0 as u64
            {
                atomic_caps::atomic_req_8B_endianness_mode.set(&mut atomic, AtomicReqMode::HOST_ENDIANNESS.0 as u64);
                set(HcaCapType::ATOMIC, &atomic)?;
                atomic = query(HcaCapType::ATOMIC, true)?;
            }
        }
        Ok(Caps { general, roce, atomic })
    }

    /// The device's current capabilities.
    pub fn caps(&self) -> Caps {
        self.caps.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or(Caps {
            general: vec![0; query_hca_cap_out::capability.size_bytes()],
            roce: vec![0; query_hca_cap_out::capability.size_bytes()],
            atomic: vec![0; query_hca_cap_out::capability.size_bytes()],
        })
    }

    fn program_gids(&self) -> Result<PortInfo> {
        let out = self.command(
            CmdOpcode::QUERY_NIC_VPORT_CONTEXT,
            0,
            query_nic_vport_context_in::SIZE_BYTES,
            query_nic_vport_context_out::SIZE_BYTES,
            |_| {},
        )?;
        let ctx = query_nic_vport_context_out::nic_vport_context;
        let mut mac = [0u8; 6];
        if let Some(b) = ctx.inner(nic_vport_context::permanent_address).bytes(&out) {
            mac.copy_from_slice(&b[2..8]);
        }
        let mtu = ctx.inner(nic_vport_context::mtu).get(&out) as u32;
        let node_guid = ctx.inner(nic_vport_context::node_guid).get(&out);
        // Index 0: the link-local GID fe80::<EUI-64 of the MAC>, as the kernel's default GID.
        let mut link_local = [0u8; 16];
        link_local[0] = 0xfe;
        link_local[1] = 0x80;
        link_local[8..16].copy_from_slice(&[mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]]);
        let mut gids = vec![GidEntry { index: 0, gid: link_local, ipv4: false }];
        for ip in &self.opts.ips {
            let (gid, ipv4) = match ip {
                std::net::IpAddr::V4(a) => (a.to_ipv6_mapped().octets(), true),
                std::net::IpAddr::V6(a) => (a.octets(), false),
            };
            gids.push(GidEntry { index: gids.len() as u32, gid, ipv4 });
        }
        // Linux `mlx5_core_roce_gid_set`: the port is named only on a multi-port vHCA.
        let vhca_ports = self.caps().general_cap(cmd_hca_cap::num_vhca_ports) != 0;
        for g in &gids {
            self.command(
                CmdOpcode::SET_ROCE_ADDRESS,
                0,
                set_roce_address_in::SIZE_BYTES,
                set_roce_address_out::SIZE_BYTES,
                |b| {
                    set_roce_address_in::roce_address_index.set(b, g.index as u64);
                    if vhca_ports {
                        set_roce_address_in::vhca_port_num.set(b, 1);
                    }
                    let a = set_roce_address_in::roce_address;
                    if let Some(d) = a.inner(roce_addr_layout::source_l3_address).bytes_mut(b) {
                        d.copy_from_slice(&g.gid);
                    }
                    a.inner(roce_addr_layout::source_mac_47_32).set(b, u16::from_be_bytes([mac[0], mac[1]]) as u64);
                    a.inner(roce_addr_layout::source_mac_31_0)
                        .set(b, u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]) as u64);
                    let l3_type = if g.ipv4 { RoceL3Type::IPV4 } else { RoceL3Type::IPV6 };
                    a.inner(roce_addr_layout::roce_l3_type).set(b, l3_type.0 as u64);
                    a.inner(roce_addr_layout::roce_version).set(b, RoceVersion::VERSION_2.0 as u64);
                },
            )?;
        }
        Ok(PortInfo { mac, mtu, node_guid, gids })
    }

    /// The port as programmed at bring-up (MAC, MTU, GID table).
    pub fn port(&self) -> PortInfo {
        self.port.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The UAR the driver allocated at bring-up (used for EQ and CQ doorbells).
    pub fn uar(&self) -> u32 {
        self.uar.lock().unwrap_or_else(|e| e.into_inner()).unwrap_or(0)
    }

    /// The async EQ number.
    pub fn async_eqn(&self) -> u32 {
        self.eq.lock().unwrap_or_else(|e| e.into_inner()).as_ref().map(|e| e.eqn).unwrap_or(0)
    }

    /// QUERY_PAGES for `op_mod` and give that many pages.
    fn satisfy_pages(&self, op_mod: umlx_hwdesc::enums::PagesOpMod) -> Result<i32> {
        let inp = cmd_in(CmdOpcode::QUERY_PAGES, op_mod.0, query_pages_in::SIZE_BYTES);
        let out = self.exec(&inp, query_pages_out::SIZE_BYTES)?;
        let n = query_pages_out::num_pages.get(&out) as u32 as i32;
        if n > 0 {
            self.give_pages(n as usize)?;
        } else if n == 0 {
            // rdma-core issues the (empty) give; Linux sends nothing for 0 pages. Either is
            // accepted; this follows rdma-core.
            self.give_pages(0)?;
        }
        Ok(n)
    }

    fn give_pages(&self, n: usize) -> Result<()> {
        let addrs = match self.pages.lock().unwrap_or_else(|e| e.into_inner()).alloc(n) {
            Ok(a) => a,
            Err(e) => {
                // Linux `give_pages` -> `page_notify_fail`: tell the firmware the request cannot
                // be met (MANAGE_PAGES CANT_GIVE) so it stops waiting for the pages.
                let inp = cmd_in(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::CANT_GIVE.0, manage_pages_in::SIZE_BYTES);
                let notified = self.exec_pages(&inp, manage_pages_out::SIZE_BYTES);
                return Err(Error::Firmware {
                    device: self.name().into(),
                    problem: format!(
                        "cannot allocate the {n} pages the firmware asked for ({e}); {}",
                        match notified {
                            Ok(_) => "told it with MANAGE_PAGES CANT_GIVE".to_string(),
                            Err(ce) => format!("MANAGE_PAGES CANT_GIVE failed too: {ce}"),
                        }
                    ),
                });
            }
        };
        let mut inp = cmd_in(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::GIVE.0, manage_pages_in::SIZE_BYTES + 8 * n);
        manage_pages_in::input_num_entries.set(&mut inp, n as u64);
        for (i, a) in addrs.iter().enumerate() {
            let off = manage_pages_in::SIZE_BYTES + 8 * i;
            inp[off..off + 8].copy_from_slice(&a.to_be_bytes());
        }
        match self.exec_pages(&inp, manage_pages_out::SIZE_BYTES) {
            Ok(_) => Ok(()),
            Err(e) => {
                let mut p = self.pages.lock().unwrap_or_else(|e| e.into_inner());
                for a in addrs {
                    p.free(a);
                }
                Err(e)
            }
        }
    }

    fn take_pages(&self, n: usize) -> Result<usize> {
        let mut inp = cmd_in(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::TAKE.0, manage_pages_in::SIZE_BYTES);
        manage_pages_in::input_num_entries.set(&mut inp, n as u64);
        let out = self.exec_pages(&inp, manage_pages_out::SIZE_BYTES + 8 * n)?;
        let got = manage_pages_out::output_num_entries.get(&out) as usize;
        if got > n {
            return Err(Error::Firmware {
                device: self.name().into(),
                problem: format!("MANAGE_PAGES take returned {got} pages, more than the {n} asked"),
            });
        }
        let mut p = self.pages.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..got {
            let off = manage_pages_out::SIZE_BYTES + 8 * i;
            let a = u64::from_be_bytes(out[off..off + 8].try_into().unwrap_or_default());
            if !p.free(a) {
                return Err(Error::Firmware {
                    device: self.name().into(),
                    problem: format!("MANAGE_PAGES take returned page {a:#x}, which the driver never gave"),
                });
            }
        }
        Ok(got)
    }

    /// Pages the driver has given to the firmware and not got back.
    pub fn pages_given(&self) -> usize {
        self.pages.lock().unwrap_or_else(|e| e.into_inner()).in_use()
    }

    fn alloc_uar(&self) -> Result<u32> {
        let out = self.exec_simple(CmdOpcode::ALLOC_UAR, 0, alloc_uar_in::SIZE_BYTES, alloc_uar_out::SIZE_BYTES)?;
        Ok(alloc_uar_out::uar.get(&out) as u32)
    }

    /// The command timeout in force: the option, else the device-reported `cmd_exec_to`, else
    /// [`CMD_TIMEOUT`].
    pub fn cmd_timeout(&self) -> Duration {
        self.cmd_timeout
    }

    fn exec_simple(&self, op: CmdOpcode, op_mod: u16, in_size: usize, out_size: usize) -> Result<Vec<u8>> {
        self.exec(&cmd_in(op, op_mod, in_size), out_size)
    }

    /// Executes a firmware command on the regular slot: `input` is the whole message (header
    /// included), `outlen` the output size. Polls during bring-up, waits for the
    /// command-completion event afterwards; a timeout or a fatal device is an error.
    pub fn exec(&self, input: &[u8], outlen: usize) -> Result<Vec<u8>> {
        if let Some(r) = self.fatal.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(Error::DeviceFatal { device: self.name().into(), reason: r });
        }
        let mut g = self.cmd.lock().unwrap_or_else(|e| e.into_inner());
        self.queue.post(&mut g.regular, input, outlen)?;
        self.wait(&mut g.regular, true)
    }

    /// MANAGE_PAGES on the page slot (served even while a regular command waits).
    fn exec_pages(&self, input: &[u8], outlen: usize) -> Result<Vec<u8>> {
        let mut s = self.page_slot.lock().unwrap_or_else(|e| e.into_inner());
        self.queue.post(&mut s, input, outlen)?;
        self.wait(&mut s, false)
    }

    fn wait(&self, slot: &mut Slot<B>, serve_events: bool) -> Result<Vec<u8>> {
        let start = Instant::now();
        // The event thread, when it runs, takes the async EQ's interrupts: the command then
        // waits without them, and drains the EQ itself when it finds an event there.
        let events = self.event_mode.load(Ordering::Acquire) && serve_events && !self.event_thread_runs();
        let fd = if events { self.backend.irq_eventfd(ASYNC_VECTOR) } else { None };
        let mut spins = 0u32;
        let mut last_health = Instant::now();
        loop {
            if self.queue.done(slot) {
                let out = self.queue.finish(slot);
                // The completion EQE (and anything else pending) is consumed now, so the async
                // EQ never fills up with the completions of commands. That takes a look at the
                // EQ itself, not only at its interrupt: polled commands have none, and another
                // thread may have taken the interrupt (an application's async-event thread
                // reading the same eventfd) and not yet drained the EQ.
                let signalled = match &fd {
                    Some(fd) if crate::event::wait_readable(fd, Duration::ZERO) => {
                        crate::event::drain(fd);
                        true
                    }
                    _ => false,
                };
                if serve_events && (signalled || self.async_eq_has_event()) {
                    self.process_events()?;
                }
                return out;
            }
            if let Some(fd) = &fd {
                if crate::event::wait_readable(fd, Duration::from_millis(2)) {
                    crate::event::drain(fd);
                    self.process_events()?;
                }
            } else if spins < 2000 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                // A page request the firmware raised for this command is served here too.
                if serve_events && self.async_eq_has_event() {
                    self.process_events()?;
                }
                std::thread::sleep(Duration::from_micros(20));
            }
            if last_health.elapsed() > Duration::from_millis(100) {
                last_health = Instant::now();
                self.check_health()?;
            }
            if start.elapsed() > self.cmd_timeout {
                let (opcode, op_mod) = self.queue.posted(slot);
                return Err(Error::CommandTimeout {
                    device: self.name().into(),
                    opcode,
                    op_mod,
                    waited: start.elapsed(),
                });
            }
        }
    }

    /// Tears the device down: async EQ, UAR, TEARDOWN_HCA, page reclaim, DISABLE_HCA. Called by
    /// drop; calling it twice is harmless.
    pub fn teardown(&self) -> Result<()> {
        if self.torn_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.stop_event_thread();
        self.event_mode.store(false, Ordering::Release);
        if self.is_fatal() {
            // A dead device executes nothing: reset it so it stops touching memory, then let
            // the buffers unmap.
            let _ = self.backend.reset();
            return Ok(());
        }
        let mut first_err = None;
        let mut note = |r: Result<()>| {
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        };
        let eq = self.eq.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(eq) = eq {
            let t = Instant::now();
            let mut inp = cmd_in(CmdOpcode::DESTROY_EQ, 0, destroy_eq_in::SIZE_BYTES);
            destroy_eq_in::eq_number.set(&mut inp, eq.eqn as u64);
            note(self.exec(&inp, destroy_eq_out::SIZE_BYTES).map(|_| ()));
            self.step("DESTROY_EQ", t, String::new());
        }
        if let Some(uar) = self.uar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let mut inp = cmd_in(CmdOpcode::DEALLOC_UAR, 0, dealloc_uar_in::SIZE_BYTES);
            dealloc_uar_in::uar.set(&mut inp, uar as u64);
            note(self.exec(&inp, dealloc_uar_out::SIZE_BYTES).map(|_| ()));
        }
        let t = Instant::now();
        let r = self.exec_simple(CmdOpcode::TEARDOWN_HCA, 0, teardown_hca_in::SIZE_BYTES, teardown_hca_out::SIZE_BYTES);
        let torn = r.is_ok();
        note(r.map(|_| ()));
        self.step("TEARDOWN_HCA", t, String::new());
        let t = Instant::now();
        let mut reclaimed = 0;
        let mut empty_replies = 0u32;
        // Linux `mlx5_reclaim_root_pages`: keep asking while the firmware holds pages; an empty
        // reply is not the end, only RECLAIM_TIMEOUT without progress is.
        let mut last_progress = Instant::now();
        while torn && self.pages_given() > 0 {
            let want = self.pages_given().min(RECLAIM_BATCH);
            match self.take_pages(want) {
                Ok(0) => {
                    empty_replies += 1;
                    if last_progress.elapsed() > RECLAIM_TIMEOUT {
                        note(Err(Error::Firmware {
                            device: self.name().into(),
                            problem: format!(
                                "MANAGE_PAGES take: the firmware still holds {} pages and returned none for {:?}",
                                self.pages_given(),
                                RECLAIM_TIMEOUT
                            ),
                        }));
                        break;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                Ok(n) => {
                    reclaimed += n;
                    last_progress = Instant::now();
                }
                Err(e) => {
                    note(Err(e));
                    break;
                }
            }
        }
        self.step("reclaim pages (MANAGE_PAGES take)", t, format!("{reclaimed} pages, {empty_replies} empty replies"));
        let t = Instant::now();
        note(
            self.exec_simple(CmdOpcode::DISABLE_HCA, 0, disable_hca_in::SIZE_BYTES, disable_hca_out::SIZE_BYTES)
                .map(|_| ()),
        );
        self.step("DISABLE_HCA", t, String::new());
        if self.pages_given() > 0 {
            // The firmware kept pages: it must not touch them after we free them.
            let _ = self.backend.reset();
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Executes a command with a typed builder: `build` fills fields of an input of `in_size`
    /// bytes (header set from `op`, `op_mod`).
    pub fn command(
        &self,
        op: CmdOpcode,
        op_mod: u16,
        in_size: usize,
        out_size: usize,
        build: impl FnOnce(&mut Vec<u8>),
    ) -> Result<Vec<u8>> {
        let mut inp = cmd_in(op, op_mod, in_size);
        build(&mut inp);
        self.exec(&inp, out_size)
    }
}

impl<B: Backend> Drop for Hca<B> {
    fn drop(&mut self) {
        let _ = self.teardown();
    }
}

/// An opened HCA, as [`Hca::open`] returns it (shared as `Arc<OpenHca>`): it derefs to the
/// [`Hca`]. Dropping the last one tears the device down there and then, its event thread
/// stopped first; the event thread holds the [`Hca`] itself, never this handle, so the teardown
/// never moves into that thread.
pub struct OpenHca<B: Backend> {
    hca: Arc<Hca<B>>,
}

impl<B: Backend> std::ops::Deref for OpenHca<B> {
    type Target = Hca<B>;

    fn deref(&self) -> &Hca<B> {
        &self.hca
    }
}

impl<B: Backend> std::fmt::Debug for OpenHca<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.hca.fmt(f)
    }
}

impl<B: Backend> Drop for OpenHca<B> {
    fn drop(&mut self) {
        let _ = self.hca.teardown();
    }
}

/// Converts an init-segment timeout register (`cmd_exec_to`, `cmd_q_init_to`): bits 19:0
/// count units, bits 31:29 (two of them used) give the unit: milliseconds, seconds, minutes,
/// hours (Linux `lib/tout.c`).
pub fn iseg_timeout(reg: u32) -> Duration {
    let value = (reg & iseg::TO_VALUE_MASK) as u64;
    match (reg >> iseg::TO_MULTIPLIER_SHIFT) & iseg::TO_MULTIPLIER_MASK {
        0 => Duration::from_millis(value),
        1 => Duration::from_secs(value),
        2 => Duration::from_secs(value * 60),
        _ => Duration::from_secs(value * 3600),
    }
}

/// The timeouts the device reports, `(firmware init, command execution)`: both `None` unless
/// `cmd_q_init_to` is non-zero (Linux `tout_is_supported`).
fn device_timeouts<B: Backend>(b: &B) -> (Option<Duration>, Option<Duration>) {
    let init = b.read32(iseg::CMD_Q_INIT_TO);
    if init == 0 || init == 0xffff_ffff {
        return (None, None);
    }
    (Some(iseg_timeout(init)), Some(iseg_timeout(b.read32(iseg::CMD_EXEC_TO))))
}

/// Polls the `initializing` bit until it clears.
fn wait_fw_ready<B: Backend>(b: &B, timeout: Duration, when: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let v = b.read32(iseg::INITIALIZING);
        if v == 0xffff_ffff {
            return Err(Error::DeviceFatal {
                device: b.name().into(),
                reason: "BAR0 reads all ones: PCI function not responding".into(),
            });
        }
        if v & (1 << iseg::INITIALIZING_BIT) == 0 {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(Error::Firmware {
                device: b.name().into(),
                problem: format!("firmware still initializing {when}: waited {timeout:?}"),
            });
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Refuses a device whose RoCE capabilities lack version 2: every QP umlx makes speaks RoCE v2
/// (UDP/IP), and the GIDs it installs are RoCE v2 GIDs.
fn require_roce_v2(device: &str, roce: &[u8]) -> Result<()> {
    let versions = RoceVersionCaps(roce_cap::roce_version.get(roce) as u8);
    if versions.contains(RoceVersionCaps::VERSION_2) {
        return Ok(());
    }
    Err(Error::Device {
        device: device.into(),
        problem: format!("the adapter does not offer RoCE v2 (roce_version capability {versions})"),
        hint: "umlx speaks RoCE v2 only; use an adapter and firmware configuration with RoCE v2".into(),
    })
}

#[cfg(test)]
mod roce_caps_tests {
    use super::*;

    fn caps(versions: RoceVersionCaps) -> Vec<u8> {
        let mut r = vec![0u8; query_hca_cap_out::capability.size_bytes()];
        roce_cap::roce_version.set(&mut r, versions.bits() as u64);
        r
    }

    #[test]
    fn a_device_with_roce_v2_passes() {
        require_roce_v2("sim0", &caps(RoceVersionCaps::VERSION_1 | RoceVersionCaps::VERSION_2)).unwrap();
        require_roce_v2("sim0", &caps(RoceVersionCaps::VERSION_2)).unwrap();
    }

    #[test]
    fn a_device_with_roce_v1_only_is_refused_with_what_it_offers() {
        let e = require_roce_v2("pci:0000:3b:00.0", &caps(RoceVersionCaps::VERSION_1)).unwrap_err().to_string();
        assert!(e.starts_with("pci:0000:3b:00.0: the adapter does not offer RoCE v2"), "{e}");
        assert!(e.contains("VERSION_1"), "{e}");
        // The old sim's value (bit 1, neither version) is refused too.
        assert!(require_roce_v2("sim0", &caps(RoceVersionCaps(2))).is_err());
    }
}

/// The `log_max_qp` bring-up asks for when the device allows it: Linux's default profile
/// (`mlx5_core` profile 2, `LOG_MAX_SUPPORTED_QPS`: the max cap, at most 18).
const PROFILE_LOG_MAX_QP: u64 = 18;

/// The `cache_line_128byte` bring-up sets, as Linux does: 1 on a host with 128-byte cache
/// lines, else 0, when the max cap allows it; `None` (left as it is) when it does not.
fn cache_line_128byte(max_cap: u64, host_line: u64) -> Option<u64> {
    (max_cap == 1).then_some(u64::from(host_line >= 128))
}

/// The host CPU's cache line in bytes (what `cache_line_128byte` tells the device, as Linux's
/// `cache_line_size()` does): the first CPU's L1 data cache's coherency line, 64 when sysfs
/// does not say.
fn host_cache_line_bytes() -> u64 {
    std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_line_128byte_follows_the_host_where_the_device_allows_it() {
        assert_eq!(cache_line_128byte(0, 128), None, "a device without the cap is left alone");
        assert_eq!(cache_line_128byte(1, 64), Some(0));
        assert_eq!(cache_line_128byte(1, 128), Some(1));
        let line = host_cache_line_bytes();
        assert!(line.is_power_of_two() && (32..=256).contains(&line), "{line}");
    }
}
