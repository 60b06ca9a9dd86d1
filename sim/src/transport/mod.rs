//! The data path of the software ConnectX: send and receive queue processing, completions and
//! the RoCEv2 RC/UD transport.
//!
//! This module owns everything between a doorbell and a frame, and between a frame and a CQE:
//!
//! * [`sq`](self): fetching send WQEs from the SQ ring (control, remote address, data, inline,
//!   atomic and UD address-vector segments, gathering through MKeys), the RC requester
//!   (segmentation by path MTU, PSNs, AckReq, the outstanding window and READ/atomic limits,
//!   fence, go-back-N retransmission on timeout, sequence-error NAK and RNR NAK) and UD sends;
//! * `rx`: inbound RoCEv2 packets: the RC responder (PSN checks, duplicates and re-ACKs,
//!   sequence-error NAKs, RNR, SEND/WRITE placement through the RQ or SRQ, READ responses,
//!   atomics with a replay cache, rkey/bounds/access/PD checks with NAK 0x62), the requester's
//!   handling of ACK/NAK/READ responses/atomic ACKs, and UD receive (Q_Key, GRH);
//! * completion queue entries as hardware writes them (requester, responder, error and flush
//!   CQEs) and the QP error state with its flush.
//!
//! The per-QP state is [`QpTransport`], kept on the firmware's `Qp`; the per-device state is
//! [`HcaTransport`] (the QPs with timers, the counters); what one run of the data path changes
//! besides its queues is its [`Lane`] (the frames it built, the ACKs it owes, its counters).
//! The transport works on a [`crate::firmware::DataPath`]: the device shared, each queue it
//! changes locked on its own, and the run's lane. Frames are built with [`umlx_wire`] and
//! queued; the device hands them to its port after the run.
//!
//! Choices where the documents leave a point open: atomics operate on big-endian 8-byte
//! targets (the default `atomic_req_8B_endianness_mode` 0) and write the original value
//! big-endian into the requester's buffer; `retry_count` 7 means seven retries (IBA), while
//! `rnr_retry` 7 is infinite; both counters are reloaded whenever the requester makes progress;
//! a PSN sequence error NAK makes the requester go back but does not use up `retry_count`
//! (only local ACK timeouts do), and it goes back at most once per PSN until it makes progress;
//! the requester keeps at most 128 unacknowledged PSNs (as rxe); a UD message longer than the
//! port MTU completes successfully without being sent (rxe, C10-93.1.1).
//!
//! Against Linux soft-RoCE (rdma_rxe, kernel 6.1; `vm/run-rxe-suite.sh` runs rdma-core's
//! ping-pongs and perftest against the umlx tools over a real RoCEv2 wire) nothing here had to
//! depart from the specification. Seen there and worth knowing: rxe drops a frame with a bad
//! ICRC, or whose IP destination is none of its GIDs, silently (no NAK, no counter), so such a
//! bug shows up as a retransmission timeout on our side; it ACKs a multi-packet message once,
//! on its last packet (AckReq), and answers a duplicate with a re-ACK as the responder here
//! does; its retransmit timer is armed once and not re-armed by later sends while pending, so
//! it sometimes retransmits a message a peer has already acknowledged (its
//! `completer_retry_err` counter rises; this responder treats the copy as a duplicate and
//! re-ACKs it, which is what rxe needs to go on).

mod completion;
mod egress;
mod memory;
mod rx;
pub use rx::RxHold;
mod sq;

use crate::firmware::objects::{Chunks, Qp, QueueBuf};
use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};
use umlx_hwdesc::enums::QpServiceType;
use umlx_hwdesc::ifc::{ads, qpc};
use umlx_wire::packet::{Bth, Checksums, FrameBuilder, FrameTemplate, Opcode};

/// Largest number of unacknowledged PSNs the requester keeps in flight (rxe's value).
pub const MAX_UNACKED_PSNS: u32 = 128;
/// The requester sets AckReq at least once every this many packets inside a long message.
pub const MAX_PKT_PER_ACK: u32 = 64;

/// Signed distance `a - b` of two 24-bit PSNs (the ±2^23 window of rxe's `psn_compare`).
pub fn psn_cmp(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b)) << 8) as i32 >> 8
}

/// `a + n` modulo 2^24.
pub fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & 0xff_ffff
}

/// The packets a message of `len` bytes takes at `mtu` bytes each (from [`mtu_bytes`], so a
/// power of two): at least one, for a message of no bytes. A shift rather than a division, as
/// it runs for every WQE.
pub fn packets_for(len: u64, mtu: u32) -> u32 {
    debug_assert!(mtu.is_power_of_two());
    let shift = mtu.trailing_zeros();
    let whole = len >> shift;
    let part = u64::from(len & (u64::from(mtu) - 1) != 0);
    ((whole + part) as u32).max(1)
}

/// IB MTU enum (1..5) to bytes.
pub fn mtu_bytes(code: u8) -> u32 {
    match code {
        1..=5 => 128 << code,
        _ => 1024,
    }
}

