//! The hardware objects, each destroyed by its firmware command when dropped (RAII): UAR, PD,
//! transport domain, completion EQ, memory key (MKey + MTT over pinned memory), CQ, QP (RC and
//! UD) with its state transitions, SRQ.
//!
//! Objects hold an `Arc` of what they depend on (the HCA, their PD, their CQs), so a parent
//! cannot be destroyed while a child lives. A destroy command that fails at drop time (the
//! device died) is reported on stderr; the memory stays mapped until the HCA itself goes, so
//! the device can never reach freed memory.

use crate::backend::Backend;
use crate::dma::{DmaBuffer, DmaMemory};
use crate::{Error, Hca, OpenHca, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use umlx_hwdesc::Field;
use umlx_hwdesc::enums::{
    ArmRqOpMod, CmdOpcode, CqResizeFields, EventType, MkcAccessMode, ModifyCqOpMod, QpServiceType, QpState, RqType,
};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::page::ADAPTER_PAGE_SIZE;
use umlx_hwdesc::plain::{cq as cqk, cqe64, eq as eqk, eqe, eqe_comp, mkey as mkeyk, wqe as wqek};

fn report<B: Backend>(hca: &Hca<B>, what: &str, r: Result<Vec<u8>>) {
    if let Err(e) = r
        && !hca.is_fatal()
    {
        eprintln!("umlx: {}: destroying {what} failed: {e}", hca.name());
    }
}

fn pas_bytes(buf: &mut [u8], start: usize, pages: impl Iterator<Item = u64>) {
    for (i, p) in pages.enumerate() {
        let off = start + 8 * i;
        buf[off..off + 8].copy_from_slice(&p.to_be_bytes());
    }
}

fn pages_of<B: Backend>(buf: &DmaBuffer<B>) -> impl Iterator<Item = u64> + '_ {
    (0..buf.len().div_ceil(ADAPTER_PAGE_SIZE)).map(move |i| buf.iova() + (ADAPTER_PAGE_SIZE * i) as u64)
}

/// A UAR page: doorbells for CQs and SQs.
pub struct Uar<B: Backend> {
    hca: Arc<OpenHca<B>>,
    index: u32,
}

impl<B: Backend> Uar<B> {
    /// ALLOC_UAR.
    pub fn new(hca: &Arc<OpenHca<B>>) -> Result<Uar<B>> {
        let out = hca.command(CmdOpcode::ALLOC_UAR, 0, alloc_uar_in::SIZE_BYTES, alloc_uar_out::SIZE_BYTES, |_| {})?;
        Ok(Uar { hca: hca.clone(), index: alloc_uar_out::uar.get(&out) as u32 })
    }

    /// UAR index (page number in BAR0).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// BAR0 offset of the UAR page.
    pub fn bar_offset(&self) -> usize {
        self.index as usize * umlx_hwdesc::plain::uar::UAR_PAGE_SIZE
    }

    /// The HCA.
    pub fn hca(&self) -> &Arc<OpenHca<B>> {
        &self.hca
    }
}

impl<B: Backend> Drop for Uar<B> {
    fn drop(&mut self) {
        let r =
            self.hca.command(CmdOpcode::DEALLOC_UAR, 0, dealloc_uar_in::SIZE_BYTES, dealloc_uar_out::SIZE_BYTES, |b| {
                dealloc_uar_in::uar.set(b, self.index as u64);
            });
        report(&self.hca, &format!("UAR {}", self.index), r);
    }
}

/// A protection domain.
pub struct Pd<B: Backend> {
    hca: Arc<OpenHca<B>>,
    pdn: u32,
}

impl<B: Backend> Pd<B> {
    /// ALLOC_PD.
    pub fn new(hca: &Arc<OpenHca<B>>) -> Result<Arc<Pd<B>>> {
        let out = hca.command(CmdOpcode::ALLOC_PD, 0, alloc_pd_in::SIZE_BYTES, alloc_pd_out::SIZE_BYTES, |_| {})?;
        Ok(Arc::new(Pd { hca: hca.clone(), pdn: alloc_pd_out::pd.get(&out) as u32 }))
    }

    /// PD number.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// The HCA.
    pub fn hca(&self) -> &Arc<OpenHca<B>> {
        &self.hca
    }
}

impl<B: Backend> Drop for Pd<B> {
    fn drop(&mut self) {
        let r =
            self.hca.command(CmdOpcode::DEALLOC_PD, 0, dealloc_pd_in::SIZE_BYTES, dealloc_pd_out::SIZE_BYTES, |b| {
                dealloc_pd_in::pd.set(b, self.pdn as u64);
            });
        report(&self.hca, &format!("PD {}", self.pdn), r);
    }
}

