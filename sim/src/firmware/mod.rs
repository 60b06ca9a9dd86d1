//! The firmware of the software ConnectX: BAR0 registers, the command queue, the command
//! processor, capabilities, firmware pages, health, and the objects commands create.
//!
//! # Choices where the contract leaves a point open
//!
//! * Command queue: 32 entries of 64 bytes (`log_cmdq_size` 5, `log_cmdq_stride` 6), read-only.
//!   The queue address must be 4 KiB aligned; writing it while `initializing` is set is allowed.
//! * Mailbox blocks must be 1 KiB aligned (what the Linux driver's DMA pool gives; rdma-core's
//!   mlx5_vfio gives each block a 4 KiB page, which also satisfies it). A misaligned pointer
//!   gets delivery status 0x05 (input) or 0x04 (output).
//! * Signatures and tokens are checked only while `cmdif_checksum` is enabled in the current
//!   capabilities; it is disabled after reset, so mlx5_vfio (which never signs) works.
//! * A command delivered before `initializing` clears is not executed (the doorbell is dropped,
//!   as the firmware is not running yet).
//! * Before ENABLE_HCA every command but ENABLE_HCA fails with BAD_SYS_STATE_ERR. ACCESS_REG,
//!   QUERY/SET_HCA_CAP need the boot pages; INIT_HCA needs boot and init pages; every resource
//!   command needs INIT_HCA. Failures use BAD_SYS_STATE_ERR with a syndrome naming the missing
//!   step ([`syndrome`]).
//! * UAR indices are handed out from 8 upward (BAR0 pages 0-2 hold the initialization segment);
//!   UAR pages are 4 KiB (`log_uar_page_sz` 0 is what the device reports and what it supports).
//! * Object numbers: PDs, transport domains and CQs from 1, EQs from 0, QPs from 0x100 (0 and 1
//!   are the special QPs), MKey indices from 1, SRQs from 1.
//! * Page demand: boot and init pages as configured; after INIT_HCA the regular demand grows with
//!   the objects (ICM in chunks) and is asked for with PAGE_REQUEST events on the EQ subscribed
//!   to them; when objects go away the firmware asks for pages back (negative PAGE_REQUEST).
//!   After TEARDOWN_HCA every page can be taken back with MANAGE_PAGES TAKE.

pub mod syndrome;

pub mod caps;
mod cmdq;
mod datapath;
pub use datapath::DataPath;
mod exec;
pub mod objects;
pub mod pages;
pub mod vport;

use crate::config::SimConfig;
use crate::iommu::Iommu;
use std::fs::File;
use std::time::{Duration, Instant};
use umlx_hwdesc::enums::{CmdStatus, HealthSyndrome};
use umlx_hwdesc::plain::{cq, eq, iseg, uar};

/// Whether UAR page offset `off` starts a BlueFlame buffer: register `k` (of
/// `BFREGS_PER_UAR`) at `BF_OFFSET + k * 2^LOG_BF_REG_SIZE`, its two buffers half a register
/// apart.
fn is_bf_buffer_start(off: usize) -> bool {
    let reg = 1usize << caps::limits::LOG_BF_REG_SIZE;
    let Some(rel) = off.checked_sub(uar::BF_OFFSET) else { return false };
    rel < uar::BFREGS_PER_UAR * reg && rel % (reg / 2) == 0
}

pub(crate) use objects::Objects;
pub(crate) use pages::Pages;

/// BAR0 size (32 MiB, as a ConnectX-6 Dx PF).
pub const BAR0_SIZE: u64 = 0x200_0000;
/// First UAR index the firmware hands out.
pub const FIRST_UAR_INDEX: u32 = 8;
/// log2 of the number of command queue entries.
pub const LOG_CMDQ_SIZE: u32 = 5;
/// log2 of the command queue entry stride.
pub const LOG_CMDQ_STRIDE: u32 = 6;
/// Slots of [`Hca::spare_lanes`].
pub(crate) const SPARE_LANE_SLOTS: usize = 4;
/// Health counter advance period.
const HEALTH_TICK: Duration = Duration::from_millis(1);
/// How often the firmware touches one of the pages it holds ([`Hca::touch_pages`]): the
/// longest its timers ever wait.
pub(crate) const PAGE_TOUCH_PERIOD: Duration = Duration::from_millis(10);

