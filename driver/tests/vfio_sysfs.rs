//! The sysfs checks of vfio::sysfs on fake sysfs and /dev trees built in a temporary directory:
//! each set-up mistake gives its own error, with the fix.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use umlx_driver::Error;
use umlx_driver::vfio::sysfs::{
    self, IdPolicy, MLX5_VENDOR_ID, check_device, check_group_node, normalize_pci, viable_member,
};

/// A fake root with `sys/` and `dev/`, removed on drop.
struct Fake {
    root: PathBuf,
}

static SEQ: AtomicU32 = AtomicU32::new(0);

impl Fake {
    fn new() -> Fake {
        let root = std::env::temp_dir().join(format!(
            "umlx-vfio-sysfs-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
        fs::create_dir_all(root.join("sys/bus/pci/drivers")).unwrap();
        fs::create_dir_all(root.join("sys/kernel/iommu_groups")).unwrap();
        fs::create_dir_all(root.join("dev")).unwrap();
        Fake { root }
    }

    fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }

    fn dev(&self) -> PathBuf {
        self.root.join("dev")
    }

    /// Adds a device like the kernel shows it: a directory under devices/ with vendor, device
    /// and class files, a `driver` link into bus/pci/drivers, an `iommu_group` link, and the
    /// group's devices/ entry linking back.
    fn device(&self, pci: &str, vendor: u16, device: u16, class: u32, driver: Option<&str>, group: Option<u32>) {
        let dir = self.sys().join("bus/pci/devices").join(pci);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
        fs::write(dir.join("device"), format!("0x{device:04x}\n")).unwrap();
        fs::write(dir.join("class"), format!("0x{class:06x}\n")).unwrap();
        if let Some(d) = driver {
            let ddir = self.sys().join("bus/pci/drivers").join(d);
            fs::create_dir_all(&ddir).unwrap();
            symlink(&ddir, dir.join("driver")).unwrap();
        }
        if let Some(g) = group {
            let gdir = self.sys().join("kernel/iommu_groups").join(g.to_string());
            fs::create_dir_all(gdir.join("devices")).unwrap();
            symlink(&gdir, dir.join("iommu_group")).unwrap();
            symlink(&dir, gdir.join("devices").join(pci)).unwrap();
        }
    }

    fn group_node(&self, group: u32) {
        fs::create_dir_all(self.dev().join("vfio")).unwrap();
        fs::write(self.dev().join("vfio").join(group.to_string()), b"").unwrap();
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

const CX5: &str = "0000:3b:00.0";
const CX5_PORT2: &str = "0000:3b:00.1";
const ETH_CLASS: u32 = 0x020000;

/// The problem and hint of a Device error (panics on any other result).
fn device_err<T: std::fmt::Debug>(r: Result<T, Error>) -> (String, String) {
    match r {
        Err(Error::Device { device, problem, hint }) => {
            assert!(device.starts_with("pci:"), "{device}");
            (problem, hint)
        }
        other => panic!("expected Error::Device, got {other:?}"),
    }
}

#[test]
fn a_good_device_passes() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("vfio-pci"), Some(7));
    f.group_node(7);
    let d = check_device(&f.sys(), CX5, IdPolicy::Mlx5).unwrap();
    assert_eq!(d.pci, CX5);
    assert_eq!((d.vendor, d.device), (0x15b3, 0x1017));
    assert_eq!(d.driver, "vfio-pci");
    assert_eq!(d.iommu_group, 7);
    assert_eq!(check_group_node(&f.dev(), 7, CX5).unwrap(), f.dev().join("vfio/7"));
    // Short address form and upper case are accepted.
    assert_eq!(check_device(&f.sys(), "3B:00.0", IdPolicy::Mlx5).unwrap().pci, CX5);
}

#[test]
fn missing_device() {
    let f = Fake::new();
    let (problem, hint) = device_err(check_device(&f.sys(), "0000:af:00.0", IdPolicy::Mlx5));
    assert!(problem.contains("does not exist"), "{problem}");
    assert!(hint.contains("lspci -D"), "{hint}");
}

#[test]
fn wrong_vendor_names_the_ids_found() {
    let f = Fake::new();
    f.device("0000:00:03.0", 0x8086, 0x10d3, ETH_CLASS, Some("vfio-pci"), Some(3));
    let (problem, _) = device_err(check_device(&f.sys(), "0000:00:03.0", IdPolicy::Mlx5));
    assert!(problem.contains("8086:10d3"), "{problem}");
    assert!(problem.contains("not a ConnectX"), "{problem}");
    assert!(problem.contains("1017") && problem.contains("15b3"), "{problem}");
    // The VM self-test may open it anyway.
    let d = check_device(&f.sys(), "0000:00:03.0", IdPolicy::Any).unwrap();
    assert_eq!((d.vendor, d.device), (0x8086, 0x10d3));
}

#[test]
fn mellanox_but_not_mlx5() {
    let f = Fake::new();
    // A Mellanox device ID outside the mlx5 table (ConnectX-3, mlx4).
    f.device(CX5, MLX5_VENDOR_ID, 0x1007, ETH_CLASS, Some("vfio-pci"), Some(7));
    let (problem, _) = device_err(check_device(&f.sys(), CX5, IdPolicy::Mlx5));
    assert!(problem.contains("15b3:1007"), "{problem}");
}

#[test]
fn iommu_off() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x101d, ETH_CLASS, Some("mlx5_core"), None);
    let (problem, hint) = device_err(check_device(&f.sys(), CX5, IdPolicy::Mlx5));
    assert!(problem.contains("IOMMU is off"), "{problem}");
    assert!(hint.contains("intel_iommu=on") && hint.contains("amd_iommu=on"), "{hint}");
}