/// A transport domain.
pub struct TransportDomain<B: Backend> {
    hca: Arc<OpenHca<B>>,
    tdn: u32,
}

impl<B: Backend> TransportDomain<B> {
    /// ALLOC_TRANSPORT_DOMAIN.
    pub fn new(hca: &Arc<OpenHca<B>>) -> Result<TransportDomain<B>> {
        let out = hca.command(
            CmdOpcode::ALLOC_TRANSPORT_DOMAIN,
            0,
            alloc_transport_domain_in::SIZE_BYTES,
            alloc_transport_domain_out::SIZE_BYTES,
            |_| {},
        )?;
        Ok(TransportDomain { hca: hca.clone(), tdn: alloc_transport_domain_out::transport_domain.get(&out) as u32 })
    }

    /// Transport domain number.
    pub fn tdn(&self) -> u32 {
        self.tdn
    }
}

impl<B: Backend> Drop for TransportDomain<B> {
    fn drop(&mut self) {
        let r = self.hca.command(
            CmdOpcode::DEALLOC_TRANSPORT_DOMAIN,
            0,
            dealloc_transport_domain_in::SIZE_BYTES,
            dealloc_transport_domain_out::SIZE_BYTES,
            |b| {
                dealloc_transport_domain_in::transport_domain.set(b, self.tdn as u64);
            },
        );
        report(&self.hca, &format!("transport domain {}", self.tdn), r);
    }
}

/// A completion EQ on its own MSI-X vector: CQs bound to it raise their completion events
/// there (a completion channel).
pub struct CompEq<B: Backend> {
    hca: Arc<OpenHca<B>>,
    eqn: u32,
    vector: u32,
    buf: DmaBuffer<B>,
    log_size: u32,
    ci: AtomicU32,
}

impl<B: Backend> CompEq<B> {
    /// CREATE_EQ on `vector` with no event subscriptions (completion events always go to the
    /// CQ's EQ), armed.
    pub fn new(hca: &Arc<OpenHca<B>>, vector: u32, log_size: u32) -> Result<Arc<CompEq<B>>> {
        if vector == 0 || vector >= hca.backend().irq_count() {
            return Err(Error::InvalidArgument(format!(
                "completion vector {vector}: the device has vectors 1..{} (0 is the async EQ)",
                hca.backend().irq_count()
            )));
        }
        // Linux `create_map_eq` / rdma-core: the requested entries plus MLX5_NUM_SPARE_EQE,
        // rounded up to a power of two, so the device never overruns while the driver drains.
        let n = ((1usize << log_size) + eqk::NUM_SPARE_EQE as usize).next_power_of_two();
        let log_size = n.trailing_zeros();
        let buf = DmaBuffer::new(hca.dma_space(), (n * eqk::EQE_SIZE).max(ADAPTER_PAGE_SIZE), false)?;
        for i in 0..n {
            buf.write_u8(i * eqk::EQE_SIZE + eqe::owner, eqk::EQE_OWNER_INIT_VAL)?;
        }
        let npages = buf.len().div_ceil(ADAPTER_PAGE_SIZE);
        let uar = hca.uar();
        let out = hca.command(
            CmdOpcode::CREATE_EQ,
            0,
            create_eq_in::SIZE_BYTES + 8 * npages,
            create_eq_out::SIZE_BYTES,
            |b| {
                let c = create_eq_in::eq_context_entry;
                c.inner(eqc::log_eq_size).set(b, log_size as u64);
                c.inner(eqc::uar_page).set(b, uar as u64);
                c.inner(eqc::intr).set(b, vector as u64);
                pas_bytes(b, create_eq_in::SIZE_BYTES, pages_of(&buf));
            },
        )?;
        let eq = CompEq {
            hca: hca.clone(),
            eqn: create_eq_out::eq_number.get(&out) as u32,
            vector,
            buf,
            log_size,
            ci: AtomicU32::new(0),
        };
        eq.doorbell(true);
        Ok(Arc::new(eq))
    }

    /// EQ number (the `c_eqn` of CQs bound here).
    pub fn eqn(&self) -> u32 {
        self.eqn
    }

    /// The eventfd signalled when the EQ fires.
    pub fn event_fd(&self) -> Option<Arc<std::os::fd::OwnedFd>> {
        self.hca.backend().irq_eventfd(self.vector)
    }

    fn doorbell(&self, arm: bool) {
        let off = crate::hca::eq_doorbell_offset(self.hca.uar(), arm);
        self.hca.backend().write32(off, crate::hca::eq_doorbell_value(self.eqn, self.ci.load(Ordering::Relaxed)));
    }

    /// Entries of the EQ as created (the requested count plus the spare entries, rounded up).
    pub fn entries(&self) -> u32 {
        1 << self.log_size
    }

