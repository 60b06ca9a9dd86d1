//! `umlx bind` / `umlx unbind` on fake sysfs and proc trees in a temporary directory: every
//! refusal names each problem with its fix and leaves the tree exactly as it was; a successful
//! plan lists the exact writes, and applying it makes exactly those.

#![forbid(unsafe_code)]

#[allow(dead_code)]
#[path = "../src/bind.rs"]
mod bind;

use bind::{Action, Plan, Roots, apply, plan_bind, plan_unbind};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

const CX6: &str = "0000:3b:00.0";
const CX6_PORT2: &str = "0000:3b:00.1";
const ETH: u32 = 0x020000;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A fake root with `sys/` and `proc/`, removed on drop.
struct Fake {
    root: PathBuf,
}

impl Fake {
    /// A system where everything is in order for a bind: root, huge pages, unlimited memlock,
    /// vfio-pci loaded.
    fn new() -> Fake {
        let root = std::env::temp_dir().join(format!(
            "umlx-bind-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = fs::remove_dir_all(&root);
        for d in ["sys/bus/pci/devices", "sys/bus/pci/drivers", "sys/kernel/iommu_groups", "proc/self"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        fs::write(root.join("sys/bus/pci/drivers_probe"), "").unwrap();
        let f = Fake { root };
        f.driver("vfio-pci");
        f.status(0, "0000000000000000");
        f.limits("unlimited");
        f.meminfo(1024);
        f
    }

    fn roots(&self) -> Roots {
        Roots { sys: self.root.join("sys"), proc: self.root.join("proc") }
    }

    fn sys(&self) -> PathBuf {
        self.root.join("sys")
    }

    fn driver(&self, name: &str) -> PathBuf {
        let d = self.sys().join("bus/pci/drivers").join(name);
        fs::create_dir_all(&d).unwrap();
        for attr in ["bind", "unbind"] {
            if !d.join(attr).exists() {
                fs::write(d.join(attr), "").unwrap();
            }
        }
        d
    }

    fn no_vfio_module(&self) {
        fs::remove_dir_all(self.sys().join("bus/pci/drivers/vfio-pci")).unwrap();
    }

    /// A device as the kernel shows it: IDs, class, driver_override, driver link, IOMMU group.
    fn device(&self, pci: &str, vendor: u16, device: u16, class: u32, driver: Option<&str>, group: Option<u32>) {
        let dir = self.sys().join("bus/pci/devices").join(pci);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
        fs::write(dir.join("device"), format!("0x{device:04x}\n")).unwrap();
        fs::write(dir.join("class"), format!("0x{class:06x}\n")).unwrap();
        fs::write(dir.join("driver_override"), "(null)\n").unwrap();
        if let Some(d) = driver {
            symlink(self.driver(d), dir.join("driver")).unwrap();
        }
        if let Some(g) = group {
            let gdir = self.sys().join("kernel/iommu_groups").join(g.to_string());
            fs::create_dir_all(gdir.join("devices")).unwrap();
            symlink(&gdir, dir.join("iommu_group")).unwrap();
            symlink(&dir, gdir.join("devices").join(pci)).unwrap();
        }
    }

    fn status(&self, euid: u32, cap_eff: &str) {
        let s = format!("Name:\tumlx\nUid:\t{euid}\t{euid}\t{euid}\t{euid}\nCapEff:\t{cap_eff}\n");
        fs::write(self.root.join("proc/self/status"), s).unwrap();
    }

    fn limits(&self, memlock: &str) {
        let s = format!(
            "Limit                     Soft Limit           Hard Limit           Units     \n\
             Max open files            1024                 4096                 files     \n\
             Max locked memory         {memlock:<20} {memlock:<20} bytes     \n"
        );
        fs::write(self.root.join("proc/self/limits"), s).unwrap();
    }

    fn meminfo(&self, huge: u64) {
        let s = format!("MemTotal:       24000000 kB\nHugePages_Total:    {huge}\nHugePages_Free:     {huge}\n");
        fs::write(self.root.join("proc/meminfo"), s).unwrap();
    }

    /// Process `pid` holding `/dev/vfio/<group>` open.
    fn holder(&self, pid: u32, comm: &str, group: u32) {
        let p = self.root.join("proc").join(pid.to_string());
        fs::create_dir_all(p.join("fd")).unwrap();
        fs::write(p.join("comm"), format!("{comm}\n")).unwrap();
        symlink(format!("/dev/vfio/{group}"), p.join("fd/7")).unwrap();
        symlink("/dev/null", p.join("fd/0")).unwrap();
    }

    fn dev(&self, pci: &str) -> PathBuf {
        self.sys().join("bus/pci/devices").join(pci)
    }

    /// Every file (with its contents) and symlink (with its target) under the root.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        fn walk(p: &Path, out: &mut BTreeMap<PathBuf, String>) {
            let meta = fs::symlink_metadata(p).unwrap();
            if meta.file_type().is_symlink() {
                out.insert(p.to_path_buf(), format!("-> {}", fs::read_link(p).unwrap().display()));
            } else if meta.is_dir() {
                out.insert(p.to_path_buf(), "dir".into());
                for e in fs::read_dir(p).unwrap() {
                    walk(&e.unwrap().path(), out);
                }
            } else {
                out.insert(p.to_path_buf(), fs::read_to_string(p).unwrap());
            }
        }
        let mut m = BTreeMap::new();
        walk(&self.root, &mut m);
        m
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// The usual case: a ConnectX-6 Dx port on mlx5_core, alone in IOMMU group 7.
fn cx6_on_mlx5_core() -> Fake {
    let f = Fake::new();
    f.device(CX6, 0x15b3, 0x101d, ETH, Some("mlx5_core"), Some(7));
    f
}

fn write(path: PathBuf, value: &str) -> Action {
    Action::Write { path, value: value.into() }
}

/// Plans a bind that must be refused; checks the tree is untouched and returns the problems as
/// `what (fix: ...)` strings.
fn refused_bind(f: &Fake, pci: &str, force: bool) -> Vec<String> {
    let before = f.snapshot();
    let r = plan_bind(&f.roots(), pci, force).expect_err("the bind must be refused");
    assert_eq!(f.snapshot(), before, "a refused bind changed the tree");
    assert!(!r.problems.is_empty());
    let text = r.to_string();
    assert!(text.contains("refused, nothing was changed"), "{text}");
    for p in &r.problems {
        assert!(!p.fix.is_empty(), "problem without a fix: {p:?}");
        assert!(text.contains(&p.what) && text.contains(&p.fix), "{text}");
    }
    r.problems.iter().map(|p| p.to_string()).collect()
}

fn ok_bind(f: &Fake, pci: &str, force: bool) -> Plan {
    let before = f.snapshot();
    let plan = plan_bind(&f.roots(), pci, force).expect("the bind must be possible");
    assert_eq!(f.snapshot(), before, "planning changed the tree");
    plan
}

#[test]
fn plan_lists_the_exact_writes_and_apply_makes_them() {
    let f = cx6_on_mlx5_core();
    let plan = ok_bind(&f, CX6, false);
    assert_eq!(plan.pci, CX6);
    assert_eq!(plan.device, "ConnectX-6 Dx (15b3:101d)");
    assert_eq!(plan.driver.as_deref(), Some("mlx5_core"));
    assert_eq!(plan.iommu_group, Some(7));
    assert_eq!(plan.group_members, vec![(CX6.to_string(), Some("mlx5_core".to_string()))]);
    assert!(plan.warnings.is_empty(), "{:?}", plan.warnings);
    let sys = f.sys();
    assert_eq!(
        plan.actions,
        vec![
            write(f.dev(CX6).join("driver_override"), "vfio-pci"),
            write(sys.join("bus/pci/drivers/mlx5_core/unbind"), CX6),
            write(sys.join("bus/pci/drivers_probe"), CX6),
        ]
    );
    let shown: Vec<String> = plan.actions.iter().map(|a| a.to_string()).collect();
    assert_eq!(shown[0], format!("echo vfio-pci > {}", f.dev(CX6).join("driver_override").display()));

    let before = f.snapshot();
    apply(&plan, &|m: &str| Err(format!("modprobe {m} must not run"))).unwrap();
    let after = f.snapshot();
    let changed: Vec<(&PathBuf, &String)> = after.iter().filter(|(k, v)| before.get(*k) != Some(*v)).collect();
    assert_eq!(
        changed,
        vec![
            (&sys.join("bus/pci/devices").join(CX6).join("driver_override"), &"vfio-pci".to_string()),
            (&sys.join("bus/pci/drivers/mlx5_core/unbind"), &CX6.to_string()),
            (&sys.join("bus/pci/drivers_probe"), &CX6.to_string()),
        ],
        "apply wrote exactly the planned values, nothing else"
    );
}

#[test]
fn vfio_pci_not_loaded_is_loaded_first() {
    let f = cx6_on_mlx5_core();
    f.no_vfio_module();
    let plan = ok_bind(&f, CX6, false);
    assert_eq!(plan.actions[0], Action::Modprobe("vfio-pci".into()));
    assert_eq!(plan.actions.len(), 4);
    assert_eq!(plan.actions[0].to_string(), "modprobe vfio-pci");
    // A failing modprobe stops everything before the first write.
    let before = f.snapshot();
    let e = apply(&plan, &|_| Err("modprobe: FATAL: Module vfio-pci not found".into())).unwrap_err();
    assert!(e.contains("step 1 `modprobe vfio-pci` failed") && e.contains("nothing was changed"), "{e}");
    assert_eq!(f.snapshot(), before);
    // A working one (here: the driver directory appears) lets the writes follow.
    let sys = f.sys();
    apply(&plan, &|m: &str| {
        assert_eq!(m, "vfio-pci");
        fs::create_dir_all(sys.join("bus/pci/drivers/vfio-pci")).map_err(|e| e.to_string())
    })
    .unwrap();
    assert_eq!(fs::read_to_string(f.dev(CX6).join("driver_override")).unwrap(), "vfio-pci");
}

#[test]
fn a_device_without_a_driver_needs_no_unbind() {
    let f = Fake::new();
    f.device(CX6, 0x15b3, 0x1017, ETH, None, Some(3));
    let plan = ok_bind(&f, "3b:00.0", false);
    assert_eq!(
        plan.actions,
        vec![write(f.dev(CX6).join("driver_override"), "vfio-pci"), write(f.sys().join("bus/pci/drivers_probe"), CX6)]
    );
}

#[test]
fn already_on_vfio_pci_is_nothing_to_do() {
    let f = Fake::new();
    f.device(CX6, 0x15b3, 0x101d, ETH, Some("vfio-pci"), Some(7));
    assert!(ok_bind(&f, CX6, false).actions.is_empty());
}

#[test]
fn missing_or_malformed_device_is_refused() {
    let f = Fake::new();
    let p = refused_bind(&f, "0000:af:00.0", false);
    assert!(p[0].contains("does not exist") && p[0].contains("lspci -D -d 15b3:"), "{p:?}");
    let p = refused_bind(&f, "not-a-pci-address", false);
    assert!(p[0].contains("not a PCI address") && p[0].contains("0000:3b:00.0"), "{p:?}");
}

#[test]
fn a_non_mlx5_device_needs_force() {
    let f = Fake::new();
    f.device("0000:00:03.0", 0x8086, 0x10d3, ETH, Some("e1000e"), Some(3));
    let p = refused_bind(&f, "0000:00:03.0", false);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("8086:10d3") && p[0].contains("not a ConnectX") && p[0].contains("--force"), "{p:?}");
    let plan = ok_bind(&f, "0000:00:03.0", true);
    assert_eq!(plan.device, "8086:10d3");
    assert_eq!(plan.actions[1], write(f.sys().join("bus/pci/drivers/e1000e/unbind"), "0000:00:03.0"));
}

#[test]
fn iommu_off_is_refused_with_the_kernel_parameters() {
    let f = Fake::new();
    f.device(CX6, 0x15b3, 0x101d, ETH, Some("mlx5_core"), None);
    let p = refused_bind(&f, CX6, false);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("IOMMU is off"), "{p:?}");
    assert!(p[0].contains("intel_iommu=on iommu=pt") && p[0].contains("amd_iommu=on"), "{p:?}");
}

#[test]
fn a_group_shared_with_a_bound_device_is_refused_naming_it() {
    let f = cx6_on_mlx5_core();
    f.device(CX6_PORT2, 0x15b3, 0x101d, ETH, Some("mlx5_core"), Some(7));
    let p = refused_bind(&f, CX6, false);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains("IOMMU group 7 is not viable"), "{p:?}");
    assert!(p[0].contains(&format!("{CX6_PORT2} (bound to mlx5_core)")), "{p:?}");
    assert!(p[0].contains(&format!("umlx bind {CX6_PORT2}")), "{p:?}");
}

