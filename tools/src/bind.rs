//! `umlx bind <pci> [--force] [--dry-run]` and `umlx unbind <pci> [--dry-run]`: move a PCI
//! function to vfio-pci (so umlx can open it) and back to its kernel driver, through sysfs.
//!
//! Binding writes `vfio-pci` to the device's `driver_override`, unbinds it from its current
//! driver and asks the kernel to probe it again (`drivers_probe`), which hands it to vfio-pci.
//! Unbinding clears `driver_override`, unbinds it from vfio-pci and probes again, so mlx5_core
//! takes it back.
//!
//! Everything is checked first, and nothing is changed when a check fails: every problem is
//! named with its fix. [`plan_bind`] and [`plan_unbind`] make the decision from a sysfs root and
//! a proc root (`/sys` and `/proc`; a fake tree in the tests) and return a [`Plan`]: the exact
//! [`Action`]s to take, the warnings, and what they saw. [`apply`] carries a plan out.
//!
//! Bind checks: the device exists and is an mlx5 function (`--force` accepts any device, for
//! the VM self-test with QEMU's devices); the IOMMU is on (the device has an IOMMU group); the
//! IOMMU group stays viable (every other member on vfio-pci, pci-stub or no driver, or a
//! bridge); we are root. vfio-pci not loaded is not a problem: the plan starts with `modprobe
//! vfio-pci`. Warnings (the bind goes ahead): no huge pages reserved, RLIMIT_MEMLOCK too low,
//! a network interface or SR-IOV VFs that go away with the kernel driver.
//!
//! Unbind checks: the device exists; no process holds its VFIO group open (the kernel would
//! wait for it forever); we are root.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use umlx_driver::vfio::sysfs;

/// RLIMIT_MEMLOCK below this (without CAP_IPC_LOCK) gets a warning: firmware pages (hundreds of
/// MiB on a ConnectX-6/7), queues and registered memory are all pinned.
pub const MEMLOCK_ENOUGH: u64 = 1 << 30;

/// The driver umlx needs.
const VFIO_PCI: &str = "vfio-pci";

/// Linux capability number of CAP_IPC_LOCK.
const CAP_IPC_LOCK: u32 = 14;

/// One change to the system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Load a kernel module (`modprobe NAME`).
    Modprobe(String),
    /// Write `value` to the sysfs attribute `path`.
    Write {
        /// The attribute.
        path: PathBuf,
        /// What is written (exactly these bytes).
        value: String,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Modprobe(m) => write!(f, "modprobe {m}"),
            Action::Write { path, value } if value.trim().is_empty() => write!(f, "echo > {}", path.display()),
            Action::Write { path, value } => write!(f, "echo {} > {}", value.trim_end(), path.display()),
        }
    }
}

/// A problem (refusing) or a warning, with its fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What is wrong.
    pub what: String,
    /// How to fix it.
    pub fix: String,
}

impl Problem {
    fn new(what: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem { what: what.into(), fix: fix.into() }
    }

    fn from_driver(e: umlx_driver::Error) -> Problem {
        match e {
            umlx_driver::Error::Device { problem, hint, .. } => Problem { what: problem, fix: hint },
            umlx_driver::Error::InvalidArgument(m) => {
                Problem::new(m, "give the address as `lspci -D` prints it, e.g. 0000:3b:00.0")
            }
            other => Problem::new(other.to_string(), "check the sysfs tree and `dmesg`"),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (fix: {})", self.what, self.fix)
    }
}

/// Why a bind or unbind was refused: every problem found. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `bind` or `unbind`.
    pub op: &'static str,
    /// The device as given.
    pub pci: String,
    /// The problems, each with its fix.
    pub problems: Vec<Problem>,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} refused, nothing was changed:", self.op, self.pci)?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

/// What a bind or unbind will do, and what it found out on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The normalized PCI address.
    pub pci: String,
    /// What the device is (`ConnectX-6 Dx (15b3:101d)`).
    pub device: String,
    /// Its driver now.
    pub driver: Option<String>,
    /// Its IOMMU group (bind: always; unbind: when it has one).
    pub iommu_group: Option<u32>,
    /// The members of the IOMMU group and their drivers (bind).
    pub group_members: Vec<(String, Option<String>)>,
    /// The changes, in order (empty: nothing to do).
    pub actions: Vec<Action>,
    /// Things that work but not well, each with its fix.
    pub warnings: Vec<Problem>,
}

/// The roots the checks read: `/sys` and `/proc` on a real system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Roots {
    /// The sysfs root.
    pub sys: PathBuf,
    /// The procfs root.
    pub proc: PathBuf,
}