/// Local ACK timeout for the `ack_timeout` code: 4.096 µs × 2^t; `None` for 0 (no timer).
pub fn ack_timeout(code: u8) -> Option<Duration> {
    (code != 0).then(|| Duration::from_nanos(4096u64 << code.min(31)))
}

/// RNR timer code to a duration (IBA table, the values rxe uses).
pub fn rnr_delay(code: u8) -> Duration {
    Duration::from_micros(umlx_wire::packet::rnr_timer_usecs(code & 0x1f) as u64)
}

/// Counters of the transport, per device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// RoCE frames queued for the wire.
    pub tx_packets: u64,
    /// RoCE packets handed to the transport.
    pub rx_packets: u64,
    /// Packets dropped by the transport (no QP, wrong state, wrong address, bad Q_Key...).
    pub rx_dropped: u64,
    /// Packets the requester sent again (go-back-N).
    pub retransmits: u64,
    /// Local ACK timeouts.
    pub timeouts: u64,
    /// ACKs sent.
    pub acks_sent: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks_sent: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Other NAKs (invalid request, remote access, remote operational) sent.
    pub err_naks_sent: u64,
    /// Duplicate requests received (and re-ACKed or replayed).
    pub duplicates: u64,
    /// RNR NAKs received.
    pub rnr_naks_received: u64,
    /// Sequence error NAKs received.
    pub seq_naks_received: u64,
    /// CQEs written.
    pub cqes: u64,
    /// Error CQEs written (flushes included).
    pub error_cqes: u64,
    /// Frames not sent because the source GID index names no GID.
    pub no_gid: u64,
    /// WQEs that were malformed (bad DS, bad opcode, bad segment).
    pub bad_wqes: u64,
    /// UD messages longer than the MTU, completed without sending.
    pub ud_too_long: u64,
}

impl TransportStats {
    /// Adds the counts of `o` (a run's) to these. Every field is named, so that a new counter
    /// cannot be left out.
    pub(crate) fn add(&mut self, o: &TransportStats) {
        let TransportStats {
            tx_packets,
            rx_packets,
            rx_dropped,
            retransmits,
            timeouts,
            acks_sent,
            seq_naks_sent,
            rnr_naks_sent,
            err_naks_sent,
            duplicates,
            rnr_naks_received,
            seq_naks_received,
            cqes,
            error_cqes,
            no_gid,
            bad_wqes,
            ud_too_long,
        } = *o;
        self.tx_packets += tx_packets;
        self.rx_packets += rx_packets;
        self.rx_dropped += rx_dropped;
        self.retransmits += retransmits;
        self.timeouts += timeouts;
        self.acks_sent += acks_sent;
        self.seq_naks_sent += seq_naks_sent;
        self.rnr_naks_sent += rnr_naks_sent;
        self.err_naks_sent += err_naks_sent;
        self.duplicates += duplicates;
        self.rnr_naks_received += rnr_naks_received;
        self.seq_naks_received += seq_naks_received;
        self.cqes += cqes;
        self.error_cqes += error_cqes;
        self.no_gid += no_gid;
        self.bad_wqes += bad_wqes;
        self.ud_too_long += ud_too_long;
    }
}

/// Puts `spare`, emptied, in place of `slot` when `slot` is empty and has less room: a list
/// taken for a batch gives its allocation back for the next one.
pub(crate) fn reuse<T>(slot: &mut Vec<T>, mut spare: Vec<T>) {
    spare.clear();
    if slot.is_empty() && slot.capacity() < spare.capacity() {
        *slot = spare;
    }
}

/// Device-wide transport state: the QPs with running timers, and the counters.
#[derive(Debug, Default)]
pub struct HcaTransport {
    /// QPs whose retransmit or RNR timer is running, or which need service.
    pub timed: std::sync::Mutex<BTreeSet<u32>>,
    /// Counters, as the runs of the data path left them (each run counts in its lane first).
    pub stats: TransportStats,
}

