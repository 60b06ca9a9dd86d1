//! Memory keys: CREATE_MKEY, DESTROY_MKEY and QUERY_MKEY, and the translation of a key's
//! range to IOVAs with its bounds, PD and access checks.

use super::*;

/// A memory key.
#[derive(Clone, Debug)]
pub struct Mkey {
    /// Index (`plain::mkey::index` of the key).
    pub index: u32,
    /// Variant byte (`plain::mkey::variant` of the key).
    pub variant: u8,
    /// PD.
    pub pd: u32,
    /// Local write.
    pub lw: bool,
    /// Remote read.
    pub rr: bool,
    /// Remote write.
    pub rw: bool,
    /// Remote atomic.
    pub atomic: bool,
    /// Start virtual address.
    pub start: u64,
    /// Length in bytes (ignored with `length64`).
    pub len: u64,
    /// Covers the whole address space.
    pub length64: bool,
    /// log2 of the MTT page size (absolute).
    pub page_shift: u32,
    /// MTT entries (address | flags).
    pub mtt: Vec<u64>,
    /// The raw mkc, for QUERY_MKEY.
    pub mkc: Vec<u8>,
}

impl Mkey {
    /// The 32-bit key.
    pub fn key(&self) -> u32 {
        plain::mkey::key(self.index, self.variant)
    }
}

/// Why an MKey refused an access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MkeyError {
    /// No such key (index or variant).
    BadKey,
    /// Key belongs to another PD.
    BadPd,
    /// Access outside `[start, start + len)`.
    OutOfBounds,
    /// Access right missing.
    NoAccess,
}

/// Rights an access needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Local read (gather for a send).
    LocalRead,
    /// Local write (scatter of a receive or READ response).
    LocalWrite,
    /// Remote read.
    RemoteRead,
    /// Remote write.
    RemoteWrite,
    /// Remote atomic.
    RemoteAtomic,
}

impl Mkey {
    /// Translates `va..va+len`: calls `each(iova, len)` for the IOVA range of each of its
    /// pages, in order, after checking the key's bounds and rights (each page's own rights just
    /// before its call: on an error, the pages before it were visited).
    pub(crate) fn visit(
        &self,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
        mut each: impl FnMut(u64, u64),
    ) -> Result<(), MkeyError> {
        if pd != self.pd {
            return Err(MkeyError::BadPd);
        }
        let ok = match access {
            Access::LocalRead => true,
            Access::LocalWrite => self.lw,
            Access::RemoteRead => self.rr,
            Access::RemoteWrite => self.rw && self.lw,
            Access::RemoteAtomic => self.atomic && self.lw,
        };
        if !ok {
            return Err(MkeyError::NoAccess);
        }
        if len == 0 {
            return Ok(());
        }
        let end = va.checked_add(len).ok_or(MkeyError::OutOfBounds)?;
        if !self.length64 && (va < self.start || end > self.start.saturating_add(self.len)) {
            return Err(MkeyError::OutOfBounds);
        }
        let ps = 1u64 << self.page_shift;
        let first_page = self.start >> self.page_shift;
        let mut cur = va;
        while cur < end {
            let idx = ((cur >> self.page_shift) - first_page) as usize;
            let entry = *self.mtt.get(idx).ok_or(MkeyError::OutOfBounds)?;
            let need_write = matches!(access, Access::LocalWrite | Access::RemoteWrite | Access::RemoteAtomic);
            if entry & plain::mkey::MTT_READ == 0 || (need_write && entry & plain::mkey::MTT_WRITE == 0) {
                return Err(MkeyError::NoAccess);
            }
            let base = entry & plain::mkey::MTT_PTAG_MASK;
            let in_page = cur & (ps - 1);
            let n = (ps - in_page).min(end - cur);
            each(base + in_page, n);
            cur += n;
        }
        Ok(())
    }
}