impl Default for Roots {
    fn default() -> Roots {
        Roots { sys: PathBuf::from("/sys"), proc: PathBuf::from("/proc") }
    }
}

/// A `Key:  value` line of a /proc file.
fn proc_field(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(':').map(|v| v.trim().to_string()))
}

/// Whether we run as root (effective UID 0, from `<proc>/self/status`).
fn is_root(proc: &Path) -> Option<bool> {
    let status = fs::read_to_string(proc.join("self/status")).ok()?;
    let uids = proc_field(&status, "Uid")?;
    Some(uids.split_whitespace().nth(1)? == "0")
}

fn root_problem(proc: &Path, op: &str) -> Option<Problem> {
    match is_root(proc) {
        Some(true) => None,
        Some(false) => Some(Problem::new(
            format!("not running as root: {op} writes to /sys/bus/pci"),
            format!("run `sudo umlx {op} ...`"),
        )),
        None => Some(Problem::new(
            format!("cannot tell whether this process is root ({} unreadable)", proc.join("self/status").display()),
            format!("run `sudo umlx {op} ...` with /proc mounted"),
        )),
    }
}

/// The huge-page warning, if no huge pages are reserved.
pub fn hugepage_warning(proc: &Path) -> Option<Problem> {
    let fix = "reserve them: `echo 1024 > /proc/sys/vm/nr_hugepages` (2 GiB of 2 MiB pages; add vm.nr_hugepages=1024 to /etc/sysctl.conf to keep it)";
    let path = proc.join("meminfo");
    let Ok(meminfo) = fs::read_to_string(&path) else {
        return Some(Problem::new(format!("cannot read {} to check huge pages", path.display()), fix));
    };
    let total = proc_field(&meminfo, "HugePages_Total").and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    (total == 0).then(|| {
        Problem::new(
            "no huge pages are reserved (HugePages_Total 0): umlx falls back to 4 KiB pages for large regions (more IOMMU mappings, slower registration)",
            fix,
        )
    })
}

/// The RLIMIT_MEMLOCK warning, if this process (and so the processes started from its shell)
/// may lock less than [`MEMLOCK_ENOUGH`] and has no CAP_IPC_LOCK.
pub fn memlock_warning(proc: &Path) -> Option<Problem> {
    let fix = "`ulimit -l unlimited` in the shell that starts umlx, or `* - memlock unlimited` in /etc/security/limits.conf (LimitMEMLOCK=infinity for a systemd service)";
    if let Ok(status) = fs::read_to_string(proc.join("self/status"))
        && let Some(caps) = proc_field(&status, "CapEff").and_then(|c| u64::from_str_radix(&c, 16).ok())
        && caps & (1 << CAP_IPC_LOCK) != 0
    {
        return None;
    }
    let path = proc.join("self/limits");
    let limits = fs::read_to_string(&path).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max locked memory"))?;
    let soft = line.split_whitespace().nth(3)?;
    if soft == "unlimited" {
        return None;
    }
    let bytes: u64 = soft.parse().ok()?;
    (bytes < MEMLOCK_ENOUGH).then(|| {
        Problem::new(
            format!(
                "RLIMIT_MEMLOCK is {} KiB: umlx pins firmware pages, queues and registered memory (hundreds of MiB), and mapping DMA fails beyond the limit",
                bytes / 1024
            ),
            fix,
        )
    })
}

/// Whether vfio-pci is loaded (its driver directory exists) or built in.
pub fn vfio_pci_loaded(sys: &Path) -> bool {
    sys.join("bus/pci/drivers").join(VFIO_PCI).is_dir() || sys.join("module/vfio_pci").is_dir()
}

fn describe(sys: &Path, pci: &str) -> Result<(String, bool), Problem> {
    let (ven, dev) = sysfs::read_ids(sys, pci).map_err(Problem::from_driver)?;
    Ok(match sysfs::mlx5_device_name(ven, dev) {
        Some(name) => (format!("{name} ({ven:04x}:{dev:04x})"), true),
        None => (format!("{ven:04x}:{dev:04x}"), false),
    })
}