impl HcaTransport {
    /// The QPs with running timers, locked.
    pub(crate) fn timed(&self) -> std::sync::MutexGuard<'_, BTreeSet<u32>> {
        self.timed.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a run of the data path changes that belongs to no queue: the frames it builds, the
/// ACKs it owes, its counters, the timer it arms soonest, and its scratch (frame templates, the
/// send queue fetch's read-ahead block). A run has a lane to itself, so that runs of several
/// threads at once share none of it; what it counted and armed joins the device's when the run
/// ends.
#[derive(Debug, Default)]
pub struct Lane {
    /// Frames built by the run, sent by the device after it, or, on a run that sends as it
    /// goes (`DataPath::send_built`), before the QP they were built for is
    /// let go of.
    pub outbox: Vec<Vec<u8>>,
    /// The ports the frames sent as they went reached: the run has them handle the frames when
    /// it holds no transport ([`crate::fabric::Reached::notify`]).
    pub(crate) reached: crate::fabric::Reached,
    /// Whether the frames built now get their IPv4 header checksum and ICRC from the builder
    /// (the port's egress needs them: [`crate::port::Port::egress_checksums`], set at each run
    /// of the device); otherwise they are left to the port.
    pub(crate) compute_checksums: bool,
    /// Whether `outbox` holds a frame built without them.
    pub(crate) outbox_deferred: bool,
    /// QPs with a coalesced ACK not sent yet ([`QpTransport`]'s `pending_ack`): sent when the
    /// device has handled the frames that arrived together.
    pub(crate) acks_pending: Vec<u32>,
    /// Transport counters of the run.
    pub(crate) stats: TransportStats,
    /// Device counters of the run.
    pub(crate) device_stats: crate::firmware::SimStats,
    /// The soonest timer the run armed.
    pub(crate) due: Option<std::time::Instant>,
    /// A fatal error the run raised (an EQ overrun).
    pub(crate) fatal: Option<umlx_hwdesc::enums::HealthSyndrome>,
    /// The frame templates of the paths sent on lately, by QPN ([`Lane::template`]).
    templates: [Option<(PathKey, FrameTemplate)>; TEMPLATE_SLOTS],
    /// The send queue fetch's read-ahead block, kept between doorbells: made for each, its
    /// 2 KiB were zeroed every time, though only the WQEBBs read into it are ever looked at.
    pub(crate) fetch_block: Box<[u8]>,
}

/// Slots of [`Lane`]'s frame templates (direct-mapped by QPN).
const TEMPLATE_SLOTS: usize = 8;

/// What a frame's headers before its BTH are made of: the fields of a QP's path (or a UD
/// WQE's address vector) and of the port that a [`FrameTemplate`] holds written out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PathKey {
    pub smac: [u8; 6],
    pub dmac: [u8; 6],
    pub sgid: [u8; 16],
    pub dgid: [u8; 16],
    pub udp_sport: u16,
    pub hop_limit: u8,
    pub tclass: u8,
    pub checksums: Checksums,
}

/// What the packets on a path are built on ([`crate::firmware::Hca::egress`]).
pub(crate) enum Egress {
    /// The path's headers.
    Frames(FrameTemplate),
    /// The path's source GID entry is gone: its packets are lost (and counted).
    NoGid,
    /// The builder refuses the path (not reached: its fields have no invalid values).
    Refused,
}

impl Lane {
    /// Whether the frames in the outbox have their IPv4 header checksum and ICRC: `Defer` when
    /// any was built without them (the port's egress then fills what it must). The outbox
    /// counts as sent from then on.
    pub(crate) fn take_outbox_checksums(&mut self) -> Checksums {
        if std::mem::take(&mut self.outbox_deferred) { Checksums::Defer } else { Checksums::Compute }
    }

    /// The frame template of `key` for a packet of QP `qpn`: the one kept in the QP's slot when
    /// it was made of the same fields (a path changes rarely: at a QP's modify, a GID or MAC
    /// change, or a UD WQE to another destination), otherwise a new one, kept there. `None`
    /// when the builder refuses the path (not reached: the fields have no invalid values).
    /// Lent, not copied: its one copy is the [`Egress`] made of it.
    pub(crate) fn template(&mut self, qpn: u32, key: &PathKey) -> Option<&FrameTemplate> {
        let slot = &mut self.templates[qpn as usize % TEMPLATE_SLOTS];
        if let Some((k, _)) = slot
            && k == key
        {
            return slot.as_ref().map(|(_, t)| t);
        }
        // The BTH is a placeholder: each frame of the template gets its packet's own.
        let bth = Bth::new(Opcode::RC_SEND_ONLY, 0, 0);
        let t = FrameBuilder::from_gids(key.smac, key.dmac, &key.sgid, &key.dgid, bth)
            .with_udp_src_port(key.udp_sport)
            .with_hop_limit(key.hop_limit)
            .with_traffic_class(key.tclass)
            .with_checksums(key.checksums)
            .template()
            .ok()?;
        Some(&slot.insert((*key, t)).1)
    }
}

/// What a QP's context says about its queues, its path and its transport parameters,
/// captured at each state change.
#[derive(Clone, Debug, Default)]
pub(crate) struct Path {
    pub qpn: u32,
    pub ud: bool,
    pub pd: u32,
    pub cqn_snd: u32,
    pub cqn_rcv: u32,
    pub srqn: Option<u32>,
    pub buf: QueueBuf,
    pub log_rq_size: u32,
    pub rq_stride_shift: u32,
    pub log_sq_size: Option<u32>,
    pub sq_offset: u64,
    pub no_rq: bool,
    pub dbr: u64,
    pub mtu: u32,
    pub remote_qpn: u32,
    pub sgid_index: usize,
    pub rgid: [u8; 16],
    pub rmac: [u8; 6],
    pub udp_sport: u16,
    pub hop_limit: u8,
    pub tclass: u8,
    pub ack_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry: u8,
    pub min_rnr_nak: u8,
    pub sra_max: u32,
    pub rra_max: u32,
    pub rre: bool,
    pub rwe: bool,
    pub rae: bool,
    pub qkey: u32,
    pub max_msg: u64,
}

