//! Driver binding through sysfs (`--rebind`): the driver's own errors for a device bound to
//! another driver, to none, or in a group that is not viable; then the device and its group
//! on vfio-pci.

use super::*;

fn write_sysfs(path: &Path, value: &str) -> Result<(), String> {
    fs::write(path, value).map_err(|e| format!("writing `{value}` to {}: {e}", path.display()))
}

fn unbind(pci: &str) -> Result<(), String> {
    if driver(pci).is_some() {
        write_sysfs(&dev_dir(pci).join("driver/unbind"), pci)?;
    }
    match wait_until(Duration::from_secs(2), || driver(pci).is_none()) {
        Some(_) => Ok(()),
        None => Err(format!("{pci} is still bound to {} after unbind", driver(pci).unwrap_or_default())),
    }
}

/// Binds `pci` to vfio-pci (driver_override, unbind, drivers_probe) and waits for its group node.
fn bind_vfio(pci: &str) -> Result<(), String> {
    if driver(pci).as_deref() == Some("vfio-pci") {
        return Ok(());
    }
    if !Path::new(SYS).join("bus/pci/drivers/vfio-pci").exists() {
        return Err("vfio-pci is not loaded (modprobe vfio-pci)".into());
    }
    write_sysfs(&dev_dir(pci).join("driver_override"), "vfio-pci")?;
    unbind(pci)?;
    write_sysfs(&Path::new(SYS).join("bus/pci/drivers_probe"), pci)?;
    if wait_until(Duration::from_secs(2), || driver(pci).as_deref() == Some("vfio-pci")).is_none() {
        return Err(format!("{pci} did not bind to vfio-pci (driver now: {:?})", driver(pci)));
    }
    let group = sysfs::iommu_group_of(Path::new(SYS), pci).ok_or(format!("{pci} has no IOMMU group"))?;
    let node = PathBuf::from(format!("/dev/vfio/{group}"));
    wait_until(Duration::from_secs(2), || node.exists()).ok_or(format!("{} did not appear", node.display()))?;
    Ok(())
}

/// With `--rebind`: the driver's errors for a device on another driver, on no driver and in a
/// non-viable group, then everything bound to vfio-pci.
pub(super) fn binding_checks(r: &mut Report, pci: &str) -> Result<(), String> {
    let start = driver(pci);
    info(format!("{pci} starts bound to {}", start.as_deref().unwrap_or("no driver")));
    match start.as_deref() {
        Some(d) if !sysfs::is_vfio_driver(d) => {
            r.expect_err("other-driver-error", VfioBackend::open_any(pci), &format!("bound to {d}, not to vfio-pci"));
        }
        _ => r.skip("other-driver-error", "the device does not start on a host driver (edu has none)"),
    }
    unbind(pci)?;
    r.expect_err("not-bound-error", VfioBackend::open_any(pci), "not bound to any driver");
    bind_vfio(pci)?;
    r.check("bind-vfio", driver(pci).as_deref() == Some("vfio-pci"), format!("{pci} bound to vfio-pci"));

    let group = sysfs::iommu_group_of(Path::new(SYS), pci).ok_or(format!("{pci} has no IOMMU group"))?;
    let members = sysfs::group_devices(Path::new(SYS), group).map_err(|e| e.to_string())?;
    let peers: Vec<(String, String)> = members
        .iter()
        .filter(|m| m.as_str() != pci)
        .filter_map(|m| driver(m).filter(|d| !sysfs::is_vfio_driver(d)).map(|d| (m.clone(), d)))
        .filter(|(_, d)| d != "pci-stub" && d != "pcieport")
        .collect();
    info(format!("IOMMU group {group}: {}", members.join(", ")));
    if peers.is_empty() {
        r.skip(
            "non-viable-error",
            format!(
                "IOMMU group {group} has no other device on a host driver (the VM topology gives it its own group)"
            ),
        );
        return Ok(());
    }
    let names: Vec<String> = peers.iter().map(|(p, d)| format!("{p} ({d})")).collect();
    info(format!("group peers on host drivers: {}", names.join(", ")));
    r.expect_err("non-viable-error", VfioBackend::open_any(pci), "is not viable");
    match vfio::kernel_group_status(group) {
        Ok(st) => r.check(
            "non-viable-kernel",
            !st.viable,
            format!("kernel VFIO_GROUP_GET_STATUS flags {:#x}: viable={}", st.flags, st.viable),
        ),
        Err(e) => r.check("non-viable-kernel", false, e),
    };
    // A peer on no driver is as good as one on vfio-pci: the sysfs rule and the kernel agree?
    for (p, _) in &peers {
        unbind(p)?;
    }
    let rule = sysfs::check_device(Path::new(SYS), pci, sysfs::IdPolicy::Any);
    match vfio::kernel_group_status(group) {
        Ok(st) => r.check(
            "viable-unbound-peer",
            st.viable && rule.is_ok(),
            format!(
                "peers unbound (no driver): driver's sysfs check {}, kernel flags {:#x}: viable={}",
                match &rule {
                    Ok(_) => "passes".to_string(),
                    Err(e) => format!("fails: {e}"),
                },
                st.flags,
                st.viable
            ),
        ),
        Err(e) => r.check("viable-unbound-peer", false, e),
    };
    for (p, _) in &peers {
        bind_vfio(p)?;
    }
    match vfio::kernel_group_status(group) {
        Ok(st) => r.check(
            "viable-after-bind",
            st.viable,
            format!("peers bound to vfio-pci; kernel flags {:#x}: viable={}", st.flags, st.viable),
        ),
        Err(e) => r.check("viable-after-bind", false, e),
    };
    Ok(())
}