/// Lifecycle state of the HCA as the firmware sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaState {
    /// After reset: only ENABLE_HCA is accepted.
    Disabled,
    /// ENABLE_HCA done.
    Enabled,
    /// INIT_HCA done: resources can be created.
    Initialized,
    /// TEARDOWN_HCA done: pages can be reclaimed, then DISABLE_HCA.
    TornDown,
}

/// A failed command: status and syndrome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdFail {
    /// PRM command status.
    pub status: CmdStatus,
    /// Syndrome ([`syndrome::make`]).
    pub syndrome: u32,
}

impl CmdFail {
    /// A failure with `status` for `opcode` and `reason`.
    pub fn new(status: CmdStatus, opcode: u16, reason: u16) -> CmdFail {
        CmdFail { status, syndrome: syndrome::make(opcode, reason) }
    }
}

/// Counters the sim keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Commands executed (delivered with delivery status OK).
    pub commands: u64,
    /// Commands that completed with a non-OK status.
    pub command_errors: u64,
    /// Commands completed with a delivery error.
    pub delivery_errors: u64,
    /// EQEs written.
    pub eqes: u64,
    /// Interrupts signalled.
    pub interrupts: u64,
    /// EQ overruns.
    pub eq_overruns: u64,
    /// Doorbells that named no valid object or UAR.
    pub bad_doorbells: u64,
    /// DMA attempted with bus mastering disabled.
    pub dma_without_bus_master: u64,
    /// MANAGE_PAGES CANT_GIVE received (the driver could not meet a page request).
    pub pages_cant_give: u64,
    /// Runs of the device by its engine thread (its timers, and frames no other thread took).
    pub engine_runs: u64,
}

impl SimStats {
    /// Adds the counts of `o` (a run's) to these. Every field is named, so that a new counter
    /// cannot be left out.
    pub(crate) fn add(&mut self, o: &SimStats) {
        let SimStats {
            commands,
            command_errors,
            delivery_errors,
            eqes,
            interrupts,
            eq_overruns,
            bad_doorbells,
            dma_without_bus_master,
            pages_cant_give,
            engine_runs,
        } = *o;
        self.commands += commands;
        self.command_errors += command_errors;
        self.delivery_errors += delivery_errors;
        self.eqes += eqes;
        self.interrupts += interrupts;
        self.eq_overruns += eq_overruns;
        self.bad_doorbells += bad_doorbells;
        self.dma_without_bus_master += dma_without_bus_master;
        self.pages_cant_give += pages_cant_give;
        self.engine_runs += engine_runs;
    }
}

/// Health state.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Health {
    /// Health syndrome (0 = healthy).
    pub synd: u8,
    /// Extended syndrome.
    pub ext_synd: u16,
    /// Recovery flow required (health buffer `rfr` bit 31): set with a fatal syndrome.
    pub rfr: bool,
    /// Counter value frozen at the fatal error.
    pub frozen_counter: Option<u32>,
}

/// A command whose completion the hostile device delays.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DelayedCmd {
    pub due: Instant,
    pub slot: u32,
}

