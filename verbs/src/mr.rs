//! Memory regions (`ibv_reg_mr` / `ibv_dereg_mr`): memory the NIC may touch, owned by the
//! region so it cannot be freed or moved while registered, reached only through copies.

use crate::Dev;
use crate::types::AccessFlags;
use crate::{Error, Result};
use umlx_driver::dma::UserMemory;
use umlx_driver::objects::{Access, MemoryRegion, Mkey};

enum Memory {
    // Field order in each variant: the key is dropped (DESTROY_MKEY) before the memory.
    Owned(MemoryRegion<Dev>),
    User { mkey: Mkey<Dev>, mem: UserMemory<Dev> },
}

/// A registered memory region (`struct ibv_mr`). It owns its memory: the program reaches it
/// through copies ([`Mr::write`], [`Mr::read`], [`Mr::to_vec`]), never through a reference the
/// NIC could write under, and it cannot be freed while registered.
///
/// ```
/// # fn main() -> Result<(), umlx_verbs::Error> {
/// use umlx_verbs::{AccessFlags, Context};
/// let ctx = Context::open_sim(Default::default())?;
/// let pd = ctx.alloc_pd()?;
/// let mr = pd.reg_mr(vec![0u8; 4096], AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
/// mr.write(16, b"data")?;
/// let sge = mr.sge(16, 4); // what a work request gathers: address, length, lkey
/// assert_eq!((sge.addr(), sge.length(), sge.lkey()), (mr.addr() + 16, 4, mr.lkey()));
/// let buffer = mr.dereg().expect("a registered buffer comes back"); // ibv_dereg_mr
/// assert_eq!(&buffer[16..20], b"data");
/// # Ok(()) }
/// ```
pub struct Mr {
    mem: Memory,
    access: AccessFlags,
}

impl std::fmt::Debug for Mr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mr").field("addr", &self.addr()).field("len", &self.len()).field("lkey", &self.lkey()).finish()
    }
}

pub(crate) fn access(flags: AccessFlags) -> Result<Access> {
    if flags.0 & !0xf != 0 {
        return Err(Error::invalid(format!(
            "access flags {:#x}: only LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC",
            flags.0
        )));
    }
    if (flags.contains(AccessFlags::REMOTE_WRITE) || flags.contains(AccessFlags::REMOTE_ATOMIC))
        && !flags.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Error::invalid("IBV_ACCESS_REMOTE_WRITE and IBV_ACCESS_REMOTE_ATOMIC need IBV_ACCESS_LOCAL_WRITE"));
    }
    Ok(Access(flags.0))
}

impl Mr {
    pub(crate) fn owned(mr: MemoryRegion<Dev>, access: AccessFlags) -> Mr {
        Mr { mem: Memory::Owned(mr), access }
    }

    pub(crate) fn user(mkey: Mkey<Dev>, mem: UserMemory<Dev>, access: AccessFlags) -> Mr {
        Mr { mem: Memory::User { mkey, mem }, access }
    }

    fn mkey(&self) -> &Mkey<Dev> {
        match &self.mem {
            Memory::Owned(m) => m.mkey(),
            Memory::User { mkey, .. } => mkey,
        }
    }

    /// The address work requests use for byte 0 of the region (`mr->addr`).
    pub fn addr(&self) -> u64 {
        self.mkey().addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.mem {
            Memory::Owned(m) => m.memory().len(),
            Memory::User { mem, .. } => mem.len(),
        }
    }

    /// Whether the region is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.mkey().lkey()
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.mkey().rkey()
    }

    /// The access flags it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// An SGE over `len` bytes at `offset`.
    pub fn sge(&self, offset: usize, len: u32) -> crate::wr::Sge {
        crate::wr::Sge::new(self.addr() + offset as u64, len, self.lkey())
    }

    /// Copies bytes out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        match &self.mem {
            Memory::Owned(m) => m.memory().read_bytes(offset, out)?,
            Memory::User { mem, .. } => mem.read(offset, out)?,
        }
        Ok(())
    }

    /// Copies bytes into the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        match &self.mem {
            Memory::Owned(m) => m.memory().write_bytes(offset, data)?,
            Memory::User { mem, .. } => mem.write(offset, data)?,
        }
        Ok(())
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        match &self.mem {
            Memory::Owned(m) => m.memory().fill(offset, len, byte)?,
            Memory::User { mem, .. } => mem.write(offset, &vec![byte; len])?,
        }
        Ok(())
    }

    /// Reads `len` bytes into a new vector.
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0u8; len];
        self.read(offset, &mut v)?;
        Ok(v)
    }

    /// `ibv_dereg_mr` for user memory: gives the buffer back (None for owned regions and for
    /// external memory, which never left its owner).
    pub fn dereg(self) -> Option<Box<[u8]>> {
        match self.mem {
            Memory::Owned(_) => None,
            Memory::User { mkey, mem } => {
                drop(mkey);
                mem.into_inner()
            }
        }
    }
}