#[test]
fn group_members_on_vfio_no_driver_or_bridges_are_fine_and_listed() {
    let f = cx6_on_mlx5_core();
    f.device(CX6_PORT2, 0x15b3, 0x101d, ETH, Some("vfio-pci"), Some(7));
    f.device("0000:3b:00.2", 0x15b3, 0x101e, ETH, None, Some(7));
    f.device("0000:3a:00.0", 0x8086, 0x2030, 0x060400, Some("pcieport"), Some(7));
    let plan = ok_bind(&f, CX6, false);
    assert_eq!(
        plan.group_members,
        vec![
            ("0000:3a:00.0".to_string(), Some("pcieport".to_string())),
            (CX6.to_string(), Some("mlx5_core".to_string())),
            (CX6_PORT2.to_string(), Some("vfio-pci".to_string())),
            ("0000:3b:00.2".to_string(), None),
        ]
    );
    assert_eq!(plan.actions.len(), 3);
}

#[test]
fn not_root_is_refused_and_every_problem_is_listed() {
    let f = Fake::new();
    f.device(CX6, 0x15b3, 0x101d, ETH, Some("mlx5_core"), None);
    f.status(1000, "0000000000000000");
    let p = refused_bind(&f, CX6, false);
    assert_eq!(p.len(), 2, "{p:?}");
    assert!(p[0].contains("not running as root") && p[0].contains("sudo umlx bind"), "{p:?}");
    assert!(p[1].contains("IOMMU is off"), "{p:?}");
}

