//! The send queue: WQEs built in the SQ ring (one at a time, or in chains on an [`SqChain`]),
//! the doorbell record and the BlueFlame doorbell.

use super::*;

/// Everything a send WQE can carry.
#[derive(Clone, Copy, Debug)]
pub struct SendWqe<'a> {
    /// Work-request id returned in the completion.
    pub wr_id: u64,
    /// PRM opcode.
    pub opcode: u8,
    /// [`send_flags`] bits (FENCE, SIGNALED, SOLICITED).
    pub send_flags: u32,
    /// Immediate data (already in wire order as a u32 value).
    pub imm: u32,
    /// Remote address for RDMA / atomics.
    pub remote: Remote,
    /// Atomic operands: swap/add, compare.
    pub atomic: (u64, u64),
    /// Gather list.
    pub sges: &'a [Sge],
    /// Inline data instead of the gather list.
    pub inline: Option<&'a [u8]>,
    /// UD address vector (48 bytes, as the hardware reads it).
    pub av: Option<&'a [u8; wqe_av::SIZE]>,
}

/// Where an SQ lives and what it accepts.
#[derive(Clone, Copy, Debug)]
pub struct SqGeometry {
    /// QP number.
    pub qpn: u32,
    /// Byte offset of the SQ in the QP buffer.
    pub sq_offset: usize,
    /// log2 of the number of WQEBBs.
    pub log_bbs: u32,
    /// UAR index of the doorbell.
    pub uar_index: u32,
    /// Max SGEs per WQE.
    pub max_sge: u32,
    /// Max inline bytes per WQE.
    pub max_inline: u32,
    /// Signal every WQE (`sq_sig_all`).
    pub sig_all: bool,
    /// Size of each of the two buffers of the BlueFlame register the doorbell alternates
    /// between ([`crate::hca::Caps::bf_buf_size`], from the cap `log_bf_reg_size`).
    pub bf_buf_size: usize,
}

/// Whether a BlueFlame buffer size is one the doorbell can alternate by: a power of two of at
/// least 8 bytes whose two buffers, from the first register at [`uar::BF_OFFSET`], stay in the
/// UAR page (toggling the offset's bit for it moves between them).
const fn bf_buf_size_fits(size: usize) -> bool {
    size.is_power_of_two() && size >= 8 && uar::BF_OFFSET & size == 0 && uar::BF_OFFSET + 2 * size <= uar::UAR_PAGE_SIZE
}

/// `fm_ce_se` for each combination of the three [`send_flags`] bits, with `sig_all` forcing
/// CQ_UPDATE.
const fn fm_ce_se_table(sig_all: bool) -> [u8; 8] {
    let mut t = [0u8; 8];
    let mut f = 0;
    while f < 8 {
        let mut v = 0;
        if f as u32 & send_flags::FENCE != 0 {
            v |= flags::FENCE;
        }
        if f as u32 & send_flags::SIGNALED != 0 || sig_all {
            v |= flags::CQ_UPDATE;
        }
        if f as u32 & send_flags::SOLICITED != 0 {
            v |= flags::SOLICITED;
        }
        t[f] = v;
        f += 1;
    }
    t
}

