//! DmaMemory is locked and not inherited by fork: checked in /proc/self/smaps. One test in
//! its own binary, so no other test changes this process's mappings meanwhile.

use umlx_driver::dma::{DmaMemory, PAGE_4K};

/// The `lo-hi` address range at the start of an smaps header line.
fn header_range(line: &str) -> Option<(usize, usize)> {
    let (range, _) = line.split_once(' ')?;
    let (lo, hi) = range.split_once('-')?;
    Some((usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?))
}

/// The VmFlags line of the mapping that contains `addr`.
fn vm_flags(addr: usize) -> Option<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut in_it = false;
    for line in smaps.lines() {
        if let Some((lo, hi)) = header_range(line) {
            in_it = lo <= addr && addr < hi;
            continue;
        }
        match line.strip_prefix("VmFlags:") {
            Some(f) if in_it => return Some(f.trim().to_string()),
            _ => {}
        }
    }
    None
}

fn vm_lck_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn memory_is_locked_and_dontfork() {
    let before = vm_lck_kb();
    let m = DmaMemory::new(16 * PAGE_4K).unwrap();
    let flags = vm_flags(m.as_ptr() as usize).expect("mapping present in smaps");
    let flags: Vec<&str> = flags.split_whitespace().collect();
    assert!(flags.contains(&"lo"), "locked: {flags:?}");
    assert!(flags.contains(&"dc"), "MADV_DONTFORK (dc: do not copy on fork): {flags:?}");
    assert!(vm_lck_kb() >= before + 64, "VmLck grew by the 64 KiB");
    let addr = m.as_ptr() as usize;
    drop(m);
    assert!(vm_lck_kb() <= before + 4);
    assert!(vm_flags(addr).is_none_or(|f| !f.contains("lo")));
}