    /// Drains the EQ: calls `f(cqn)` for each completion event, then re-arms. While draining,
    /// the consumer index is written without arming every `NUM_SPARE_EQE` entries (Linux
    /// `mlx5_eq_comp_int` / `eq_update_ci`, rdma-core), so the device never sees the EQ full.
    pub fn drain(&self, mut f: impl FnMut(u32)) -> Result<usize> {
        let mut count = 0;
        loop {
            let ci = self.ci.load(Ordering::Relaxed);
            let Some(base) = crate::hca::ready_eqe(&self.buf, ci, self.log_size) else { break };
            crate::dma::dma_rmb();
            let ty = self.buf.read_u8(base + eqe::type_)?;
            let cqn = self.buf.read_u32_be(base + eqe::data + eqe_comp::cqn)? & cqk::NUM_MASK_24;
            self.ci.store(ci.wrapping_add(1), Ordering::Relaxed);
            if EventType(ty) == EventType::COMP {
                f(cqn);
            }
            count += 1;
            if count % eqk::NUM_SPARE_EQE as usize == 0 {
                self.doorbell(false);
            }
        }
        self.doorbell(true);
        Ok(count)
    }
}

impl<B: Backend> Drop for CompEq<B> {
    fn drop(&mut self) {
        let r =
            self.hca.command(CmdOpcode::DESTROY_EQ, 0, destroy_eq_in::SIZE_BYTES, destroy_eq_out::SIZE_BYTES, |b| {
                destroy_eq_in::eq_number.set(b, self.eqn as u64);
            });
        report(&self.hca, &format!("EQ {}", self.eqn), r);
    }
}

/// Remote and local access rights of a memory key (ibv_access_flags values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Access(pub u32);

impl Access {
    /// IBV_ACCESS_LOCAL_WRITE.
    pub const LOCAL_WRITE: Access = Access(1);
    /// IBV_ACCESS_REMOTE_WRITE.
    pub const REMOTE_WRITE: Access = Access(2);
    /// IBV_ACCESS_REMOTE_READ.
    pub const REMOTE_READ: Access = Access(4);
    /// IBV_ACCESS_REMOTE_ATOMIC.
    pub const REMOTE_ATOMIC: Access = Access(8);

    /// Whether all of `other` is set.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

static MKEY_VARIANT: AtomicU32 = AtomicU32::new(0x5a);

/// A memory key over pinned, mapped memory (MTT translation, one entry per memory page: huge
/// pages give few entries).
pub struct Mkey<B: Backend> {
    hca: Arc<OpenHca<B>>,
    _pd: Arc<Pd<B>>,
    index: u32,
    key: u32,
    addr: u64,
    len: u64,
}

impl<B: Backend> Mkey<B> {
    /// CREATE_MKEY for `len` bytes at virtual address `addr` whose pages sit at IOVAs
    /// `iova_of_page(i)` (page size `1 << page_shift`; `addr` may start inside the first page).
    pub fn create(
        pd: &Arc<Pd<B>>,
        addr: u64,
        len: u64,
        page_shift: u32,
        access: Access,
        iova_of_page: impl Fn(usize) -> u64,
    ) -> Result<Mkey<B>> {
        let hca = pd.hca().clone();
        if access.contains(Access::REMOTE_WRITE) && !access.contains(Access::LOCAL_WRITE)
            || access.contains(Access::REMOTE_ATOMIC) && !access.contains(Access::LOCAL_WRITE)
        {
            return Err(Error::InvalidArgument(
                "remote write and remote atomic access need local write (IBV_ACCESS_LOCAL_WRITE)".into(),
            ));
        }
        if access.0 & !0xf != 0 {
            return Err(Error::InvalidArgument(format!("unsupported access flags {:#x}", access.0)));
        }
        let ps = 1u64 << page_shift;
        let npages = ((addr & (ps - 1)) + len).div_ceil(ps).max(1) as usize;
        let nmtt = npages.next_multiple_of(2);
        let variant = MKEY_VARIANT.fetch_add(1, Ordering::Relaxed) as u8;
        let write = access.contains(Access::LOCAL_WRITE);
        let out = hca.command(
            CmdOpcode::CREATE_MKEY,
            0,
            create_mkey_in::SIZE_BYTES + 8 * nmtt,
            create_mkey_out::SIZE_BYTES,
            |b| {
                create_mkey_in::pg_access.set(b, 1);
                create_mkey_in::translations_octword_actual_size.set(b, (nmtt / 2) as u64);
                let c = create_mkey_in::memory_key_mkey_entry;
                let s = |b: &mut Vec<u8>, f: Field, v: u64| {
                    c.inner(f).set(b, v);
                };
                s(b, mkc::access_mode_4_2, MkcAccessMode::MTT.bits_4_2() as u64);
                s(b, mkc::access_mode_1_0, MkcAccessMode::MTT.bits_1_0() as u64);
                s(b, mkc::lr, 1);
                s(b, mkc::lw, write as u64);
                s(b, mkc::rr, access.contains(Access::REMOTE_READ) as u64);
                s(b, mkc::rw, access.contains(Access::REMOTE_WRITE) as u64);
                s(b, mkc::a, access.contains(Access::REMOTE_ATOMIC) as u64);
                s(b, mkc::qpn, cqk::NUM_MASK_24 as u64); // no QP bound
                s(b, mkc::mkey_7_0, variant as u64);
                s(b, mkc::pd, pd.pdn() as u64);
                s(b, mkc::start_addr, addr);
                s(b, mkc::len, len);
                s(b, mkc::translations_octword_size, (nmtt / 2) as u64);
                s(b, mkc::log_page_size, page_shift as u64);
                let flags = if write { mkeyk::MTT_READ | mkeyk::MTT_WRITE } else { mkeyk::MTT_READ };
                pas_bytes(b, create_mkey_in::SIZE_BYTES, (0..npages).map(|i| iova_of_page(i) | flags));
            },
        )?;
        let index = create_mkey_out::mkey_index.get(&out) as u32;
        Ok(Mkey { hca, _pd: pd.clone(), index, key: mkeyk::key(index, variant), addr, len })
    }

