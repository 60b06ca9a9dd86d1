//! Host memory for the transport: MKey translation of a range (with its access rights), the
//! gather of a WQE's payload or a READ's source, and the scatter of received data into a
//! receive WQE's SGEs or an RDMA target, all through the device's IOMMU.

use super::{Gather, Piece};
use crate::firmware::DataPath;
use crate::firmware::objects::{Access, Chunks, MkeyError};
use umlx_hwdesc::enums::CqeSyndrome;

impl DataPath<'_> {
    /// Translates `va..va+len` of `key` for `access` by PD `pd`.
    pub(crate) fn mkey_chunks(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
    ) -> Result<Chunks, MkeyError> {
        let mut v = Chunks::default();
        self.mkey_visit(key, pd, va, len, access, |iova, n| v.push(iova, n))?;
        Ok(v)
    }

    /// [`DataPath::mkey_chunks`] without the list: calls `each(iova, len)` for each piece (see
    /// [`crate::firmware::objects::Mkey::visit`]).
    pub(crate) fn mkey_visit(
        &self,
        key: u32,
        pd: u32,
        va: u64,
        len: u64,
        access: Access,
        each: impl FnMut(u64, u64),
    ) -> Result<(), MkeyError> {
        self.mkey(key).ok_or(MkeyError::BadKey)?.visit(pd, va, len, access, each)
    }

    /// DMA-reads IOVA chunks, appending to `out`.
    pub(crate) fn read_chunks(&mut self, chunks: &[(u64, u64)], out: &mut Vec<u8>) -> bool {
        if !self.may_dma() {
            return false;
        }
        for &(iova, n) in chunks {
            let at = out.len();
            out.resize(at + n as usize, 0);
            if self.iommu.read(iova, &mut out[at..]).is_err() {
                return false;
            }
        }
        true
    }

    /// The payload of READ responses: `len` bytes at `va` of `rkey`, read when each packet is
    /// built. `None` when the key does not allow the read or the whole range cannot be read
    /// now, so that memory that is not mapped is refused before the first response. A READ
    /// of no bytes names no memory: its R_Key is not checked.
    pub(crate) fn read_source(&mut self, pd: u32, rkey: u32, va: u64, len: u32) -> Option<Gather> {
        let mut g = Gather::default();
        if len == 0 {
            return Some(g);
        }
        let chunks = self.mkey_chunks(rkey, pd, va, len.into(), Access::RemoteRead).ok()?;
        if !self.may_dma() {
            return None;
        }
        for &(iova, n) in chunks.iter() {
            self.iommu.check_read(iova, n as usize).ok()?;
            g.push_host(iova, n);
        }
        Some(g)
    }

    /// DMA-reads bytes `from..from + out.len()` of a WQE's payload into `out` (a packet's
    /// payload, in place). False on a DMA fault, or when bus mastering is off.
    pub(crate) fn gather(&mut self, g: &mut Gather, from: u64, out: &mut [u8]) -> bool {
        if out.is_empty() {
            return true;
        }
        if !self.may_dma() {
            return false;
        }
        // Packets are read in order but after a rewind: the cursor saves the walk from the
        // first piece for each packet of a message of many pieces.
        let (mut i, mut skip) = match g.cursor {
            (at, i, skip) if at == from => (i, skip),
            _ => match g.locate(from) {
                Some(found) => found,
                None => return false,
            },
        };
        let mut done = 0;
        while done < out.len() {
            let Some(piece) = g.piece(i) else { return false };
            let (n, ok) = match piece {
                Piece::Inline { from, len } => {
                    let n = ((u64::from(len) - skip) as usize).min(out.len() - done);
                    let start = from as usize + skip as usize;
                    let src = g.inline.get(start..start + n);
                    let ok = src.is_some_and(|src| {
                        out[done..done + n].copy_from_slice(src);
                        true
                    });
                    (n, ok)
                }
                Piece::Host { iova, len } => {
                    let n = ((len - skip) as usize).min(out.len() - done);
                    (n, self.iommu.read(iova + skip, &mut out[done..done + n]).is_ok())
                }
            };
            if !ok {
                return false;
            }
            done += n;
            skip += n as u64;
            if skip == piece.len() {
                (i, skip) = (i + 1, 0);
            }
        }
        g.cursor = (from + out.len() as u64, i, skip);
        true
    }

    /// DMA-writes `data` over IOVA chunks (a translation of exactly its length).
    pub(crate) fn write_chunks(&mut self, chunks: &[(u64, u64)], data: &[u8]) -> bool {
        self.write_chunks_from(chunks, 0, data)
    }

    /// DMA-writes `data` at byte `skip` of the region `chunks` translate. False, as for a DMA
    /// fault, when `data` runs past the region.
    pub(crate) fn write_chunks_from(&mut self, chunks: &[(u64, u64)], mut skip: u64, data: &[u8]) -> bool {
        if !self.may_dma() {
            return false;
        }
        let mut at = 0usize;
        for &(iova, n) in chunks {
            if at == data.len() {
                break;
            }
            if skip >= n {
                skip -= n;
                continue;
            }
            let take = ((n - skip) as usize).min(data.len() - at);
            if self.iommu.write(iova + skip, &data[at..at + take]).is_err() {
                return false;
            }
            at += take;
            skip = 0;
        }
        at == data.len()
    }

    /// Scatters `data` at byte `offset` of the scatter list `sges` (checked against PD `pd`).
    /// Err(syndrome) on failure.
    pub(crate) fn scatter(&mut self, sges: &[(u32, u64, u32)], pd: u32, offset: u64, data: &[u8]) -> Result<(), u8> {
        let cap: u64 = sges.iter().map(|s| s.2 as u64).sum();
        if offset + data.len() as u64 > cap {
            return Err(CqeSyndrome::LOCAL_LENGTH_ERR.0);
        }
        let mut skip = offset;
        let mut at = 0usize;
        for &(lkey, va, len) in sges {
            if at == data.len() {
                break;
            }
            let len = len as u64;
            if skip >= len {
                skip -= len;
                continue;
            }
            let n = (len - skip).min((data.len() - at) as u64);
            let chunks = self
                .mkey_chunks(lkey, pd, va + skip, n, Access::LocalWrite)
                .map_err(|_| CqeSyndrome::LOCAL_PROT_ERR.0)?;
            if !self.write_chunks(&chunks, &data[at..at + n as usize]) {
                return Err(CqeSyndrome::LOCAL_PROT_ERR.0);
            }
            at += n as usize;
            skip = 0;
        }
        Ok(())
    }
}