impl Path {
    fn from_qp(qp: &Qp) -> Path {
        let a = |f| qp.get(qpc::primary_address_path.inner(f));
        let rgid: [u8; 16] = qpc::primary_address_path
            .inner(ads::rgid_rip)
            .bytes(&qp.ctx)
            .and_then(|b| b.try_into().ok())
            .unwrap_or([0; 16]);
        let mac = (a(ads::rmac_47_32) << 32) | a(ads::rmac_31_0);
        let mut rmac = [0u8; 6];
        rmac.copy_from_slice(&mac.to_be_bytes()[2..]);
        let remote_qpn = qp.get(qpc::remote_qpn) as u32;
        let sport = a(ads::udp_sport) as u16;
        let flow_label = a(ads::flow_label) as u32;
        let udp_sport = if sport != 0 {
            sport
        } else if qp.st == QpServiceType::UD {
            umlx_wire::packet::initial_udp_sport(qp.qpn)
        } else {
            umlx_wire::packet::udp_sport(flow_label, qp.qpn, remote_qpn)
        };
        let tclass = if a(ads::f_dscp) != 0 || a(ads::dscp) != 0 {
            ((a(ads::dscp) as u8) << 2) | a(ads::ecn) as u8
        } else {
            a(ads::tclass) as u8
        };
        let hop = a(ads::hop_limit) as u8;
        Path {
            qpn: qp.qpn,
            ud: qp.st == QpServiceType::UD,
            pd: qp.pd,
            cqn_snd: qp.cqn_snd,
            cqn_rcv: qp.cqn_rcv,
            srqn: qp.srqn,
            buf: qp.buf.clone(),
            log_rq_size: qp.log_rq_size,
            rq_stride_shift: qp.rq_stride_shift,
            log_sq_size: qp.log_sq_size,
            sq_offset: qp.sq_offset(),
            no_rq: qp.no_rq,
            dbr: qp.dbr,
            mtu: mtu_bytes(qp.get(qpc::mtu) as u8),
            remote_qpn,
            sgid_index: a(ads::src_addr_index) as usize,
            rgid,
            rmac,
            udp_sport,
            hop_limit: if hop == 0 { 64 } else { hop },
            tclass,
            ack_timeout: a(ads::ack_timeout) as u8,
            retry_count: qp.get(qpc::retry_count) as u8,
            rnr_retry: qp.get(qpc::rnr_retry) as u8,
            min_rnr_nak: qp.get(qpc::min_rnr_nak) as u8,
            sra_max: 1 << qp.get(qpc::log_sra_max).min(16),
            rra_max: 1 << qp.get(qpc::log_rra_max).min(16),
            rre: qp.get(qpc::rre) != 0,
            rwe: qp.get(qpc::rwe) != 0,
            rae: qp.get(qpc::rae) != 0,
            qkey: qp.get(qpc::q_key) as u32,
            max_msg: 1u64 << qp.get(qpc::log_msg_max).clamp(12, 31),
        }
    }
}

/// What a send WQE asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Nop,
    Send,
    Write,
    Read,
    Atomic,
}

/// Destination of a UD send (from the WQE's address vector).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct UdDest {
    pub qkey: u32,
    pub dqpn: u32,
    pub rmac: [u8; 6],
    pub rgid: [u8; 16],
    pub sgid_index: usize,
    pub udp_sport: u16,
    pub hop_limit: u8,
    pub tclass: u8,
}

/// One piece of a SEND or WRITE's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// `len` bytes from byte `from` of the WQE's inline data ([`Gather::inline`]).
    Inline { from: u32, len: u32 },
    /// `len` bytes of device-visible host memory at `iova` (what an MKey translated to when
    /// the WQE was fetched).
    Host { iova: u64, len: u64 },
}

impl Piece {
    fn len(self) -> u64 {
        match self {
            Piece::Inline { len, .. } => len.into(),
            Piece::Host { len, .. } => len,
        }
    }
}

/// Where a SEND or WRITE's payload comes from: its pieces, in the order of the WQE's inline
/// and data segments. Host memory is read when each packet is built, straight into the packet,
/// and read again for a retransmission, as a NIC's DMA engine does ([`DataPath::gather`]): nothing
/// of the payload is staged per WQE.
///
/// [`DataPath::gather`]: crate::firmware::DataPath::gather
#[derive(Clone, Debug, Default)]
pub(crate) struct Gather {
    /// The WQE's inline data (a buffer of [`crate::buffers`] once there is any).
    pub inline: Vec<u8>,
    /// The first piece (all of a one-SGE or inline WQE's payload) without an allocation.
    first: Option<Piece>,
    /// The pieces after the first.
    more: Vec<Piece>,
    /// Where the next packet's bytes are, when it follows the last one read: (byte of the
    /// payload, index of the piece that holds it, offset in that piece).
    pub cursor: (u64, usize, u64),
}

