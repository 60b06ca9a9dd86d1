//! Devices and contexts: the device list, opening a device (bring-up through the driver),
//! device/port/GID queries, async events, and the tables the data path shares.

use crate::Dev;
use crate::types::*;
use crate::{Error, Result};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use umlx_driver::AnyBackend;
#[cfg(feature = "sim")]
use umlx_driver::SimBackend;
use umlx_driver::datapath::QpTable;
use umlx_driver::hca::PortInfo;
use umlx_driver::objects::{Pd as DrvPd, Uar};
use umlx_driver::vfio::VfioBackend;
use umlx_driver::wqsize;
use umlx_driver::{Hca, HcaOptions, OpenHca};
use umlx_hwdesc::ifc::cmd_hca_cap;
#[cfg(feature = "sim")]
use umlx_sim::{SimConfig, SimDevice};

/// What kind of device an entry of the device list is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A PCI function bound to vfio-pci (its address).
    Pci(String),
    /// A software ConnectX, embedded in this process.
    Sim,
}

/// One entry of [`devices`] (`struct ibv_device`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceListEntry {
    /// Name: `mlx5_<pci>` for adapters, `sim0` for the software ConnectX.
    pub name: String,
    /// Kind.
    pub kind: DeviceKind,
}

/// `ibv_get_device_list`: PCI functions bound to vfio-pci with mlx5 IDs, then the software
/// ConnectX.
pub fn devices() -> Vec<DeviceListEntry> {
    let mut v = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/sys/bus/pci/drivers/vfio-pci") {
        let mut pcis: Vec<String> = dir
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(':') && n.contains('.'))
            .collect();
        pcis.sort();
        for pci in pcis {
            let root = std::path::Path::new("/sys");
            let is_mlx5 = umlx_driver::vfio::sysfs::read_ids(root, &pci)
                .map(|(ven, dev)| umlx_driver::vfio::sysfs::mlx5_device_name(ven, dev).is_some())
                .unwrap_or(false);
            if is_mlx5 {
                v.push(DeviceListEntry { name: format!("mlx5_{pci}"), kind: DeviceKind::Pci(pci) });
            }
        }
    }
    v.push(DeviceListEntry { name: "sim0".into(), kind: DeviceKind::Sim });
    v
}

/// An asynchronous event (`struct ibv_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AsyncEvent {
    /// The mlx5 event type (port change, CQ error, QP/SRQ events, SRQ limit...).
    pub event_type: umlx_hwdesc::enums::EventType,
    /// The object it names (port, CQN, QPN, SRQN).
    pub object: u32,
    /// Sub-type (port change: 1 DOWN, 4 ACTIVE).
    pub sub_type: u8,
}

/// A neighbour resolver: IP address to MAC (see [`Context::set_resolver`]).
pub type Resolver = Arc<dyn Fn(IpAddr) -> Option<[u8; 6]> + Send + Sync>;

pub(crate) struct Shared {
    pub hca: Arc<OpenHca<Dev>>,
    pub uar: Arc<Uar<Dev>>,
    pub qps: QpTable,
    pub port: PortInfo,
    pub neighbors: Mutex<Vec<(IpAddr, [u8; 6])>>,
    pub resolver: Mutex<Option<Resolver>>,
    /// Completion vectors in use (vector 0 is the async EQ's).
    pub vectors: Mutex<Vec<u32>>,
    /// The software ConnectX port whose UDP wire an empty CQ poll drains
    /// ([`Context::poll_sim_wire`]).
    #[cfg(feature = "sim")]
    pub wire: std::sync::OnceLock<umlx_sim::port::Port>,
}

/// An open device (`struct ibv_context`).
pub struct Context {
    pub(crate) shared: Arc<Shared>,
}

impl Clone for Context {
    fn clone(&self) -> Self {
        Context { shared: self.shared.clone() }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.shared.hca.name()).finish()
    }
}

#[cfg(feature = "sim")]
impl Context {
    /// Opens a new software ConnectX (its IP addresses become GIDs 1..).
    pub fn open_sim(cfg: SimConfig) -> Result<Context> {
        let ips = cfg.ips.clone();
        let backend = SimBackend::new("0", cfg)?;
        Context::open(backend, ips)
    }

    /// Opens an existing software ConnectX (for example one attached to a fabric).
    pub fn attach_sim(dev: SimDevice, name: &str, ips: Vec<IpAddr>) -> Result<Context> {
        let backend = SimBackend::attach(name, dev)?;
        Context::open(backend, ips)
    }
}

#[cfg(feature = "sim")]
impl Context {
    /// The software ConnectX behind this context, if it is one.
    pub fn sim_backend(&self) -> Option<&Arc<SimBackend>> {
        self.shared.hca.backend().as_sim()
    }

