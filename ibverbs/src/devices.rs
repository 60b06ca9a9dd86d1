//! Which devices `ibv_get_device_list` shows, from the environment.
//!
//! `UMLX_DEVICES` names them, comma-separated (a `sim:udp:` entry's own comma is part of it):
//! - `sim` (the default when the variable is unset or empty): an embedded software ConnectX
//!   on the automatic loopback LAN the umlx tools use, so unmodified programs on one machine
//!   reach each other (see `umlx_verbs::simwire`);
//! - `sim:udp:LOCAL,PEER`: a software ConnectX on a named UDP wire;
//! - `pci:0000:3b:00.0`: the ConnectX at that address, bound to vfio-pci.
//!
//! `UMLX_IP` (comma-separated addresses) gives the port's IP addresses, which become GIDs 1 and
//! on: needed for a PCI function (it has no netdev), optional for a sim (default 10.77.0.N+1).
//! `UMLX_SIM_INDEX` numbers a sim (MAC 02:00:5e:10:00:N, IP 10.77.0.N+1): on the automatic
//! wire the number follows from the port the process got; on a named wire it is 0 unless set,
//! so the two ends of one set different numbers. `UMLX_PCAP` records a sim's frames.
//! `UMLX_SIM_PLAIN_DOORBELLS=1` makes a sim's data-path doorbells plain stores the device never
//! sees (posted send WRs are not executed): for counting the library's own data-path
//! instructions, as `umlx bench datapath` does (`benches/c_abi.rs`).
//!
//! Names are stable: `umlx_simN` for the N-th sim entry, `mlx5_<pci address>` for adapters.

use std::net::IpAddr;
use umlx_verbs::simwire::SimWire;

/// What an entry of the device list opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSpec {
    /// A software ConnectX on a wire.
    Sim(SimWire),
    /// A PCI function bound to vfio-pci.
    Pci(String),
}

/// One entry of the device list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEntry {
    /// The name programs see (`ibv_get_device_name`, `-d`).
    pub name: String,
    /// What it opens.
    pub spec: DeviceSpec,
}

/// Splits `UMLX_DEVICES` into entries: a comma starts a new entry unless it is the one
/// between a `sim:udp:` entry's two endpoints.
fn split_entries(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in s.split(',').map(str::trim) {
        if let Some(last) = out.last_mut()
            && last.starts_with("sim:udp:")
            && !last.contains(',')
        {
            last.push(',');
            last.push_str(part);
            continue;
        }
        if !part.is_empty() {
            out.push(part.to_string());
        }
    }
    out
}

/// Parses one entry.
fn parse_entry(s: &str) -> Result<DeviceSpec, String> {
    if s == "sim" {
        return Ok(DeviceSpec::Sim(SimWire::Auto));
    }
    if let Some(wire) = s.strip_prefix("sim:") {
        return SimWire::parse(wire).map(DeviceSpec::Sim);
    }
    if let Some(addr) = s.strip_prefix("pci:") {
        let ok = addr.len() == 12
            && addr.as_bytes()[4] == b':'
            && addr.as_bytes()[7] == b':'
            && addr.as_bytes()[10] == b'.'
            && addr.chars().enumerate().all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit());
        if ok {
            return Ok(DeviceSpec::Pci(addr.to_ascii_lowercase()));
        }
        return Err(format!("`{s}`: expected pci:DDDD:BB:SS.F, e.g. pci:0000:3b:00.0"));
    }
    Err(format!("`{s}`: expected sim, sim:udp:LOCAL,PEER or pci:0000:3b:00.0"))
}