/// The whole device state behind the device lock.
pub struct Hca {
    pub(crate) cfg: SimConfig,
    pub(crate) iommu: Iommu,
    pub(crate) pci_config: [u8; 256],
    pub(crate) reset_at: Instant,
    pub(crate) cmdq_addr_h: u32,
    pub(crate) cmdq_addr_l: u32,
    pub(crate) nic_interface: u8,
    /// Set when the command queue address was written: `initializing` reads 1 until then.
    pub(crate) cmdq_ready_at: Option<Instant>,
    /// Empty MANAGE_PAGES TAKE replies still to give after TEARDOWN_HCA (hostile knob).
    pub(crate) reclaim_empty_left: u32,
    /// Host-side limit on DMA mappings (see `SimDevice::set_dma_entry_limit`).
    pub(crate) dma_entry_limit: Option<usize>,
    pub(crate) health: Health,
    pub(crate) state: HcaState,
    pub(crate) issi: u16,
    pub(crate) caps: caps::Caps,
    pub(crate) pages: Pages,
    pub(crate) objects: Objects,
    pub(crate) vport: vport::Vport,
    /// The administrative state of the device's port, which the firmware sets as it brings
    /// the vport up and down ([`Hca::attach_port`]): while it is down, the port sends and
    /// receives nothing.
    pub(crate) port_admin_up: std::sync::Arc<std::sync::atomic::AtomicBool>,
    pub(crate) irqs: Vec<Option<File>>,
    pub(crate) delayed: Vec<DelayedCmd>,
    /// When [`Hca::tick`] is next needed: set by its last run, lowered by [`Hca::note_due`]
    /// when a timer is armed sooner (the engine also looks at [`Hca::next_due`] when it runs).
    pub(crate) timers_due: Instant,
    /// `timers_due` and its `port::nanos_since_epoch`, as last converted
    /// ([`Hca::timers_due_nanos`]).
    timers_due_converted: (Instant, u64),
    pub(crate) stats: SimStats,
    pub(crate) host_endianness: u8,
    pub(crate) driver_version: Vec<u8>,
    /// Commands executed since the last reset (what the hostile knobs count; `stats` survive
    /// a reset).
    pub(crate) commands_since_reset: u64,
    pub(crate) last_page_touch: Instant,
    pub(crate) page_cursor: u64,
    /// The lane of the device's own runs of the data path ([`Hca::data_path`]); taken out
    /// while one runs.
    pub(crate) lane: Option<Box<crate::transport::Lane>>,
    /// The lanes of runs on a shared borrow of the device ([`Hca::take_spare_lane`]): one per
    /// run at once, each given back, its frames sent, before the run lets go of the device.
    /// Their counts wait in them until read ([`Hca::collect_counts`]). A thread takes and
    /// gives back at its own slot (by [`datapath::lane_slot`]), so that threads at once do
    /// not share the lock. (Boxed: a lane is a few KiB, moved in and out at every run.)
    #[allow(clippy::vec_box)]
    pub(crate) spare_lanes: [crate::CacheLines<std::sync::Mutex<Vec<Box<crate::transport::Lane>>>>; SPARE_LANE_SLOTS],
    /// Whether a spare lane holds a fatal error a shared run raised: the next thread to hold
    /// the device whole applies it ([`Hca::absorb_spare_lanes`]).
    pub(crate) spare_fatal: std::sync::atomic::AtomicBool,
}

impl Hca {
    /// A device in its power-on state.
    pub fn new(cfg: SimConfig) -> Hca {
        let caps = caps::Caps::new(&cfg);
        let vport = vport::Vport::new(&cfg);
        let pages = Pages::new(cfg.boot_pages, cfg.init_pages);
        let now = Instant::now();
        let mut hca = Hca {
            iommu: Iommu::new(),
            pci_config: [0; 256],
            reset_at: Instant::now(),
            cmdq_addr_h: 0,
            cmdq_addr_l: 0,
            nic_interface: 0,
            cmdq_ready_at: None,
            reclaim_empty_left: 0,
            dma_entry_limit: None,
            health: Health::default(),
            state: HcaState::Disabled,
            issi: 0,
            caps,
            pages,
            objects: Objects::default(),
            vport,
            port_admin_up: Default::default(),
            irqs: (0..cfg.num_msix).map(|_| None).collect(),
            delayed: Vec::new(),
            timers_due: now,
            timers_due_converted: (now, crate::port::nanos_since_epoch(now)),
            stats: SimStats::default(),
            host_endianness: 0,
            driver_version: Vec::new(),
            last_page_touch: Instant::now(),
            page_cursor: 0,
            commands_since_reset: 0,
            lane: Some(Box::default()),
            spare_lanes: Default::default(),
            spare_fatal: std::sync::atomic::AtomicBool::new(false),
            cfg,
        };
        hca.init_pci_config();
        hca
    }