    /// Has every CQ created from now on that finds no completion take the frames waiting at the
    /// software ConnectX's UDP wire and let the device handle them in the polling thread
    /// ([`umlx_sim::port::Port::poll_wire`]), then look again: an application that busy-polls
    /// then runs the device's receive side itself, as a DPDK program does, instead of waiting
    /// for the wire's receive thread to get a core. An empty poll then costs a `recvmmsg`.
    pub fn poll_sim_wire(&self) -> Result<()> {
        let Some(sim) = self.sim_backend() else {
            return Err(Error::invalid(format!("{}: poll_sim_wire needs a software ConnectX", self.name())));
        };
        let _ = self.shared.wire.set(sim.device().port());
        Ok(())
    }

    /// Resolves neighbours by ARP / neighbour solicitation on the device's own wire.
    pub fn use_sim_arp(&self) -> Result<()> {
        let Some(sim) = self.sim_backend() else {
            return Err(Error::invalid(format!("{}: use_sim_arp needs a software ConnectX", self.name())));
        };
        let resolve = sim.neighbor_resolver(std::time::Duration::from_secs(2));
        let mine: Vec<IpAddr> = self.gids().iter().skip(1).map(|(_, g)| g.to_ip()).collect();
        self.set_resolver(Arc::new(move |ip: IpAddr| {
            let me = mine.iter().find(|m| m.is_ipv4() == ip.is_ipv4())?;
            resolve(*me, ip)
        }));
        Ok(())
    }
}

impl Context {
    /// Opens the adapter at PCI address `pci` (bound to vfio-pci); `ips` become GIDs 1...
    pub fn open_pci(pci: &str, ips: Vec<IpAddr>) -> Result<Context> {
        let backend = VfioBackend::open(pci)?;
        Context::open(backend, ips)
    }
}

impl Context {
    /// Brings the device behind `backend` up and opens a context on it.
    pub fn open(backend: impl Into<AnyBackend>, ips: Vec<IpAddr>) -> Result<Context> {
        let hca = Hca::open(Arc::new(backend.into()), HcaOptions { ips, ..Default::default() })?;
        let uar = Arc::new(Uar::new(&hca)?);
        let port = hca.port();
        Ok(Context {
            shared: Arc::new(Shared {
                hca,
                uar,
                qps: QpTable::default(),
                port,
                neighbors: Mutex::new(Vec::new()),
                resolver: Mutex::new(None),
                vectors: Mutex::new(Vec::new()),
                #[cfg(feature = "sim")]
                wire: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The driver's HCA (bring-up trace, capabilities, commands).
    pub fn hca(&self) -> &Arc<OpenHca<Dev>> {
        &self.shared.hca
    }

    /// Device name.
    pub fn name(&self) -> &str {
        self.shared.hca.name()
    }

    /// `ibv_query_device`.
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let caps = self.shared.hca.caps();
        let g = |f| caps.general_cap(f);
        let hca = &self.shared.hca;
        let (vendor, device) = hca.pci_ids()?;
        let atomic = hca.atomics_supported();
        Ok(DeviceAttr {
            fw_ver: hca.fw_version().to_string(),
            node_guid: self.shared.port.node_guid,
            sys_image_guid: self.shared.port.node_guid,
            max_mr_size: u64::MAX,
            page_size_cap: !0xfff,
            vendor_id: vendor as u32,
            vendor_part_id: device as u32,
            hw_ver: 0,
            max_qp: 1 << g(cmd_hca_cap::log_max_qp),
            max_qp_wr: 1 << g(cmd_hca_cap::log_max_qp_sz),
            max_sge: wqsize::device_max_send_sge(g(cmd_hca_cap::max_wqe_sz_sq) as u32),
            max_cq: 1 << g(cmd_hca_cap::log_max_cq),
            max_cqe: (1 << g(cmd_hca_cap::log_max_cq_sz)) - 1,
            max_mr: 1 << g(cmd_hca_cap::log_max_mkey),
            max_pd: 1 << g(cmd_hca_cap::log_max_pd),
            max_qp_rd_atom: 1 << g(cmd_hca_cap::log_max_ra_res_qp),
            max_qp_init_rd_atom: 1 << g(cmd_hca_cap::log_max_ra_req_qp),
            max_srq: 1 << g(cmd_hca_cap::log_max_srq),
            max_srq_wr: (1 << g(cmd_hca_cap::log_max_srq_sz)) - 1,
            max_srq_sge: wqsize::device_max_srq_sge(g(cmd_hca_cap::max_wqe_sz_rq) as u32),
            phys_port_cnt: g(cmd_hca_cap::num_ports) as u8,
            atomic_cap: atomic as u32,
            local_ca_ack_delay: g(cmd_hca_cap::local_ca_ack_delay) as u8,
        })
    }

    /// `ibv_query_port` (port 1).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(Error::invalid(format!("port {port}: the device has port 1")));
        }
        let vport = self.shared.hca.query_vport(port)?;
        let (st, phys) = (vport.port_state as u32, vport.port_physical_state);
        let active = self.active_mtu();
        let caps = self.shared.hca.caps();
        let (active_width, active_speed) = ib_width_speed(self.shared.hca.query_eth_proto_oper(port)?);
        Ok(PortAttr {
            state: PortState::from_value(st).unwrap_or(PortState::Down),
            max_mtu: Mtu::Mtu4096,
            active_mtu: active,
            gid_tbl_len: caps.general_cap(cmd_hca_cap::gid_table_size) as u32,
            pkey_tbl_len: 1,
            lid: 0,
            link_layer: "Ethernet",
            phys_state: phys,
            max_msg_sz: 1 << caps.general_cap(cmd_hca_cap::log_max_msg),
            active_width,
            active_speed,
        })
    }

    /// The active MTU: the largest IB MTU that fits the Ethernet MTU with RoCEv2 headers.
    pub fn active_mtu(&self) -> Mtu {
        match self.shared.port.mtu.saturating_sub(80) {
            4096.. => Mtu::Mtu4096,
            2048.. => Mtu::Mtu2048,
            1024.. => Mtu::Mtu1024,
            512.. => Mtu::Mtu512,
            _ => Mtu::Mtu256,
        }
    }

    /// `ibv_query_gid`.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        if port != 1 {
            return Err(Error::invalid(format!("port {port}: the device has port 1")));
        }
        let index = u16::try_from(index)
            .map_err(|_| Error::invalid(format!("GID index {index}: the table has 16-bit indices")))?;
        Ok(Gid(self.shared.hca.query_gid(port, index)?))
    }