impl Gather {
    /// No pieces (what `default` gives, as a constant).
    pub const EMPTY: Gather = Gather { inline: Vec::new(), first: None, more: Vec::new(), cursor: (0, 0, 0) };

    /// Appends inline data.
    pub fn push_inline(&mut self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        if self.inline.capacity() == 0 {
            self.inline = crate::buffers::take();
        }
        let from = self.inline.len() as u32;
        self.inline.extend_from_slice(data);
        self.push(Piece::Inline { from, len: data.len() as u32 });
    }

    /// Appends `len` bytes of host memory at `iova` (merged into the last piece when they
    /// continue it).
    pub fn push_host(&mut self, iova: u64, len: u64) {
        if len == 0 {
            return;
        }
        let last = if self.more.is_empty() { self.first.as_mut() } else { self.more.last_mut() };
        if let Some(Piece::Host { iova: a, len: l }) = last
            && a.checked_add(*l) == Some(iova)
        {
            *l += len;
            return;
        }
        self.push(Piece::Host { iova, len });
    }

    fn push(&mut self, p: Piece) {
        if self.first.is_none() {
            self.first = Some(p);
        } else {
            self.more.push(p);
        }
    }

    /// Piece `i`.
    pub fn piece(&self, i: usize) -> Option<Piece> {
        if i == 0 { self.first } else { self.more.get(i - 1).copied() }
    }

    /// The piece that holds byte `at` of the payload and the offset of that byte in it.
    pub fn locate(&self, at: u64) -> Option<(usize, u64)> {
        let mut start = 0;
        let mut i = 0;
        loop {
            let n = self.piece(i)?.len();
            if at < start + n {
                return Some((i, at - start));
            }
            start += n;
            i += 1;
        }
    }

    /// Gives the inline data's buffer back to [`crate::buffers`].
    pub fn release(&mut self) {
        if self.inline.capacity() != 0 {
            crate::buffers::give(std::mem::take(&mut self.inline));
        }
    }

    /// Makes it [`Gather::EMPTY`] again where it lies: the inline buffer goes back to
    /// [`crate::buffers`], the list of further pieces keeps its allocation.
    fn clear(&mut self) {
        self.release();
        let Gather { inline: _, first, more, cursor } = self;
        *first = None;
        more.clear();
        *cursor = (0, 0, 0);
    }
}

/// A fetched send WQE and its progress.
#[derive(Clone, Debug)]
pub(crate) struct SendWqe {
    /// mlx5 send opcode.
    pub opcode: u8,
    /// WQE index from the control segment.
    pub index: u16,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
    pub imm: [u8; 4],
    pub kind: Kind,
    /// Where the payload is (SEND/WRITE).
    pub gather: Gather,
    /// Message length (READ: bytes to read; atomic: 8).
    pub len: u32,
    pub raddr: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
    /// Local scatter list for READ/atomic results: (mkey, va, len).
    pub local: ScatterList,
    pub ud: Option<UdDest>,
    /// PSN of the first packet, once sent.
    pub first_psn: Option<u32>,
    /// Number of PSNs the message uses.
    pub npkts: u32,
    /// PSNs sent so far (from `first_psn`).
    pub sent: u32,
    /// READ response packets received.
    pub resp: u32,
    /// Completed (waiting for earlier WQEs).
    pub done: bool,
    /// The WQE failed with this CQE syndrome; it completes in error when it reaches the front.
    pub err: Option<u8>,
}

/// A descriptor with nothing parsed into it, as a constant: the first WQE a slot of a
/// [`SendQueue`] holds starts from it, and [`SendWqe::reset`] makes a slot this again.
pub(crate) const BLANK_WQE: SendWqe = SendWqe {
    opcode: 0,
    index: 0,
    signaled: false,
    solicited: false,
    fence: false,
    imm: [0; 4],
    kind: Kind::Nop,
    gather: Gather::EMPTY,
    len: 0,
    raddr: 0,
    rkey: 0,
    swap_add: 0,
    compare: 0,
    local: ScatterList::filled_with((0, 0, 0)),
    ud: None,
    first_psn: None,
    npkts: 0,
    sent: 0,
    resp: 0,
    done: false,
    err: None,
};

