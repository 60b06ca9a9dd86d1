//! Finds whether this machine has a PCI device that is not a ConnectX, for the test that opens
//! a real one and expects the refusal (`tests/vfio_open.rs`): without one, the test is compiled
//! as ignored with the reason, rather than passing without having checked anything.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(umlx_non_mlx5_pci)");
    // (No rerun-if-changed on /sys: cargo would walk sysfs, whose links loop. The script runs
    // again when the crate changes.)
    let found = std::fs::read_dir("/sys/bus/pci/devices").is_ok_and(|entries| {
        entries.flatten().any(|e| {
            std::fs::read_to_string(e.path().join("vendor")).is_ok_and(|v| !v.trim().is_empty() && v.trim() != "0x15b3")
        })
    });
    if found {
        println!("cargo::rustc-cfg=umlx_non_mlx5_pci");
    }
}
