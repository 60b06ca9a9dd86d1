//! Opening devices on a machine without VFIO: the sysfs checks answer before /dev/vfio is
//! touched. (The real open is exercised by the VM self-test.)

use umlx_driver::Error;
use umlx_driver::vfio::VfioBackend;

#[test]
fn nonexistent_device_does_not_exist() {
    // Domain ffff does not exist on any ordinary machine.
    match VfioBackend::open("ffff:ff:1f.7") {
        Err(Error::Device { device, problem, hint }) => {
            assert_eq!(device, "pci:ffff:ff:1f.7");
            assert!(problem.contains("does not exist"), "{problem}");
            assert!(hint.contains("lspci -D"), "{hint}");
        }
        other => panic!("expected a does-not-exist error, got {other:?}"),
    }
    assert!(matches!(VfioBackend::open_any("ffff:ff:1f.7"), Err(Error::Device { .. })));
}

#[test]
fn malformed_address() {
    assert!(matches!(VfioBackend::open("not-an-address"), Err(Error::InvalidArgument(_))));
}

#[test]
#[cfg_attr(not(umlx_non_mlx5_pci), ignore = "this machine has no PCI device other than a ConnectX to be refused")]
fn a_real_non_mlx5_device_is_refused_with_its_ids() {
    // Whatever this machine has on its PCI bus that is not a ConnectX.
    let entries = std::fs::read_dir("/sys/bus/pci/devices").expect("the build found /sys/bus/pci/devices");
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let vendor = std::fs::read_to_string(e.path().join("vendor")).unwrap_or_default();
        if vendor.trim() == "0x15b3" {
            continue;
        }
        let err = VfioBackend::open(&name).unwrap_err().to_string();
        assert!(err.contains("not a ConnectX"), "{err}");
        // open_any passes the ID check; without vfio-pci it must still fail with a Device error.
        if !std::path::Path::new("/dev/vfio/vfio").exists() {
            assert!(matches!(VfioBackend::open_any(&name), Err(Error::Device { .. })));
        }
        return;
    }
    panic!("no PCI device other than a ConnectX on this machine (the build found one)");
}