    fn init_pci_config(&mut self) {
        let c = &mut self.pci_config;
        *c = [0; 256];
        c[0..2].copy_from_slice(&0x15b3u16.to_le_bytes());
        c[2..4].copy_from_slice(&self.cfg.device_id.to_le_bytes());
        c[8] = 0; // revision
        c[9..12].copy_from_slice(&[0x00, 0x00, 0x02]); // class: Ethernet controller
        c[0x0e] = 0; // header type 0
        c[0x2c..0x2e].copy_from_slice(&0x15b3u16.to_le_bytes());
        c[0x2e..0x30].copy_from_slice(&0x0016u16.to_le_bytes());
        // BAR0: 64-bit prefetchable memory.
        c[0x10] = 0x0c;
    }

    /// Function-level reset: everything but the IOMMU table (owned by the host's container) is
    /// back to power-on, the pages the firmware held are dropped.
    pub fn reset(&mut self) {
        let iommu = std::mem::take(&mut self.iommu);
        let irqs = std::mem::take(&mut self.irqs);
        let stats = self.sim_stats();
        let limit = self.dma_entry_limit;
        let cfg = self.cfg.clone();
        let port = self.port_admin_up.clone();
        // The cable is where it was: a reset changes nothing on the wire's side.
        let carrier = self.vport.has_carrier();
        *self = Hca::new(cfg);
        self.dma_entry_limit = limit;
        self.iommu = iommu;
        self.irqs = irqs;
        self.stats = stats;
        self.vport.set_has_carrier(carrier);
        self.attach_port(port);
    }

    /// Shares the administrative state of the device's port (see [`Hca::port_admin_up`]). It
    /// changes when the firmware brings the port up or down, not at power-on or a reset: a
    /// device no driver brought up yet passes frames (its port answers ARP), and one a driver
    /// brought down stays down until a driver brings it up.
    pub(crate) fn attach_port(&mut self, admin_up: std::sync::Arc<std::sync::atomic::AtomicBool>) {
        self.port_admin_up = admin_up;
    }

    /// Whether the firmware is still initializing after reset.
    ///
    /// It is also set again for `cmdq_init_delay` after the command queue address is written
    /// (Linux `mlx5_function_enable` and rdma-core wait for it to clear after programming the
    /// queue; that the bit is set again meanwhile is inferred from that wait).
    pub fn initializing(&self) -> bool {
        self.reset_at.elapsed() < self.cfg.init_delay || self.cmdq_ready_at.is_some_and(|t| Instant::now() < t)
    }

    /// Whether bus mastering is enabled in the PCI COMMAND register.
    pub fn bus_master(&self) -> bool {
        self.pci_config[4] & 0x04 != 0
    }

    /// Whether a fatal health error is present.
    ///
    /// Fatal means a syndrome with the recovery-flow-required bit (Linux
    /// `sensor_fw_synd_rfr`); a syndrome without it is a warning and the firmware goes on.
    pub fn is_fatal(&self) -> bool {
        self.health.synd != 0 && self.health.rfr
    }

    /// Raises a health syndrome without the recovery-flow-required bit: reported in the health
    /// buffer, commands keep working.
    pub fn inject_health_warning(&mut self, synd: HealthSyndrome) {
        self.health.synd = synd.0.max(1);
        self.health.rfr = false;
    }

