//! Opening the device a tool names with `-d`: `sim` (the default: a software ConnectX embedded
//! in this process) or `pci:0000:3b:00.0` (an adapter bound to vfio-pci).
//!
//! With `-d sim` and no `--wire`, processes on one machine reach each other with no
//! configuration: each joins the automatic loopback LAN (`umlx_verbs::simwire`), binding the
//! first free UDP port from 127.0.0.1:47901 (up to 64 processes), gets the address 10.77.0.N+1
//! of its member number N, and finds its peers' MACs with ARP on that LAN. `--wire udp:LOCAL,PEER` names the
//! endpoints instead (for a VM or a second machine), `--pcap FILE` records every frame.
//!
//! [`DeviceOpts`] holds these options (`-d/--ib-dev/--device`, `--wire`, `--pcap`, `--ip`,
//! `--index`) as one clap `Args` struct each tool flattens into its own. A tool given no GID index
//! uses `Context::default_gid` on RoCE (and prints [`auto_gid_line`]), so that the processes
//! reach each other with no option at all.

use clap::Args;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use umlx_verbs::simwire::{SimWire, SimWireOptions};
use umlx_verbs::{Context, Gid};

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

/// Device options common to every tool (flattened into each subcommand's options).
#[derive(Args, Clone, Debug, Default)]
pub struct DeviceOpts {
    /// `-d`: `None` is the default, the embedded sim.
    #[arg(
        short = 'd',
        long = "ib-dev",
        visible_alias = "device",
        value_name = "DEV",
        value_parser = parse_device,
        help = "Device: sim (default, an embedded software ConnectX) or pci:0000:3b:00.0"
    )]
    pub device: Option<DeviceArg>,
    /// `--wire` (sim only).
    #[arg(
        long,
        value_name = "udp:LOCAL,PEER",
        value_parser = parse_wire,
        help_heading = "umlx options",
        help = "The sim's UDP wire (default: the automatic loopback LAN)"
    )]
    pub wire: Option<WireArg>,
    /// `--pcap` (sim only).
    #[arg(long, value_name = "FILE", help_heading = "umlx options", help = "Record the sim's frames in a pcap file")]
    pub pcap: Option<String>,
    /// `--ip` addresses of the port (a VFIO function has no netdev; for the sim they override
    /// the automatic 10.77.0.N).
    #[arg(
        long = "ip",
        value_name = "ADDR",
        help_heading = "umlx options",
        help = "An IP address of the port, repeatable (sim default: 10.77.0.N)"
    )]
    pub ips: Vec<IpAddr>,
    /// `--index` of the sim (MAC and default IP); automatic with the auto wire.
    #[arg(
        long = "index",
        value_name = "N",
        help_heading = "umlx options",
        help = "The sim's number: MAC 02:00:5e:10:00:N, IP 10.77.0.N+1"
    )]
    pub sim_index: Option<u8>,
}

impl DeviceOpts {
    /// The device `-d` names (the sim when it was not given).
    pub fn device(&self) -> DeviceArg {
        self.device.clone().unwrap_or(DeviceArg::Sim)
    }

    /// The wire `--wire` names (the automatic loopback LAN when it was not given).
    pub fn wire(&self) -> WireArg {
        self.wire.clone().unwrap_or_default()
    }

    /// Refuses sim-only options with a PCI device.
    pub fn check(&self) -> Result<(), String> {
        if self.device() != DeviceArg::Sim && (self.wire.is_some() || self.pcap.is_some() || self.sim_index.is_some()) {
            return Err("--wire, --pcap and --index are for -d sim".into());
        }
        Ok(())
    }
}

/// Creates a sim device numbered `index` with `ips` (default 10.77.0.(index+1)).
pub use umlx_verbs::simwire::sim_device;

/// Opens the device `o` names.
pub fn open(o: &DeviceOpts) -> Result<Context, String> {
    o.check()?;
    match &o.device() {
        DeviceArg::Pci(pci) => Context::open_pci(pci, o.ips.clone()).map_err(|e| e.to_string()),
        DeviceArg::Sim => {
            let wire = match o.wire() {
                WireArg::Auto => SimWire::Auto,
                WireArg::Udp(local, peer) => SimWire::Udp(local, peer),
            };
            let opts = SimWireOptions {
                wire,
                index: o.sim_index,
                ips: o.ips.clone(),
                pcap: o.pcap.clone(),
                ..Default::default()
            };
            Context::open_sim_on_wire(&opts).map_err(|e| e.to_string())
        }
    }
}

/// The line a tool prints about a GID it chose itself; `flag` names the option that overrides.
pub fn auto_gid_line(index: u32, gid: &Gid, flag: &str) -> String {
    format!("local GID index {index} (RoCEv2 {}), chosen automatically; {flag} overrides", Ipv6Addr::from(gid.0))
}
