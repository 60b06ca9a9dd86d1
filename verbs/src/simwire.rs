//! Opening a software ConnectX on a UDP wire, the way the umlx tools and the `libibverbs.so.1`
//! shim both do it, so that two unmodified programs on one machine reach each other with no
//! configuration.
//!
//! [`SimWire::Auto`]: every process joins one loopback LAN ([`umlx_sim::port::LoopbackLan`])
//! of [`AUTO_WIRE_MEMBERS`] UDP ports from 127.0.0.1:47901: the first process binds :47901,
//! the next one :47902, and so on. Each numbers its sim by the member it became (N: MAC
//! 02:00:5e:10:00:N, IP 10.77.0.N+1), and peers find each other's MAC with ARP on that LAN, so
//! any number of processes (up to the member count) reach each other with no configuration and
//! no daemon. [`SimWire::Udp`] names both endpoints of a point-to-point wire instead (a VM, a
//! second machine).

use crate::{Context, Error, ErrorKind, Result, SimBackend};
use std::net::{IpAddr, SocketAddr};
use umlx_sim::port::LoopbackLan;
use umlx_sim::{SimConfig, SimDevice};

/// The first UDP port of the automatic loopback LAN (member 0).
pub const AUTO_WIRE_BASE_PORT: u16 = 47901;

/// How many processes the automatic loopback LAN holds (UDP ports 47901..=47964; sims 0..=63,
/// IPs 10.77.0.1..=10.77.0.64).
pub const AUTO_WIRE_MEMBERS: u16 = 64;

/// Where a software ConnectX's port is connected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SimWire {
    /// The automatic loopback LAN (see the module docs).
    #[default]
    Auto,
    /// UDP between two named endpoints (local, peer).
    Udp(SocketAddr, SocketAddr),
}

impl SimWire {
    /// Parses `udp:LOCAL,PEER` (`auto` is [`SimWire::Auto`]).
    pub fn parse(s: &str) -> std::result::Result<SimWire, String> {
        if s == "auto" {
            return Ok(SimWire::Auto);
        }
        let rest = s.strip_prefix("udp:").ok_or_else(|| format!("wire `{s}`: expected udp:LOCAL,PEER"))?;
        let (l, p) = rest.split_once(',').ok_or_else(|| format!("wire `{s}`: expected udp:LOCAL,PEER"))?;
        let l: SocketAddr = l.parse().map_err(|e| format!("wire local address `{l}`: {e}"))?;
        let p: SocketAddr = p.parse().map_err(|e| format!("wire peer address `{p}`: {e}"))?;
        Ok(SimWire::Udp(l, p))
    }

    /// The sim number a process opening the automatic LAN now would get: its first free member
    /// (a look, not a reservation); the last member when all are taken (the open then fails).
    pub fn auto_slot_free_now() -> u8 {
        LoopbackLan::first_free(AUTO_WIRE_BASE_PORT, AUTO_WIRE_MEMBERS).unwrap_or(AUTO_WIRE_MEMBERS - 1) as u8
    }
}

/// How to open a software ConnectX on a wire ([`Context::open_sim_on_wire`]).
#[derive(Clone, Debug, Default)]
pub struct SimWireOptions {
    /// The wire.
    pub wire: SimWire,
    /// The sim's number (MAC 02:00:5e:10:00:N, IP 10.77.0.N+1); `None`: 0, or the automatic
    /// slot with [`SimWire::Auto`].
    pub index: Option<u8>,
    /// The port's IP addresses (empty: 10.77.0.N+1).
    pub ips: Vec<IpAddr>,
    /// Record every frame in this pcap file.
    pub pcap: Option<String>,
    /// Data-path doorbells are plain stores the device never sees
    /// ([`SimBackend::with_plain_doorbells`]): posted send WRs are not executed.
    /// For measuring the driver's own data-path cost, as `umlx bench datapath` does.
    pub plain_doorbells: bool,
}

/// A sim numbered `index` with `ips` (default 10.77.0.(index+1)); fails when the operating
/// system refuses the sim its engine thread.
pub fn sim_device(index: u8, ips: &[IpAddr]) -> std::io::Result<(SimDevice, Vec<IpAddr>)> {
    let mut cfg = SimConfig::numbered(index);
    if !ips.is_empty() {
        cfg.ips = ips.to_vec();
    }
    let ips = cfg.ips.clone();
    Ok((SimDevice::try_new(cfg)?, ips))
}

/// The operating system refused a new sim its engine thread (the error says so).
fn sim_refused(e: std::io::Error) -> Error {
    Error::new(ErrorKind::NoDevice, e.to_string())
}

fn wire_error(message: String) -> Error {
    Error::new(ErrorKind::NoDevice, message)
}

impl Context {
    /// Opens a new software ConnectX whose port is connected to `o.wire`, with neighbours
    /// resolved by ARP on that wire ([`Context::use_sim_arp`]).
    pub fn open_sim_on_wire(o: &SimWireOptions) -> Result<Context> {
        let (dev, ips) = match &o.wire {
            SimWire::Udp(local, peer) => {
                let (dev, ips) = sim_device(o.index.unwrap_or(0), &o.ips).map_err(sim_refused)?;
                dev.port().connect_udp(*local, *peer).map_err(|e| wire_error(format!("wire: binding {local}: {e}")))?;
                (dev, ips)
            }
            SimWire::Auto => {
                let lan = LoopbackLan::join(AUTO_WIRE_BASE_PORT, AUTO_WIRE_MEMBERS).map_err(|e| {
                    wire_error(format!("wire: joining the loopback LAN: {e}; name the wire (udp:LOCAL,PEER)"))
                })?;
                let (dev, ips) = sim_device(o.index.unwrap_or(lan.member() as u8), &o.ips).map_err(sim_refused)?;
                dev.port().connect_lan(lan).map_err(|e| wire_error(format!("wire: the loopback LAN: {e}")))?;
                (dev, ips)
            }
        };
        if let Some(p) = &o.pcap {
            dev.port().set_pcap(p).map_err(|e| wire_error(format!("pcap {p}: {e}")))?;
        }
        let ctx = if o.plain_doorbells {
            Context::open(SimBackend::attach_with_plain_doorbells("0", dev)?, ips)?
        } else {
            Context::attach_sim(dev, "0", ips)?
        };
        ctx.use_sim_arp()?;
        if !o.plain_doorbells {
            ctx.poll_sim_wire()?;
        }
        Ok(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wires_parse() {
        assert_eq!(SimWire::parse("auto"), Ok(SimWire::Auto));
        let w = SimWire::parse("udp:127.0.0.1:5000,127.0.0.1:5001").unwrap();
        assert_eq!(w, SimWire::Udp("127.0.0.1:5000".parse().unwrap(), "127.0.0.1:5001".parse().unwrap()));
        assert!(SimWire::parse("tcp:1").is_err());
        assert!(SimWire::parse("udp:127.0.0.1:5000").is_err());
    }
}
