//! [`CmdHost`]: the host's IOVA allocator, command issuer and bring-up helpers, with
//! [`PreparedCmd`] (a command built and not yet posted) and [`CmdError`].

use super::{
    BLOCK_DATA, DEFAULT_IOVA_BASE, ENTRY, GUARD, HostBuffer, HostEq, INLINE, MAILBOX_BLOCK, MAILBOX_STRIDE, PAGE_SIZE,
    signature,
};
use crate::device::SimDevice;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};
use umlx_hwdesc::enums::{
    AccessRegId, AccessRegOpMod, CmdOpcode, CmdStatus, DeliveryStatus, HcaCapType, ManagePagesOpMod, PagesOpMod,
    TeardownProfile,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::{cmd, cmd_layout, cmd_prot_block, eq, eqe, iseg};

/// A command that did not complete with status OK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmdError {
    /// Delivery status of the entry (`status_own` bits 7:1); not OK means the firmware did not
    /// execute the command.
    pub delivery: DeliveryStatus,
    /// Command status (output byte 0).
    pub status: CmdStatus,
    /// Syndrome (output bytes 4..8).
    pub syndrome: u32,
    /// The device never handed the entry back within the timeout.
    pub timed_out: bool,
}

impl CmdError {
    fn timeout() -> CmdError {
        CmdError { delivery: DeliveryStatus::OK, status: CmdStatus::OK, syndrome: 0, timed_out: true }
    }

    /// The sim's syndrome reason (low 16 bits; see [`crate::firmware::syndrome`]).
    pub fn reason(&self) -> u16 {
        self.syndrome as u16
    }

    /// The opcode the sim's syndrome names (high 16 bits).
    pub fn syndrome_opcode(&self) -> u16 {
        (self.syndrome >> 16) as u16
    }
}

impl std::fmt::Display for CmdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.timed_out {
            return f.write_str("command timed out (the entry is still owned by the device)");
        }
        if self.delivery != DeliveryStatus::OK {
            return write!(f, "command delivery failed: {:?}", self.delivery);
        }
        write!(f, "command failed: {:?}, syndrome {:#010x}", self.status, self.syndrome)?;
        if let Some(why) = crate::firmware::syndrome::describe(self.syndrome) {
            write!(f, " ({why})")?;
        }
        Ok(())
    }
}

impl std::error::Error for CmdError {}

/// A command built in the queue and its mailboxes, not yet (or already) handed to the device.
#[derive(Debug)]
pub struct PreparedCmd {
    /// Command queue slot.
    pub slot: u32,
    /// Mailbox memory: the input blocks, then the output blocks, [`MAILBOX_STRIDE`] apart.
    pub mailbox: Option<HostBuffer>,
    /// Number of input blocks.
    pub in_blocks: usize,
    /// Number of output blocks.
    pub out_blocks: usize,
    /// Output length in bytes.
    pub outlen: usize,
}

impl PreparedCmd {
    /// Offset of input block `i` in [`PreparedCmd::mailbox`].
    pub fn in_block_offset(&self, i: usize) -> usize {
        assert!(i < self.in_blocks, "no input block {i}");
        i * MAILBOX_STRIDE
    }

    /// Offset of output block `i` in [`PreparedCmd::mailbox`].
    pub fn out_block_offset(&self, i: usize) -> usize {
        assert!(i < self.out_blocks, "no output block {i}");
        (self.in_blocks + i) * MAILBOX_STRIDE
    }

    fn mb(&self) -> &HostBuffer {
        self.mailbox.as_ref().expect("command has mailbox blocks")
    }

    /// IOVA of input block `i`.
    pub fn in_block_iova(&self, i: usize) -> u64 {
        self.mb().iova_at(self.in_block_offset(i))
    }

    /// IOVA of output block `i`.
    pub fn out_block_iova(&self, i: usize) -> u64 {
        self.mb().iova_at(self.out_block_offset(i))
    }