impl SendWqe {
    /// Makes the descriptor [`BLANK_WQE`] again where it lies, field by field (its lists keep
    /// their allocations; the inline data's buffer goes back to [`crate::buffers`]). Every
    /// field is named, so a new one cannot be left out.
    pub(crate) fn reset(&mut self) {
        let SendWqe {
            opcode,
            index,
            signaled,
            solicited,
            fence,
            imm,
            kind,
            gather,
            len,
            raddr,
            rkey,
            swap_add,
            compare,
            local,
            ud,
            first_psn,
            npkts,
            sent,
            resp,
            done,
            err,
        } = self;
        (*opcode, *index, *signaled, *solicited, *fence, *imm, *kind) = (0, 0, false, false, false, [0; 4], Kind::Nop);
        gather.clear();
        (*len, *raddr, *rkey, *swap_add, *compare) = (0, 0, 0, 0, 0);
        local.clear();
        (*ud, *first_psn, *npkts, *sent, *resp, *done, *err) = (None, None, 0, 0, 0, false, None);
    }
}

/// The send WQEs fetched and not completed, oldest first: a ring of descriptors whose slots are
/// kept once made, as a NIC keeps its WQE cache. A WQE fetched takes the slot of one completed
/// before and is reset there ([`SendWqe::reset`]). A descriptor is a few hundred bytes, and one
/// made anew for each WQE was copied into its queue whole: a `memcpy` per WQE, the most of
/// `memmove`'s 5% of the in-process 64-byte WRITE stream in perf.
#[derive(Clone, Debug, Default)]
pub(crate) struct SendQueue {
    /// Every slot made. The queue is the `len` of them from `head` on, wrapping at the end.
    slots: Vec<SendWqe>,
    head: usize,
    len: usize,
}

impl SendQueue {
    /// WQEs in the queue.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the queue holds no WQE.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The slot of the queue's WQE `i` (`i < slots.len()`).
    fn slot(&self, i: usize) -> usize {
        let at = self.head + i;
        if at >= self.slots.len() { at - self.slots.len() } else { at }
    }

    /// WQE `i`, oldest first.
    pub fn get(&self, i: usize) -> Option<&SendWqe> {
        if i < self.len { self.slots.get(self.slot(i)) } else { None }
    }

    /// WQE `i`, oldest first.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut SendWqe> {
        if i < self.len {
            let at = self.slot(i);
            self.slots.get_mut(at)
        } else {
            None
        }
    }

    /// The oldest WQE.
    pub fn front(&self) -> Option<&SendWqe> {
        self.get(0)
    }

    /// Appends a blank WQE ([`BLANK_WQE`]) and returns it. The slot after the last is reused
    /// when there is one; a full ring first gets as many slots again as it has (at least 8),
    /// made once.
    pub fn push_blank(&mut self) -> &mut SendWqe {
        if self.len == self.slots.len() {
            self.slots.rotate_left(self.head);
            self.head = 0;
            let more = self.len.max(8);
            self.slots.resize_with(self.len + more, || BLANK_WQE);
        } else {
            let at = self.slot(self.len);
            if let Some(w) = self.slots.get_mut(at) {
                w.reset();
            }
        }
        self.len += 1;
        let at = self.slot(self.len - 1);
        &mut self.slots[at]
    }

    /// Takes the oldest WQE out of the queue and returns it: it stays in its slot, as it was,
    /// until a WQE fetched later takes the slot.
    pub fn retire_front(&mut self) -> Option<&mut SendWqe> {
        if self.len == 0 {
            return None;
        }
        let at = self.head;
        self.retire(1);
        self.slots.get_mut(at)
    }

    /// Takes the `n` oldest WQEs out of the queue (all of them if there are fewer).
    pub fn retire(&mut self, n: usize) {
        let n = n.min(self.len);
        self.head = if self.len == n { 0 } else { self.slot(n) };
        self.len -= n;
    }

    /// The two runs of slots that hold the queue, in order.
    fn runs(&self) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let end = self.head + self.len;
        if end <= self.slots.len() {
            (self.head..end, 0..0)
        } else {
            (self.head..self.slots.len(), 0..end - self.slots.len())
        }
    }

    /// The WQEs, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &SendWqe> {
        let (a, b) = self.runs();
        self.slots[a].iter().chain(self.slots[b].iter())
    }

    /// The WQEs, oldest first.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut SendWqe> {
        let (a, b) = self.runs();
        let (low, high) = self.slots.split_at_mut(a.start);
        high[..a.len()].iter_mut().chain(low[b].iter_mut())
    }
}

impl std::ops::Index<usize> for SendQueue {
    type Output = SendWqe;
    fn index(&self, i: usize) -> &SendWqe {
        self.get(i).expect("a WQE index within the send queue")
    }
}

impl std::ops::IndexMut<usize> for SendQueue {
    fn index_mut(&mut self, i: usize) -> &mut SendWqe {
        self.get_mut(i).expect("a WQE index within the send queue")
    }
}

/// An in-progress inbound message at the responder.
#[derive(Clone, Debug)]
pub(crate) enum RecvMsg {
    /// A SEND into a receive WQE.
    Send { wqe: RecvWqe, offset: u32 },
    /// An RDMA WRITE into an rkey region; `whole`, the region's translation made at the first
    /// packet, with the count of MKeys destroyed then (it holds while that count is unchanged).
    Write { rkey: u32, va: u64, len: u32, offset: u32, whole: Option<(u64, Chunks)> },
}

