//! Checks made through sysfs before anything under /dev/vfio is touched, each failing with an
//! error that says what is wrong and how to fix it.
//!
//! Every function takes the sysfs root (`/sys` on a real system) and, where needed, the device
//! root (`/dev`), so the checks can be tested on a fake tree in a temporary directory.
//!
//! The checks, in order ([`check_device`]):
//! 1. the address is well formed (`dddd:bb:dd.f`; `bb:dd.f` means domain 0000);
//! 2. the device exists (`<sys>/bus/pci/devices/<pci>`);
//! 3. it is a ConnectX (vendor 0x15b3 and a device ID of [`MLX5_DEVICE_IDS`]), unless the
//!    caller allows any device ([`IdPolicy::Any`], for the VM self-test);
//! 4. it has an IOMMU group (`iommu_group` link; none means the IOMMU is off, and binding to
//!    vfio-pci cannot work, so this comes before the driver check);
//! 5. it is bound to vfio-pci (or a vfio-pci variant driver such as `mlx5_vfio_pci`);
//! 6. its IOMMU group is viable: every other device in the group is bound to a vfio driver,
//!    to `pci-stub`, or to no driver, or is a bridge (any driver, e.g. `pcieport`), as the
//!    kernel's VFIO viability rule requires;
//! 7. `<dev>/vfio/<group>` exists and can be opened read-write ([`check_group_node`]).

use crate::{Error, Result};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// PCI vendor ID of Mellanox/NVIDIA networking.
pub const MLX5_VENDOR_ID: u16 = 0x15b3;

/// Device IDs of the mlx5 family (rdma-core's mlx5 table; contract doc section 10.1).
pub const MLX5_DEVICE_IDS: &[(u16, &str)] = &[
    (0x1011, "Connect-IB"),
    (0x1012, "Connect-IB VF"),
    (0x1013, "ConnectX-4"),
    (0x1014, "ConnectX-4 VF"),
    (0x1015, "ConnectX-4 Lx"),
    (0x1016, "ConnectX-4 Lx VF"),
    (0x1017, "ConnectX-5"),
    (0x1018, "ConnectX-5 VF"),
    (0x1019, "ConnectX-5 Ex"),
    (0x101a, "ConnectX-5 Ex VF"),
    (0x101b, "ConnectX-6"),
    (0x101c, "ConnectX-6 VF"),
    (0x101d, "ConnectX-6 Dx"),
    (0x101e, "ConnectX VF (mlx5Gen)"),
    (0x101f, "ConnectX-6 Lx"),
    (0x1021, "ConnectX-7"),
    (0x1023, "ConnectX-8"),
    (0x1025, "ConnectX-9"),
    (0xa2d2, "BlueField ConnectX-5"),
    (0xa2d3, "BlueField ConnectX-5 VF"),
    (0xa2d6, "BlueField-2 ConnectX-6 Dx"),
    (0xa2dc, "BlueField-3 ConnectX-7"),
    (0xa2df, "BlueField-4 ConnectX-8"),
];

/// The name of a ConnectX device ID, if it is one.
pub fn mlx5_device_name(vendor: u16, device: u16) -> Option<&'static str> {
    if vendor != MLX5_VENDOR_ID {
        return None;
    }
    MLX5_DEVICE_IDS.iter().find(|(id, _)| *id == device).map(|(_, n)| *n)
}

/// Which devices [`check_device`] accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdPolicy {
    /// Only ConnectX (mlx5) devices.
    Mlx5,
    /// Any PCI device (the VM self-test drives QEMU's `edu` 1234:11e8 and `e1000e` 8086:10d3).
    Any,
}

/// What sysfs says about a device that passed the checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PciDevice {
    /// The normalized address, `dddd:bb:dd.f`.
    pub pci: String,
    /// PCI vendor ID.
    pub vendor: u16,
    /// PCI device ID.
    pub device: u16,
    /// The bound driver (`vfio-pci` or a variant).
    pub driver: String,
    /// The IOMMU group number.
    pub iommu_group: u32,
}

fn device_error(pci: &str, problem: impl Into<String>, hint: impl Into<String>) -> Error {
    Error::Device { device: format!("pci:{pci}"), problem: problem.into(), hint: hint.into() }
}