    /// A copy of input block `i`.
    pub fn in_block(&self, i: usize) -> Vec<u8> {
        self.mb().to_vec(self.in_block_offset(i), MAILBOX_BLOCK)
    }

    /// A copy of output block `i`.
    pub fn out_block(&self, i: usize) -> Vec<u8> {
        self.mb().to_vec(self.out_block_offset(i), MAILBOX_BLOCK)
    }
}

/// A zeroed command input of `size` bytes with `opcode` and `op_mod` set.
pub fn cmd_input(opcode: CmdOpcode, op_mod: u16, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    mbox_in::opcode.set(&mut v, opcode.0 as u64);
    mbox_in::op_mod.set(&mut v, op_mod as u64);
    v
}

/// A software host: IOVA allocator, command issuer and bring-up helpers.
pub struct CmdHost {
    dev: SimDevice,
    next_iova: u64,
    queue: HostBuffer,
    /// Slot used by [`CmdHost::run`] and [`CmdHost::exec`].
    pub slot: u32,
    /// How long [`CmdHost::poll`] waits for the device to hand an entry back.
    pub timeout: Duration,
    /// Sign every command (token, mailbox and entry signatures), as needed once
    /// `cmdif_checksum` is enabled.
    pub sign: bool,
    token: u8,
    page_chunks: Vec<HostBuffer>,
    fw_pages: BTreeSet<u64>,
}

impl std::fmt::Debug for CmdHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmdHost")
            .field("queue", &self.queue)
            .field("next_iova", &format_args!("{:#x}", self.next_iova))
            .field("fw_pages", &self.fw_pages.len())
            .finish_non_exhaustive()
    }
}

impl CmdHost {
    /// A host for `dev` whose IOVAs start at [`DEFAULT_IOVA_BASE`]. Maps the command queue page;
    /// touches no device register.
    pub fn new(dev: &SimDevice) -> CmdHost {
        CmdHost::with_iova_base(dev, DEFAULT_IOVA_BASE)
    }

    /// A host whose IOVAs start at `base` (4 KiB aligned).
    pub fn with_iova_base(dev: &SimDevice, base: u64) -> CmdHost {
        let queue = HostBuffer::new(dev, base, PAGE_SIZE).expect("mapping the command queue page");
        CmdHost {
            dev: dev.clone(),
            next_iova: base + PAGE_SIZE as u64 + GUARD,
            queue,
            slot: 0,
            timeout: Duration::from_secs(5),
            sign: false,
            token: 0,
            page_chunks: Vec::new(),
            fw_pages: BTreeSet::new(),
        }
    }

    /// The device.
    pub fn dev(&self) -> &SimDevice {
        &self.dev
    }

    /// The command queue page.
    pub fn queue(&mut self) -> &mut HostBuffer {
        &mut self.queue
    }

    /// Reserves `len` bytes (whole pages) of IOVA space without mapping it.
    pub fn reserve_iova(&mut self, len: usize) -> u64 {
        let iova = self.next_iova;
        self.next_iova += len.max(1).next_multiple_of(PAGE_SIZE) as u64 + GUARD;
        iova
    }

    /// Allocates and maps a zeroed buffer of `len` bytes at the next free IOVA.
    ///
    /// # Panics
    /// If the IOMMU refuses the mapping.
    pub fn alloc(&mut self, len: usize) -> HostBuffer {
        let iova = self.reserve_iova(len);
        HostBuffer::new(&self.dev, iova, len).expect("mapping a host buffer")
    }

    // ---- device attachment ----

    /// Sets memory-space and bus-master enable in the PCI COMMAND register.
    pub fn enable_bus_master(&self) {
        let mut b = [0u8; 2];
        self.dev.config_read(4, &mut b).expect("PCI COMMAND register");
        let v = u16::from_le_bytes(b) | 0x6;
        self.dev.config_write(4, &v.to_le_bytes()).expect("PCI COMMAND register");
    }