    /// Registers a whole DMA buffer (already pinned and mapped) at virtual address `addr`.
    pub fn for_buffer(pd: &Arc<Pd<B>>, buf: &DmaBuffer<B>, addr: u64, access: Access) -> Result<Mkey<B>> {
        let ps = buf.page_size();
        let shift = ps.trailing_zeros();
        let base = buf.iova();
        Mkey::create(pd, addr, buf.len() as u64, shift, access, |i| base + (i * ps) as u64)
    }

    /// The local key (= remote key).
    pub fn lkey(&self) -> u32 {
        self.key
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.key
    }

    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the key covers no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<B: Backend> Drop for Mkey<B> {
    fn drop(&mut self) {
        let r = self.hca.command(
            CmdOpcode::DESTROY_MKEY,
            0,
            destroy_mkey_in::SIZE_BYTES,
            destroy_mkey_out::SIZE_BYTES,
            |b| {
                destroy_mkey_in::mkey_index.set(b, self.index as u64);
            },
        );
        report(&self.hca, &format!("MKey {:#x}", self.key), r);
    }
}

/// A memory region: pinned DMA memory owned by the region plus its MKey.
pub struct MemoryRegion<B: Backend> {
    // Field order: the key goes before the memory it translates.
    mkey: Mkey<B>,
    buf: DmaBuffer<B>,
}

impl<B: Backend> MemoryRegion<B> {
    /// Allocates `len` bytes of pinned memory (2 MiB pages when `huge` and available), maps it
    /// and registers it with `access`; the region's address is its IOVA.
    pub fn new(pd: &Arc<Pd<B>>, len: usize, huge: bool, access: Access) -> Result<MemoryRegion<B>> {
        let buf = DmaBuffer::new(pd.hca().dma_space(), len.max(1), huge)?;
        let mkey = Mkey::for_buffer(pd, &buf, buf.iova(), access)?;
        Ok(MemoryRegion { mkey, buf })
    }

    /// The key.
    pub fn mkey(&self) -> &Mkey<B> {
        &self.mkey
    }

    /// The memory (safe accessors; no Rust references into it).
    pub fn memory(&self) -> &DmaMemory {
        &self.buf
    }

    /// The address work requests use for this region (its IOVA).
    pub fn addr(&self) -> u64 {
        self.buf.iova()
    }
}

/// Buffer and doorbell record of a hardware queue, shared (`Arc`) by the queue object and the
/// queue's writer or reader, which keeps it alive (see [`crate::datapath::QueueMemory`]): the
/// memory goes back to the system when both are gone, so neither the device (the object
/// destroys its queue first) nor the data path can reach freed memory.
pub struct QueueMem<B: Backend> {
    /// The queue buffer.
    pub buf: DmaBuffer<B>,
    /// The doorbell record page.
    pub dbr: DmaBuffer<B>,
}

impl<B: Backend> QueueMem<B> {
    fn new(hca: &Arc<OpenHca<B>>, bytes: usize) -> Result<Arc<QueueMem<B>>> {
        Ok(Arc::new(QueueMem {
            buf: DmaBuffer::new(
                hca.dma_space(),
                bytes.max(ADAPTER_PAGE_SIZE).next_multiple_of(ADAPTER_PAGE_SIZE),
                false,
            )?,
            dbr: DmaBuffer::new(hca.dma_space(), ADAPTER_PAGE_SIZE, false)?,
        }))
    }
}

/// A CQ's ring after MODIFY_CQ moved it ([`Cq::resize`]): the new buffer, and the CQ's
/// memory, whose doorbell record the CQ keeps using.
pub struct ResizedCqMem<B: Backend> {
    /// The new ring.
    pub buf: DmaBuffer<B>,
    /// The CQ's original memory (its doorbell record).
    pub orig: Arc<QueueMem<B>>,
}

/// A completion queue: 64-byte CQEs in a ring, a doorbell record, bound to an EQ.
pub struct Cq<B: Backend> {
    hca: Arc<OpenHca<B>>,
    cqn: u32,
    log_size: u32,
    mem: Arc<QueueMem<B>>,
    _eq: Option<Arc<CompEq<B>>>,
}

impl<B: Backend> Cq<B> {
    /// The CQ's buffer and doorbell record, for its reader ([`crate::datapath::CqRing`]) to
    /// keep alive.
    pub fn mem(&self) -> &Arc<QueueMem<B>> {
        &self.mem
    }