/// Normalizes a PCI address: `dddd:bb:dd.f` (hex, case-insensitive) or `bb:dd.f` (domain 0).
/// Returns the lower-case, full form.
pub fn normalize_pci(pci: &str) -> Result<String> {
    let bad = || {
        Error::InvalidArgument(format!(
            "`{pci}` is not a PCI address: expected domain:bus:device.function such as 0000:3b:00.0 (see `lspci -D`)"
        ))
    };
    let full = match pci.matches(':').count() {
        1 => format!("0000:{pci}"),
        2 => pci.to_string(),
        _ => return Err(bad()),
    };
    let full = full.to_ascii_lowercase();
    let (rest, func) = full.rsplit_once('.').ok_or_else(bad)?;
    let parts: Vec<&str> = rest.split(':').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    let well_formed = parts.len() == 3
        && hex(parts[0], 4)
        && hex(parts[1], 2)
        && hex(parts[2], 2)
        && u8::from_str_radix(parts[2], 16).is_ok_and(|d| d <= 0x1f)
        && func.len() == 1
        && matches!(func.as_bytes()[0], b'0'..=b'7');
    if !well_formed {
        return Err(bad());
    }
    Ok(full)
}

/// `<sys>/bus/pci/devices/<pci>`.
pub fn device_dir(sysfs: &Path, pci: &str) -> PathBuf {
    sysfs.join("bus/pci/devices").join(pci)
}

/// The last component of the symlink `path` points to, if `path` is a symlink.
fn link_name(path: &Path) -> Option<String> {
    let target = fs::read_link(path).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

/// Reads a sysfs hex attribute such as `0x15b3`.
fn read_hex(path: &Path) -> io::Result<u32> {
    let s = fs::read_to_string(path)?;
    let t = s.trim();
    let t = t.strip_prefix("0x").unwrap_or(t);
    u32::from_str_radix(t, 16)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, format!("`{}` is not a hex number", s.trim())))
}

/// The vendor and device IDs of a device.
pub fn read_ids(sysfs: &Path, pci: &str) -> Result<(u16, u16)> {
    let dir = device_dir(sysfs, pci);
    let read = |attr: &str| -> Result<u16> {
        let p = dir.join(attr);
        read_hex(&p).map(|v| v as u16).map_err(|source| Error::Os { op: format!("reading {}", p.display()), source })
    };
    Ok((read("vendor")?, read("device")?))
}

/// The driver a device is bound to (`None`: no driver).
pub fn driver_of(sysfs: &Path, pci: &str) -> Option<String> {
    link_name(&device_dir(sysfs, pci).join("driver"))
}

/// The IOMMU group of a device (`None`: no IOMMU group, the IOMMU is off).
pub fn iommu_group_of(sysfs: &Path, pci: &str) -> Option<u32> {
    link_name(&device_dir(sysfs, pci).join("iommu_group"))?.parse().ok()
}

/// The devices (PCI addresses) in IOMMU group `group`, sorted.
pub fn group_devices(sysfs: &Path, group: u32) -> Result<Vec<String>> {
    let dir = sysfs.join("kernel/iommu_groups").join(group.to_string()).join("devices");
    let entries =
        fs::read_dir(&dir).map_err(|source| Error::Os { op: format!("listing {}", dir.display()), source })?;
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|source| Error::Os { op: format!("listing {}", dir.display()), source })?;
        out.push(e.file_name().to_string_lossy().into_owned());
    }
    out.sort();
    Ok(out)
}

/// Whether `driver` is vfio-pci or a vfio-pci variant driver (`mlx5_vfio_pci`, ...).
pub fn is_vfio_driver(driver: &str) -> bool {
    driver == "vfio-pci" || driver.ends_with("vfio_pci") || driver.ends_with("vfio-pci")
}

/// Whether a device with `driver` (and PCI `class`, if known) may share an IOMMU group with a
/// device used through VFIO: no driver, a vfio driver, `pci-stub`, or a bridge (header type
/// other than normal, so any driver, e.g. `pcieport`).
pub fn viable_member(driver: Option<&str>, class: Option<u32>) -> bool {
    match driver {
        None => true,
        Some(d) if is_vfio_driver(d) || d == "pci-stub" || d == "pcieport" => true,
        Some(_) => {
            // Class code 0x06 (bridge), subclass 0x04 PCI-PCI, 0x07 CardBus, 0x09 semi-transparent.
            matches!(class.map(|c| c >> 8), Some(0x0604 | 0x0607 | 0x0609))
        }
    }
}