#[test]
fn no_huge_pages_is_a_warning_with_the_fix() {
    let f = cx6_on_mlx5_core();
    f.meminfo(0);
    let plan = ok_bind(&f, CX6, false);
    assert_eq!(plan.actions.len(), 3, "the bind still goes ahead");
    assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
    assert!(plan.warnings[0].what.contains("HugePages_Total 0"), "{:?}", plan.warnings);
    assert!(plan.warnings[0].fix.contains("echo 1024 > /proc/sys/vm/nr_hugepages"), "{:?}", plan.warnings);
}

#[test]
fn a_low_memlock_limit_is_a_warning_unless_cap_ipc_lock() {
    let f = cx6_on_mlx5_core();
    f.limits("65536");
    f.status(0, "0000000000000000");
    let plan = ok_bind(&f, CX6, false);
    assert_eq!(plan.warnings.len(), 1, "{:?}", plan.warnings);
    assert!(plan.warnings[0].what.contains("RLIMIT_MEMLOCK is 64 KiB"), "{:?}", plan.warnings);
    assert!(plan.warnings[0].fix.contains("ulimit -l unlimited"), "{:?}", plan.warnings);
    assert!(plan.warnings[0].fix.contains("limits.conf"), "{:?}", plan.warnings);
    // CAP_IPC_LOCK (bit 14) lifts the limit.
    f.status(0, "0000000000004000");
    assert!(ok_bind(&f, CX6, false).warnings.is_empty());
    // Enough is enough.
    f.status(0, "0000000000000000");
    f.limits(&(4u64 << 30).to_string());
    assert!(ok_bind(&f, CX6, false).warnings.is_empty());
}