    /// CREATE_CQ with 2^`log_size` CQEs; completion events go to `eq` (or to the async EQ).
    pub fn new(hca: &Arc<OpenHca<B>>, log_size: u32, eq: Option<Arc<CompEq<B>>>) -> Result<Cq<B>> {
        let max = hca.caps().general_cap(cmd_hca_cap::log_max_cq_sz) as u32;
        if log_size > max {
            return Err(Error::InvalidArgument(format!("CQ of 2^{log_size} entries exceeds the device's 2^{max}")));
        }
        let n = 1usize << log_size;
        let mem = QueueMem::new(hca, n * cqe64::SIZE)?;
        for i in 0..n {
            mem.buf.write_u8(i * cqe64::SIZE + cqe64::op_own, cqk::CQE_OP_OWN_INVALID)?; // INVALID, owner 0
        }
        let eqn = eq.as_ref().map(|e| e.eqn()).unwrap_or_else(|| hca.async_eqn());
        let npages = mem.buf.len().div_ceil(ADAPTER_PAGE_SIZE);
        let uar = hca.uar();
        let out = hca.command(
            CmdOpcode::CREATE_CQ,
            0,
            create_cq_in::SIZE_BYTES + 8 * npages,
            create_cq_out::SIZE_BYTES,
            |b| {
                let c = create_cq_in::cq_context;
                c.inner(cqc::log_cq_size).set(b, log_size as u64);
                c.inner(cqc::uar_page).set(b, uar as u64);
                c.inner(cqc::c_eqn_or_apu_element).set(b, eqn as u64);
                c.inner(cqc::log_page_size).set(b, 0);
                c.inner(cqc::dbr_addr).set(b, mem.dbr.iova());
                pas_bytes(b, create_cq_in::SIZE_BYTES, pages_of(&mem.buf));
            },
        )?;
        Ok(Cq { hca: hca.clone(), cqn: create_cq_out::cqn.get(&out) as u32, log_size, mem, _eq: eq })
    }

    /// CQ number.
    pub fn cqn(&self) -> u32 {
        self.cqn
    }

    /// log2 of the number of CQEs.
    pub fn log_size(&self) -> u32 {
        self.log_size
    }

    /// The HCA.
    pub fn hca(&self) -> &Arc<OpenHca<B>> {
        &self.hca
    }

    /// MODIFY_CQ (resize) to a new ring of 2^`log_size` CQEs, returned. The device writes a
    /// RESIZE_CQ CQE (opcode 5) in the current ring at the switch point and goes on in the new
    /// ring; the caller copies the CQEs before the marker (see `umlx_verbs::Cq::resize`). The
    /// original ring stays allocated until the CQ is destroyed and the new one until its
    /// reader is gone (the returned memory holds the CQ's, whose doorbell record it shares).
    pub fn resize(&self, log_size: u32) -> Result<Arc<ResizedCqMem<B>>> {
        let max = self.hca.caps().general_cap(cmd_hca_cap::log_max_cq_sz) as u32;
        if log_size > max {
            return Err(Error::InvalidArgument(format!("CQ of 2^{log_size} entries exceeds the device's 2^{max}")));
        }
        let n = 1usize << log_size;
        let buf = DmaBuffer::new(self.hca.dma_space(), (n * cqe64::SIZE).max(ADAPTER_PAGE_SIZE), false)?;
        for i in 0..n {
            buf.write_u8(i * cqe64::SIZE + cqe64::op_own, cqk::CQE_OP_OWN_INVALID)?;
        }
        let npages = buf.len().div_ceil(ADAPTER_PAGE_SIZE);
        self.hca.command(
            CmdOpcode::MODIFY_CQ,
            ModifyCqOpMod::RESIZE.0,
            modify_cq_in::SIZE_BYTES + 8 * npages,
            modify_cq_out::SIZE_BYTES,
            |b| {
                modify_cq_in::cqn.set(b, self.cqn as u64);
                let select = CqResizeFields::LOG_SIZE | CqResizeFields::PG_OFFSET | CqResizeFields::PG_SIZE;
                modify_cq_in::modify_field_select_resize_field_select.set(b, select.bits() as u64);
                let c = modify_cq_in::cq_context;
                c.inner(cqc::log_cq_size).set(b, log_size as u64);
                c.inner(cqc::log_page_size).set(b, 0);
                pas_bytes(b, modify_cq_in::SIZE_BYTES, pages_of(&buf));
            },
        )?;
        Ok(Arc::new(ResizedCqMem { buf, orig: self.mem.clone() }))
    }