    /// The health counter's current value (24 bits): it advances while the firmware is alive
    /// and stops at a fatal error.
    pub fn health_counter(&self) -> u32 {
        match self.health.frozen_counter {
            Some(v) => v,
            None => (self.reset_at.elapsed().as_nanos() / HEALTH_TICK.as_nanos()) as u32 & iseg::HEALTH_COUNTER_MASK,
        }
    }

    /// Injects a fatal error: the health syndrome is set, the counter stops and commands stop
    /// completing.
    pub fn inject_fatal(&mut self, synd: HealthSyndrome) {
        if self.health.frozen_counter.is_none() {
            self.health.frozen_counter = Some(self.health_counter());
        }
        self.health.synd = synd.0.max(1);
        self.health.rfr = true;
        self.health.ext_synd = 0;
    }

    /// Whether the device may do DMA now ([`DataPath::may_dma`]).
    pub(crate) fn may_dma(&mut self) -> bool {
        self.data_path(|dp| dp.may_dma())
    }

    /// Signals MSI-X `vector` ([`DataPath::signal_irq`]).
    pub(crate) fn signal_irq(&mut self, vector: u32) {
        self.data_path(|dp| dp.signal_irq(vector));
    }

    /// Reads a BAR0 register (32-bit, host-order value of the big-endian register).
    pub fn bar_read32(&self, offset: u64) -> u32 {
        let Ok(offset) = usize::try_from(offset) else { return 0 };
        let (major, minor, sub_minor) = self.cfg.fw_version;
        match offset {
            // The health buffer's `fw_ver` is one opaque dword to drivers (Linux and rdma-core
            // compare it with all ones and print it raw); the model gives it `fw_rev`'s value.
            iseg::FW_REV | iseg::HEALTH_FW_VER => ((minor as u32) << iseg::FW_REV_MINOR_SHIFT) | major as u32,
            iseg::CMDIF_REV_FW_SUB => (iseg::CMDIF_REV << iseg::CMDIF_REV_SHIFT) | sub_minor as u32,
            iseg::CMDQ_ADDR_H => self.cmdq_addr_h,
            iseg::CMDQ_ADDR_L_SZ => {
                (self.cmdq_addr_l & iseg::CMDQ_ADDR_L_MASK)
                    | ((self.nic_interface as u32 & iseg::NIC_IFC_MASK) << iseg::NIC_IFC_SHIFT)
                    | (LOG_CMDQ_SIZE << iseg::LOG_CMDQ_SIZE_SHIFT)
                    | LOG_CMDQ_STRIDE
            }
            iseg::INITIALIZING => {
                let init = if self.initializing() { 1u32 << iseg::INITIALIZING_BIT } else { 0 };
                init | (1 << iseg::FW_RESET_SUPPORTED_BIT)
            }
            iseg::HEALTH_RFR if self.health.rfr => 1 << iseg::RFR_BIT,
            // irisc_index (0 here), synd, ext_synd share one dword.
            iseg::HEALTH_SYND_DWORD => {
                ((self.health.synd as u32) << iseg::HEALTH_SYND_SHIFT) | self.health.ext_synd as u32
            }
            iseg::CMD_EXEC_TO => self.cfg.cmd_exec_to,
            iseg::CMD_Q_INIT_TO => self.cfg.cmd_q_init_to,
            iseg::INTERNAL_TIMER_H => (self.internal_timer() >> 32) as u32,
            iseg::INTERNAL_TIMER_L => self.internal_timer() as u32,
            iseg::HEALTH_COUNTER => {
                self.health_counter() | ((self.health.synd as u32) << iseg::HEALTH_COUNTER_SYNDROME_SHIFT)
            }
            iseg::REAL_TIME_H => (self.real_time() >> 32) as u32,
            iseg::REAL_TIME_L => self.real_time() as u32,
            _ => 0,
        }
    }

    fn internal_timer(&self) -> u64 {
        // Free-running at the device frequency (1 GHz: one tick per nanosecond).
        self.reset_at.elapsed().as_nanos() as u64
    }