/// The send queue writer of one QP.
///
/// The fields the fast path touches come first and are raw pointers resolved at creation (the
/// ring, its WQE-id slots and tail, the doorbell record, the BlueFlame register), so posting a
/// WQE follows no pointer chains. The memory they point into is held by the writer
/// ([`QueueMemory`]), as is the [`WrRing`].
pub struct SendQueue<B: Backend> {
    /// Start of the SQ in the QP buffer (validated at creation to hold the whole ring).
    base: *mut u8,
    /// Producer counter in WQEBBs.
    cur_post: u32,
    /// WQEBBs in the ring minus one (the ring is a power of two).
    mask: u32,
    /// `qpn << 8`: the control segment's second dword without its DS count.
    qpn_ds: u32,
    /// `fm_ce_se` by the low three send-flag bits (sig_all folded in).
    fm_ce_se: [u8; 8],
    /// The same, placed in the control segment's second 8 bytes as stored (big-endian).
    fm_ce_se_word: [u64; 8],
    /// The WQE-id slots of the ring (`mask + 1` of them, kept alive by `ring`).
    slots: *const SqSlot,
    /// WQEBBs retired by completions (in `ring`).
    tail: *const AtomicU32,
    /// Where the known free space ends (refreshed from the tail only when `cur_post` gets
    /// there: the tail is another thread's cache line).
    limit: u32,
    /// The first 8 bytes of the last WQE written, as stored: the doorbell value.
    last_ctrl: u64,
    /// A batch is open ([`SendQueue::hold_doorbell`]): finished chains ring no doorbell, and
    /// the batch is published or discarded as a whole. Where it started: the producer counter
    /// and `last_ctrl` then.
    held: Option<(u32, u64)>,
    /// The SQ counter of the doorbell record (dword 1; in `_mem`).
    dbr: *mut u32,
    /// Whether the backend lets stores reach the UAR page's BlueFlame registers directly
    /// (then `bf` is an address), or doorbells go through [`Backend::write64`] (then `bf` is
    /// a BAR0 offset).
    bf_direct: bool,
    /// The BlueFlame buffer the next doorbell goes to: a pointer into the UAR page, or (not
    /// `bf_direct`) a BAR0 offset held as an address without provenance. The UAR page is
    /// page-aligned and the two buffers differ in one bit (`bf_buf_size`), so toggling that bit
    /// moves between them in either form.
    bf: *mut u8,
    /// Where `bf` starts (the first buffer of the UAR's first BlueFlame register).
    bf_start: *mut u8,
    /// The BlueFlame buffer size: `bf` toggles by it.
    bf_buf_size: usize,
    backend: Arc<B>,
    ring: Arc<WrRing>,
    /// The memory `base` and `dbr` point into, kept alive by the writer (never read through).
    _mem: Arc<dyn QueueMemory>,
    /// Max SGEs per WQE.
    pub max_sge: u32,
    /// Max inline bytes per WQE.
    pub max_inline: u32,
}

/// The 16-byte segments inline data `d` takes with its header: none for no data.
#[inline(always)]
fn inline_ds(d: &[u8]) -> u32 {
    if d.is_empty() { 0 } else { (d.len() + wqe_inline_seg::SIZE).div_ceil(DS_BYTES) as u32 }
}

/// A remote address segment's two 8-byte words, as stored.
#[inline(always)]
fn raddr_words(r: Remote) -> (u64, u64) {
    (r.addr.to_be(), ((r.rkey as u64) << RADDR_RKEY_SHIFT).to_be())
}

/// The WQE's size in 16-byte segments: control, address vector, remote address, atomic
/// operands, then the inline data (behind its 4-byte header) or one data segment per SGE.
fn ds_count(w: &SendWqe<'_>) -> u32 {
    let mut ds = 1; // ctrl
    if w.av.is_some() {
        ds += AV_DS;
    }
    match w.opcode {
        opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ => ds += 1,
        opcode::ATOMIC_CS | opcode::ATOMIC_FA => ds += 2,
        _ => {}
    }
    match w.inline {
        Some(d) => ds += inline_ds(d),
        None => ds += w.sges.iter().filter(|s| !s.is_empty()).count() as u32,
    }
    ds
}

