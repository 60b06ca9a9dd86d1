//! The transport's frames: one built on a QP's path (or a UD destination) from its template,
//! its payload given or gathered from host memory, and queued in the run's outbox for the
//! port.

use super::{Egress, Gather, Path, PathKey, UdDest};
use crate::firmware::DataPath;
use umlx_wire::packet::{Bth, BuildError, Checksums, ExtHeaders, FrameTemplate};

impl DataPath<'_> {
    /// Builds one frame on the path (or UD destination) and queues it for the port.
    pub(crate) fn emit(&mut self, path: &Path, ud: Option<&UdDest>, bth: Bth, ext: ExtHeaders, payload: &[u8]) {
        let egress = self.egress(path, ud);
        self.emit_built(&egress, |_, t, f| t.build_vec(&bth, &ext, payload, f).map(Some));
    }

    /// [`Self::emit`] of a packet whose payload is bytes `range` of a WQE's payload, read
    /// from host memory into the frame ([`Self::gather`]). False, and nothing queued, on a DMA
    /// fault.
    pub(crate) fn emit_gathered(
        &mut self,
        path: &Path,
        ud: Option<&UdDest>,
        bth: Bth,
        ext: ExtHeaders,
        g: &mut Gather,
        range: std::ops::Range<u64>,
    ) -> bool {
        let egress = self.egress(path, ud);
        self.emit_gathered_on(&egress, bth, ext, g, range)
    }

    /// [`Self::emit_gathered`] on an [`Egress`] already looked up: what a run of packets on
    /// one path (a message's, a burst's) builds on.
    pub(crate) fn emit_gathered_on(
        &mut self,
        egress: &Egress,
        bth: Bth,
        ext: ExtHeaders,
        g: &mut Gather,
        range: std::ops::Range<u64>,
    ) -> bool {
        let len = range.end.saturating_sub(range.start) as usize;
        self.emit_built(egress, |hca, t, f| {
            t.build_vec_filled(&bth, &ext, len, f, |slot| hca.gather(g, range.start, slot))
        })
    }

    /// What the packets on the path (or UD destination) are built on now: its source GID
    /// entry's [`FrameTemplate`]. It holds while the device runs on (a GID, a MAC or a QP
    /// changes only by a command, between runs).
    pub(crate) fn egress(&mut self, path: &Path, ud: Option<&UdDest>) -> Egress {
        let (sgid_index, rgid, rmac, sport, hop, tc) = match ud {
            Some(d) => (d.sgid_index, d.rgid, d.rmac, d.udp_sport, d.hop_limit, d.tclass),
            None => (path.sgid_index, path.rgid, path.rmac, path.udp_sport, path.hop_limit, path.tclass),
        };
        let Some(entry) = self.vport.gids.get(sgid_index).copied().flatten() else {
            return Egress::NoGid;
        };
        // Left to the port unless its egress needs them now (see `crate::port`).
        let checksums = if self.lane.compute_checksums { Checksums::Compute } else { Checksums::Defer };
        let key = PathKey {
            smac: self.vport.mac,
            dmac: rmac,
            sgid: entry.gid,
            dgid: rgid,
            udp_sport: sport,
            hop_limit: if hop == 0 { 64 } else { hop },
            tclass: tc,
            checksums,
        };
        match self.lane.template(path.qpn, &key) {
            Some(t) => Egress::Frames(*t),
            None => Egress::Refused,
        }
    }

    /// Builds one frame on `egress` with `build`, given its [`FrameTemplate`], and queues it
    /// for the port. False when `build` could not get the payload.
    fn emit_built(
        &mut self,
        egress: &Egress,
        build: impl FnOnce(&mut Self, &FrameTemplate, &mut Vec<u8>) -> Result<Option<usize>, BuildError>,
    ) -> bool {
        let template = match egress {
            Egress::Frames(t) => t,
            Egress::NoGid => {
                // The GID entry went away: counted, and the packet lost as on a wire
                // (retransmission or the retry limit follows).
                self.lane.stats.no_gid += 1;
                return true;
            }
            Egress::Refused => return true,
        };
        if template.defers_checksums() {
            self.lane.outbox_deferred = true;
        }
        // Every byte of the frame is written (the builder's contract): no need to clear.
        let mut f = crate::buffers::take_stale();
        match build(self, template, &mut f) {
            Ok(Some(_)) => {
                self.lane.stats.tx_packets += 1;
                self.lane.outbox.push(f);
                true
            }
            Ok(None) => {
                crate::buffers::give(f);
                false
            }
            // Not reached: the transport gives the builder only valid fields.
            Err(_) => {
                crate::buffers::give(f);
                true
            }
        }
    }
}