#[test]
fn not_bound() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, None, Some(7));
    let (problem, hint) = device_err(check_device(&f.sys(), CX5, IdPolicy::Mlx5));
    assert!(problem.contains("not bound to any driver"), "{problem}");
    assert!(hint.contains(&format!("umlx bind {CX5}")), "{hint}");
}

#[test]
fn wrong_driver() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("mlx5_core"), Some(7));
    let (problem, hint) = device_err(check_device(&f.sys(), CX5, IdPolicy::Mlx5));
    assert!(problem.contains("bound to mlx5_core"), "{problem}");
    assert!(hint.contains(&format!("umlx bind {CX5}")), "{hint}");
}

#[test]
fn vfio_variant_driver_is_accepted() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x101e, ETH_CLASS, Some("mlx5_vfio_pci"), Some(9));
    assert_eq!(check_device(&f.sys(), CX5, IdPolicy::Mlx5).unwrap().driver, "mlx5_vfio_pci");
}

#[test]
fn non_viable_group() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("vfio-pci"), Some(7));
    f.device(CX5_PORT2, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("mlx5_core"), Some(7));
    let (problem, hint) = device_err(check_device(&f.sys(), CX5, IdPolicy::Mlx5));
    assert!(problem.contains("IOMMU group 7 is not viable"), "{problem}");
    assert!(problem.contains(&format!("{CX5_PORT2} (bound to mlx5_core)")), "{problem}");
    assert!(hint.contains(&format!("umlx bind {CX5_PORT2}")), "{hint}");
}

#[test]
fn viable_group_members() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("vfio-pci"), Some(7));
    f.device(CX5_PORT2, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("vfio-pci"), Some(7));
    f.device("0000:3b:00.2", MLX5_VENDOR_ID, 0x1017, ETH_CLASS, None, Some(7));
    f.device("0000:3b:00.3", 0x1234, 0x5678, 0xff0000, Some("pci-stub"), Some(7));
    f.device("0000:3a:00.0", 0x8086, 0x2030, 0x060400, Some("pcieport"), Some(7));
    f.device("0000:3a:01.0", 0x8086, 0x2031, 0x060400, Some("shpchp"), Some(7));
    let d = check_device(&f.sys(), CX5, IdPolicy::Mlx5).unwrap();
    assert_eq!(d.iommu_group, 7);
    let members = sysfs::group_devices(&f.sys(), 7).unwrap();
    assert_eq!(members.len(), 6);
    assert!(members.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn viability_rule() {
    assert!(viable_member(None, None));
    assert!(viable_member(Some("vfio-pci"), Some(0x020000)));
    assert!(viable_member(Some("pci-stub"), None));
    assert!(viable_member(Some("pcieport"), None));
    assert!(viable_member(Some("shpchp"), Some(0x060400)));
    assert!(!viable_member(Some("mlx5_core"), Some(0x020000)));
    assert!(!viable_member(Some("nvme"), None));
}

#[test]
fn group_node_missing() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("vfio-pci"), Some(7));
    check_device(&f.sys(), CX5, IdPolicy::Mlx5).unwrap();
    let (problem, hint) = device_err(check_group_node(&f.dev(), 7, CX5));
    assert!(problem.contains("vfio/7") && problem.contains("does not exist"), "{problem}");
    assert!(hint.contains("modprobe vfio-pci"), "{hint}");
}

#[test]
fn malformed_addresses() {
    let f = Fake::new();
    for bad in ["", "xyz", "0000:3b:00", "0000:3b:00.8", "0000:3b:20.0", "00:3b:00.0", "0000:3b:00.0:1", "0000:zz:00.0"]
    {
        assert!(
            matches!(check_device(&f.sys(), bad, IdPolicy::Any), Err(Error::InvalidArgument(_))),
            "`{bad}` must be refused"
        );
    }
    assert_eq!(normalize_pci("3b:1f.7").unwrap(), "0000:3b:1f.7");
    assert_eq!(normalize_pci("ABCD:EF:01.2").unwrap(), "abcd:ef:01.2");
}

#[test]
fn device_error_display_has_problem_and_fix() {
    let f = Fake::new();
    f.device(CX5, MLX5_VENDOR_ID, 0x1017, ETH_CLASS, Some("mlx5_core"), Some(7));
    let msg = check_device(&f.sys(), CX5, IdPolicy::Mlx5).unwrap_err().to_string();
    assert!(msg.starts_with(&format!("pci:{CX5}: ")), "{msg}");
    assert!(msg.contains("(fix: run `umlx bind"), "{msg}");
    let _ = Path::new("/");
}