    /// QUERY_CQ: the device's producer counter (CQEs written, 24 bits).
    pub fn producer_counter(&self) -> Result<u32> {
        let out = self.hca.command(CmdOpcode::QUERY_CQ, 0, query_cq_in::SIZE_BYTES, query_cq_out::SIZE_BYTES, |b| {
            query_cq_in::cqn.set(b, self.cqn as u64);
        })?;
        Ok(query_cq_out::cq_context.inner(cqc::producer_counter).get(&out) as u32)
    }
}

impl<B: Backend> Drop for Cq<B> {
    fn drop(&mut self) {
        let r =
            self.hca.command(CmdOpcode::DESTROY_CQ, 0, destroy_cq_in::SIZE_BYTES, destroy_cq_out::SIZE_BYTES, |b| {
                destroy_cq_in::cqn.set(b, self.cqn as u64);
            });
        report(&self.hca, &format!("CQ {:#x}", self.cqn), r);
    }
}

/// A shared receive queue.
pub struct Srq<B: Backend> {
    hca: Arc<OpenHca<B>>,
    srqn: u32,
    mem: Arc<QueueMem<B>>,
    /// log2 entries.
    pub log_size: u32,
    /// log2 WQE stride in bytes.
    pub stride_shift: u32,
    _pd: Arc<Pd<B>>,
}

impl<B: Backend> Srq<B> {
    /// The SRQ's buffer and doorbell record, for its writer ([`crate::datapath::RecvQueue`])
    /// to keep alive.
    pub fn mem(&self) -> &Arc<QueueMem<B>> {
        &self.mem
    }