impl<B: Backend> SendQueue<B> {
    /// A writer for the SQ described by `geo` in `mem`'s buffer (which must hold the whole
    /// ring), its producer counter in `mem`'s doorbell record, doorbells through `backend`. The
    /// writer keeps `mem` alive.
    pub fn new(
        backend: Arc<B>,
        mem: Arc<dyn QueueMemory>,
        geo: SqGeometry,
        ring: Arc<WrRing>,
    ) -> Result<SendQueue<B>, PostError> {
        let (buf, dbr) = (mem.buf(), mem.dbr());
        let bytes = WQEBB << geo.log_bbs;
        if geo.sq_offset.checked_add(bytes).is_none_or(|e| e > buf.len())
            || ring.sq.len() < (1 << geo.log_bbs)
            || dbr.len() < 8
            || geo.log_bbs > 16
            || !bf_buf_size_fits(geo.bf_buf_size)
        {
            return Err(PostError::WqeTooLarge);
        }
        // SAFETY: in bounds (checked above); only the address is computed here.
        let base = unsafe { buf.as_ptr().add(geo.sq_offset) };
        // SAFETY: the send counter lies in `dbr` (checked above); address only.
        let dbr_sq = unsafe { dbr.as_ptr().add(qp_dbr::send_counter) }.cast::<u32>();
        let uar_offset = geo.uar_index as usize * uar::UAR_PAGE_SIZE;
        // (A page that is not page-aligned breaks the backend's contract: doorbells then go
        // through `write64`.)
        let page = backend.doorbell_page(uar_offset).filter(|p| p.as_ptr().addr() % uar::UAR_PAGE_SIZE == 0);
        let bf_direct = page.is_some();
        let bf_start = match page {
            // SAFETY: BF_OFFSET is inside the UAR page; address only.
            Some(p) => unsafe { p.as_ptr().add(uar::BF_OFFSET) },
            None => std::ptr::without_provenance_mut(uar_offset + uar::BF_OFFSET),
        };
        Ok(SendQueue {
            base,
            cur_post: 0,
            mask: (1 << geo.log_bbs) - 1,
            qpn_ds: geo.qpn << wqe_consts::WQE_CTRL_QPN_SHIFT,
            fm_ce_se: fm_ce_se_table(geo.sig_all),
            fm_ce_se_word: fm_ce_se_table(geo.sig_all).map(|f| ((f as u64) << CTRL_FM_CE_SE_SHIFT).to_be()),
            slots: ring.sq.as_ptr(),
            tail: &*ring.sq_tail as *const AtomicU32,
            limit: 1 << geo.log_bbs,
            last_ctrl: 0,
            held: None,
            dbr: dbr_sq,
            bf_direct,
            bf: bf_start,
            bf_start,
            bf_buf_size: geo.bf_buf_size,
            backend,
            ring,
            _mem: mem,
            max_sge: geo.max_sge,
            max_inline: geo.max_inline,
        })
    }

    #[inline(always)]
    fn tail(&self) -> u32 {
        // SAFETY: `tail` points into `ring`, which this writer keeps alive.
        unsafe { (*self.tail).load(Ordering::Acquire) }
    }

    /// The producer counter at which the ring is full, as of the last retired WQE.
    #[inline(always)]
    fn fresh_limit(&self) -> u32 {
        self.tail().wrapping_add(self.mask + 1)
    }

    /// WQEBBs free for posting.
    #[inline]
    pub fn free_bbs(&self) -> u32 {
        self.mask + 1 - self.cur_post.wrapping_sub(self.tail())
    }

    /// The producer counter (WQEBBs).
    pub fn cur_post(&self) -> u32 {
        self.cur_post
    }

    /// Resets the producer state (QP back to RESET).
    pub fn reset(&mut self) {
        self.cur_post = 0;
        self.limit = self.mask + 1;
        self.last_ctrl = 0;
        self.held = None;
        self.ring.sq_tail.store(0, Ordering::Release);
        self.bf = self.bf_start;
    }

    /// Records the WQE at `bb` spanning `nbb` WQEBBs: its wr_id and where the SQ head will be
    /// once it completes.
    #[inline(always)]
    fn record(&mut self, bb: u32, nbb: u32, wr_id: u64) {
        let next = bb.wrapping_add(nbb);
        // SAFETY: `slots` has `mask + 1` entries kept alive by `ring`; the index is masked.
        let slot = unsafe { &*self.slots.add((bb & self.mask) as usize) };
        slot.wr_id.store(wr_id, Ordering::Relaxed);
        slot.head.store(next, Ordering::Release);
        self.cur_post = next;
    }

