//! Firmware pages: the boot, init and regular demand, QUERY_PAGES, MANAGE_PAGES give and take,
//! PAGE_REQUEST events in both directions, and reclaim after TEARDOWN_HCA.
//!
//! Every page given must be 4 KiB aligned, non-zero, not already held, and mapped for device
//! read and write in the IOMMU; the firmware writes a marker into each page it accepts and keeps
//! reading the pages it holds (round robin, every few milliseconds, see `Hca::tick`), so a page
//! unmapped while the firmware still holds it is an IOMMU fault, and a fatal health error.

use super::exec::{CmdResult, bad_param, need_in, out};
use super::{Hca, syndrome as sy};
use std::collections::BTreeSet;
use umlx_hwdesc::enums::{CmdOpcode, EventType, PagesOpMod};
use umlx_hwdesc::ifc::*;

/// Adapter page size.
pub const PAGE: u64 = umlx_hwdesc::plain::page::ADAPTER_PAGE_SIZE as u64;

/// Page accounting.
#[derive(Debug, Default)]
pub struct Pages {
    /// Addresses of the pages the firmware holds.
    pub held: BTreeSet<u64>,
    boot: u32,
    init: u32,
    /// Pages the objects need after INIT_HCA.
    pub regular: u32,
    /// Extra pages asked for by the hostile churn.
    extra: u32,
    /// Whether INIT_HCA ran (init demand stays).
    pub initialized: bool,
    /// After TEARDOWN_HCA: demand is zero.
    pub(crate) torn_down: bool,
    /// Net pages asked for by PAGE_REQUEST events not yet answered (positive: give, negative:
    /// take).
    pub requested: i64,
    /// Pages given in total (for accounting tests).
    pub given_total: u64,
    /// Pages returned in total.
    pub returned_total: u64,
    churn_out: bool,
}

impl Pages {
    /// Demand of a freshly reset device.
    pub fn new(boot: u32, init: u32) -> Pages {
        Pages { boot, init, ..Default::default() }
    }

    /// Total pages the firmware wants right now.
    pub fn demand(&self) -> u64 {
        if self.torn_down {
            return 0;
        }
        let mut d = self.boot as u64 + self.init as u64;
        if self.initialized {
            d += self.regular as u64 + self.extra as u64;
        }
        d
    }

    /// Whether the boot pages were given.
    pub fn boot_satisfied(&self) -> bool {
        self.torn_down || self.held.len() as u64 >= self.boot as u64
    }

    /// Whether the boot and init pages were given.
    pub fn init_satisfied(&self) -> bool {
        self.held.len() as u64 >= self.boot as u64 + self.init as u64
    }

    /// TEARDOWN_HCA: every page may come back.
    pub fn torn_down(&mut self) {
        self.torn_down = true;
        self.regular = 0;
        self.extra = 0;
        self.requested = 0;
    }

    /// ENABLE_HCA: a new life of the function (after DISABLE_HCA, without a reset) asks for its
    /// boot and init pages again and has live demand after INIT_HCA; pages it still holds count.
    pub fn enable(&mut self) {
        self.torn_down = false;
        self.initialized = false;
        self.regular = 0;
        self.extra = 0;
        self.requested = 0;
        self.churn_out = false;
    }

    /// Hostile churn: alternately ask for `n` extra pages and give them back.
    pub fn churn(&mut self, n: u32) {
        self.churn_out = !self.churn_out;
        self.extra = if self.churn_out { n } else { 0 };
    }

    /// Sets the extra demand directly (tests and the `request_pages` API).
    pub fn set_extra(&mut self, n: u32) {
        self.extra = n;
    }
}

impl Hca {
    /// Compares held pages with demand and posts a PAGE_REQUEST for the difference not yet
    /// asked for.
    pub(crate) fn rebalance_pages(&mut self) {
        if !self.pages.initialized || self.pages.torn_down {
            return;
        }
        let diff = self.pages.demand() as i64 - self.pages.held.len() as i64;
        let ask = diff - self.pages.requested;
        if ask == 0 {
            return;
        }
        // ec_function 0, func_id 0 (this function), num_pages signed.
        let data = umlx_hwdesc::plain::eqe_page_req { num_pages: (ask as i32).into(), ..Default::default() };
        if self.post_event(EventType::PAGE_REQUEST, 0, &super::objects::event_data(&data)) {
            self.pages.requested += ask;
        }
    }