#[test]
fn losing_a_netdev_or_vfs_is_a_warning() {
    let f = cx6_on_mlx5_core();
    fs::create_dir_all(f.dev(CX6).join("net/ens1f0np0")).unwrap();
    fs::write(f.dev(CX6).join("sriov_numvfs"), "4\n").unwrap();
    let plan = ok_bind(&f, CX6, false);
    let w: Vec<String> = plan.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("ens1f0np0") && w[0].contains("umlx unbind"), "{w:?}");
    assert!(w[1].contains("4 SR-IOV virtual functions") && w[1].contains("sriov_numvfs"), "{w:?}");
}

#[test]
fn unbind_clears_the_override_and_reprobes() {
    let f = Fake::new();
    f.device(CX6, 0x15b3, 0x101d, ETH, Some("vfio-pci"), Some(7));
    fs::write(f.dev(CX6).join("driver_override"), "vfio-pci\n").unwrap();
    let before = f.snapshot();
    let plan = plan_unbind(&f.roots(), CX6).unwrap();
    assert_eq!(f.snapshot(), before, "planning changed the tree");
    let sys = f.sys();
    assert_eq!(
        plan.actions,
        vec![
            write(f.dev(CX6).join("driver_override"), "\n"),
            write(sys.join("bus/pci/drivers/vfio-pci/unbind"), CX6),
            write(sys.join("bus/pci/drivers_probe"), CX6),
        ]
    );
    assert_eq!(plan.actions[0].to_string(), format!("echo > {}", f.dev(CX6).join("driver_override").display()));
    apply(&plan, &|_| Err("no modprobe".into())).unwrap();
    assert_eq!(fs::read_to_string(f.dev(CX6).join("driver_override")).unwrap(), "\n");
    assert_eq!(fs::read_to_string(sys.join("bus/pci/drivers/vfio-pci/unbind")).unwrap(), CX6);
    assert_eq!(fs::read_to_string(sys.join("bus/pci/drivers_probe")).unwrap(), CX6);
}