/// Checks that every device of `group` other than `pci` is viable (see [`viable_member`]).
pub fn check_group_viable(sysfs: &Path, group: u32, pci: &str) -> Result<()> {
    let members = group_devices(sysfs, group)?;
    let group_dir = sysfs.join("kernel/iommu_groups").join(group.to_string()).join("devices");
    let mut offenders = Vec::new();
    for m in members.iter().filter(|m| m.as_str() != pci) {
        let dir = group_dir.join(m);
        let driver = link_name(&dir.join("driver"));
        let class = read_hex(&dir.join("class")).ok();
        if !viable_member(driver.as_deref(), class) {
            offenders.push((m.clone(), driver.unwrap_or_default()));
        }
    }
    if offenders.is_empty() {
        return Ok(());
    }
    let list: Vec<String> = offenders.iter().map(|(d, drv)| format!("{d} (bound to {drv})")).collect();
    let binds: Vec<String> = offenders.iter().map(|(d, _)| format!("`umlx bind {d}`")).collect();
    Err(device_error(
        pci,
        format!(
            "IOMMU group {group} is not viable: {} must be bound to vfio-pci or to no driver, as every device in the group is reachable through VFIO",
            list.join(", ")
        ),
        format!(
            "run {}, or unbind them (echo <addr> > /sys/bus/pci/devices/<addr>/driver/unbind); if they are functions of another card, move the card or enable ACS",
            binds.join(" and ")
        ),
    ))
}

/// Runs checks 1 to 6 of the module documentation on `pci` and returns what sysfs says about it.
pub fn check_device(sysfs: &Path, pci: &str, policy: IdPolicy) -> Result<PciDevice> {
    let pci = normalize_pci(pci)?;
    let dir = device_dir(sysfs, &pci);
    if !dir.exists() {
        return Err(device_error(
            &pci,
            format!("PCI device {pci} does not exist ({} is missing)", dir.display()),
            "list the PCI devices with `lspci -D` (ConnectX: `lspci -D -d 15b3:`) and pass the full address",
        ));
    }

    let (vendor, device) = read_ids(sysfs, &pci)?;
    if policy == IdPolicy::Mlx5 && mlx5_device_name(vendor, device).is_none() {
        let known: Vec<String> = MLX5_DEVICE_IDS.iter().map(|(id, _)| format!("{id:04x}")).collect();
        return Err(device_error(
            &pci,
            format!(
                "device is {vendor:04x}:{device:04x} (vendor:device), not a ConnectX (mlx5) adapter: expected vendor 15b3 and a device ID among {}",
                known.join(", ")
            ),
            "pass the address of a ConnectX function (`lspci -D -d 15b3:`)",
        ));
    }

    let Some(iommu_group) = iommu_group_of(sysfs, &pci) else {
        return Err(device_error(
            &pci,
            "the device has no IOMMU group: the IOMMU is off",
            "boot with intel_iommu=on iommu=pt (Intel) or amd_iommu=on (AMD) on the kernel command line, and enable VT-d/AMD-Vi in the firmware setup",
        ));
    };

    let driver = match driver_of(sysfs, &pci) {
        Some(d) if is_vfio_driver(&d) => d,
        Some(d) => {
            return Err(device_error(
                &pci,
                format!("the device is bound to {d}, not to vfio-pci"),
                format!("run `umlx bind {pci}`"),
            ));
        }
        None => {
            return Err(device_error(
                &pci,
                "the device is not bound to any driver (vfio-pci needed)",
                format!("run `umlx bind {pci}`"),
            ));
        }
    };

    check_group_viable(sysfs, iommu_group, &pci)?;

    Ok(PciDevice { pci, vendor, device, driver, iommu_group })
}

/// Check 7: `<dev>/vfio/<group>` exists and can be opened read-write (it is opened and closed
/// at once). Returns its path.
pub fn check_group_node(dev: &Path, group: u32, pci: &str) -> Result<PathBuf> {
    let node = dev.join("vfio").join(group.to_string());
    if !node.exists() {
        return Err(device_error(
            pci,
            format!("{} does not exist although the device is bound to vfio-pci", node.display()),
            "load the VFIO modules (`modprobe vfio-pci vfio_iommu_type1`); a /dev/vfio/noiommu-N node means VFIO runs without an IOMMU, which umlx does not support",
        ));
    }
    match fs::OpenOptions::new().read(true).write(true).open(&node) {
        Ok(_) => Ok(node),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(device_error(
            pci,
            format!(
                "{} is busy: the IOMMU group is already open (another process, or this one, holds it)",
                node.display()
            ),
            "stop the other user of the device (another umlx, QEMU, DPDK) or close its first VfioBackend; `fuser -v` on the node names it",
        )),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => Err(device_error(
            pci,
            format!("no permission to open {}: {e}", node.display()),
            format!("run as root, or give your user the node (`chown $USER {}`)", node.display()),
        )),
        Err(e) => {
            Err(device_error(pci, format!("cannot open {}: {e}", node.display()), "check `dmesg` for VFIO messages"))
        }
    }
}