    /// Waits up to `timeout` for `initializing` (BAR0 0x1fc bit 31) to clear.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.dev.bar0_read32(iseg::INITIALIZING as u64) >> iseg::INITIALIZING_BIT & 1 == 0 {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// Writes the command queue address (BAR0 0x10 high, 0x14 low with `nic_interface` 0).
    pub fn program_queue(&self) {
        let iova = self.queue.iova();
        self.dev.bar0_write32(iseg::CMDQ_ADDR_H as u64, (iova >> 32) as u32);
        self.dev.bar0_write32(iseg::CMDQ_ADDR_L_SZ as u64, iova as u32 & iseg::CMDQ_ADDR_L_MASK);
    }

    /// Enables bus mastering, waits for the firmware and programs the command queue.
    ///
    /// # Panics
    /// If the firmware is still initializing after 5 s.
    pub fn attach(&mut self) {
        self.enable_bus_master();
        assert!(self.wait_ready(Duration::from_secs(5)), "firmware still initializing after 5 s");
        self.program_queue();
        // The firmware takes the queue address with `initializing` set again (Linux
        // `mlx5_function_enable` waits for it a second time).
        assert!(self.wait_ready(Duration::from_secs(5)), "firmware still initializing after the queue was programmed");
    }

    // ---- command issue ----

    /// Offset of `slot`'s entry in the queue page.
    pub fn entry_offset(slot: u32) -> usize {
        slot as usize * ENTRY
    }

    /// Builds `input` and an `outlen`-byte output in `slot`: the entry (ownership left with
    /// software) and both mailbox chains.
    pub fn prepare(&mut self, slot: u32, input: &[u8], outlen: usize) -> PreparedCmd {
        assert!((slot as usize) < cmd::MAX_COMMANDS, "no command slot {slot}");
        let in_blocks = input.len().saturating_sub(INLINE).div_ceil(BLOCK_DATA);
        let out_blocks = outlen.saturating_sub(INLINE).div_ceil(BLOCK_DATA);
        let total = in_blocks + out_blocks;
        let mailbox = (total > 0).then(|| self.alloc(total * MAILBOX_STRIDE));
        let p = PreparedCmd { slot, mailbox, in_blocks, out_blocks, outlen };
        // Chains: block i links to block i + 1 of the same chain, the last one to 0.
        let link = |first: usize, n: usize, data: Option<&[u8]>| {
            let mb = p.mb();
            for i in 0..n {
                let off = (first + i) * MAILBOX_STRIDE;
                if let Some(data) = data {
                    let start = INLINE + i * BLOCK_DATA;
                    let end = (start + BLOCK_DATA).min(data.len());
                    mb.write(off, &data[start..end]);
                }
                let next = if i + 1 < n { mb.iova_at(off + MAILBOX_STRIDE) } else { 0 };
                mb.write_u64_be(off + cmd_prot_block::next, next);
                mb.write_u32_be(off + cmd_prot_block::block_num, i as u32);
            }
        };
        if in_blocks > 0 {
            link(0, in_blocks, Some(input));
        }
        if out_blocks > 0 {
            link(in_blocks, out_blocks, None);
        }
        let mut e = [0u8; ENTRY];
        e[cmd_layout::type_] = cmd::PCI_CMD_XPORT;
        e[cmd_layout::inlen..cmd_layout::inlen + 4].copy_from_slice(&(input.len() as u32).to_be_bytes());
        if in_blocks > 0 {
            e[cmd_layout::in_ptr..cmd_layout::in_ptr + 8].copy_from_slice(&p.in_block_iova(0).to_be_bytes());
        }
        let n = input.len().min(INLINE);
        e[cmd_layout::in_..cmd_layout::in_ + n].copy_from_slice(&input[..n]);
        if out_blocks > 0 {
            e[cmd_layout::out_ptr..cmd_layout::out_ptr + 8].copy_from_slice(&p.out_block_iova(0).to_be_bytes());
        }
        e[cmd_layout::outlen..cmd_layout::outlen + 4].copy_from_slice(&(outlen as u32).to_be_bytes());
        self.queue.write(Self::entry_offset(slot), &e);
        p
    }