    /// CREATE_SRQ with 2^`log_size` WQEs of 2^`stride_shift` bytes (16-byte next segment + SGEs).
    pub fn new(pd: &Arc<Pd<B>>, log_size: u32, stride_shift: u32, limit: u32) -> Result<Srq<B>> {
        let hca = pd.hca().clone();
        let mem = QueueMem::new(&hca, (1usize << log_size) << stride_shift)?;
        // Link the WQEs: next_wqe_index of WQE i is i + 1 (wrapping).
        for i in 0..(1usize << log_size) {
            let next = ((i + 1) & ((1 << log_size) - 1)) as u16;
            mem.buf.write_u16_be((i << stride_shift) + 2, next)?;
        }
        let npages = mem.buf.len().div_ceil(ADAPTER_PAGE_SIZE);
        let out = hca.command(
            CmdOpcode::CREATE_SRQ,
            0,
            create_srq_in::SIZE_BYTES + 8 * npages,
            create_srq_out::SIZE_BYTES,
            |b| {
                let c = create_srq_in::srq_context_entry;
                c.inner(srqc::log_srq_size).set(b, log_size as u64);
                c.inner(srqc::log_rq_stride).set(b, (stride_shift - wqek::RQ_STRIDE_UNIT_SHIFT) as u64);
                c.inner(srqc::pd).set(b, pd.pdn() as u64);
                c.inner(srqc::lwm).set(b, limit as u64);
                c.inner(srqc::dbr_addr).set(b, mem.dbr.iova());
                pas_bytes(b, create_srq_in::SIZE_BYTES, pages_of(&mem.buf));
            },
        )?;
        Ok(Srq { hca, srqn: create_srq_out::srqn.get(&out) as u32, mem, log_size, stride_shift, _pd: pd.clone() })
    }

    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// ARM_RQ: raise the limit event when fewer than `limit` WQEs remain.
    pub fn arm(&self, limit: u32) -> Result<()> {
        self.hca
            .command(CmdOpcode::ARM_RQ, ArmRqOpMod::SRQ.0, arm_rq_in::SIZE_BYTES, arm_rq_out::SIZE_BYTES, |b| {
                arm_rq_in::srq_number.set(b, self.srqn as u64);
                arm_rq_in::lwm.set(b, limit as u64);
            })
            .map(|_| ())
    }
}

impl<B: Backend> Drop for Srq<B> {
    fn drop(&mut self) {
        let r =
            self.hca.command(CmdOpcode::DESTROY_SRQ, 0, destroy_srq_in::SIZE_BYTES, destroy_srq_out::SIZE_BYTES, |b| {
                destroy_srq_in::srqn.set(b, self.srqn as u64);
            });
        report(&self.hca, &format!("SRQ {:#x}", self.srqn), r);
    }
}

/// Sizes and bindings of a new QP.
#[derive(Clone, Copy, Debug)]
pub struct QpConfig {
    /// RC or UD.
    pub service: QpServiceType,
    /// log2 of the SQ size in 64-byte WQEBBs.
    pub log_sq_size: u32,
    /// log2 of the number of receive WQEs (ignored with an SRQ).
    pub log_rq_size: u32,
    /// log2 of the receive WQE stride in bytes (16 bytes per SGE).
    pub rq_stride_shift: u32,
}

/// The QP state transitions (each a firmware command).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// RST2INIT_QP.
    Rst2Init,
    /// INIT2INIT_QP.
    Init2Init,
    /// INIT2RTR_QP.
    Init2Rtr,
    /// RTR2RTS_QP.
    Rtr2Rts,
    /// RTS2RTS_QP.
    Rts2Rts,
    /// SQERR2RTS_QP.
    SqErr2Rts,
    /// SQD_RTS_QP.
    Sqd2Rts,
    /// 2ERR_QP.
    ToErr,
    /// 2RST_QP.
    ToRst,
}

impl Transition {
    /// The command opcode.
    pub fn opcode(self) -> CmdOpcode {
        match self {
            Transition::Rst2Init => CmdOpcode::RST2INIT_QP,
            Transition::Init2Init => CmdOpcode::INIT2INIT_QP,
            Transition::Init2Rtr => CmdOpcode::INIT2RTR_QP,
            Transition::Rtr2Rts => CmdOpcode::RTR2RTS_QP,
            Transition::Rts2Rts => CmdOpcode::RTS2RTS_QP,
            Transition::SqErr2Rts => CmdOpcode::SQERR2RTS_QP,
            Transition::Sqd2Rts => CmdOpcode::SQD_RTS_QP,
            Transition::ToErr => CmdOpcode::QP_2ERR,
            Transition::ToRst => CmdOpcode::QP_2RST,
        }
    }

    /// The state the QP is in after the transition.
    pub fn target(self) -> QpState {
        match self {
            Transition::Rst2Init | Transition::Init2Init => QpState::INIT,
            Transition::Init2Rtr => QpState::RTR,
            Transition::Rtr2Rts | Transition::Rts2Rts | Transition::SqErr2Rts | Transition::Sqd2Rts => QpState::RTS,
            Transition::ToErr => QpState::ERR,
            Transition::ToRst => QpState::RST,
        }
    }
}

/// A queue pair: RQ then SQ in one buffer, a doorbell record, its CQs, PD and UAR.
pub struct Qp<B: Backend> {
    hca: Arc<OpenHca<B>>,
    qpn: u32,
    /// Buffer (RQ at 0, SQ after it) and doorbell record.
    mem: Arc<QueueMem<B>>,
    /// The configuration it was created with.
    pub config: QpConfig,
    /// Byte offset of the SQ in the buffer.
    pub sq_offset: usize,
    /// The UAR of its SQ doorbell.
    pub uar: Arc<Uar<B>>,
    _pd: Arc<Pd<B>>,
    _send_cq: Arc<Cq<B>>,
    _recv_cq: Arc<Cq<B>>,
    _srq: Option<Arc<Srq<B>>>,
}

impl<B: Backend> Qp<B> {
    /// The QP's buffer (RQ at 0, SQ at [`Qp::sq_offset`]) and doorbell record, for its writers
    /// ([`crate::datapath::SendQueue`], [`crate::datapath::RecvQueue`]) to keep alive.
    pub fn mem(&self) -> &Arc<QueueMem<B>> {
        &self.mem
    }