    /// Opens a batch (the new post-send API's `ibv_wr_start`): the chains posted until
    /// [`SendQueue::release_doorbell`] are written but not published, so that the device sees
    /// them all at once, or none of them after [`SendQueue::discard_held`]. Nothing if a batch
    /// is open already.
    pub fn hold_doorbell(&mut self) {
        if self.held.is_none() {
            self.held = Some((self.cur_post, self.last_ctrl));
        }
    }

    /// Closes the batch and publishes what it wrote with one doorbell.
    pub fn release_doorbell(&mut self) {
        if let Some((start, _)) = self.held.take()
            && self.cur_post != start
        {
            self.ring_doorbell();
        }
    }

    /// Closes the batch and drops what it wrote: the producer state goes back to where the
    /// batch started (the device never saw those WQEs; the next posts overwrite them).
    pub fn discard_held(&mut self) {
        if let Some((start, last_ctrl)) = self.held.take() {
            self.cur_post = start;
            self.last_ctrl = last_ctrl;
        }
    }

    /// Starts posting a chain: the producer state moves into the returned [`SqChain`] (kept in
    /// registers while the chain is written) and comes back, with the doorbell, in
    /// [`SqChain::finish`].
    #[inline(always)]
    pub fn begin(&mut self) -> SqChain<'_, B> {
        let bb = self.cur_post;
        SqChain { limit: self.limit, bb, start: bb, last_ctrl: self.last_ctrl, sq: self }
    }

    /// Stores one 16-byte segment, as laid out in `seg`, at 16-byte segment `seg16` of the WQE
    /// starting at WQEBB `bb`, wrapping at the ring's end.
    #[inline(always)]
    fn put_seg(&self, bb: u32, seg16: u32, seg: &[u8; DS_BYTES]) {
        let (w0, w1) = seg.split_at(8);
        self.put_seg_words(
            bb,
            seg16,
            u64::from_ne_bytes(w0.try_into().unwrap_or_default()),
            u64::from_ne_bytes(w1.try_into().unwrap_or_default()),
        );
    }

    /// Stores a 16-byte segment given as its two 8-byte words as they lie in memory.
    #[inline(always)]
    fn put_seg_words(&self, bb: u32, seg16: u32, w0: u64, w1: u64) {
        // The ring's bytes are a power of two (`mask + 1` WQEBBs of 64 bytes): the wrap is a
        // mask, not a `%`, which the compiler cannot tell is one and makes a division (tens of
        // cycles, once a segment).
        let ring_mask = (((self.mask as usize) + 1) << WQEBB_SHIFT) - 1;
        let off = (((bb & self.mask) as usize) << WQEBB_SHIFT).wrapping_add(seg16 as usize * DS_BYTES) & ring_mask;
        // SAFETY: the ring [base, base + ring_mask + 1) lies in the QP buffer (checked in `new`;
        // the writer keeps the buffer alive); `off` is a multiple of 16 at most `ring_mask` (the
        // ring is a multiple of 64 bytes), so both 8-byte stores are in the ring and aligned.
        unsafe {
            let p = self.base.add(off).cast::<u64>();
            p.write_volatile(w0);
            p.add(1).write_volatile(w1);
        }
    }

    /// Stores the inline segment of `d` (not empty) from 16-byte segment `seg` of the WQE at
    /// WQEBB `bb` on: the inline header, then the data, in 16-byte segments wrapping with the
    /// ring, the last one zero-padded.
    #[inline(always)]
    fn put_inline(&self, bb: u32, mut seg: u32, d: &[u8]) {
        const HEADER: usize = wqe_inline_seg::SIZE;
        let header = wqe_inline_seg { byte_count: U32::new(wqe_consts::INLINE_SEG | d.len() as u32) };
        let header = header.as_bytes();
        // The first segment: the header and the data's first bytes (zero-padded). Where the data
        // fills it, put together from loads of fixed lengths: no call to `memset` or `memcpy`.
        let (head, rest) = d.split_at(d.len().min(DS_BYTES - HEADER));
        let first = match head.first_chunk::<{ DS_BYTES - HEADER }>() {
            Some(full) => {
                let dword = |b: &[u8]| u128::from(u32::from_le_bytes(b.try_into().unwrap_or_default()));
                let qword = |b: &[u8]| u128::from(u64::from_le_bytes(b.try_into().unwrap_or_default()));
                (dword(header) | qword(&full[..8]) << 32 | dword(&full[8..]) << 96).to_le_bytes()
            }
            None => {
                let mut part = [0u8; DS_BYTES];
                part[..HEADER].copy_from_slice(header);
                part[HEADER..HEADER + head.len()].copy_from_slice(head);
                part
            }
        };
        self.put_seg(bb, seg, &first);
        seg += 1;
        // The rest, 16 bytes a segment, stored from the data itself (no staging copy).
        let mut whole = rest.chunks_exact(DS_BYTES);
        for chunk in &mut whole {
            self.put_seg(bb, seg, chunk.try_into().unwrap_or(&[0; DS_BYTES]));
            seg += 1;
        }
        // The last, zero-padded: the data's last 16 bytes shifted past what the segments before
        // took, where there are 16.
        let tail = whole.remainder();
        if !tail.is_empty() {
            let padded = match d.last_chunk::<DS_BYTES>() {
                Some(last) => (u128::from_le_bytes(*last) >> (8 * (DS_BYTES - tail.len()))).to_le_bytes(),
                None => {
                    let mut part = [0u8; DS_BYTES];
                    part[..tail.len()].copy_from_slice(tail);
                    part
                }
            };
            self.put_seg(bb, seg, &padded);
        }
    }

    /// The control segment of a WQE at WQEBB `bb` as its two 8-byte words, as stored.
    #[inline(always)]
    fn ctrl_words(&self, bb: u32, opcode: u8, ds: u32, send_flags: u32, imm: u32) -> (u64, u64) {
        let idx_opcode = ((bb & WQE_INDEX_MASK) << wqe_consts::WQE_CTRL_WQE_INDEX_SHIFT) | opcode as u32;
        let ctrl0 = ((idx_opcode as u64) << CTRL_IDX_OPCODE_SHIFT) | ((self.qpn_ds | ds) as u64) << CTRL_QPN_DS_SHIFT;
        // Byte swapping distributes over OR: the flags word is stored pre-swapped.
        let ctrl1_be = self.fm_ce_se_word[(send_flags & 7) as usize] | ((imm as u64) << CTRL_IMM_SHIFT).to_be();
        (ctrl0.to_be(), ctrl1_be)
    }

    /// Writes one WQE into the ring (no doorbell). Call [`SendQueue::ring_doorbell`] after the
    /// last WQE of a chain.
    #[inline]
    pub fn write_wqe(&mut self, w: &SendWqe<'_>) -> Result<(), PostError> {
        if w.inline.is_none() && w.sges.len() > self.max_sge as usize {
            return Err(PostError::TooManySges);
        }
        if let Some(d) = w.inline
            && d.len() > self.max_inline as usize
        {
            return Err(PostError::InlineTooLarge);
        }
        let ds = ds_count(w);
        if ds > MAX_DS {
            return Err(PostError::WqeTooLarge);
        }
        let nbb = ds.div_ceil(DS_PER_BB);
        if nbb > self.free_bbs() {
            return Err(PostError::QueueFull);
        }
        self.limit = self.fresh_limit();
        let bb = self.cur_post;
        let ctrl = wqe_ctrl_seg {
            opmod_idx_opcode: U32::new(
                ((bb & WQE_INDEX_MASK) << wqe_consts::WQE_CTRL_WQE_INDEX_SHIFT) | w.opcode as u32,
            ),
            qpn_ds: U32::new(self.qpn_ds | ds),
            fm_ce_se: self.fm_ce_se[(w.send_flags & 7) as usize],
            imm: U32::new(w.imm),
            ..Default::default()
        };
        let ctrl: [u8; DS_BYTES] = zerocopy::transmute!(ctrl);
        self.put_seg(bb, 0, &ctrl);
        self.last_ctrl = u64::from_ne_bytes(ctrl[..8].try_into().unwrap_or_default());
        let mut seg = 1;
        if let Some(av) = w.av {
            for (i, part) in av.chunks_exact(DS_BYTES).enumerate() {
                self.put_seg(bb, seg + i as u32, part.try_into().unwrap_or(&[0; DS_BYTES]));
            }
            seg += AV_DS;
        }
        match w.opcode {
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                let raddr = wqe_raddr_seg {
                    raddr: U64::new(w.remote.addr),
                    rkey: U32::new(w.remote.rkey),
                    ..Default::default()
                };
                self.put_seg(bb, seg, &zerocopy::transmute!(raddr));
                seg += 1;
                if matches!(w.opcode, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
                    let atomic = wqe_atomic_seg { swap_add: U64::new(w.atomic.0), compare: U64::new(w.atomic.1) };
                    self.put_seg(bb, seg, &zerocopy::transmute!(atomic));
                    seg += 1;
                }
            }
            _ => {}
        }
        match w.inline {
            Some(d) if !d.is_empty() => self.put_inline(bb, seg, d),
            Some(_) => {}
            None => {
                for sge in w.sges.iter().filter(|s| !s.is_empty()) {
                    let [w0, w1] = sge.wire();
                    self.put_seg_words(bb, seg, w0, w1);
                    seg += 1;
                }
            }
        }
        self.record(bb, nbb, w.wr_id);
        Ok(())
    }

    /// Publishes the WQEs written since the last doorbell: the doorbell record, then the
    /// BlueFlame register with the first 8 bytes of the last WQE.
    #[inline(always)]
    pub fn ring_doorbell(&mut self) {
        // Everything read before the barriers (which the compiler treats as touching all memory).
        let (counter, ctrl, bf) = ((self.cur_post & DBR_COUNTER_MASK).to_be(), self.last_ctrl, self.bf);
        dma_wmb();
        // SAFETY: `dbr` points at dword 1 of the QP's doorbell record (checked in `new`; the
        // writer keeps it alive); 4-byte aligned.
        unsafe { self.dbr.write_volatile(counter) };
        dma_wmb();
        // The next doorbell goes to the other buffer; noted first, so that the register write
        // is the last thing done (nothing is kept across a backend's call).
        let size = self.bf_buf_size;
        self.bf = bf.map_addr(|a| a ^ size);
        if self.bf_direct {
            // SAFETY: the backend keeps the UAR page mapped while it lives (this writer holds
            // it); `bf` is one of the first BlueFlame register's two buffers in that page
            // (`bf_buf_size_fits` was checked in `new`), 8-byte aligned.
            unsafe { bf.cast::<u64>().write_volatile(ctrl) }
        } else {
            self.backend.write64(bf.addr(), u64::from_be(ctrl));
        }
    }
}