#[test]
fn unbind_is_refused_while_a_process_holds_the_group() {
    let f = Fake::new();
    f.device(CX6, 0x15b3, 0x101d, ETH, Some("vfio-pci"), Some(7));
    f.holder(4242, "umlx", 7);
    f.holder(4243, "other", 8);
    let before = f.snapshot();
    let r = plan_unbind(&f.roots(), CX6).unwrap_err();
    assert_eq!(f.snapshot(), before);
    assert_eq!(r.problems.len(), 1, "{r}");
    assert!(r.problems[0].what.contains("/dev/vfio/7 is open in process 4242 (umlx)"), "{r}");
    assert!(!r.problems[0].what.contains("4243"), "{r}");
    assert!(r.problems[0].fix.contains("stop that process"), "{r}");
}

#[test]
fn unbind_of_a_device_on_its_kernel_driver_is_nothing_to_do() {
    let f = cx6_on_mlx5_core();
    assert!(plan_unbind(&f.roots(), CX6).unwrap().actions.is_empty());
    let before = f.snapshot();
    let r = plan_unbind(&f.roots(), "0000:af:00.0").unwrap_err();
    assert_eq!(f.snapshot(), before);
    assert!(r.problems[0].what.contains("does not exist"), "{r}");
    f.status(1000, "0");
    let r = plan_unbind(&f.roots(), CX6).unwrap_err();
    assert!(r.problems[0].fix.contains("sudo umlx unbind"), "{r}");
}

#[test]
fn a_write_failure_says_how_far_it_got() {
    let f = cx6_on_mlx5_core();
    let plan = ok_bind(&f, CX6, false);
    fs::remove_file(f.sys().join("bus/pci/drivers_probe")).unwrap();
    let e = apply(&plan, &|_| Ok(())).unwrap_err();
    assert!(e.contains("step 3") && e.contains("drivers_probe") && e.contains("steps 1-2 were done"), "{e}");
}

#[test]
fn the_command_line() {
    let bin = env!("CARGO_BIN_EXE_umlx");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin).args(args).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, err) = run(&["bind"]);
    assert!(!ok && err.contains("<PCI>") && err.contains("Usage: umlx bind <PCI>"), "{err}");
    let (ok, err) = run(&["unbind"]);
    assert!(!ok && err.contains("Usage: umlx unbind <PCI>"), "{err}");
    let (ok, err) = run(&["bind", "xyz", "--dry-run"]);
    assert!(!ok && err.contains("not a PCI address"), "{err}");
    let (ok, err) = run(&["bind", "pci:xyz", "-n"]);
    assert!(!ok && err.contains("not a PCI address"), "{err}");
    let (ok, err) = run(&["unbind", CX6, "--force"]);
    assert!(!ok && err.contains("unexpected argument '--force'"), "unbind has no --force: {err}");
    let (ok, err) = run(&["help"]);
    assert!(ok, "{err}");
}