fn net_interfaces(sys: &Path, pci: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(sysfs::device_dir(sys, pci).join("net"))
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn write(path: PathBuf, value: impl Into<String>) -> Action {
    Action::Write { path, value: value.into() }
}

/// Decides how to bind `pci` to vfio-pci, reading only `roots`. `force` accepts a device that is
/// not an mlx5 function.
pub fn plan_bind(roots: &Roots, pci: &str, force: bool) -> Result<Plan, Refusal> {
    let refuse = |problems| Refusal { op: "bind", pci: pci.to_string(), problems };
    let sys = &roots.sys;
    let pci = sysfs::normalize_pci(pci).map_err(|e| refuse(vec![Problem::from_driver(e)]))?;
    let dir = sysfs::device_dir(sys, &pci);
    let mut problems = Vec::new();
    problems.extend(root_problem(&roots.proc, "bind"));
    if !dir.is_dir() {
        problems.push(Problem::new(
            format!("PCI device {pci} does not exist ({} is missing)", dir.display()),
            "list the ConnectX functions with `lspci -D -d 15b3:` and pass one of their addresses",
        ));
        return Err(refuse(problems));
    }
    let device = match describe(sys, &pci) {
        Ok((name, true)) => name,
        Ok((name, false)) if force => name,
        Ok((name, false)) => {
            problems.push(Problem::new(
                format!("{pci} is {name} (vendor:device), not a ConnectX (mlx5) function"),
                "pass a ConnectX function (`lspci -D -d 15b3:`), or add --force to bind another device (the VM self-test)",
            ));
            name
        }
        Err(p) => {
            problems.push(p);
            "unknown device".into()
        }
    };
    let driver = sysfs::driver_of(sys, &pci);
    let iommu_group = sysfs::iommu_group_of(sys, &pci);
    let mut group_members = Vec::new();
    match iommu_group {
        None => problems.push(Problem::new(
            format!("{pci} has no IOMMU group: the IOMMU is off, and vfio-pci needs it"),
            "boot with intel_iommu=on iommu=pt (Intel) or amd_iommu=on (AMD) on the kernel command line, and enable VT-d / AMD-Vi in the firmware setup",
        )),
        Some(group) => {
            match sysfs::group_devices(sys, group) {
                Ok(members) => {
                    group_members = members.into_iter().map(|m| (m.clone(), sysfs::driver_of(sys, &m))).collect();
                }
                Err(e) => problems.push(Problem::from_driver(e)),
            }
            if let Err(e) = sysfs::check_group_viable(sys, group, &pci) {
                problems.push(Problem::from_driver(e));
            }
        }
    }
    if !problems.is_empty() {
        return Err(refuse(problems));
    }

    let mut warnings = Vec::new();
    warnings.extend(hugepage_warning(&roots.proc));
    warnings.extend(memlock_warning(&roots.proc));
    let mut actions = Vec::new();
    if driver.as_deref().is_some_and(sysfs::is_vfio_driver) {
        return Ok(Plan { pci, device, driver, iommu_group, group_members, actions, warnings });
    }
    if let Some(d) = &driver {
        let nets = net_interfaces(sys, &pci);
        if !nets.is_empty() {
            warnings.push(Problem::new(
                format!("unbinding {d} removes the network interface(s) {} of {pci}", nets.join(", ")),
                format!("move traffic off them first; `umlx unbind {pci}` gives them back"),
            ));
        }
        let vfs = fs::read_to_string(dir.join("sriov_numvfs")).ok().and_then(|v| v.trim().parse::<u32>().ok());
        if let Some(n) = vfs.filter(|n| *n > 0) {
            warnings.push(Problem::new(
                format!("{pci} has {n} SR-IOV virtual functions, which go away with {d}"),
                format!("bind a VF instead, or set /sys/bus/pci/devices/{pci}/sriov_numvfs to 0 first"),
            ));
        }
    }
    if !vfio_pci_loaded(sys) {
        actions.push(Action::Modprobe(VFIO_PCI.into()));
    }
    actions.push(write(dir.join("driver_override"), VFIO_PCI));
    if let Some(d) = &driver {
        actions.push(write(sys.join("bus/pci/drivers").join(d).join("unbind"), pci.clone()));
    }
    actions.push(write(sys.join("bus/pci/drivers_probe"), pci.clone()));
    Ok(Plan { pci, device, driver, iommu_group, group_members, actions, warnings })
}

/// The processes (PID, command name) that hold `/dev/vfio/<group>` open, from `<proc>/*/fd`.
pub fn group_holders(proc: &Path, group: u32) -> Vec<(u32, String)> {
    let node = PathBuf::from(format!("/dev/vfio/{group}"));
    let mut v = Vec::new();
    let Ok(dir) = fs::read_dir(proc) else { return v };
    for e in dir.filter_map(|e| e.ok()) {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(fds) = fs::read_dir(e.path().join("fd")) else { continue };
        if fds.filter_map(|f| f.ok()).any(|f| fs::read_link(f.path()).is_ok_and(|t| t == node)) {
            let comm = fs::read_to_string(e.path().join("comm")).unwrap_or_default().trim().to_string();
            v.push((pid, comm));
        }
    }
    v.sort();
    v
}

/// Decides how to give `pci` back to its kernel driver, reading only `roots`.
pub fn plan_unbind(roots: &Roots, pci: &str) -> Result<Plan, Refusal> {
    let refuse = |problems| Refusal { op: "unbind", pci: pci.to_string(), problems };
    let sys = &roots.sys;
    let pci = sysfs::normalize_pci(pci).map_err(|e| refuse(vec![Problem::from_driver(e)]))?;
    let dir = sysfs::device_dir(sys, &pci);
    let mut problems = Vec::new();
    problems.extend(root_problem(&roots.proc, "unbind"));
    if !dir.is_dir() {
        problems.push(Problem::new(
            format!("PCI device {pci} does not exist ({} is missing)", dir.display()),
            "list the devices bound to vfio-pci with `ls /sys/bus/pci/drivers/vfio-pci`",
        ));
        return Err(refuse(problems));
    }
    let device = describe(sys, &pci).map(|d| d.0).unwrap_or_else(|_| "unknown device".into());
    let driver = sysfs::driver_of(sys, &pci);
    let iommu_group = sysfs::iommu_group_of(sys, &pci);
    let on_vfio = driver.as_deref().is_some_and(sysfs::is_vfio_driver);
    if let (true, Some(group)) = (on_vfio, iommu_group) {
        let holders = group_holders(&roots.proc, group);
        if !holders.is_empty() {
            let list: Vec<String> = holders.iter().map(|(p, c)| format!("{p} ({c})")).collect();
            problems.push(Problem::new(
                format!(
                    "/dev/vfio/{group} is open in process {}: unbinding would wait until it lets the device go",
                    list.join(", ")
                ),
                "stop that process first (it is using the device through VFIO)",
            ));
        }
    }
    if !problems.is_empty() {
        return Err(refuse(problems));
    }
    let overridden = fs::read_to_string(dir.join("driver_override")).map(|v| v.trim().to_string()).unwrap_or_default();
    let mut actions = Vec::new();
    if !overridden.is_empty() && overridden != "(null)" {
        actions.push(write(dir.join("driver_override"), "\n"));
    }
    if on_vfio {
        if let Some(d) = &driver {
            actions.push(write(sys.join("bus/pci/drivers").join(d).join("unbind"), pci.clone()));
        }
        actions.push(write(sys.join("bus/pci/drivers_probe"), pci.clone()));
    } else if driver.is_none() && !actions.is_empty() {
        actions.push(write(sys.join("bus/pci/drivers_probe"), pci.clone()));
    }
    Ok(Plan { pci, device, driver, iommu_group, group_members: Vec::new(), actions, warnings: Vec::new() })
}

/// Carries out `plan`'s actions in order: sysfs writes (to existing attributes only) and module
/// loads through `modprobe`. Stops at the first failure, saying which step failed and how far
/// it got.
pub fn apply(plan: &Plan, modprobe: &dyn Fn(&str) -> Result<(), String>) -> Result<(), String> {
    for (i, a) in plan.actions.iter().enumerate() {
        let done = if i == 0 { "nothing was changed".to_string() } else { format!("steps 1-{i} were done") };
        let r = match a {
            Action::Modprobe(m) => modprobe(m),
            Action::Write { path, value } => fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(path)
                .and_then(|mut f| std::io::Write::write_all(&mut f, value.as_bytes()))
                .map_err(|e| format!("{e}")),
        };
        r.map_err(|e| format!("step {} `{a}` failed: {e} ({done}; check `dmesg`)", i + 1))?;
    }
    Ok(())
}

/// Runs `modprobe NAME`.
pub fn system_modprobe(name: &str) -> Result<(), String> {
    let out = std::process::Command::new("modprobe")
        .arg(name)
        .output()
        .map_err(|e| format!("cannot run modprobe: {e} (install kmod)"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "modprobe {name}: {} (fix: install the kernel's VFIO modules, e.g. linux-modules-extra-$(uname -r), or build with CONFIG_VFIO_PCI)",
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// The options of `umlx bind`.
#[derive(clap::Args, Debug)]
pub struct BindArgs {
    /// The PCI function (0000:3b:00.0, 3b:00.0 or pci:0000:3b:00.0)
    #[arg(value_name = "PCI")]
    pub pci: String,
    /// Accept a device that is not a ConnectX (the VM self-test)
    #[arg(long)]
    pub force: bool,
    /// Print the plan and change nothing
    #[arg(short = 'n', long)]
    pub dry_run: bool,
}

/// The options of `umlx unbind`.
#[derive(clap::Args, Debug)]
pub struct UnbindArgs {
    /// The PCI function (0000:3b:00.0, 3b:00.0 or pci:0000:3b:00.0)
    #[arg(value_name = "PCI")]
    pub pci: String,
    /// Print the plan and change nothing
    #[arg(short = 'n', long)]
    pub dry_run: bool,
}

fn pci_arg(s: &str) -> &str {
    s.strip_prefix("pci:").unwrap_or(s)
}

fn print_plan(plan: &Plan) {
    let driver = plan.driver.as_deref().unwrap_or("no driver");
    let group = plan.iommu_group.map(|g| format!(", IOMMU group {g}")).unwrap_or_default();
    println!("{}: {}, bound to {driver}{group}", plan.pci, plan.device);
    if !plan.group_members.is_empty() {
        let m: Vec<String> = plan
            .group_members
            .iter()
            .map(|(d, drv)| {
                let me = if *d == plan.pci { ", this device" } else { "" };
                format!("{d} ({}{me})", drv.as_deref().unwrap_or("no driver"))
            })
            .collect();
        println!("IOMMU group members: {}", m.join(", "));
    }
    for w in &plan.warnings {
        println!("warning: {w}");
    }
}

fn execute(plan: &Plan, dry_run: bool) -> Result<(), String> {
    print_plan(plan);
    if plan.actions.is_empty() {
        println!("nothing to do");
        return Ok(());
    }
    println!("{}:", if dry_run { "would run" } else { "running" });
    for a in &plan.actions {
        println!("  {a}");
    }
    if dry_run {
        return Ok(());
    }
    apply(plan, &system_modprobe)
}

fn wait_for_driver(sys: &Path, pci: &str, done: impl Fn(Option<&str>) -> bool) -> Option<String> {
    let start = std::time::Instant::now();
    loop {
        let d = sysfs::driver_of(sys, pci);
        if done(d.as_deref()) || start.elapsed() > std::time::Duration::from_secs(5) {
            return d;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `umlx bind <pci> [--force] [--dry-run]`.
pub fn run(a: &BindArgs) -> Result<(), String> {
    let roots = Roots::default();
    let plan = plan_bind(&roots, pci_arg(&a.pci), a.force).map_err(|r| r.to_string())?;
    execute(&plan, a.dry_run)?;
    if a.dry_run || plan.actions.is_empty() {
        return Ok(());
    }
    let now = wait_for_driver(&roots.sys, &plan.pci, |d| d.is_some_and(sysfs::is_vfio_driver));
    match now {
        Some(d) if sysfs::is_vfio_driver(&d) => {
            let group = plan.iommu_group.map(|g| format!(" (/dev/vfio/{g})")).unwrap_or_default();
            println!("done: {} is bound to {d}; open it as pci:{}{group}", plan.pci, plan.pci);
            Ok(())
        }
        other => Err(format!(
            "{} is bound to {} after the bind, not to vfio-pci (fix: see `dmesg`; `umlx unbind {}` restores the kernel driver)",
            plan.pci,
            other.as_deref().unwrap_or("no driver"),
            plan.pci
        )),
    }
}

/// `umlx unbind <pci> [--dry-run]`.
pub fn run_unbind(a: &UnbindArgs) -> Result<(), String> {
    let roots = Roots::default();
    let plan = plan_unbind(&roots, pci_arg(&a.pci)).map_err(|r| r.to_string())?;
    execute(&plan, a.dry_run)?;
    if a.dry_run || plan.actions.is_empty() {
        return Ok(());
    }
    match wait_for_driver(&roots.sys, &plan.pci, |d| d.is_some_and(|d| !sysfs::is_vfio_driver(d))) {
        Some(d) if !sysfs::is_vfio_driver(&d) => {
            println!("done: {} is bound to {d}", plan.pci);
            Ok(())
        }
        Some(d) => Err(format!("{} is still bound to {d} (fix: see `dmesg`)", plan.pci)),
        None => {
            println!(
                "done: {} is on no driver (fix: `modprobe mlx5_core` if it should come back, then `echo {} > /sys/bus/pci/drivers_probe`)",
                plan.pci, plan.pci
            );
            Ok(())
        }
    }
}