/// The fields of a simple send WQE besides its opcode, flags and SGE, as
/// [`SqChain::put_simple_from`] reads them: each where the WQE takes it. A binding hands its own
/// request (libibverbs.so.1 its `struct ibv_send_wr`), read in place, so that none of them is
/// kept in a register across the post's checks; [`SimpleFields`] holds them as values.
pub trait SimpleWqeSource {
    /// The work request ID.
    fn wr_id(&self) -> u64;
    /// The immediate, as the 32 wire bits (read only for an opcode with one).
    fn imm(&self) -> u32;
    /// The remote address and R_Key (read only for an RDMA opcode).
    fn remote(&self) -> Remote;
}

/// A [`SimpleWqeSource`] of values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SimpleFields {
    /// The work request ID.
    pub wr_id: u64,
    /// The immediate (0 for an opcode without one).
    pub imm: u32,
    /// The remote address and R_Key (unused for a SEND).
    pub remote: Remote,
}

impl SimpleWqeSource for SimpleFields {
    #[inline(always)]
    fn wr_id(&self) -> u64 {
        self.wr_id
    }
    #[inline(always)]
    fn imm(&self) -> u32 {
        self.imm
    }
    #[inline(always)]
    fn remote(&self) -> Remote {
        self.remote
    }
}