    /// The GID table entries the driver programmed (index, GID).
    pub fn gids(&self) -> Vec<(u32, Gid)> {
        self.shared.port.gids.iter().map(|g| (g.index, Gid(g.gid))).collect()
    }

    /// The GID a program uses when it was given none, as perftest picks it: the RoCEv2 GID
    /// of the port's IPv4 address (one outside 169.254/16 first), else an IPv6 GID (global
    /// scope first); the lowest index among equals. `None` when the table is empty.
    pub fn default_gid(&self) -> Option<(u32, Gid)> {
        let rank = |g: &Gid| match g.to_ip() {
            IpAddr::V4(a) if !a.is_link_local() => 0,
            IpAddr::V4(_) => 1,
            IpAddr::V6(a) if !a.is_unicast_link_local() => 2,
            IpAddr::V6(_) => 3,
        };
        self.gids().into_iter().filter(|(_, g)| *g != Gid::default()).min_by_key(|(i, g)| (rank(g), *i))
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.shared.port.mac
    }

    /// Adds a neighbour (IP → MAC) used to resolve address vectors; a VFIO function has no
    /// kernel neighbour table.
    pub fn add_neighbor(&self, ip: IpAddr, mac: [u8; 6]) {
        let mut n = self.shared.neighbors.lock().unwrap_or_else(|e| e.into_inner());
        n.retain(|(i, _)| *i != ip);
        n.push((ip, mac));
    }

    /// Installs a neighbour resolver, asked when the neighbour table has no entry (for a
    /// software ConnectX: ARP on its wire, see `Context::use_sim_arp`).
    pub fn set_resolver(&self, r: Resolver) {
        *self.shared.resolver.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    }