    pub(crate) fn cmd_query_pages(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::QUERY_PAGES.0;
        need_in(op, input, query_pages_in::SIZE_BYTES)?;
        if query_pages_in::function_id.get(input) != 0 || query_pages_in::embedded_cpu_function.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let p = &self.pages;
        let held = p.held.len() as i64;
        let n: i64 = match PagesOpMod(op_mod) {
            PagesOpMod::BOOT => (p.boot as i64 - held).max(0),
            PagesOpMod::INIT => (p.boot as i64 + p.init as i64 - held).max(0),
            PagesOpMod::REGULAR => p.demand() as i64 - held,
            _ => return Err(bad_param(op, sy::BAD_OP_MOD)),
        };
        let mut o = out(query_pages_out::SIZE_BYTES);
        query_pages_out::num_pages.set(&mut o, n as i32 as u32 as u64);
        Ok(o)
    }

    pub(crate) fn cmd_manage_pages(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::MANAGE_PAGES.0;
        need_in(op, input, manage_pages_in::SIZE_BYTES)?;
        if manage_pages_in::function_id.get(input) != 0 || manage_pages_in::embedded_cpu_function.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let n = manage_pages_in::input_num_entries.get(input) as usize;
        match op_mod {
            // Allocation failed on the driver side: forget the outstanding request.
            0 => {
                self.stats.pages_cant_give += 1;
                self.pages.requested = 0;
                Ok(out(manage_pages_out::SIZE_BYTES))
            }
            1 => {
                need_in(op, input, manage_pages_in::SIZE_BYTES + 8 * n)?;
                let base = manage_pages_in::SIZE_BYTES;
                let addrs: Vec<u64> = (0..n)
                    .map(|i| u64::from_be_bytes(input[base + 8 * i..base + 8 * i + 8].try_into().unwrap_or_default()))
                    .collect();
                // Validate all before taking any.
                let mut seen = BTreeSet::new();
                for &a in &addrs {
                    if a == 0 || a % PAGE != 0 {
                        return Err(bad_param(op, sy::BAD_PAGE_ADDRESS));
                    }
                    if self.pages.held.contains(&a) || !seen.insert(a) {
                        return Err(bad_param(op, sy::DUPLICATE_PAGE));
                    }
                    if !self.iommu.is_mapped(a, PAGE as usize, true) || !self.iommu.is_mapped(a, PAGE as usize, false) {
                        return Err(bad_param(op, sy::PAGE_NOT_MAPPED));
                    }
                }
                for &a in &addrs {
                    // The firmware uses the page: mark it.
                    let _ = self.iommu.write(a, b"umlx-sim firmware page\0");
                    self.pages.held.insert(a);
                }
                self.pages.given_total += n as u64;
                if self.pages.requested > 0 {
                    self.pages.requested = (self.pages.requested - n as i64).max(0);
                }
                self.rebalance_pages();
                Ok(out(manage_pages_out::SIZE_BYTES))
            }
            2 => {
                if self.pages.torn_down && self.reclaim_empty_left > 0 {
                    // Hostile: still releasing ICM; nothing to hand back yet.
                    self.reclaim_empty_left -= 1;
                    let mut o = out(manage_pages_out::SIZE_BYTES);
                    manage_pages_out::output_num_entries.set(&mut o, 0);
                    return Ok(o);
                }
                // Return at most what is asked, and only pages beyond the current demand.
                let surplus = (self.pages.held.len() as i64 - self.pages.demand() as i64).max(0) as usize;
                let k = n.min(surplus);
                let taken: Vec<u64> = self.pages.held.iter().rev().take(k).copied().collect();
                for a in &taken {
                    self.pages.held.remove(a);
                }
                self.pages.returned_total += k as u64;
                if self.pages.requested < 0 {
                    self.pages.requested = (self.pages.requested + k as i64).min(0);
                }
                let mut o = out(manage_pages_out::SIZE_BYTES + 8 * k);
                manage_pages_out::output_num_entries.set(&mut o, k as u64);
                for (i, a) in taken.iter().enumerate() {
                    let off = manage_pages_out::SIZE_BYTES + 8 * i;
                    o[off..off + 8].copy_from_slice(&a.to_be_bytes());
                }
                self.rebalance_pages();
                Ok(o)
            }
            _ => Err(bad_param(op, sy::BAD_OP_MOD)),
        }
    }
}

impl Hca {
    /// Public entry for the device handle: re-evaluates page demand and posts PAGE_REQUEST.
    pub(crate) fn rebalance_pages_pub(&mut self) {
        self.rebalance_pages();
    }
}