    /// CREATE_QP.
    pub fn new(
        pd: &Arc<Pd<B>>,
        uar: &Arc<Uar<B>>,
        send_cq: &Arc<Cq<B>>,
        recv_cq: &Arc<Cq<B>>,
        srq: Option<&Arc<Srq<B>>>,
        config: QpConfig,
    ) -> Result<Qp<B>> {
        let hca = pd.hca().clone();
        let max = hca.caps().general_cap(cmd_hca_cap::log_max_qp_sz) as u32;
        if config.log_sq_size > max || config.log_rq_size > max {
            return Err(Error::InvalidArgument(format!("QP queue of more than 2^{max} entries")));
        }
        if config.service != QpServiceType::RC && config.service != QpServiceType::UD {
            return Err(Error::InvalidArgument(format!(
                "QP service type {} (RC and UD are supported)",
                config.service
            )));
        }
        let rq_bytes = if srq.is_some() { 0 } else { (1usize << config.log_rq_size) << config.rq_stride_shift };
        let sq_bytes = 64usize << config.log_sq_size;
        let mem = QueueMem::new(&hca, rq_bytes + sq_bytes)?;
        let npages = mem.buf.len().div_ceil(ADAPTER_PAGE_SIZE);
        let out = hca.command(
            CmdOpcode::CREATE_QP,
            0,
            create_qp_in::SIZE_BYTES + 8 * npages,
            create_qp_out::SIZE_BYTES,
            |b| {
                let c = create_qp_in::qpc;
                let s = |b: &mut Vec<u8>, f: Field, v: u64| {
                    c.inner(f).set(b, v);
                };
                s(b, qpc::st, config.service.0 as u64);
                s(b, qpc::pm_state, umlx_hwdesc::enums::QpPmState::MIGRATED.0 as u64);
                s(b, qpc::pd, pd.pdn() as u64);
                s(b, qpc::uar_page, uar.index() as u64);
                s(b, qpc::log_sq_size, config.log_sq_size as u64);
                s(b, qpc::cqn_snd, send_cq.cqn() as u64);
                s(b, qpc::cqn_rcv, recv_cq.cqn() as u64);
                s(b, qpc::dbr_addr, mem.dbr.iova());
                s(b, qpc::log_page_size, 0);
                match srq {
                    Some(srq) => {
                        s(b, qpc::rq_type, RqType::SRQ_RQ.0 as u64);
                        s(b, qpc::srqn_rmpn_xrqn, srq.srqn() as u64);
                    }
                    None => {
                        s(b, qpc::log_rq_size, config.log_rq_size as u64);
                        s(b, qpc::log_rq_stride, (config.rq_stride_shift - wqek::RQ_STRIDE_UNIT_SHIFT) as u64);
                    }
                }
                pas_bytes(b, create_qp_in::SIZE_BYTES, pages_of(&mem.buf));
            },
        )?;
        Ok(Qp {
            hca,
            qpn: create_qp_out::qpn.get(&out) as u32,
            mem,
            config,
            sq_offset: rq_bytes,
            uar: uar.clone(),
            _pd: pd.clone(),
            _send_cq: send_cq.clone(),
            _recv_cq: recv_cq.clone(),
            _srq: srq.cloned(),
        })
    }

    /// QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// Runs a state transition: `fill` sets QPC fields (offsets relative to the QPC) and the
    /// optional-parameter mask.
    pub fn modify(&self, t: Transition, opt_param_mask: u32, fill: impl FnOnce(&mut [u8])) -> Result<()> {
        let short = matches!(t, Transition::ToErr | Transition::ToRst);
        let in_size = if short { qp_2err_in::SIZE_BYTES } else { rst2init_qp_in::SIZE_BYTES };
        let mut ctx = vec![0u8; qpc::SIZE_BYTES];
        fill(&mut ctx);
        self.hca
            .command(t.opcode(), 0, in_size, rst2init_qp_out::SIZE_BYTES, |b| {
                rst2init_qp_in::qpn.set(b, self.qpn as u64);
                if !short {
                    rst2init_qp_in::opt_param_mask.set(b, opt_param_mask as u64);
                    if let Some(d) = rst2init_qp_in::qpc.bytes_mut(b) {
                        d.copy_from_slice(&ctx);
                    }
                }
            })
            .map(|_| ())
    }

    /// QUERY_QP: the QPC as the firmware holds it.
    pub fn query(&self) -> Result<Vec<u8>> {
        let out = self.hca.command(CmdOpcode::QUERY_QP, 0, query_qp_in::SIZE_BYTES, query_qp_out::SIZE_BYTES, |b| {
            query_qp_in::qpn.set(b, self.qpn as u64);
        })?;
        Ok(query_qp_out::qpc.bytes(&out).unwrap_or(&[]).to_vec())
    }

    /// The HCA.
    pub fn hca(&self) -> &Arc<OpenHca<B>> {
        &self.hca
    }
}

impl<B: Backend> Drop for Qp<B> {
    fn drop(&mut self) {
        let r =
            self.hca.command(CmdOpcode::DESTROY_QP, 0, destroy_qp_in::SIZE_BYTES, destroy_qp_out::SIZE_BYTES, |b| {
                destroy_qp_in::qpn.set(b, self.qpn as u64);
            });
        report(&self.hca, &format!("QP {:#x}", self.qpn), r);
    }
}
