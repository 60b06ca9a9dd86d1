//! Opening the device a tool names with `-d`: `sim` (the default: a software ConnectX embedded
//! in this process) or `pci:0000:3b:00.0` (an adapter bound to vfio-pci).
//!
//! With `-d sim` and no `--wire`, two processes on one machine reach each other with no
//! configuration: the first one binds UDP 127.0.0.1:47901 and sends to :47902, the second one
//! (finding :47901 taken) binds :47902 and sends to :47901. They get addresses 10.77.0.1 and
//! 10.77.0.2 and find each other's MAC with ARP on that wire. `--wire udp:LOCAL,PEER` names the
//! endpoints instead (for a VM or a second machine), `--pcap FILE` records every frame.

use std::net::{IpAddr, SocketAddr};
use umlx_sim::{SimConfig, SimDevice};
use umlx_verbs::{Context, SimBackend, VfioBackend};

/// The device a tool opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceArg {
    /// The embedded software ConnectX.
    Sim,
    /// A PCI function bound to vfio-pci.
    Pci(String),
}

/// Parses `-d` values: `sim`, `sim0`, `pci:<addr>`, `mlx5_<addr>` or a bare PCI address.
pub fn parse_device(s: &str) -> Result<DeviceArg, String> {
    match s {
        "sim" | "sim0" => Ok(DeviceArg::Sim),
        _ => {
            let addr = s.strip_prefix("pci:").or_else(|| s.strip_prefix("mlx5_")).unwrap_or(s);
            if addr.contains(':') && addr.contains('.') {
                Ok(DeviceArg::Pci(addr.to_string()))
            } else {
                Err(format!("unknown device `{s}`: use `sim` or `pci:0000:3b:00.0`"))
            }
        }
    }
}

/// Where the embedded sim's port is connected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum WireArg {
    /// Loopback UDP, endpoints chosen automatically (see the module docs).
    #[default]
    Auto,
    /// Loopback or remote UDP with explicit endpoints.
    Udp(SocketAddr, SocketAddr),
}

/// Parses `--wire udp:LOCAL,PEER`.
pub fn parse_wire(s: &str) -> Result<WireArg, String> {
    let rest = s.strip_prefix("udp:").ok_or_else(|| format!("--wire {s}: expected udp:LOCAL,PEER"))?;
    let (l, p) = rest.split_once(',').ok_or_else(|| format!("--wire {s}: expected udp:LOCAL,PEER"))?;
    let l: SocketAddr = l.parse().map_err(|e| format!("--wire local address {l}: {e}"))?;
    let p: SocketAddr = p.parse().map_err(|e| format!("--wire peer address {p}: {e}"))?;
    Ok(WireArg::Udp(l, p))
}

/// Device options common to every tool.
#[derive(Clone, Debug)]
pub struct DeviceOpts {
    /// `-d`.
    pub device: DeviceArg,
    /// `--wire` (sim only).
    pub wire: WireArg,
    /// `--pcap` (sim only).
    pub pcap: Option<String>,
    /// `--ip` addresses of the port (a VFIO function has no netdev; for the sim they override
    /// the automatic 10.77.0.N).
    pub ips: Vec<IpAddr>,
    /// `--index` of the sim (MAC and default IP); automatic with the auto wire.
    pub sim_index: Option<u8>,
}

impl Default for DeviceOpts {
    fn default() -> Self {
        DeviceOpts { device: DeviceArg::Sim, wire: WireArg::Auto, pcap: None, ips: Vec::new(), sim_index: None }
    }
}

impl DeviceOpts {
    /// Takes the device options out of `args` (leaving the rest).
    pub fn take(args: &mut Vec<String>) -> Result<DeviceOpts, String> {
        let mut o = DeviceOpts::default();
        let mut i = 0;
        while i < args.len() {
            let val = |i: usize| args.get(i + 1).cloned().ok_or_else(|| format!("{} needs a value", args[i]));
            match args[i].as_str() {
                "-d" | "--ib-dev" | "--device" => {
                    o.device = parse_device(&val(i)?)?;
                    args.drain(i..i + 2);
                }
                "--wire" => {
                    o.wire = parse_wire(&val(i)?)?;
                    args.drain(i..i + 2);
                }
                "--pcap" => {
                    o.pcap = Some(val(i)?);
                    args.drain(i..i + 2);
                }
                "--ip" => {
                    let v = val(i)?;
                    o.ips.push(v.parse().map_err(|e| format!("--ip {v}: {e}"))?);
                    args.drain(i..i + 2);
                }
                "--index" => {
                    let v = val(i)?;
                    o.sim_index = Some(v.parse().map_err(|e| format!("--index {v}: {e}"))?);
                    args.drain(i..i + 2);
                }
                _ => i += 1,
            }
        }
        Ok(o)
    }
}

/// An opened device of either kind.
pub enum AnyContext {
    /// The software ConnectX.
    Sim(Context<SimBackend>),
    /// A real adapter.
    Pci(Context<VfioBackend>),
}

/// Runs `$body` with `$ctx` bound to the concrete context (monomorphized per backend).
#[macro_export]
macro_rules! with_ctx {
    ($any:expr, $ctx:ident => $body:expr) => {
        match $any {
            $crate::device::AnyContext::Sim($ctx) => $body,
            $crate::device::AnyContext::Pci($ctx) => $body,
        }
    };
}

/// Creates a sim device numbered `index` with `ips` (default 10.77.0.(index+1)).
pub fn sim_device(index: u8, ips: &[IpAddr]) -> (SimDevice, Vec<IpAddr>) {
    let mut cfg = SimConfig::numbered(index);
    if !ips.is_empty() {
        cfg.ips = ips.to_vec();
    }
    let ips = cfg.ips.clone();
    (SimDevice::new(cfg), ips)
}

/// Opens the device `o` names.
pub fn open(o: &DeviceOpts) -> Result<AnyContext, String> {
    match &o.device {
        DeviceArg::Pci(pci) => Context::open_pci(pci, o.ips.clone()).map(AnyContext::Pci).map_err(|e| e.to_string()),
        DeviceArg::Sim => {
            let (dev, ips) = match &o.wire {
                WireArg::Udp(local, peer) => {
                    let (dev, ips) = sim_device(o.sim_index.unwrap_or(0), &o.ips);
                    dev.port().connect_udp(*local, *peer).map_err(|e| format!("--wire: binding {local}: {e}"))?;
                    (dev, ips)
                }
                WireArg::Auto => {
                    let mut found = None;
                    for n in 1u16..=2 {
                        let (dev, ips) = sim_device(o.sim_index.unwrap_or((n - 1) as u8), &o.ips);
                        let local = SocketAddr::from(([127, 0, 0, 1], 47900 + n));
                        let peer = SocketAddr::from(([127, 0, 0, 1], 47900 + (3 - n)));
                        if dev.port().connect_udp(local, peer).is_ok() {
                            found = Some((dev, ips));
                            break;
                        }
                    }
                    found.ok_or("both loopback wire ports (UDP 127.0.0.1:47901 and :47902) are taken: give --wire udp:LOCAL,PEER")?
                }
            };
            if let Some(p) = &o.pcap {
                dev.port().set_pcap(p).map_err(|e| format!("--pcap {p}: {e}"))?;
            }
            let ctx = Context::attach_sim(dev, "0", ips).map_err(|e| e.to_string())?;
            ctx.use_sim_arp();
            Ok(AnyContext::Sim(ctx))
        }
    }
}
