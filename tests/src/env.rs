//! The environment a scenario runs in: two endpoints that reach each other over RoCEv2.
//!
//! - [`Env::sim`]: two software ConnectX adapters on a fresh in-process fabric
//!   ([`umlx_sim::fabric::Fabric`]), which can also lose frames on purpose ([`Env::fabric`]).
//! - [`Env::hardware`]: two real ConnectX functions bound to vfio-pci and cabled to each other,
//!   named by the environment ([`HardwareConfig::from_env`]).
//!
//! Each endpoint knows the other's MAC (a VFIO function has no kernel neighbour table), so
//! address vectors resolve without ARP.

use crate::kit::{Failure, Result};
use std::net::IpAddr;
use std::time::{Duration, Instant};
use umlx_sim::fabric::Fabric;
use umlx_sim::{SimConfig, SimDevice};
use umlx_verbs::*;

/// What the endpoints are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvKind {
    /// Two software ConnectX adapters on an in-process fabric.
    Sim,
    /// Two real adapters (or ports) cabled to each other.
    Hardware,
}

/// One endpoint: an open device and how the other endpoint addresses it.
pub struct Endpoint {
    /// The open device.
    pub ctx: Context,
    /// Its IP address (the RoCEv2 GID it is reached at).
    pub ip: IpAddr,
    /// The GID of `ip`.
    pub gid: Gid,
    /// The GID table index of `gid` (the source GID index of everything it sends).
    pub sgid_index: u8,
    /// The MAC address the other endpoint sends to.
    pub mac: [u8; 6],
    /// How the device list names it.
    pub device: DeviceKind,
}

impl Clone for Endpoint {
    fn clone(&self) -> Self {
        Endpoint {
            ctx: self.ctx.clone(),
            ip: self.ip,
            gid: self.gid,
            sgid_index: self.sgid_index,
            mac: self.mac,
            device: self.device.clone(),
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("device", &self.ctx.name()).field("ip", &self.ip).finish()
    }
}

impl Endpoint {
    fn new(ctx: Context, ip: IpAddr, device: DeviceKind, mac: Option<[u8; 6]>) -> Result<Endpoint> {
        let gid = Gid::from_ip(ip);
        let Some((index, _)) = ctx.gids().into_iter().find(|(_, g)| *g == gid) else {
            return Err(Failure::new(format!("{}: {ip} is not in the GID table {:?}", ctx.name(), ctx.gids())));
        };
        let sgid_index = u8::try_from(index).map_err(|_| Failure::new(format!("GID index {index} > 255")))?;
        let mac = mac.unwrap_or_else(|| ctx.mac());
        Ok(Endpoint { ctx, ip, gid, sgid_index, mac, device })
    }

    /// `name (ip)`, for messages.
    pub fn label(&self) -> String {
        format!("{} ({})", self.ctx.name(), self.ip)
    }
}

/// The per-scenario objects of one endpoint: a PD, a 256-entry CQ and a 256 KiB region with
/// every access right.
pub struct Side {
    /// The endpoint.
    pub ep: Endpoint,
    /// A protection domain.
    pub pd: Pd,
    /// A CQ of at least 256 entries, no completion channel.
    pub cq: Cq,
    /// [`SIDE_MR_LEN`] bytes, zeroed, registered with every access right.
    pub mr: Mr,
}

/// Length of [`Side::mr`].
pub const SIDE_MR_LEN: usize = 256 * 1024;

/// Two endpoints and what the environment can do.
pub struct Env {
    /// The first endpoint (the requester in most scenarios).
    pub a: Endpoint,
    /// The second endpoint.
    pub b: Endpoint,
    /// Sim or hardware.
    pub kind: EnvKind,
    /// How long to wait for something that must happen (a completion, an event).
    pub timeout: Duration,
    /// How long to watch for something that must not happen.
    pub quiet: Duration,
    fabric: Option<Fabric>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env").field("kind", &self.kind).field("a", &self.a).field("b", &self.b).finish()
    }
}

impl Env {
    /// An environment of two open devices: each learns the other's MAC, and both ports must be
    /// (or become, within 10 s) ACTIVE.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: EnvKind,
        a: Context,
        ip_a: IpAddr,
        device_a: DeviceKind,
        b: Context,
        ip_b: IpAddr,
        device_b: DeviceKind,
        b_mac: Option<[u8; 6]>,
    ) -> Result<Env> {
        let a = Endpoint::new(a, ip_a, device_a, None)?;
        let b = Endpoint::new(b, ip_b, device_b, b_mac)?;
        for ep in [&a, &b] {
            wait_port_active(&ep.ctx, Duration::from_secs(10))?;
        }
        a.ctx.add_neighbor(b.ip, b.mac);
        b.ctx.add_neighbor(a.ip, a.mac);
        let (timeout, quiet) = match kind {
            EnvKind::Sim => (Duration::from_secs(5), Duration::from_millis(30)),
            EnvKind::Hardware => (Duration::from_secs(10), Duration::from_millis(50)),
        };
        Ok(Env { a, b, kind, timeout, quiet, fabric: None })
    }

    /// The fabric between the endpoints, for fault injection: only the sim has one.
    pub fn fabric(&self) -> Option<&Fabric> {
        self.fabric.as_ref()
    }

    /// Fresh per-scenario objects on both endpoints.
    pub fn sides(&self) -> Result<(Side, Side)> {
        Ok((side(&self.a)?, side(&self.b)?))
    }
}