/// A receive WQE's scatter list, (lkey, va, len) each: up to four without an allocation.
pub(crate) type ScatterList = crate::firmware::objects::InlineList<(u32, u64, u32), 4>;

/// A receive WQE taken from the RQ or the SRQ.
#[derive(Clone, Debug)]
pub(crate) struct RecvWqe {
    /// WQE counter (RQ index or SRQ WQE index).
    pub counter: u16,
    /// Scatter list: (lkey, va, len).
    pub sges: ScatterList,
    /// PD the scatter list is checked against.
    pub pd: u32,
}

/// Responder resource: a READ or atomic request kept for replay.
#[derive(Clone, Debug)]
pub(crate) enum Resource {
    Read { psn: u32, npkts: u32, va: u64, rkey: u32, len: u32 },
    Atomic { psn: u32, orig: u64 },
}

/// Per-QP transport state (requester and responder), kept on the firmware's `Qp`.
#[derive(Clone, Debug, Default)]
pub struct QpTransport {
    pub(crate) path: Path,
    /// The QP's state, as its context holds it: set with it at every change (a MODIFY_QP, the
    /// move to error), so that the data path reads it with the transport it works on.
    pub(crate) state: umlx_hwdesc::enums::QpState,
    // Requester.
    pub(crate) sq: SendQueue,
    pub(crate) sq_head: u16,
    /// Where the requester's next look for something to send starts in `sq`: every WQE before
    /// it is done, a NOP, or sent in full, and none failed. A stream keeps hundreds of WQEs
    /// waiting for their ACK; without it each doorbell walked all of them. Set back by a pop
    /// from the front, and to 0 by anything that makes an earlier WQE matter again (a rewind, a
    /// failure).
    pub(crate) pump_from: usize,
    pub(crate) next_psn: u32,
    pub(crate) una: u32,
    pub(crate) retry_left: u8,
    pub(crate) rnr_left: u8,
    pub(crate) deadline: Option<Instant>,
    pub(crate) rnr_until: Option<Instant>,
    pub(crate) noack_pkts: u32,
    // Responder.
    pub(crate) epsn: u32,
    pub(crate) msn: u32,
    pub(crate) nak_sent: bool,
    pub(crate) rq_consumed: u32,
    pub(crate) cur: Option<RecvMsg>,
    pub(crate) resources: VecDeque<Resource>,
    pub(crate) last_ack_psn: Option<u32>,
    /// The ACK (PSN and AETH) owed for the newest request received with AckReq, not sent yet:
    /// requests that arrive together get one ACK, for the last of them, as a ConnectX
    /// coalesces them (an ACK acknowledges every earlier PSN too).
    pub(crate) pending_ack: Option<(u32, umlx_wire::packet::Aeth)>,
    /// PSN at which the requester last re-requested a READ/atomic after a gap.
    pub(crate) retry_psn: Option<u32>,
}

impl QpTransport {
    /// Whether the requester waits for an acknowledgement or a response.
    pub(crate) fn waiting(&self) -> bool {
        self.una != self.next_psn
            || self.sq.iter().any(|w| w.first_psn.is_some() && !w.done && w.err.is_none() && w.kind != Kind::Nop)
    }

    /// Where a timeout goes back to: the first PSN not acknowledged, or earlier, the first
    /// missing response of a READ or atomic.
    pub(crate) fn resume_psn(&self) -> u32 {
        let pending = self.sq.iter().find(|w| !w.done && w.kind != Kind::Nop);
        match pending {
            Some(w) if matches!(w.kind, Kind::Read | Kind::Atomic) => match w.first_psn {
                Some(f) => {
                    let p = psn_add(f, w.resp);
                    if psn_cmp(p, self.una) < 0 { p } else { self.una }
                }
                None => self.una,
            },
            _ => self.una,
        }
    }

    /// Next PSN the requester will send.
    pub fn next_send_psn(&self) -> u32 {
        self.next_psn
    }

    /// Next PSN the responder expects.
    pub fn expected_psn(&self) -> u32 {
        self.epsn
    }

