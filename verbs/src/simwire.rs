//! Opening a software ConnectX on a UDP wire, the way the umlx tools and the `libibverbs.so.1`
//! shim both do it, so that two unmodified programs on one machine reach each other with no
//! configuration.
//!
//! [`SimWire::Auto`]: the first process binds UDP 127.0.0.1:47901 and sends to :47902; the
//! second one (finding :47901 taken) binds :47902 and sends to :47901. Each numbers its sim by
//! the port it got (index 0 or 1: MAC 02:00:5e:10:00:N, IP 10.77.0.N+1), and peers find each
//! other's MAC with ARP on that wire. [`SimWire::Udp`] names both endpoints instead (a VM, a
//! second machine).

use crate::{Context, Error, ErrorKind, Result, SimBackend};
use std::net::{IpAddr, SocketAddr};
use umlx_sim::{SimConfig, SimDevice};

/// The first of the two automatic loopback wire ports (the other is the next one).
pub const AUTO_WIRE_BASE_PORT: u16 = 47901;

/// Where a software ConnectX's port is connected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum SimWire {
    /// Loopback UDP, endpoints chosen automatically (see the module docs).
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

    /// The loopback endpoints (local, peer) of automatic slot `n` (0 or 1).
    pub fn auto_endpoints(n: u8) -> (SocketAddr, SocketAddr) {
        let base = AUTO_WIRE_BASE_PORT;
        let local = SocketAddr::from(([127, 0, 0, 1], base + n as u16));
        let peer = SocketAddr::from(([127, 0, 0, 1], base + 1 - n as u16));
        (local, peer)
    }

    /// The automatic slot a process opening the sim now would get: 0 when UDP
    /// 127.0.0.1:47901 is free, 1 otherwise (a look, not a reservation).
    pub fn auto_slot_free_now() -> u8 {
        let (local, _) = SimWire::auto_endpoints(0);
        if std::net::UdpSocket::bind(local).is_ok() { 0 } else { 1 }
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

/// A sim numbered `index` with `ips` (default 10.77.0.(index+1)).
pub fn sim_device(index: u8, ips: &[IpAddr]) -> (SimDevice, Vec<IpAddr>) {
    let mut cfg = SimConfig::numbered(index);
    if !ips.is_empty() {
        cfg.ips = ips.to_vec();
    }
    let ips = cfg.ips.clone();
    (SimDevice::new(cfg), ips)
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
                let (dev, ips) = sim_device(o.index.unwrap_or(0), &o.ips);
                dev.port().connect_udp(*local, *peer).map_err(|e| wire_error(format!("wire: binding {local}: {e}")))?;
                (dev, ips)
            }
            SimWire::Auto => {
                let mut found = None;
                for n in 0..2u8 {
                    let (dev, ips) = sim_device(o.index.unwrap_or(n), &o.ips);
                    let (local, peer) = SimWire::auto_endpoints(n);
                    if dev.port().connect_udp(local, peer).is_ok() {
                        found = Some((dev, ips));
                        break;
                    }
                }
                found.ok_or_else(|| {
                    wire_error(format!(
                        "both loopback wire ports (UDP 127.0.0.1:{} and :{}) are taken: name the wire (udp:LOCAL,PEER)",
                        AUTO_WIRE_BASE_PORT,
                        AUTO_WIRE_BASE_PORT + 1
                    ))
                })?
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
        Ok(ctx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wires_parse_and_auto_slots_face_each_other() {
        assert_eq!(SimWire::parse("auto"), Ok(SimWire::Auto));
        let w = SimWire::parse("udp:127.0.0.1:5000,127.0.0.1:5001").unwrap();
        assert_eq!(w, SimWire::Udp("127.0.0.1:5000".parse().unwrap(), "127.0.0.1:5001".parse().unwrap()));
        assert!(SimWire::parse("tcp:1").is_err());
        assert!(SimWire::parse("udp:127.0.0.1:5000").is_err());
        let (l0, p0) = SimWire::auto_endpoints(0);
        let (l1, p1) = SimWire::auto_endpoints(1);
        assert_eq!((l0, p0), (p1, l1));
        assert_eq!(l0.port(), 47901);
    }
}