    fn real_time(&self) -> u64 {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        (t.as_secs() << 32) | t.subsec_nanos() as u64
    }

    /// Writes a 32-bit BAR0 register.
    pub fn bar_write32(&mut self, offset: u64, value: u32) {
        match offset {
            o if o == iseg::CMDQ_ADDR_H as u64 => self.cmdq_addr_h = value,
            o if o == iseg::CMDQ_ADDR_L_SZ as u64 => {
                self.cmdq_addr_l = value & iseg::CMDQ_ADDR_L_MASK;
                self.nic_interface = ((value >> iseg::NIC_IFC_SHIFT) & iseg::NIC_IFC_MASK) as u8;
                if !self.cfg.cmdq_init_delay.is_zero() {
                    self.cmdq_ready_at = Some(Instant::now() + self.cfg.cmdq_init_delay);
                }
            }
            o if o == iseg::CMD_DBELL as u64 => self.ring_cmd_doorbell(value),
            o if o >= (FIRST_UAR_INDEX as usize * uar::UAR_PAGE_SIZE) as u64 && o + 4 <= BAR0_SIZE => {
                let uar = (o >> 12) as u32;
                self.uar_write32(uar, (o & 0xfff) as u32, value);
            }
            _ => {}
        }
    }

    /// The UAR page (index, offset in it) of a 64-bit write at BAR0 + `offset`, if it is in one.
    fn uar_of(offset: u64) -> Option<(u32, u32)> {
        let page = uar::UAR_PAGE_SIZE as u64;
        (offset >= FIRST_UAR_INDEX as u64 * page && offset.checked_add(8).is_some_and(|end| end <= BAR0_SIZE))
            .then(|| ((offset / page) as u32, (offset % page) as u32))
    }

    /// The UAR of a 64-bit write at BAR0 + `offset` that is a send doorbell (it starts a
    /// BlueFlame buffer of a UAR page): the one BAR write the data path takes on a shared
    /// borrow of the device (`DataPath::uar_sq_doorbell`).
    pub fn sq_doorbell_uar(offset: u64) -> Option<u32> {
        Hca::uar_of(offset).filter(|&(_, off)| is_bf_buffer_start(off as usize)).map(|(uar, _)| uar)
    }

    /// Writes a 64-bit BAR0 location (doorbells).
    pub fn bar_write64(&mut self, offset: u64, value: u64) {
        if let Some((uar, off)) = Hca::uar_of(offset) {
            self.uar_write64(uar, off, value);
        } else {
            self.bar_write32(offset, (value >> 32) as u32);
            self.bar_write32(offset + 4, value as u32);
        }
    }

    /// A 32-bit write into a UAR page: the EQ doorbells.
    fn uar_write32(&mut self, uar: u32, off: u32, value: u32) {
        match off as usize {
            uar::EQ_DOORBELL_ARM | uar::EQ_DOORBELL_NO_ARM => {
                if !self.objects.uars.contains(&uar) {
                    self.stats.bad_doorbells += 1;
                    return;
                }
                let eqn = value >> eq::DB_EQN_SHIFT;
                let ci = value & eq::DB_CI_MASK;
                self.eq_doorbell(uar, eqn, ci, off as usize == uar::EQ_DOORBELL_ARM);
            }
            _ => self.stats.bad_doorbells += 1,
        }
    }