/// A chain of send WQEs being written (see [`SendQueue::begin`]). Dropping it without
/// [`SqChain::finish`] leaves the written WQEs unposted: the next chain overwrites them.
pub struct SqChain<'q, B: Backend> {
    sq: &'q mut SendQueue<B>,
    /// Producer counter.
    bb: u32,
    /// Where the known free space ends (refreshed from the tail when `bb` reaches it).
    limit: u32,
    /// The producer counter when the chain started.
    start: u32,
    /// The first 8 bytes of the last WQE written, as stored.
    last_ctrl: u64,
}

impl<B: Backend> SqChain<'_, B> {
    /// Whether the ring has room for one more WQEBB, as far as known without reading the
    /// tail (see [`SqChain::write_simple`] for the refreshing check).
    #[inline(always)]
    pub fn has_room(&self) -> bool {
        self.bb != self.limit
    }

    /// WQEBBs known free without reading the tail.
    #[inline(always)]
    pub fn room(&self) -> u32 {
        self.limit.wrapping_sub(self.bb)
    }

    /// [`SqChain::put_simple`] after making sure of room (reading the tail if needed).
    #[inline(always)]
    pub fn write_simple(
        &mut self,
        wr_id: u64,
        opcode: u8,
        send_flags: u32,
        imm: u32,
        remote: Option<Remote>,
        sge: &Sge,
    ) -> Result<(), PostError> {
        self.make_room(1)?;
        self.put_simple(wr_id, opcode, send_flags, imm, remote, sge);
        Ok(())
    }

    /// Makes sure of room for `nbb` WQEBBs: the known limit, else the limit the tail gives now.
    #[inline(always)]
    fn make_room(&mut self, nbb: u32) -> Result<(), PostError> {
        if self.room() < nbb {
            self.limit = self.sq.fresh_limit();
            self.sq.limit = self.limit;
            if self.room() < nbb {
                return Err(PostError::QueueFull);
            }
        }
        Ok(())
    }

    /// One RC WQE whose data is inline: a SEND or SEND_IMM, or with `remote` an RDMA_WRITE or
    /// RDMA_WRITE_IMM (the latency tests' requests), as [`SendQueue::write_wqe`] writes it,
    /// without its general descriptor (no inline segment for empty `data`). Reads the tail
    /// only when the ring looks too full for the WQE.
    #[inline]
    pub fn write_inline(
        &mut self,
        wr_id: u64,
        opcode: u8,
        send_flags: u32,
        imm: u32,
        remote: Option<Remote>,
        data: &[u8],
    ) -> Result<(), PostError> {
        if data.len() > self.sq.max_inline as usize {
            return Err(PostError::InlineTooLarge);
        }
        let seg = 1 + remote.is_some() as u32;
        let ds = seg + inline_ds(data);
        if ds > MAX_DS {
            return Err(PostError::WqeTooLarge);
        }
        let nbb = ds.div_ceil(DS_PER_BB);
        self.make_room(nbb)?;
        let bb = self.bb;
        let sq = &mut *self.sq;
        let ctrl1_be;
        (self.last_ctrl, ctrl1_be) = sq.ctrl_words(bb, opcode, ds, send_flags, imm);
        sq.put_seg_words(bb, 0, self.last_ctrl, ctrl1_be);
        if let Some(r) = remote {
            let (w0, w1) = raddr_words(r);
            sq.put_seg_words(bb, 1, w0, w1);
        }
        if !data.is_empty() {
            sq.put_inline(bb, seg, data);
        }
        sq.record(bb, nbb, wr_id);
        self.bb = sq.cur_post;
        Ok(())
    }

    /// Fast path: one WQE with one SGE, no inline data, no atomic operands, no address vector
    /// (an RC SEND, SEND_IMM, RDMA_WRITE(_IMM) or RDMA_READ), in a ring known to have room
    /// ([`SqChain::has_room`]; without room the WQE would overwrite one not yet completed).
    /// `send_flags` holds the [`send_flags`] bits; `imm` is the immediate as the 32 wire bits.
    /// A zero-length SGE is left out (a zero byte count would mean 2 GiB).
    #[inline(always)]
    pub fn put_simple(&mut self, wr_id: u64, opcode: u8, send_flags: u32, imm: u32, remote: Option<Remote>, sge: &Sge) {
        let has_remote = remote.is_some();
        let fields = SimpleFields { wr_id, imm, remote: remote.unwrap_or_default() };
        self.put_simple_from(opcode, send_flags, true, has_remote, sge, &fields);
    }

    /// [`SqChain::put_simple`] with the work request ID, immediate and remote address read from
    /// `src` where the WQE takes each: the immediate only when `has_imm` (else 0), the remote
    /// address only when `has_remote`.
    #[inline(always)]
    pub fn put_simple_from(
        &mut self,
        opcode: u8,
        send_flags: u32,
        has_imm: bool,
        has_remote: bool,
        sge: &Sge,
        src: &impl SimpleWqeSource,
    ) {
        let sq = &*self.sq;
        let bb = self.bb;
        let ds = 1 + has_remote as u32 + !sge.is_empty() as u32;
        let imm = if has_imm { src.imm() } else { 0 };
        let ctrl1_be;
        (self.last_ctrl, ctrl1_be) = sq.ctrl_words(bb, opcode, ds, send_flags, imm);
        let idx = (bb & sq.mask) as usize;
        // SAFETY: the ring [base, base + 64 * (mask + 1)) lies in the QP buffer (checked in
        // `SendQueue::new`; the queue keeps the buffer alive); idx <= mask; WQEBBs are 64-byte
        // aligned. `slots` has mask + 1 entries, kept alive by the queue's `ring`.
        unsafe {
            let p = sq.base.add(idx << WQEBB_SHIFT).cast::<u64>();
            p.write_volatile(self.last_ctrl);
            p.add(1).write_volatile(ctrl1_be);
            let d = if has_remote {
                let (w0, w1) = raddr_words(src.remote());
                let ra = p.add(CTRL_WORDS);
                ra.write_volatile(w0);
                ra.add(1).write_volatile(w1);
                ra.add(RADDR_WORDS)
            } else {
                p.add(CTRL_WORDS)
            };
            let [w0, w1] = sge.wire();
            d.write_volatile(w0);
            d.add(1).write_volatile(w1);
            let slot = &*sq.slots.add(idx);
            slot.wr_id.store(src.wr_id(), Ordering::Relaxed);
            slot.head.store(bb.wrapping_add(1), Ordering::Release);
        }
        self.bb = bb.wrapping_add(1);
    }

    /// Runs `f` on the queue itself with the chain's producer state synced in and out: for
    /// WQEs built by the caller through [`SendQueue::write_wqe`].
    #[inline(always)]
    pub fn with_queue<R>(&mut self, f: impl FnOnce(&mut SendQueue<B>) -> R) -> R {
        self.sq.cur_post = self.bb;
        self.sq.limit = self.limit;
        self.sq.last_ctrl = self.last_ctrl;
        let r = f(self.sq);
        self.bb = self.sq.cur_post;
        self.limit = self.sq.limit;
        self.last_ctrl = self.sq.last_ctrl;
        r
    }

    /// Ends the chain: the producer state goes back to the queue and, if any WQE was written,
    /// the doorbell rings once (unless a batch holds it: [`SendQueue::hold_doorbell`]).
    #[inline(always)]
    pub fn finish(self) {
        // (`limit` is written back where it changes.)
        self.sq.cur_post = self.bb;
        self.sq.last_ctrl = self.last_ctrl;
        if self.bb != self.start && self.sq.held.is_none() {
            self.sq.ring_doorbell();
        }
    }
}