fn side(ep: &Endpoint) -> Result<Side> {
    let pd = ep.ctx.alloc_pd()?;
    let cq = ep.ctx.create_cq(256, None)?;
    let mr = pd.alloc_mr(SIDE_MR_LEN, crate::kit::all_access())?;
    Ok(Side { ep: ep.clone(), pd, cq, mr })
}

/// Waits until port 1 of `ctx` is ACTIVE.
pub fn wait_port_active(ctx: &Context, timeout: Duration) -> Result {
    let start = Instant::now();
    loop {
        let p = ctx.query_port(1)?;
        if p.state == PortState::Active {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(Failure::new(format!(
                "{}: port 1 is {} (physical state {}) after {timeout:?}: check the cable and the link partner",
                ctx.name(),
                p.state,
                p.phys_state
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Snapshot of the sim devices' bookkeeping: live objects and IOMMU faults of each device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimSnapshot {
    /// Live objects of A and B.
    pub objects: [umlx_sim::device::ObjectCounts; 2],
    /// IOMMU faults of A and B so far.
    pub iommu_faults: [u64; 2],
}

impl Env {
    /// Two software ConnectX adapters (10.77.0.2 and 10.77.0.3) on a fresh fabric without
    /// impairments.
    pub fn sim() -> Result<Env> {
        let fabric = Fabric::perfect();
        let open = |n: u8, name: &str| -> Result<(Context, IpAddr)> {
            let cfg = SimConfig::numbered(n);
            let ip = cfg.ips[0];
            let dev = SimDevice::new(cfg);
            fabric.attach(&dev.port());
            Ok((Context::attach_sim(dev, name, vec![ip])?, ip))
        };
        let (a, ip_a) = open(1, "a")?;
        let (b, ip_b) = open(2, "b")?;
        let mut env = Env::new(EnvKind::Sim, a, ip_a, DeviceKind::Sim, b, ip_b, DeviceKind::Sim, None)?;
        env.fabric = Some(fabric);
        Ok(env)
    }

    /// The devices' live objects and IOMMU faults (compare before and after a scenario: it
    /// must leave no object behind and cause no fault).
    /// `None` when either endpoint is not a software ConnectX.
    pub fn sim_snapshot(&self) -> Option<SimSnapshot> {
        let dev = |ep: &Endpoint| {
            let d = ep.ctx.sim_backend()?.device();
            Some((d.object_counts(), d.page_accounting().iommu_faults))
        };
        let (oa, fa) = dev(&self.a)?;
        let (ob, fb) = dev(&self.b)?;
        Some(SimSnapshot { objects: [oa, ob], iommu_faults: [fa, fb] })
    }
}

/// What the hardware run needs, from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HardwareConfig {
    /// `UMLX_PCI`: endpoint A's PCI function.
    pub pci: String,
    /// `UMLX_PCI_PEER`: endpoint B's PCI function, cabled to A.
    pub pci_peer: String,
    /// `UMLX_IP`: A's IP address.
    pub ip: IpAddr,
    /// `UMLX_IP_PEER`: B's IP address.
    pub ip_peer: IpAddr,
    /// `UMLX_PEER_MAC`: the MAC A sends to for B (default: B's port MAC).
    pub peer_mac: Option<[u8; 6]>,
}

/// What a hardware test prints when `UMLX_PCI` is not set.
pub const HARDWARE_HINT: &str = "set UMLX_PCI=0000:3b:00.0 UMLX_PCI_PEER=0000:3b:00.1 \
UMLX_IP=192.0.2.1 UMLX_IP_PEER=192.0.2.2 (optionally UMLX_PEER_MAC=aa:bb:cc:dd:ee:ff) to run on a real ConnectX: \
two ports cabled to each other, both bound to vfio-pci (`umlx bind <pci>`)";

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    if parts.len() != 6 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (m, p) in mac.iter_mut().zip(parts) {
        if p.len() != 2 {
            return None;
        }
        *m = u8::from_str_radix(p, 16).ok()?;
    }
    Some(mac)
}

impl HardwareConfig {
    /// Reads `UMLX_PCI`, `UMLX_PCI_PEER`, `UMLX_IP`, `UMLX_IP_PEER` and `UMLX_PEER_MAC`.
    /// `Ok(None)`: `UMLX_PCI` is not set (hardware tests skip). An error names what is missing
    /// or malformed.
    pub fn from_env() -> std::result::Result<Option<HardwareConfig>, String> {
        HardwareConfig::from_vars(|k| std::env::var(k).ok())
    }

    /// [`HardwareConfig::from_env`] with the variables looked up by `get`.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> std::result::Result<Option<HardwareConfig>, String> {
        let get = |k: &str| get(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let Some(pci) = get("UMLX_PCI") else { return Ok(None) };
        let need = |k: &str, what: &str| {
            get(k).ok_or_else(|| format!("UMLX_PCI is set but {k} is not: give {what}\n{HARDWARE_HINT}"))
        };
        let pci_peer = need("UMLX_PCI_PEER", "the PCI address of the port cabled to UMLX_PCI")?;
        let ip = |k: &str| -> std::result::Result<IpAddr, String> {
            let v = need(k, "the IP address of that port (a VFIO function has no netdev)")?;
            v.parse().map_err(|e| format!("{k}={v}: not an IP address: {e}"))
        };
        let (ip, ip_peer) = (ip("UMLX_IP")?, ip("UMLX_IP_PEER")?);
        if ip == ip_peer {
            return Err(format!("UMLX_IP and UMLX_IP_PEER are both {ip}: give each port its own address"));
        }
        if pci == pci_peer {
            return Err(format!("UMLX_PCI and UMLX_PCI_PEER are both {pci}: give two functions cabled to each other"));
        }
        let peer_mac = match get("UMLX_PEER_MAC") {
            Some(m) => Some(parse_mac(&m).ok_or_else(|| format!("UMLX_PEER_MAC={m}: expected aa:bb:cc:dd:ee:ff"))?),
            None => None,
        };
        Ok(Some(HardwareConfig { pci, pci_peer, ip, ip_peer, peer_mac }))
    }
}

impl Env {
    /// Opens both functions of `cfg` (each brought up by the driver) and waits for their links.
    pub fn hardware(cfg: &HardwareConfig) -> Result<Env> {
        let a = Context::open_pci(&cfg.pci, vec![cfg.ip])
            .map_err(|e| Failure::new(format!("opening UMLX_PCI={}: {e}", cfg.pci)))?;
        let b = Context::open_pci(&cfg.pci_peer, vec![cfg.ip_peer])
            .map_err(|e| Failure::new(format!("opening UMLX_PCI_PEER={}: {e}", cfg.pci_peer)))?;
        let pci = |c: &Context| {
            DeviceKind::Pci(c.hca().backend().as_vfio().map_or_else(String::new, |v| v.pci().to_string()))
        };
        let (da, db) = (pci(&a), pci(&b));
        Env::new(EnvKind::Hardware, a, cfg.ip, da, b, cfg.ip_peer, db, cfg.peer_mac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(v: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = v.iter().map(|(k, x)| (k.to_string(), x.to_string())).collect();
        move |k| v.iter().find(|(n, _)| n == k).map(|(_, x)| x.clone())
    }

    #[test]
    fn no_pci_means_skip() {
        assert_eq!(HardwareConfig::from_vars(vars(&[])), Ok(None));
        assert_eq!(HardwareConfig::from_vars(vars(&[("UMLX_PCI", " ")])), Ok(None));
        assert!(HARDWARE_HINT.contains("UMLX_PCI=") && HARDWARE_HINT.contains("UMLX_PCI_PEER="));
    }

    #[test]
    fn full_config() {
        let c = HardwareConfig::from_vars(vars(&[
            ("UMLX_PCI", "0000:3b:00.0"),
            ("UMLX_PCI_PEER", "0000:3b:00.1"),
            ("UMLX_IP", "192.0.2.1"),
            ("UMLX_IP_PEER", "192.0.2.2"),
            ("UMLX_PEER_MAC", "0c:42:a1:00:00:02"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.pci_peer, "0000:3b:00.1");
        assert_eq!(c.ip_peer, "192.0.2.2".parse::<IpAddr>().unwrap());
        assert_eq!(c.peer_mac, Some([0x0c, 0x42, 0xa1, 0, 0, 2]));
    }

    #[test]
    fn missing_or_bad_values_are_named() {
        let e = HardwareConfig::from_vars(vars(&[("UMLX_PCI", "0000:3b:00.0")])).unwrap_err();
        assert!(e.contains("UMLX_PCI_PEER"), "{e}");
        let e = HardwareConfig::from_vars(vars(&[
            ("UMLX_PCI", "0000:3b:00.0"),
            ("UMLX_PCI_PEER", "0000:3b:00.1"),
            ("UMLX_IP", "192.0.2.1"),
        ]))
        .unwrap_err();
        assert!(e.contains("UMLX_IP_PEER"), "{e}");
        let e = HardwareConfig::from_vars(vars(&[
            ("UMLX_PCI", "0000:3b:00.0"),
            ("UMLX_PCI_PEER", "0000:3b:00.1"),
            ("UMLX_IP", "not-an-ip"),
            ("UMLX_IP_PEER", "192.0.2.2"),
        ]))
        .unwrap_err();
        assert!(e.contains("UMLX_IP=not-an-ip"), "{e}");
        let e = HardwareConfig::from_vars(vars(&[
            ("UMLX_PCI", "0000:3b:00.0"),
            ("UMLX_PCI_PEER", "0000:3b:00.1"),
            ("UMLX_IP", "192.0.2.1"),
            ("UMLX_IP_PEER", "192.0.2.2"),
            ("UMLX_PEER_MAC", "0c:42"),
        ]))
        .unwrap_err();
        assert!(e.contains("UMLX_PEER_MAC"), "{e}");
    }
}