impl Hca {
    pub(super) fn cmd_create_mkey(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::CREATE_MKEY.0;
        need_in(op, input, create_mkey_in::SIZE_BYTES)?;
        let ctx = create_mkey_in::memory_key_mkey_entry;
        let g = |f: Field| ctx.inner(f).get(input);
        if create_mkey_in::mkey_umem_valid.get(input) != 0
            || MkcAccessMode::from_fields(g(mkc::access_mode_4_2) as u8, g(mkc::access_mode_1_0) as u8)
                != MkcAccessMode::MTT
        {
            // MTT translation only.
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if g(mkc::free) != 0 || g(mkc::umr_en) != 0 || g(mkc::bsf_en) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let pd = g(mkc::pd) as u32;
        if !self.objects.pds.contains(&pd) {
            return Err(bad_param(op, sy::BAD_REFERENCE));
        }
        let page_shift = g(mkc::log_page_size) as u32;
        if !(12..=30).contains(&page_shift) {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        let start = g(mkc::start_addr);
        let len = g(mkc::len);
        let length64 = g(mkc::length64) != 0;
        let octwords =
            create_mkey_in::translations_octword_actual_size.get(input).max(g(mkc::translations_octword_size));
        let nmtt = octwords as usize * 2;
        let needed = if length64 { 0 } else { pages_for(len, page_shift, start & ((1 << page_shift) - 1)) };
        if nmtt < needed || nmtt > (1 << 24) {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        need_in(op, input, create_mkey_in::SIZE_BYTES + 8 * nmtt)?;
        let mtt: Vec<u64> = (0..nmtt).map(|i| be64(input, create_mkey_in::SIZE_BYTES + 8 * i)).collect();
        if mtt[..needed].iter().any(|e| e & ((1u64 << page_shift) - 1) & plain::mkey::MTT_PTAG_MASK != 0) {
            return Err(bad_param(op, sy::BAD_PAGE_ADDRESS));
        }
        let mkey = |index| Mkey {
            index,
            variant: g(mkc::mkey_7_0) as u8,
            pd,
            lw: g(mkc::lw) != 0,
            rr: g(mkc::rr) != 0,
            rw: g(mkc::rw) != 0,
            atomic: g(mkc::a) != 0,
            start,
            len,
            length64,
            page_shift,
            mtt,
            mkc: ctx.bytes(input).map(|b| b.to_vec()).unwrap_or_default(),
        };
        let index = self.objects.mkeys.add(1 << limits::LOG_MAX_MKEY, mkey).ok_or_else(|| no_res(op))?;
        self.objects.mkeys_created += 1;
        let mut o = out(create_mkey_out::SIZE_BYTES);
        create_mkey_out::mkey_index.set(&mut o, index as u64);
        Ok(o)
    }

    pub(super) fn cmd_destroy_mkey(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DESTROY_MKEY.0;
        need_in(op, input, destroy_mkey_in::SIZE_BYTES)?;
        let index = destroy_mkey_in::mkey_index.get(input) as u32;
        if self.objects.mkeys.remove(&index).is_none() {
            return Err(bad_res(op));
        }
        self.objects.mkeys_destroyed += 1;
        Ok(out(destroy_mkey_out::SIZE_BYTES))
    }

    pub(super) fn cmd_query_mkey(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::QUERY_MKEY.0;
        need_in(op, input, query_mkey_in::SIZE_BYTES)?;
        let index = query_mkey_in::mkey_index.get(input) as u32;
        let Some(m) = self.objects.mkeys.get(&index) else { return Err(bad_res(op)) };
        let mut o = out(query_mkey_out::SIZE_BYTES);
        if let Some(d) = query_mkey_out::memory_key_mkey_entry.bytes_mut(&mut o) {
            let n = d.len().min(m.mkc.len());
            d[..n].copy_from_slice(&m.mkc[..n]);
        }
        Ok(o)
    }

    /// Looks up an MKey by its 32-bit key (index and variant must both match).
    pub fn mkey(&self, key: u32) -> Option<&Mkey> {
        self.objects.mkeys.get(&plain::mkey::index(key)).filter(|m| m.variant == plain::mkey::variant(key))
    }
}