    /// Send WQEs fetched and not yet completed.
    pub fn outstanding(&self) -> usize {
        self.sq.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::IpAddr;
    use umlx_wire::packet::{ip_to_gid, parse_frame_verified};

    fn key(dst: [u8; 4], sport: u16) -> PathKey {
        PathKey {
            smac: [2, 0, 0, 0, 0, 1],
            dmac: [2, 0, 0, 0, 0, 2],
            sgid: ip_to_gid(IpAddr::from([10, 0, 0, 1])),
            dgid: ip_to_gid(IpAddr::from(dst)),
            udp_sport: sport,
            hop_limit: 64,
            tclass: 0,
            checksums: Checksums::Compute,
        }
    }

    /// The WQEs a send queue holds, oldest first, from `get`, `iter` and `iter_mut`.
    fn indices(q: &mut SendQueue) -> Vec<u16> {
        let got: Vec<u16> = q.iter().map(|w| w.index).collect();
        let by_get: Vec<u16> = (0..q.len()).map(|i| q[i].index).collect();
        let by_mut: Vec<u16> = q.iter_mut().map(|w| w.index).collect();
        assert_eq!(got, by_get);
        assert_eq!(got, by_mut);
        assert!(q.get(q.len()).is_none());
        got
    }

    /// A send queue keeps its WQEs in order while its ring wraps and grows, gives back the one
    /// it retires as it was, and hands out a reused slot blank (its inline buffer returned).
    #[test]
    fn a_send_queue_keeps_order_across_wrap_and_growth_and_reuses_slots_blank() {
        let mut q = SendQueue::default();
        let mut next = 0u16;
        let mut push = |q: &mut SendQueue, n: usize| {
            for _ in 0..n {
                let w = q.push_blank();
                assert_eq!((w.index, w.len, w.kind, w.first_psn, w.done), (0, 0, Kind::Nop, None, false));
                assert!(w.gather.inline.is_empty() && w.gather.piece(0).is_none() && w.local.is_empty());
                w.index = next;
                w.len = 100 + u32::from(next);
                w.kind = Kind::Write;
                w.gather.push_inline(b"inline data");
                w.local.push((1, 2, 3));
                w.first_psn = Some(7);
                next += 1;
            }
        };
        push(&mut q, 6);
        assert_eq!(indices(&mut q), [0, 1, 2, 3, 4, 5]);
        q.retire(4);
        push(&mut q, 3); // into the slots retired: the ring wraps
        assert_eq!(indices(&mut q), [4, 5, 6, 7, 8]);
        push(&mut q, 12); // grows while it wraps
        assert_eq!(indices(&mut q), (4..21).collect::<Vec<u16>>());
        let w = q.retire_front().expect("a WQE");
        assert_eq!((w.index, w.len, w.kind), (4, 104, Kind::Write));
        assert_eq!(q.front().map(|w| w.index), Some(5));
        q.retire(100);
        assert!(q.is_empty() && q.front().is_none() && q.retire_front().is_none());
        push(&mut q, 30);
        assert_eq!(indices(&mut q), (21..51).collect::<Vec<u16>>());
    }

    /// A message's packet count is its length divided by the MTU, rounded up, and one for a
    /// message of no bytes, at every IB MTU.
    #[test]
    fn packets_for_counts_mtu_sized_packets_rounding_up() {
        for code in 1..=5u8 {
            let mtu = mtu_bytes(code);
            let m = u64::from(mtu);
            for len in [0, 1, m - 1, m, m + 1, 3 * m, 3 * m + 7, (1 << 31) + 1] {
                let expected = len.div_ceil(m).max(1) as u32;
                assert_eq!(packets_for(len, mtu), expected, "{len} bytes at MTU {mtu}");
            }
        }
        assert_eq!(packets_for(0, 1024), 1);
        assert_eq!(packets_for(2049, 1024), 3);
    }

    /// The frame a template gives for a SEND of QP `qpn`: its destination IP and UDP source port.
    fn sent(x: &mut Lane, qpn: u32, k: &PathKey) -> (IpAddr, u16) {
        let t = x.template(qpn, k).expect("a valid path");
        let mut f = Vec::new();
        let bth = Bth::new(Opcode::RC_SEND_ONLY, 5, 1);
        t.build_vec(&bth, &Default::default(), b"data", &mut f).expect("a valid packet");
        let p = parse_frame_verified(&f).expect("a good frame");
        (p.dst_ip(), p.udp_src_port())
    }

    /// A QP's template follows its path: a changed field makes a new one, and two QPs that
    /// share a slot each get their own path's headers.
    #[test]
    fn a_template_is_used_only_for_the_path_it_was_made_of() {
        let mut x = Lane::default();
        let (a, b) = (key([10, 0, 0, 2], 0xC001), key([10, 0, 0, 3], 0xC002));
        assert_eq!(sent(&mut x, 1, &a), (IpAddr::from([10, 0, 0, 2]), 0xC001));
        assert_eq!(sent(&mut x, 1, &a), (IpAddr::from([10, 0, 0, 2]), 0xC001));
        // QP 1 + TEMPLATE_SLOTS shares QP 1's slot.
        let other = 1 + TEMPLATE_SLOTS as u32;
        assert_eq!(sent(&mut x, other, &b), (IpAddr::from([10, 0, 0, 3]), 0xC002));
        assert_eq!(sent(&mut x, 1, &a), (IpAddr::from([10, 0, 0, 2]), 0xC001));
        // A new source port (a modified QP) is a new path.
        let a2 = PathKey { udp_sport: 0xC0FF, ..a };
        assert_eq!(sent(&mut x, 1, &a2), (IpAddr::from([10, 0, 0, 2]), 0xC0FF));
    }
}