    /// A 64-bit write into a UAR page: CQ arm and SQ doorbells.
    fn uar_write64(&mut self, uar: u32, off: u32, value: u64) {
        if is_bf_buffer_start(off as usize) {
            self.data_path(|dp| dp.uar_sq_doorbell(uar, value));
            return;
        }
        if !self.objects.uars.contains(&uar) {
            self.stats.bad_doorbells += 1;
            return;
        }
        match off as usize {
            uar::CQ_DOORBELL => {
                let hi = (value >> 32) as u32;
                let cqn = value as u32 & cq::NUM_MASK_24;
                self.cq_arm_doorbell(uar, cqn, hi);
            }
            // A send doorbell starts one of the two buffers of a BlueFlame register (each half of
            // the register size this device reports in `log_bf_reg_size`; taken above); any
            // other write there is the body of a BlueFlame copy, which the device reads from the
            // SQ buffer instead. A doorbell written anywhere else is not seen, as on hardware.
            o if o >= uar::BF_OFFSET => {}
            _ => self.stats.bad_doorbells += 1,
        }
    }

    /// Time-driven work: delayed command completions, the transport's timers, the page touches.
    pub fn tick(&mut self, now: Instant) {
        self.touch_pages(now);
        if !self.objects.xport.timed().is_empty() {
            self.data_path(|dp| dp.transport_tick(now));
        }
        if self.delayed.is_empty() {
            return;
        }
        let mut done = 0u32;
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].due <= now && !self.is_fatal() {
                let slot = self.delayed.remove(i).slot;
                if self.deliver(slot) {
                    done |= 1 << slot;
                }
            } else {
                i += 1;
            }
        }
        if done != 0 {
            self.post_cmd_completion(done);
        }
    }

    /// The firmware uses the pages it holds (ICM): every few milliseconds it reads one of them,
    /// round robin. A page the host unmapped while the firmware still holds it is an IOMMU fault,
    /// and on a ConnectX that is fatal: health syndrome "ICM fetch PCI error".
    fn touch_pages(&mut self, now: Instant) {
        if self.page_touch_due().is_none_or(|due| now < due) {
            return;
        }
        self.last_page_touch = now;
        let next = self.pages.held.range(self.page_cursor..).next().or_else(|| self.pages.held.iter().next()).copied();
        if let Some(page) = next {
            self.page_cursor = page + 1;
            let mut b = [0u8; 8];
            if self.iommu.read(page, &mut b).is_err() {
                self.inject_fatal(HealthSyndrome::FETCH_PCI_ERR);
            }
        }
    }

    /// When the firmware next touches a page it holds ([`Hca::touch_pages`]); `None` while it
    /// holds none, is in error, or may not reach host memory.
    fn page_touch_due(&self) -> Option<Instant> {
        let touching = !self.pages.held.is_empty() && !self.is_fatal() && self.bus_master();
        touching.then(|| self.last_page_touch + PAGE_TOUCH_PERIOD)
    }

    /// Notes a timer due at `due`: the device's timers run no later than that (the thread that
    /// runs the device when it is due, or its engine, which a run that leaves it due sooner
    /// than the engine's next look wakes).
    pub(crate) fn note_due(&mut self, due: Instant) {
        if due < self.timers_due {
            self.timers_due = due;
        }
    }

    /// `timers_due` in `port::nanos_since_epoch`, converted only when it changed since the
    /// last call (a run's end publishes it: most runs leave it as they found it).
    pub(crate) fn timers_due_nanos(&mut self) -> u64 {
        if self.timers_due_converted.0 != self.timers_due {
            self.timers_due_converted = (self.timers_due, crate::port::nanos_since_epoch(self.timers_due));
        }
        self.timers_due_converted.1
    }

    /// When the timers next need running ([`Hca::tick`]): the earliest of the delayed command
    /// completions, the transport's deadlines and the next page touch; `None` if nothing is
    /// timed.
    pub fn next_due(&self, now: Instant) -> Option<Instant> {
        let cmds = self.delayed.iter().map(|d| d.due).min();
        [cmds, self.transport_next_due(now), self.page_touch_due()].into_iter().flatten().min()
    }

    /// When the transport's timers next need running: the part of [`Hca::next_due`] that its
    /// QPs' retransmit and RNR deadlines make (a QP in ERR that needs service makes it `now`).
    pub fn transport_due(&self, now: Instant) -> Option<Instant> {
        self.transport_next_due(now)
    }
}