/// The device list `value` (the content of `UMLX_DEVICES`, `None` when unset) names, and the
/// problems with entries that were left out.
pub fn parse_devices(value: Option<&str>) -> (Vec<DeviceEntry>, Vec<String>) {
    let value = value.map(str::trim).filter(|v| !v.is_empty()).unwrap_or("sim");
    let (mut entries, mut problems) = (Vec::new(), Vec::new());
    let mut sims = 0;
    for e in split_entries(value) {
        match parse_entry(&e) {
            Ok(DeviceSpec::Sim(wire)) => {
                entries.push(DeviceEntry { name: format!("umlx_sim{sims}"), spec: DeviceSpec::Sim(wire) });
                sims += 1;
            }
            Ok(DeviceSpec::Pci(pci)) => {
                let name = format!("mlx5_{pci}");
                if entries.iter().any(|d: &DeviceEntry| d.name == name) {
                    problems.push(format!("`{e}`: listed twice"));
                } else {
                    entries.push(DeviceEntry { name, spec: DeviceSpec::Pci(pci) });
                }
            }
            Err(p) => problems.push(p),
        }
    }
    (entries, problems)
}

/// The addresses `UMLX_IP` names (`None` when unset).
pub fn parse_ips(value: Option<&str>) -> Result<Vec<IpAddr>, String> {
    let Some(v) = value else { return Ok(Vec::new()) };
    v.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<IpAddr>().map_err(|e| format!("UMLX_IP `{s}`: {e}")))
        .collect()
}

/// The sim number `UMLX_SIM_INDEX` names (`None` when unset).
pub fn parse_sim_index(value: Option<&str>) -> Result<Option<u8>, String> {
    match value.map(str::trim).filter(|v| !v.is_empty()) {
        None => Ok(None),
        Some(v) => v.parse::<u8>().map(Some).map_err(|e| format!("UMLX_SIM_INDEX `{v}`: {e} (0 to 255)")),
    }
}

/// Whether `UMLX_SIM_PLAIN_DOORBELLS` (its value, `None` when unset) asks for plain doorbells.
pub fn parse_plain_doorbells(value: Option<&str>) -> bool {
    value.map(str::trim).is_some_and(|v| !v.is_empty() && v != "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_one_sim_on_the_automatic_wire() {
        let (d, p) = parse_devices(None);
        assert!(p.is_empty());
        assert_eq!(d, vec![DeviceEntry { name: "umlx_sim0".into(), spec: DeviceSpec::Sim(SimWire::Auto) }]);
        assert_eq!(parse_devices(Some(" ")).0, d);
    }

    #[test]
    fn entries_keep_their_udp_commas_and_get_stable_names() {
        let (d, p) = parse_devices(Some("sim:udp:127.0.0.1:5000,127.0.0.1:5001, pci:0000:3B:00.0,sim"));
        assert!(p.is_empty(), "{p:?}");
        let names: Vec<&str> = d.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["umlx_sim0", "mlx5_0000:3b:00.0", "umlx_sim1"]);
        assert_eq!(
            d[0].spec,
            DeviceSpec::Sim(SimWire::Udp("127.0.0.1:5000".parse().unwrap(), "127.0.0.1:5001".parse().unwrap()))
        );
        assert_eq!(d[1].spec, DeviceSpec::Pci("0000:3b:00.0".into()));
    }

    #[test]
    fn bad_entries_are_reported_and_left_out() {
        let (d, p) = parse_devices(Some("pci:3b:00.0,mlx4_0,sim"));
        assert_eq!(d.len(), 1);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("pci:DDDD:BB:SS.F"), "{}", p[0]);
    }

    #[test]
    fn ips_parse() {
        assert_eq!(parse_ips(None), Ok(vec![]));
        assert_eq!(parse_ips(Some("10.0.0.1, fe80::1")).unwrap().len(), 2);
        assert!(parse_ips(Some("10.0.0.300")).is_err());
        assert_eq!(parse_sim_index(Some("1")), Ok(Some(1)));
        assert_eq!(parse_sim_index(None), Ok(None));
        assert!(parse_sim_index(Some("256")).is_err());
        assert!(parse_plain_doorbells(Some("1")));
        assert!(!parse_plain_doorbells(Some("0")));
        assert!(!parse_plain_doorbells(None));
    }
}