    /// Signs a prepared command: a fresh non-zero token in the entry and every block, the
    /// input blocks' `ctrl_sig`/`sig`, and the entry `sig` computed with `status_own` = 1.
    pub fn sign(&mut self, p: &PreparedCmd) {
        self.token = self.token.wrapping_add(1).max(1);
        let token = self.token;
        for i in 0..p.in_blocks {
            let off = p.in_block_offset(i);
            let mb = p.mb();
            let mut b = mb.to_vec(off, MAILBOX_BLOCK);
            b[cmd_prot_block::token] = token;
            b[cmd_prot_block::ctrl_sig] = 0;
            b[cmd_prot_block::sig] = 0;
            b[cmd_prot_block::ctrl_sig] = signature(&b[cmd_prot_block::rsvd0..cmd_prot_block::ctrl_sig]);
            b[cmd_prot_block::sig] = signature(&b[..cmd_prot_block::sig]);
            mb.write(off, &b);
        }
        for i in 0..p.out_blocks {
            p.mb().write_u8(p.out_block_offset(i) + cmd_prot_block::token, token);
        }
        let off = Self::entry_offset(p.slot);
        let mut e = self.queue.to_vec(off, ENTRY);
        e[cmd_layout::token] = token;
        e[cmd_layout::sig] = 0;
        e[cmd_layout::status_own] = cmd::CMD_OWNER_HW;
        e[cmd_layout::sig] = signature(&e);
        self.queue.write(off, &e[..ENTRY - 1]);
    }

    /// Hands a prepared command to the device: signs it if [`CmdHost::sign`] is set, sets the
    /// ownership bit and rings the doorbell.
    pub fn post(&mut self, p: &PreparedCmd) {
        if self.sign {
            self.sign(p);
        }
        self.queue.write_u8(Self::entry_offset(p.slot) + 63, cmd::CMD_OWNER_HW);
        self.ring(1 << p.slot);
    }

    /// Writes `mask` to the command doorbell.
    pub fn ring(&self, mask: u32) {
        self.dev.bar0_write32(iseg::CMD_DBELL as u64, mask);
    }

    /// The `status_own` byte of `slot`'s entry.
    pub fn status_own(&self, slot: u32) -> u8 {
        self.queue.read_u8(Self::entry_offset(slot) + 63)
    }

    /// Whether the device handed `slot` back.
    pub fn is_done(&self, slot: u32) -> bool {
        self.status_own(slot) & cmd::CMD_OWNER_MASK == 0
    }