    /// Resolves the destination MAC of an address: explicit, link-local EUI-64, neighbour table.
    pub fn resolve_dmac(&self, ah: &AhAttr) -> Result<[u8; 6]> {
        if let Some(m) = ah.dmac {
            return Ok(m);
        }
        let g = ah.grh.dgid.0;
        if g[0] == 0xfe && g[1] == 0x80 && g[11] == 0xff && g[12] == 0xfe {
            return Ok([g[8] ^ 2, g[9], g[10], g[13], g[14], g[15]]);
        }
        let ip = ah.grh.dgid.to_ip();
        if self.shared.port.gids.iter().any(|e| e.gid == g) {
            return Ok(self.shared.port.mac);
        }
        let known = self
            .shared
            .neighbors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|(i, _)| *i == ip)
            .map(|(_, m)| *m);
        if let Some(m) = known {
            return Ok(m);
        }
        let resolver = self.shared.resolver.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(m) = resolver.and_then(|r| r(ip)) {
            self.add_neighbor(ip, m);
            return Ok(m);
        }
        Err(Error::invalid(format!(
            "no MAC known for {ip}: give ah_attr.dmac, call Context::add_neighbor or set a resolver"
        )))
    }

    /// `ibv_alloc_pd`.
    pub fn alloc_pd(&self) -> Result<crate::qp::Pd> {
        Ok(crate::qp::Pd { ctx: self.clone(), pd: DrvPd::new(&self.shared.hca)? })
    }

    /// `ibv_get_async_event` (non-blocking): the next port, CQ, QP, SRQ or device event. A
    /// device that died gives its fatal event (`INTERNAL_ERROR`, `IBV_EVENT_DEVICE_FATAL`)
    /// once, after the events queued before it, and then the device's error.
    pub fn get_async_event(&self) -> Result<Option<AsyncEvent>> {
        let hca = &self.shared.hca;
        let next = || {
            hca.next_event().map(|e| AsyncEvent { event_type: e.event_type, object: e.object, sub_type: e.sub_type })
        };
        match hca.process_events() {
            Ok(()) => Ok(next()),
            // A dead device's events, its fatal event last, come before its error.
            Err(e) if hca.is_fatal() => next().map(Some).ok_or_else(|| e.into()),
            Err(e) => Err(e.into()),
        }
    }

    /// The async event file descriptor, open while held: readable when an event is queued
    /// (it can also wake once with none: look again after clearing it).
    pub fn async_fd(&self) -> Option<Arc<std::os::fd::OwnedFd>> {
        self.shared.hca.async_event_fd()
    }
}

/// The IB width and per-lane speed (`IBV_WIDTH_*`, `IBV_SPEED_*`) a RoCE port reports for the
/// Ethernet link mode it operates in, as Linux's mlx5_ib translates them (the extended link
/// modes when the device reports them, else the legacy ones); (0, 0) when down or unknown.
fn ib_width_speed(oper: umlx_driver::port::EthProtoOper) -> (u8, u8) {
    use umlx_hwdesc::enums::{EthLinkMode as L, ExtEthLinkMode as X};
    const W1: u8 = 1;
    const W2: u8 = 16;
    const W4: u8 = 2;
    const W8: u8 = 4;
    const SDR: u8 = 1;
    const DDR: u8 = 2;
    const QDR: u8 = 4;
    const FDR: u8 = 16;
    const EDR: u8 = 32;
    const HDR: u8 = 64;
    const NDR: u8 = 128;
    let top = |bits: u32| (bits != 0).then(|| (31 - bits.leading_zeros()) as u8);
    if let Some(bit) = top(oper.extended) {
        return match X(bit) {
            X::SGMII_100M | X::BASE_1000_X_SGMII => (W1, SDR),
            X::BASE_5G_R => (W1, DDR),
            X::XFI_XAUI_1_10G => (W1, QDR),
            X::XLAUI_4_XLPPI_4_40G => (W4, QDR),
            X::AUI_1_25G_CR_KR => (W1, EDR),
            X::AUI_2_LAUI_2_50G_CR2_KR2 => (W2, EDR),
            X::AUI_1_LAUI_1_50G_CR_KR => (W1, HDR),
            X::CAUI_4_100G_CR4_KR4 => (W4, EDR),
            X::AUI_2_100G_CR2_KR2 => (W2, HDR),
            X::AUI_1_100G_CR_KR => (W1, NDR),
            X::AUI_4_200G_CR4_KR4 => (W4, HDR),
            X::AUI_2_200G_CR2_KR2 => (W2, NDR),
            X::AUI_8_400G => (W8, HDR),
            X::AUI_4_400G_CR4_KR4 => (W4, NDR),
            X::AUI_8_800G_CR8_KR8 => (W8, NDR),
            _ => (0, 0),
        };
    }
    match top(oper.legacy).map(L) {
        Some(L::SGMII_100M | L::BASE_1000_CX_SGMII | L::BASE_1000_KX | L::BASE_100_TX | L::BASE_1000_T) => (W1, SDR),
        Some(
            L::BASE_10G_T
            | L::BASE_10G_CX4
            | L::BASE_10G_KX4
            | L::BASE_10G_KR
            | L::BASE_10G_CR
            | L::BASE_10G_SR
            | L::BASE_10G_ER,
        ) => (W1, QDR),
        Some(L::BASE_25G_CR | L::BASE_25G_KR | L::BASE_25G_SR) => (W1, EDR),
        Some(L::BASE_40G_CR4 | L::BASE_40G_KR4 | L::BASE_40G_SR4 | L::BASE_40G_LR4) => (W4, QDR),
        Some(L::BASE_50G_CR2 | L::BASE_50G_KR2 | L::BASE_50G_SR2) => (W1, HDR),
        Some(L::BASE_56G_R4) => (W4, FDR),
        Some(L::BASE_100G_CR4 | L::BASE_100G_SR4 | L::BASE_100G_KR4 | L::BASE_100G_LR4) => (W4, EDR),
        _ => (0, 0),
    }
}