    /// Waits up to [`CmdHost::timeout`] for the device to hand the command back, then collects
    /// its output.
    pub fn poll(&self, p: &PreparedCmd) -> Result<Vec<u8>, CmdError> {
        let deadline = Instant::now() + self.timeout;
        let mut spins = 0u32;
        while !self.is_done(p.slot) {
            if Instant::now() >= deadline {
                return Err(CmdError::timeout());
            }
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        self.collect(p)
    }

    /// Reads a completed command's delivery status and output (header in the entry, the rest
    /// from the output chain).
    pub fn collect(&self, p: &PreparedCmd) -> Result<Vec<u8>, CmdError> {
        let off = Self::entry_offset(p.slot);
        let delivery = DeliveryStatus::from_status_own(self.status_own(p.slot));
        if delivery != DeliveryStatus::OK {
            return Err(CmdError { delivery, status: CmdStatus::OK, syndrome: 0, timed_out: false });
        }
        let inline = self.queue.to_vec(off + cmd_layout::out, INLINE);
        let mut out = vec![0u8; p.outlen.max(INLINE)];
        out[..INLINE].copy_from_slice(&inline);
        for i in 0..p.out_blocks {
            let start = INLINE + i * BLOCK_DATA;
            let n = BLOCK_DATA.min(out.len() - start);
            p.mb().read(p.out_block_offset(i), &mut out[start..start + n]);
        }
        out.truncate(p.outlen);
        let status = CmdStatus(inline[0]);
        let syndrome = u32::from_be_bytes(inline[4..8].try_into().expect("4 bytes"));
        if status != CmdStatus::OK {
            return Err(CmdError { delivery, status, syndrome, timed_out: false });
        }
        Ok(out)
    }

    /// Runs `input` with an `outlen`-byte output on [`CmdHost::slot`] and waits for it.
    pub fn run(&mut self, input: &[u8], outlen: usize) -> Result<Vec<u8>, CmdError> {
        let slot = self.slot;
        self.run_on(slot, input, outlen)
    }

    /// Runs `input` on `slot` and waits for it.
    pub fn run_on(&mut self, slot: u32, input: &[u8], outlen: usize) -> Result<Vec<u8>, CmdError> {
        let p = self.prepare(slot, input, outlen);
        self.post(&p);
        self.poll(&p)
    }

    /// Builds an `in_size`-byte input for `opcode`/`op_mod`, lets `fill` set its fields, runs it
    /// with an `out_size`-byte output and waits for it.
    pub fn exec(
        &mut self,
        opcode: CmdOpcode,
        op_mod: u16,
        in_size: usize,
        out_size: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<Vec<u8>, CmdError> {
        let mut input = cmd_input(opcode, op_mod, in_size);
        fill(&mut input);
        self.run(&input, out_size)
    }

    // ---- bring-up and teardown ----

    /// ENABLE_HCA.
    pub fn enable_hca(&mut self) -> Result<(), CmdError> {
        self.exec(CmdOpcode::ENABLE_HCA, 0, enable_hca_in::SIZE_BYTES, enable_hca_out::SIZE_BYTES, |_| {})?;
        Ok(())
    }

    /// QUERY_ISSI: (current ISSI, `supported_issi_dw0`).
    pub fn query_issi(&mut self) -> Result<(u16, u32), CmdError> {
        let o = self.exec(CmdOpcode::QUERY_ISSI, 0, query_issi_in::SIZE_BYTES, query_issi_out::SIZE_BYTES, |_| {})?;
        Ok((query_issi_out::current_issi.get(&o) as u16, query_issi_out::supported_issi_dw0.get(&o) as u32))
    }

    /// SET_ISSI.
    pub fn set_issi(&mut self, issi: u16) -> Result<(), CmdError> {
        self.exec(CmdOpcode::SET_ISSI, 0, set_issi_in::SIZE_BYTES, set_issi_out::SIZE_BYTES, |i| {
            set_issi_in::current_issi.set(i, issi as u64);
        })?;
        Ok(())
    }

    /// QUERY_PAGES: the signed number of pages the firmware wants for `stage`.
    pub fn query_pages(&mut self, stage: PagesOpMod) -> Result<i32, CmdError> {
        let o = self.exec(
            CmdOpcode::QUERY_PAGES,
            stage.0,
            query_pages_in::SIZE_BYTES,
            query_pages_out::SIZE_BYTES,
            |_| {},
        )?;
        Ok(query_pages_out::num_pages.get(&o) as u32 as i32)
    }

    /// MANAGE_PAGES GIVE of exactly these addresses (no host bookkeeping).
    pub fn give_page_list(&mut self, pages: &[u64]) -> Result<(), CmdError> {
        let size = manage_pages_in::SIZE_BYTES + 8 * pages.len();
        self.exec(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::GIVE.0, size, manage_pages_out::SIZE_BYTES, |i| {
            manage_pages_in::input_num_entries.set(i, pages.len() as u64);
            for (k, p) in pages.iter().enumerate() {
                let off = manage_pages_in::SIZE_BYTES + 8 * k;
                i[off..off + 8].copy_from_slice(&p.to_be_bytes());
            }
        })?;
        Ok(())
    }

    /// MANAGE_PAGES GIVE of `n` fresh pages from the host's pool (a GIVE of zero entries when
    /// `n` is 0, as drivers issue it). Returns their addresses.
    pub fn give_pages(&mut self, n: usize) -> Result<Vec<u64>, CmdError> {
        if n == 0 {
            self.give_page_list(&[])?;
            return Ok(Vec::new());
        }
        let chunk = self.alloc(n * PAGE_SIZE);
        let pages: Vec<u64> = (0..n).map(|i| chunk.iova_at(i * PAGE_SIZE)).collect();
        self.give_page_list(&pages)?;
        self.fw_pages.extend(pages.iter().copied());
        self.page_chunks.push(chunk);
        Ok(pages)
    }

    /// MANAGE_PAGES TAKE of up to `n` pages; returns the addresses the firmware gave back (and
    /// frees the host memory of chunks that are entirely back).
    ///
    /// # Panics
    /// If the firmware returns more entries than asked or an address the host never gave.
    pub fn take_pages(&mut self, n: usize) -> Result<Vec<u64>, CmdError> {
        let outlen = manage_pages_out::SIZE_BYTES + 8 * n;
        let o =
            self.exec(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::TAKE.0, manage_pages_in::SIZE_BYTES, outlen, |i| {
                manage_pages_in::input_num_entries.set(i, n as u64);
            })?;
        let k = manage_pages_out::output_num_entries.get(&o) as usize;
        assert!(k <= n, "firmware returned {k} pages for a TAKE of {n}");
        let pages: Vec<u64> = (0..k)
            .map(|i| {
                let off = manage_pages_out::SIZE_BYTES + 8 * i;
                u64::from_be_bytes(o[off..off + 8].try_into().expect("8 bytes"))
            })
            .collect();
        for p in &pages {
            assert!(self.fw_pages.remove(p), "firmware returned page {p:#x} the host never gave");
        }
        let held = &self.fw_pages;
        self.page_chunks.retain(|c| (0..c.len() / PAGE_SIZE).any(|i| held.contains(&c.iova_at(i * PAGE_SIZE))));
        Ok(pages)
    }

    /// QUERY_PAGES for `stage`, then GIVE that many pages. Returns how many were given.
    pub fn satisfy_pages(&mut self, stage: PagesOpMod) -> Result<usize, CmdError> {
        let n = self.query_pages(stage)?.max(0) as usize;
        self.give_pages(n)?;
        Ok(n)
    }

    /// TAKEs pages in batches of 256 until the firmware returns none. Returns how many came back.
    pub fn reclaim_all(&mut self) -> Result<usize, CmdError> {
        let mut total = 0;
        loop {
            let got = self.take_pages(256)?.len();
            if got == 0 {
                return Ok(total);
            }
            total += got;
        }
    }

    /// Pages the host believes the firmware holds.
    pub fn fw_page_count(&self) -> usize {
        self.fw_pages.len()
    }

    /// ACCESS_REG: writes `data` to register `reg` (op_mod 0) or reads it (op_mod 1, `data`
    /// gives the size). Returns the register data of the output.
    pub fn access_reg(&mut self, reg: AccessRegId, write: bool, data: &[u8]) -> Result<Vec<u8>, CmdError> {
        let base = access_register_in::SIZE_BYTES;
        let o = self.exec(
            CmdOpcode::ACCESS_REG,
            if write { AccessRegOpMod::WRITE.0 } else { AccessRegOpMod::READ.0 },
            base + data.len(),
            base + data.len(),
            |i| {
                access_register_in::register_id.set(i, reg.0 as u64);
                i[base..].copy_from_slice(data);
            },
        )?;
        Ok(o[access_register_out::SIZE_BYTES..].to_vec())
    }

    /// ACCESS_REG write of HOST_ENDIANNESS (`he` = 0 on little-endian hosts).
    pub fn write_host_endianness(&mut self) -> Result<(), CmdError> {
        let mut reg = [0u8; 16];
        reg[0] = if cfg!(target_endian = "big") { 0x80 } else { 0 };
        self.access_reg(AccessRegId::HOST_ENDIANNESS, true, &reg)?;
        Ok(())
    }

    /// QUERY_HCA_CAP: the 4096-byte capability area of `ty`, current or maximum.
    pub fn query_hca_cap(&mut self, ty: HcaCapType, current: bool) -> Result<Vec<u8>, CmdError> {
        let o = self.exec(
            CmdOpcode::QUERY_HCA_CAP,
            ty.op_mod(current),
            query_hca_cap_in::SIZE_BYTES,
            query_hca_cap_out::SIZE_BYTES,
            |_| {},
        )?;
        Ok(query_hca_cap_out::capability.bytes(&o).expect("capability area").to_vec())
    }

    /// SET_HCA_CAP of `ty` with the 4096-byte area `cap`.
    pub fn set_hca_cap(&mut self, ty: HcaCapType, cap: &[u8]) -> Result<(), CmdError> {
        self.exec(
            CmdOpcode::SET_HCA_CAP,
            ty.op_mod(false),
            set_hca_cap_in::SIZE_BYTES,
            set_hca_cap_out::SIZE_BYTES,
            |i| {
                set_hca_cap_in::capability.bytes_mut(i).expect("capability area").copy_from_slice(cap);
            },
        )?;
        Ok(())
    }

    /// INIT_HCA.
    pub fn init_hca(&mut self) -> Result<(), CmdError> {
        self.exec(CmdOpcode::INIT_HCA, 0, init_hca_in::SIZE_BYTES, init_hca_out::SIZE_BYTES, |_| {})?;
        Ok(())
    }

    /// The bring-up up to INIT_HCA: attach, ENABLE_HCA, ISSI 1, boot pages, host endianness,
    /// init pages, INIT_HCA.
    pub fn bring_up(&mut self) -> Result<(), CmdError> {
        self.attach();
        self.enable_hca()?;
        self.set_issi(1)?;
        self.satisfy_pages(PagesOpMod::BOOT)?;
        self.write_host_endianness()?;
        self.satisfy_pages(PagesOpMod::INIT)?;
        self.init_hca()
    }

    /// TEARDOWN_HCA with `profile`; returns the output `state` bit.
    pub fn teardown_hca(&mut self, profile: TeardownProfile) -> Result<u8, CmdError> {
        let o =
            self.exec(CmdOpcode::TEARDOWN_HCA, 0, teardown_hca_in::SIZE_BYTES, teardown_hca_out::SIZE_BYTES, |i| {
                teardown_hca_in::profile.set(i, profile.0 as u64);
            })?;
        Ok(teardown_hca_out::state.get(&o) as u8)
    }

    /// DISABLE_HCA.
    pub fn disable_hca(&mut self) -> Result<(), CmdError> {
        self.exec(CmdOpcode::DISABLE_HCA, 0, disable_hca_in::SIZE_BYTES, disable_hca_out::SIZE_BYTES, |_| {})?;
        Ok(())
    }

    /// The full teardown: TEARDOWN_HCA (graceful), every page back, DISABLE_HCA. Returns how
    /// many pages came back.
    pub fn shut_down(&mut self) -> Result<usize, CmdError> {
        self.teardown_hca(TeardownProfile::GRACEFUL_CLOSE)?;
        let n = self.reclaim_all()?;
        self.disable_hca()?;
        Ok(n)
    }

    // ---- simple allocations ----

    /// ALLOC_UAR: the UAR index.
    pub fn alloc_uar(&mut self) -> Result<u32, CmdError> {
        let o = self.exec(CmdOpcode::ALLOC_UAR, 0, alloc_uar_in::SIZE_BYTES, alloc_uar_out::SIZE_BYTES, |_| {})?;
        Ok(alloc_uar_out::uar.get(&o) as u32)
    }

    /// DEALLOC_UAR.
    pub fn dealloc_uar(&mut self, uar: u32) -> Result<(), CmdError> {
        self.exec(CmdOpcode::DEALLOC_UAR, 0, dealloc_uar_in::SIZE_BYTES, dealloc_uar_out::SIZE_BYTES, |i| {
            dealloc_uar_in::uar.set(i, uar as u64);
        })?;
        Ok(())
    }

    /// ALLOC_PD: the PD number.
    pub fn alloc_pd(&mut self) -> Result<u32, CmdError> {
        let o = self.exec(CmdOpcode::ALLOC_PD, 0, alloc_pd_in::SIZE_BYTES, alloc_pd_out::SIZE_BYTES, |_| {})?;
        Ok(alloc_pd_out::pd.get(&o) as u32)
    }

    /// DEALLOC_PD.
    pub fn dealloc_pd(&mut self, pd: u32) -> Result<(), CmdError> {
        self.exec(CmdOpcode::DEALLOC_PD, 0, dealloc_pd_in::SIZE_BYTES, dealloc_pd_out::SIZE_BYTES, |i| {
            dealloc_pd_in::pd.set(i, pd as u64);
        })?;
        Ok(())
    }

    /// CREATE_EQ of 2^`log_size` entries on `uar`, subscribed to the event types set in
    /// `event_mask` (bit n = type n, types 0..63), raising MSI-X vector `intr`. The ring is a
    /// fresh buffer with every owner byte pre-set to 1 and one 4 KiB page per PAS entry.
    pub fn create_eq(&mut self, uar: u32, log_size: u32, event_mask: u64, intr: u32) -> Result<HostEq, CmdError> {
        let bytes = eq::EQE_SIZE << log_size;
        let buf = self.alloc(bytes);
        for i in 0..(1usize << log_size) {
            buf.write_u8(i * eq::EQE_SIZE + eqe::owner, eq::EQE_OWNER_INIT_VAL);
        }
        let npages = buf.len() / PAGE_SIZE;
        let size = create_eq_in::SIZE_BYTES + 8 * npages;
        let ctx = create_eq_in::eq_context_entry;
        let o = self.exec(CmdOpcode::CREATE_EQ, 0, size, create_eq_out::SIZE_BYTES, |i| {
            ctx.inner(eqc::log_eq_size).set(i, log_size as u64);
            ctx.inner(eqc::uar_page).set(i, uar as u64);
            ctx.inner(eqc::intr).set(i, intr as u64);
            ctx.inner(eqc::log_page_size).set(i, 0);
            create_eq_in::event_bitmask.elem(0).set(i, event_mask);
            for k in 0..npages {
                let off = create_eq_in::SIZE_BYTES + 8 * k;
                i[off..off + 8].copy_from_slice(&buf.iova_at(k * PAGE_SIZE).to_be_bytes());
            }
        })?;
        let eqn = create_eq_out::eq_number.get(&o) as u32;
        Ok(HostEq { eqn, uar, log_size, intr, buf, ci: 0, dev: self.dev.clone() })
    }

    /// DESTROY_EQ.
    pub fn destroy_eq(&mut self, eqn: u32) -> Result<(), CmdError> {
        self.exec(CmdOpcode::DESTROY_EQ, 0, destroy_eq_in::SIZE_BYTES, destroy_eq_out::SIZE_BYTES, |i| {
            destroy_eq_in::eq_number.set(i, eqn as u64);
        })?;
        Ok(())
    }
}
