//! The UDP wire's socket: its options (large buffers, `UDP_GRO`, the `UDP_SEGMENT` probe),
//! batched receives (`recvmmsg`, a segmented datagram split again; `recv` for a look for one
//! datagram from this machine) and sends (`sendmmsg`, frames to one address as one segmented
//! datagram; `send` for the one datagram of a ping-pong's turn), and the receive thread that
//! serves the socket while no application polls it. These system calls are the `unsafe` of
//! the port.

use super::*;
use std::sync::RwLock;

/// The socket buffers a UDP wire asks for: a burst of a multi-packet message (an 8 MiB READ's
/// responses are 8192 datagrams) waits there while the receiving sim's thread is not running;
/// the kernel grants at most `net.core.rmem_max` / `wmem_max`.
const WIRE_SOCKET_BUFFER: libc::c_int = 16 << 20;

/// Asks the kernel to deliver a segmented datagram (`UDP_SEGMENT`, as [`send_datagrams`] sends
/// frames) to `sock` as one datagram with its segment size (`UDP_GRO`), which [`recv_batch`]
/// splits: one pass through the receive path for the whole burst. A kernel without it (before
/// Linux 5.0) delivers the frames one per datagram, as it does to any other socket.
pub(super) fn enable_gro(sock: &UdpSocket) {
    set_int_option(sock, libc::SOL_UDP, libc::UDP_GRO, 1);
}

/// Sets the `int` socket option `level`/`name` of `sock` to `value`; says whether the kernel
/// took it.
fn set_int_option(sock: &UdpSocket, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&value`, a local that outlives
    // the call; the descriptor is the socket's own, open while `sock` is borrowed.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// Asks for [`WIRE_SOCKET_BUFFER`] bytes of receive and send buffer: beyond the sysctl limits
/// where the process may (`SO_RCVBUFFORCE`, CAP_NET_ADMIN), else up to them (best effort: a
/// smaller grant only means earlier drops, which the RC transport retransmits).
pub(super) fn enlarge_buffers(sock: &UdpSocket) {
    for (forced, capped) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        if !set_int_option(sock, libc::SOL_SOCKET, forced, WIRE_SOCKET_BUFFER) {
            set_int_option(sock, libc::SOL_SOCKET, capped, WIRE_SOCKET_BUFFER);
        }
    }
}

/// How long a UDP wire's receive thread keeps polling its socket without blocking after the
/// last frame: a frame of a conversation in progress is taken as soon as it arrives, not after a
/// scheduler wake-up; an idle wire sleeps in `recv`.
const UDP_RX_SPIN: Duration = Duration::from_millis(2);

/// How long a UDP wire's receive thread leaves the ACKs its run of the device owes waiting
/// for the application's reply to carry them ([`Port::acks_may_wait`]), watching the socket
/// meanwhile (a datagram that comes is taken, and its run sends them). An application that
/// watches memory for a WRITE replies a few microseconds after the run: ACKs sent alone
/// there had perftest's `ib_write_lat` through `libibverbs.so.1` fall into a mode where each
/// side's poll took the ACK alone and the reply was left to the receive thread, which waited
/// up to 4 ms for a core (1,000 iterations averaged 10 - 320 µs with a 99th percentile near
/// 2 ms in most runs; 6 - 13 µs now, p99 23 - 49 µs).
const UDP_RX_ACK_GRACE: Duration = Duration::from_micros(30);

/// How many runs in a row whose ACKs no reply carried ([`UDP_RX_ACK_GRACE`]) have a UDP wire's
/// receive thread send ACKs at once for [`UDP_RX_ACK_WAIT_HOLDOFF`]: the application sends, but
/// not in reply to what comes (both ends of a stream each way, `ib_write_bw -b`). One such run
/// is only a reply that came late (its application preempted).
const UDP_RX_ACK_WAIT_MISSES: u32 = 2;

/// How long a UDP wire's receive thread sends the ACKs its runs owe at once after
/// [`UDP_RX_ACK_WAIT_MISSES`] runs whose ACKs no reply carried. Each such run costs a stream up
/// to a grace's delay of its ACKs and a run of the whole device (not beside the application's
/// doorbells): two every 10 ms is a fraction of a percent, and a ping-pong whose replies came
/// late twice sends its ACKs alone for no longer than that. (Before a stream's receiver that
/// sends nothing was left out, ACKs left waiting a grace each time took 64 KiB
/// `ib_write_bw` from 520 - 610 MB/s to 300 - 440.)
const UDP_RX_ACK_WAIT_HOLDOFF: Duration = Duration::from_millis(10);

/// A gap this long between two looks of a spinning receive thread means it was preempted.
const UDP_RX_PREEMPTED: Duration = Duration::from_micros(200);

/// How long a receive thread that was preempted while spinning blocks instead.
const UDP_RX_SPIN_BACKOFF: Duration = Duration::from_millis(100);

/// How long a UDP wire's receive thread sleeps, instead of waiting at its socket, when an
/// application polled the wire since its last look ([`Port::poll_wire`]): the first pause.
/// Waking at each datagram only to find it taken would take a core from the polling threads
/// (on a machine with as many busy pollers as cores, every datagram would cost a context
/// switch there). When the polling stops, a datagram waits at most one pause for the receive
/// thread (and pausing stops for a while: [`UDP_RX_PAUSE_HOLDOFF`]).
const UDP_RX_POLLED_PAUSE: Duration = Duration::from_millis(1);

/// The longest pause. A pause through which the application polled steadily (at least once
/// every [`UDP_RX_STEADY_POLL_GAP`] on average), and that left nothing for the thread, doubles
/// the next, up to this; any other starts again at [`UDP_RX_POLLED_PAUSE`]. Each pause ends
/// with a wake of the thread on a CPU a busy-polling application may be using: a thousand a
/// second, with the engine's, took 1 - 2% of a `send-lat` application's turns, and with them
/// its 99th percentile.
const UDP_RX_POLLED_PAUSE_MAX: Duration = Duration::from_millis(8);

/// How long after a pause that left datagrams waiting (the application had stopped polling,
/// [`Pause::Missed`]) the pauses stay at [`UDP_RX_POLLED_PAUSE`]: an application that polls
/// steadily for a while, then watches memory for a message, and polls again (perftest's
/// `ib_write_lat` spins on its send CQ, then on the buffer the peer's WRITE fills) would see
/// that WRITE wait for a long pause's end each time it stopped.
const UDP_RX_LONG_PAUSE_AFTER_MISS: Duration = Duration::from_secs(1);

/// The longest average gap between the polls of an application that polls steadily: a
/// busy-polling loop looks at the wire every 0.3 - 1 µs here, and a `send-lat` application,
/// busy with its own work between, about every 2 µs. One that polls now and then does not,
/// and its pauses stay short.
const UDP_RX_STEADY_POLL_GAP: Duration = Duration::from_micros(5);

/// How long a UDP wire's receive thread stops pausing for pollers after two pauses within
/// [`UDP_RX_PAUSE_MISS_WINDOW`] ended with datagrams waiting ([`Pause::Missed`]). An
/// application that alternates polling with watching memory then waits two pauses in this
/// long; one that was preempted while it polled, twice in that window, loses the pauses for
/// this long.
const UDP_RX_PAUSE_HOLDOFF: Duration = Duration::from_millis(100);
const UDP_RX_PAUSE_MISS_WINDOW: Duration = Duration::from_millis(50);
const _: () = assert!(UDP_RX_PAUSE_HOLDOFF.as_millis() > UDP_RX_PAUSE_MISS_WINDOW.as_millis());

/// How long datagrams found waiting at the end of a pause are left to the application before
/// the receive thread decides it stopped polling: a poller busy with the frames it took (the
/// device's work, the application's own) comes back well within it.
const UDP_RX_PAUSE_GRACE: Duration = Duration::from_micros(100);

/// Most datagrams a UDP wire's receive thread queues before it has the device handle them.
pub(super) const UDP_RX_BATCH: usize = 64;

/// How many datagrams one `recvmmsg` call takes at most, and the size of each receive slot (a
/// longer datagram is truncated: counted as a truncated frame and dropped).
pub(super) const RECV_BATCH: usize = 16;
const RECV_SLOT: usize = 65536;

/// Control-message space per received datagram: room for the `UDP_GRO` segment size (an
/// `int`), in `u64`s for the alignment of a `cmsghdr`.
const RECV_CONTROL_WORDS: usize = 8;

/// Receive slots for [`recv_batch`]: [`RECV_BATCH`] buffers of [`RECV_SLOT`] bytes (zeroed
/// memory the kernel maps in as it is first written), and the `recvmmsg` headers, zeroed once
/// (not at each call: most calls of a busy poller find nothing).
pub(crate) struct RecvSlots {
    data: Vec<u8>,
    headers: Box<RecvHeaders>,
    /// The leading headers the last call may have changed (the kernel shortens a filled
    /// message's control length): set again before the next. All of them at first.
    stale: usize,
    /// How many datagrams the next call asks for: one after a call that found none (what comes
    /// to an idle poller is usually one datagram, a ping-pong's; a call for more would look
    /// for a second one, in vain, at the cost of a quarter of a microsecond), else
    /// [`RECV_BATCH`] (a stream may be under way).
    ask: usize,
}

/// The headers of [`RecvSlots`]: [`recv_batch`] points each message's header at its iovec
/// (pointed at its slot of `data`) and its control buffer. No header asks for its sender's
/// address: nothing the sim does with a datagram depends on who sent it (a connected socket's
/// are all from its peer; a loopback LAN's member learns from its peers' tagged neighbour
/// frames), and a receive that asks costs a busy poller 0.17 - 0.19 µs more on loopback (a C
/// ping-pong, `recvfrom` with a name against `recv`).
struct RecvHeaders {
    iovs: [libc::iovec; RECV_BATCH],
    msgs: [libc::mmsghdr; RECV_BATCH],
    control: [[u64; RECV_CONTROL_WORDS]; RECV_BATCH],
}

impl RecvSlots {
    pub(crate) fn new() -> RecvSlots {
        // SAFETY: all-zero bytes are valid values of these plain C structs and arrays
        // (integers, arrays and null pointers).
        let headers: Box<RecvHeaders> = Box::new(unsafe { std::mem::zeroed() });
        RecvSlots { data: vec![0u8; RECV_BATCH * RECV_SLOT], headers, stale: RECV_BATCH, ask: RECV_BATCH }
    }

    /// The slots' memory, where the frames [`recv_batch`] handed out lie until its next call.
    pub(super) fn memory(&self) -> &[u8] {
        &self.data
    }
}

/// Takes the datagrams waiting at `sock` (up to [`RECV_BATCH`], or one after a call that found
/// none: `RecvSlots::ask`; one `recvmmsg` with `MSG_DONTWAIT`: the socket stays blocking for
/// the other users of its descriptor) and calls `each(frame, truncated)` for each frame;
/// returns how many datagrams it took. A datagram the kernel coalesced from a segmented
/// send (`UDP_GRO`, see [`enable_gro`]) is split back into its frames at the segment size it
/// reports. `local` says that every datagram comes from this machine (a socket on a loopback
/// address, or connected to one): a look for one datagram is then one `recv` ([`recv_one`]).
pub(super) fn recv_batch(
    sock: &UdpSocket,
    slots: &mut RecvSlots,
    local: bool,
    mut each: impl FnMut(&[u8], bool),
) -> usize {
    use std::os::fd::AsRawFd;
    if local && slots.ask == 1 {
        return recv_one(sock, slots, each);
    }
    let h = &mut *slots.headers;
    // Only the headers the last call filled (and the one it stopped at) changed: an empty poll
    // sets one header again, not all of them.
    for (k, slot) in slots.data.chunks_exact_mut(RECV_SLOT).enumerate().take(slots.stale.min(RECV_BATCH)) {
        h.iovs[k] = libc::iovec { iov_base: slot.as_mut_ptr().cast(), iov_len: RECV_SLOT };
        let hdr = &mut h.msgs[k].msg_hdr;
        (hdr.msg_name, hdr.msg_namelen) = (std::ptr::null_mut(), 0);
        hdr.msg_iov = &raw mut h.iovs[k];
        hdr.msg_iovlen = 1;
        hdr.msg_control = h.control[k].as_mut_ptr().cast();
        hdr.msg_controllen = std::mem::size_of_val(&h.control[k]);
    }
    // SAFETY: each header points at its own name, iovec and control buffer in `headers` (with
    // these lengths), each iovec at its own `RECV_SLOT` bytes of `data`, all exclusively
    // borrowed through `slots` for the call; the kernel writes at most those. No timeout is
    // passed. The descriptor is the socket's own, open while `sock` is borrowed.
    let n = unsafe {
        libc::recvmmsg(
            sock.as_raw_fd(),
            h.msgs.as_mut_ptr(),
            slots.ask.min(RECV_BATCH) as libc::c_uint,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        )
    };
    let n = if n > 0 { n as usize } else { 0 };
    slots.stale = n + 1;
    slots.ask = if n == 0 { 1 } else { RECV_BATCH };
    for k in 0..n {
        let len = (h.msgs[k].msg_len as usize).min(RECV_SLOT);
        let truncated = h.msgs[k].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        let data = &slots.data[k * RECV_SLOT..k * RECV_SLOT + len];
        match gro_segment_size(&h.msgs[k].msg_hdr) {
            Some(seg) if !truncated && seg < len => data.chunks(seg).for_each(|frame| each(frame, false)),
            // A LAN member's bundle (see `WireSocket::bundles`) has no segment size.
            None if local && !truncated => split_at_frame_lengths(data, |frame| each(frame, false)),
            _ => each(data, truncated),
        }
    }
    n
}

/// [`recv_batch`]'s look for one datagram from this machine: one `recv`, the cheapest call
/// that takes a datagram (in C, on Linux 6.18, a `recvmmsg` for one datagram costs 0.13 µs
/// more when it finds none and 0.29 µs more when it takes one, and a ping-pong's one-way trip
/// 0.26 µs more), but one that does not give the kernel's segment size of a datagram it
/// coalesced. On loopback the kernel coalesces a segmented send only (it has no receive
/// offload there), and a umlx sim segments only frames exactly as long as they say
/// ([`delimited`]): such a datagram is split at its frames' own lengths
/// ([`split_at_frame_lengths`]), into the frames it was sent as.
fn recv_one(sock: &UdpSocket, slots: &mut RecvSlots, mut each: impl FnMut(&[u8], bool)) -> usize {
    use std::os::fd::AsRawFd;
    let slot = &mut slots.data[..RECV_SLOT];
    // SAFETY: recv writes at most `RECV_SLOT` bytes into the slot (with MSG_TRUNC it returns
    // the datagram's whole length, writing no more), exclusively borrowed through `slots` for
    // the call. The descriptor is the socket's own, open while `sock` is borrowed.
    let r = unsafe {
        libc::recv(sock.as_raw_fd(), slot.as_mut_ptr().cast(), RECV_SLOT, libc::MSG_DONTWAIT | libc::MSG_TRUNC)
    };
    // An error is what `recvmmsg` would have met (nothing waits, or a peer's ICMP error).
    let Ok(len) = usize::try_from(r) else { return 0 };
    slots.ask = RECV_BATCH;
    match slots.data[..RECV_SLOT].get(..len) {
        Some(datagram) => split_at_frame_lengths(datagram, |frame| each(frame, false)),
        None => each(&slots.data[..RECV_SLOT], true),
    }
    1
}

/// Hands `each` the frames of a datagram taken without its segment size: one frame, unless it
/// is longer than its first frame says and its segments of that length are each one frame
/// exactly as long as it says ([`delimited`]; the last segment may be shorter), as a
/// segmented send of a umlx sim, coalesced, is. A frame padded after its IP packet, or one
/// that does not say its length (ARP), is one frame.
fn split_at_frame_lengths(datagram: &[u8], mut each: impl FnMut(&[u8])) {
    match umlx_wire::packet::ip_frame_len(datagram) {
        Some(segment) if segment < datagram.len() && datagram.chunks(segment).all(delimited) => {
            datagram.chunks(segment).for_each(each)
        }
        _ => each(datagram),
    }
}

/// The segment size of a datagram the kernel coalesced (its `UDP_GRO` control message), if
/// `hdr`, as `recvmmsg` left it, carries one.
fn gro_segment_size(hdr: &libc::msghdr) -> Option<usize> {
    // SAFETY: `hdr` is a header `recvmmsg` filled: its control pointer and length describe the
    // control messages the kernel wrote into the caller's buffer (or nothing), which the
    // CMSG_* functions walk within that length; a UDP_GRO message carries an `int`, read
    // unaligned.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == libc::UDP_GRO {
                let size = libc::CMSG_DATA(cmsg).cast::<libc::c_int>().read_unaligned();
                return usize::try_from(size).ok().filter(|&s| s > 0);
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    None
}

/// Most datagrams one `sendmmsg` call sends.
const SEND_BATCH: usize = 64;

/// Most frames, and most bytes, one segmented datagram carries (`UDP_SEGMENT`: the kernel's
/// limits are 64 segments and a UDP datagram's 65,507 bytes).
const GSO_MAX_SEGMENTS: usize = 64;
const GSO_MAX_BYTES: usize = 60 * 1024;

/// Frames at least this long are not sent segmented: 0 when the kernel has no `UDP_SEGMENT`
/// ([`probe_gso`]) or refused it for a route (a device without checksum offload), else the
/// shortest segment size the kernel refused as longer than a route's MTU (a segment is never
/// fragmented, where a lone datagram is). Starts unlimited.
static GSO_SEGMENT_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// Turns segmented sends off when the kernel does not know `UDP_SEGMENT` (before Linux 4.18),
/// found by setting it as a socket option (to 0, "no default segment size", which changes
/// nothing): such a kernel would ignore the control message and send a batch of frames as one
/// datagram.
pub(super) fn probe_gso(sock: &UdpSocket) {
    if !set_int_option(sock, libc::SOL_UDP, libc::UDP_SEGMENT, 0) {
        GSO_SEGMENT_LIMIT.store(0, Ordering::Relaxed);
    }
}

/// One datagram of a [`send_datagrams`] batch: consecutive entries of its `dests`, all to
/// one address, whose frames are as long as the first except a shorter last one.
#[derive(Clone, Copy, Default)]
struct Datagram {
    /// Its first entry of `dests` and its first iovec.
    first: usize,
    iov: usize,
    /// Its frames, the length of its first, and its bytes.
    frames: usize,
    segment: usize,
    bytes: usize,
}

/// Whether `frame` is an IP frame exactly as long as its IP packet says (no padding after it):
/// only such frames are sent segmented, so that a receiver that takes a datagram without its
/// segment size can split it at its frames' own lengths ([`split_at_frame_lengths`]).
fn delimited(frame: &[u8]) -> bool {
    umlx_wire::packet::ip_frame_len(frame) == Some(frame.len())
}

impl Datagram {
    /// Whether `frame`, to the same address, joins this datagram as one more segment (segments
    /// shorter than `limit`, each [`delimited`]). `first` is the datagram's first frame, looked
    /// at only when it is still alone (a frame that joined a datagram was delimited, and so was
    /// the first); a lone frame is never looked at.
    fn takes<'f>(&self, frame: &[u8], limit: usize, first: impl FnOnce() -> Option<&'f [u8]>) -> bool {
        let len = frame.len();
        self.segment < limit
            && self.bytes == self.frames * self.segment
            && len <= self.segment
            && self.frames < GSO_MAX_SEGMENTS
            && self.bytes + len <= GSO_MAX_BYTES
            && delimited(frame)
            && (self.frames > 1 || first().is_some_and(delimited))
    }
}

/// The `sendmmsg` headers of [`send_datagrams`] (about 15 KB): zeroed once per thread and kept
/// in [`SEND_HEADERS`], not zeroed at each call; a call writes every field of the entries it
/// uses.
struct SendHeaders {
    names: [libc::sockaddr_storage; SEND_BATCH],
    iovs: [libc::iovec; SEND_BATCH],
    msgs: [libc::mmsghdr; SEND_BATCH],
    control: [[u64; 4]; SEND_BATCH],
    grams: [Datagram; SEND_BATCH],
}

impl SendHeaders {
    fn new() -> Box<SendHeaders> {
        // SAFETY: all-zero bytes are valid values of these plain C structs and arrays
        // (integers, arrays and null pointers) and of `Datagram` (integers).
        Box::new(unsafe { std::mem::zeroed() })
    }
}

thread_local! {
    /// This thread's [`SendHeaders`].
    static SEND_HEADERS: std::cell::RefCell<Option<Box<SendHeaders>>> = const { std::cell::RefCell::new(None) };
}

/// A UDP wire's socket, with the segment size set as its `UDP_SEGMENT` option (see
/// [`send_alone`]). Derefs to the socket.
pub(super) struct WireSocket {
    sock: UdpSocket,
    /// The socket's `UDP_SEGMENT` option: the kernel cuts a datagram sent without a control
    /// message saying otherwise into segments this long (0: it does not). A send that relies
    /// on it read-holds it, a change write-holds it, and neither ever waits for it: a send that
    /// cannot take it says its datagram's segment size (or 0) in a control message.
    segment: RwLock<u16>,
    /// Whether every receiver of the socket's datagrams is a umlx sim (a loopback LAN's
    /// member): frames that make one datagram then go as one plain datagram of their bytes
    /// (a bundle), not a segmented one, and the receiver splits it at the frames' own lengths
    /// as it splits a coalesced segmented one ([`split_at_frame_lengths`]). Linux takes a
    /// plain datagram faster than a segmented one of the same bytes (a C ping-pong on
    /// loopback: 2.63 against 2.71 µs a one-way trip, a reply and its ACK), and QEMU's socket
    /// netdev, which cannot split one, is never a LAN member.
    bundles: bool,
}

impl WireSocket {
    /// A UDP wire's socket, whose receivers may be any program (QEMU's socket netdev).
    pub(super) fn new(sock: UdpSocket) -> WireSocket {
        WireSocket { sock, segment: RwLock::new(0), bundles: false }
    }

    /// A socket whose every receiver is a loopback LAN's member (see `bundles`).
    pub(super) fn to_lan_members(sock: UdpSocket) -> WireSocket {
        WireSocket { sock, segment: RwLock::new(0), bundles: true }
    }
}

impl std::ops::Deref for WireSocket {
    type Target = UdpSocket;
    fn deref(&self) -> &UdpSocket {
        &self.sock
    }
}

/// Sends `frames[i]` to `addr` for each `(i, addr)` of `dests`, up to [`SEND_BATCH`] datagrams
/// per `sendmmsg` call. Consecutive frames to one address go as one segmented datagram
/// (`UDP_SEGMENT`, generic segmentation offload) where they can: the kernel then carries them
/// through its stack once and delivers them as separate datagrams (or as one, to a socket that
/// asked for `UDP_GRO`, see [`recv_batch`]); a receiver sees the same frames either way. To a
/// loopback LAN's members they go as one plain datagram instead ([`WireSocket::bundles`]). A
/// datagram the kernel refuses is skipped, as a wire loses a frame (the RC transport
/// retransmits); a refused segmented send is sent again one frame per datagram (and
/// [`GSO_SEGMENT_LIMIT`] learns from the refusal). On a `connected` socket every address of
/// `dests` is its peer, and the datagrams go without one, so that the kernel uses the route the
/// socket keeps; frames that make one datagram there go with one `send` ([`send_alone`]).
pub(super) fn send_datagrams(sock: &WireSocket, frames: &[Vec<u8>], dests: &[(usize, SocketAddr)], connected: bool) {
    let limit = GSO_SEGMENT_LIMIT.load(Ordering::Relaxed);
    SEND_HEADERS.with(|h| match h.try_borrow_mut() {
        Ok(mut h) => send_datagrams_with(sock, frames, dests, connected, limit, h.get_or_insert_with(SendHeaders::new)),
        // A send from within a send of this thread (none today): without the batch headers.
        Err(_) => send_one_by_one(sock, frames, dests, connected),
    });
}

/// Sends each frame of `dests` as a datagram of its own: the way a segmented datagram the
/// kernel refused goes again. While the socket's option is 0 (held as read), one `send`
/// (`sendto`) each; otherwise each says in a control message that it is not segmented.
fn send_one_by_one(sock: &WireSocket, frames: &[Vec<u8>], dests: &[(usize, SocketAddr)], connected: bool) {
    let option = sock.segment.try_read();
    let plain = option.as_ref().is_ok_and(|s| **s == 0);
    for &(i, addr) in dests {
        if let Some(frame) = frames.get(i) {
            // A refused datagram is lost, as on a wire (the RC transport retransmits); so is
            // one a connected socket refuses for an ICMP error that reached it (a peer not
            // listening yet).
            let _ = match (plain, connected) {
                (true, true) => sock.send(frame),
                (true, false) => sock.send_to(frame, addr),
                (false, _) => send_unsegmented(sock, frame, (!connected).then_some(addr)),
            };
        }
    }
}

/// Sends `frame` as one datagram (to `addr`, or to the connected socket's peer), with a
/// control message that sets its segment size to 0, whatever the socket's option.
fn send_unsegmented(sock: &UdpSocket, frame: &[u8], addr: Option<SocketAddr>) -> std::io::Result<usize> {
    use std::os::fd::AsRawFd;
    // SAFETY: all-zero bytes are valid values of these plain C structs (integers and null
    // pointers).
    let (mut name, mut hdr): (libc::sockaddr_storage, libc::msghdr) = unsafe { std::mem::zeroed() };
    let mut control = [0u64; 4];
    let mut iov = libc::iovec { iov_base: frame.as_ptr().cast_mut().cast(), iov_len: frame.len() };
    if let Some(addr) = addr {
        hdr.msg_namelen = put_sockaddr(&mut name, addr);
        hdr.msg_name = (&raw mut name).cast();
    }
    hdr.msg_iov = &raw mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = control.as_mut_ptr().cast();
    put_segment_size(&mut hdr, 0);
    // SAFETY: the header's name, iovec and control buffer are the locals above, within their
    // lengths, and its buffer is the borrowed `frame`, which the kernel only reads; the
    // descriptor is the socket's own, open while `sock` is borrowed.
    let r = unsafe { libc::sendmsg(sock.as_raw_fd(), &raw const hdr, 0) };
    if r < 0 { Err(std::io::Error::last_os_error()) } else { Ok(r as usize) }
}

/// Writes the one control message of `hdr`, its segment size (`UDP_SEGMENT`): `hdr`'s control
/// pointer must point at 32 bytes aligned for a `cmsghdr` (a `[u64; 4]`).
fn put_segment_size(hdr: &mut libc::msghdr, segment: u16) {
    // SAFETY: the control buffer (32 bytes, aligned for a `cmsghdr`, the caller's contract)
    // holds the one control message of CMSG_SPACE(2) = 24 bytes written here: its header and,
    // at CMSG_DATA, the two bytes of the segment size.
    unsafe {
        hdr.msg_controllen = libc::CMSG_SPACE(2) as usize;
        let cmsg = libc::CMSG_FIRSTHDR(hdr);
        (*cmsg).cmsg_level = libc::SOL_UDP;
        (*cmsg).cmsg_type = libc::UDP_SEGMENT;
        (*cmsg).cmsg_len = libc::CMSG_LEN(2) as usize;
        libc::CMSG_DATA(cmsg).cast::<u16>().write_unaligned(segment);
    }
}

/// The longest segmented datagram [`send_alone`] copies into one buffer; a longer one goes
/// with `sendmmsg` (its frames in place).
const SEND_ALONE_COPY_MAX: usize = 16 * 1024;

thread_local! {
    /// The buffer [`send_alone`] joins a segmented datagram's frames in, kept for the next.
    static JOINED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Sends `frames`, one datagram `g` to the peer of the connected `sock`, with one `send(2)`: a
/// segmented datagram's frames joined in one buffer, its segment size the socket's option (set
/// here when it differs) rather than a control message. Linux takes a segmented datagram from
/// `send` markedly faster than from `sendmsg` or `sendmmsg`, with the size in a control message
/// or as the option alike: a C ping-pong on loopback (Linux 6.18) measured a 184-byte
/// datagram of two segments (a reply and its ACK) at 3.2 µs a one-way trip this way against
/// 3.7 - 3.85 µs, and 3.2 µs for one unsegmented datagram. Whether it sent them; `false` leaves
/// them to `sendmmsg`: while another thread changes the option, for a lone frame longer than
/// the option (the option is changed for segmented datagrams only), a datagram longer than
/// [`SEND_ALONE_COPY_MAX`], and after an error (which `sendmmsg` meets again and handles).
fn send_alone<'f>(sock: &WireSocket, mut frames: impl Iterator<Item = &'f Vec<u8>>, g: Datagram) -> bool {
    if g.frames == 1 {
        return frames.next().is_none_or(|frame| send_with_option(sock, g, frame));
    }
    if g.bytes > SEND_ALONE_COPY_MAX {
        return false;
    }
    let mut joined = JOINED.take();
    joined.clear();
    frames.for_each(|f| joined.extend_from_slice(f));
    // A bundle goes as one frame would: unsegmented.
    let g = if sock.bundles { Datagram { frames: 1, ..g } } else { g };
    let sent = send_with_option(sock, g, &joined);
    JOINED.set(joined);
    sent
}

/// Sends `datagram` (the bytes of `g`) with one `send` that relies on the socket's
/// `UDP_SEGMENT` option, set first to `g`'s segment size if `g` is segmented and the option
/// differs. Whether it sent it (see [`send_alone`] for when it does not).
fn send_with_option(sock: &WireSocket, g: Datagram, datagram: &[u8]) -> bool {
    // The segment size is a u16; a frame is never longer than 64 KiB.
    let wanted = if g.frames > 1 { g.segment as u16 } else { 0 };
    let fits =
        |option: u16| if g.frames > 1 { option == wanted } else { option == 0 || g.bytes <= usize::from(option) };
    // A LAN member's socket never has the option set (its datagrams are bundles, never
    // segmented, see `WireSocket::bundles`): its sends skip the option's lock.
    let sent = if sock.bundles && g.frames == 1 {
        sock.send(datagram)
    } else {
        match sock.segment.try_read() {
            Ok(option) if fits(*option) => sock.send(datagram),
            Ok(_) if g.frames == 1 => return false,
            Ok(option) => {
                drop(option);
                let Ok(mut option) = sock.segment.try_write() else { return false };
                if !fits(*option) {
                    if !set_int_option(sock, libc::SOL_UDP, libc::UDP_SEGMENT, libc::c_int::from(wanted)) {
                        return false;
                    }
                    *option = wanted;
                }
                sock.send(datagram)
            }
            Err(_) => return false,
        }
    };
    let Err(e) = sent else { return true };
    // A refused segmented datagram (EMSGSIZE, EINVAL, EIO: see `send_datagrams_with`), or the
    // option on a route that refuses segmentation: the option goes back to 0. Either way (a
    // peer's ICMP error among the others) `sendmmsg` sends the frames, one per datagram if it
    // is refused too.
    if matches!(e.raw_os_error(), Some(libc::EMSGSIZE | libc::EINVAL | libc::EIO))
        && let Ok(mut option) = sock.segment.try_write()
        && *option != 0
        && set_int_option(sock, libc::SOL_UDP, libc::UDP_SEGMENT, 0)
    {
        *option = 0;
    }
    false
}

/// [`send_datagrams`] with the thread's headers `h`, segments shorter than `limit` (0: one
/// frame per datagram).
fn send_datagrams_with(
    sock: &WireSocket,
    frames: &[Vec<u8>],
    dests: &[(usize, SocketAddr)],
    connected: bool,
    limit: usize,
    h: &mut SendHeaders,
) {
    use std::os::fd::AsRawFd;
    // Held as read from the first `sendmmsg` on: while the option is 0, a lone frame goes
    // without a control message; otherwise (or while it changes) it says it is not segmented.
    let mut option = None;
    let mut next = 0;
    while next < dests.len() {
        let (mut n, mut k) = (0, 0);
        let mut last_addr = None;
        // Up to SEND_BATCH frames (iovecs) per call, grouped into datagrams.
        while next < dests.len() && k < SEND_BATCH {
            let (i, addr) = dests[next];
            next += 1;
            let Some(frame) = frames.get(i) else { continue };
            h.iovs[k] = libc::iovec { iov_base: frame.as_ptr().cast_mut().cast(), iov_len: frame.len() };
            let first_of = |g: &Datagram| frames.get(dests[g.first].0).map(Vec::as_slice);
            if n > 0 && last_addr == Some(addr) && h.grams[n - 1].takes(frame, limit, || first_of(&h.grams[n - 1])) {
                let g = &mut h.grams[n - 1];
                g.frames += 1;
                g.bytes += frame.len();
            } else {
                h.msgs[n].msg_hdr.msg_namelen = if connected { 0 } else { put_sockaddr(&mut h.names[n], addr) };
                let len = frame.len();
                h.grams[n] = Datagram { first: next - 1, iov: k, frames: 1, segment: len, bytes: len };
                last_addr = Some(addr);
                n += 1;
            }
            k += 1;
        }
        if connected && n == 1 && next == dests.len() && option.is_none() {
            let g = h.grams[0];
            if send_alone(sock, dests[g.first..].iter().filter_map(|&(i, _)| frames.get(i)), g) {
                return;
            }
        }
        let option = option.get_or_insert_with(|| sock.segment.try_read());
        let plain = option.as_ref().is_ok_and(|s| **s == 0);
        for m in 0..n {
            let g = h.grams[m];
            let hdr = &mut h.msgs[m].msg_hdr;
            hdr.msg_name = if connected { std::ptr::null_mut() } else { (&raw mut h.names[m]).cast() };
            hdr.msg_iov = &raw mut h.iovs[g.iov];
            hdr.msg_iovlen = g.frames;
            hdr.msg_flags = 0;
            let segmented = g.frames > 1 && !sock.bundles;
            if segmented || !plain {
                hdr.msg_control = h.control[m].as_mut_ptr().cast();
                // The segment size is a u16; a frame is never longer than 64 KiB.
                put_segment_size(hdr, if segmented { g.segment as u16 } else { 0 });
            } else {
                hdr.msg_control = std::ptr::null_mut();
                hdr.msg_controllen = 0;
            }
        }
        let mut sent = 0;
        while sent < n {
            // SAFETY: `h.msgs[sent..n]` are headers whose every field was written above, whose
            // name (null with length 0 on a connected socket), iovec and control pointers point
            // into `h.names`, `h.iovs` and `h.control` (borrowed for the call, within their
            // lengths) and whose buffers are the borrowed
            // `frames`, which the kernel only reads; the descriptor is the socket's own, open
            // while `sock` is borrowed.
            let r = unsafe { libc::sendmmsg(sock.as_raw_fd(), h.msgs.as_mut_ptr().add(sent), (n - sent) as u32, 0) };
            if r > 0 {
                sent += r as usize;
                continue;
            }
            let g = h.grams[sent];
            if g.frames > 1 {
                // EMSGSIZE (EINVAL before Linux 5.x): a segment longer than the route's MTU;
                // EIO: a device without checksum offload. Either way the frames go again one
                // per datagram (a refused bundle too, which says nothing of segmentation).
                match std::io::Error::last_os_error().raw_os_error() {
                    _ if sock.bundles => 0,
                    Some(libc::EMSGSIZE | libc::EINVAL) => GSO_SEGMENT_LIMIT.fetch_min(g.segment, Ordering::Relaxed),
                    Some(libc::EIO) => GSO_SEGMENT_LIMIT.swap(0, Ordering::Relaxed),
                    _ => 0,
                };
                let end = if sent + 1 < n { h.grams[sent + 1].first } else { next };
                send_one_by_one(sock, frames, &dests[g.first..end], connected);
            }
            sent += 1;
        }
    }
}

/// Writes `addr` as a C socket address into `out`; returns its length.
fn put_sockaddr(out: &mut libc::sockaddr_storage, addr: SocketAddr) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: a `sockaddr_in` fits in and is aligned within a `sockaddr_storage`.
            unsafe { (&raw mut *out).cast::<libc::sockaddr_in>().write(sin) };
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: a `sockaddr_in6` fits in and is aligned within a `sockaddr_storage`.
            unsafe { (&raw mut *out).cast::<libc::sockaddr_in6>().write(sin6) };
            std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

/// Waits up to `timeout` for a datagram to be waiting at `sock` (`ppoll(2)`, to the
/// microsecond and the thread's timer slack; an error or a signal only ends the wait early),
/// and says whether one waits.
pub(super) fn wait_readable(sock: &UdpSocket, timeout: Duration) -> bool {
    use std::os::fd::AsRawFd;
    let mut pfd = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: ppoll reads and writes the one `pollfd` of the exclusively borrowed local `pfd`
    // and reads the local `ts`, both of which outlive the call; a null signal mask leaves the
    // thread's as it is; the descriptor is the socket's own, open while `sock` is borrowed.
    let ready = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    ready > 0 && pfd.revents & libc::POLLIN != 0
}

/// What a receive thread's [`pause_for_poller`] found.
enum Pause {
    /// No application polled the wire since the last look: the thread serves the socket.
    NotPolled,
    /// An application polled, and the thread paused; it took what arrived, or still polls.
    /// `steadily`: it polled through the whole pause ([`UDP_RX_STEADY_POLL_GAP`]).
    Polled { steadily: bool },
    /// The thread paused, and datagrams still wait a grace after its end, with no poll since:
    /// the application stopped polling. If it waits for the device some other way (watching
    /// memory an RDMA WRITE fills, as `ib_write_lat` does), pausing only delays it.
    Missed,
}

/// When an application polled the wire since the receive thread's last pause began (the
/// port's poll count differs from `seen`, the count then, which it updates), sleeps `pause`
/// without watching the socket, and says whether datagrams were left waiting for the thread.
/// `None` when the port is gone or moved to another socket or wire.
fn pause_for_poller(weak: &Weak<PortInner>, sock: &Arc<WireSocket>, pause: Duration, seen: &mut u64) -> Option<Pause> {
    let polls = || Some(weak.upgrade()?.polls.load(Ordering::Relaxed));
    let start = polls()?;
    if std::mem::replace(seen, start) == start {
        return Some(Pause::NotPolled);
    }
    if !lock(&weak.upgrade()?.link).receives_on(sock) {
        return None;
    }
    std::thread::sleep(pause);
    let end = polls()?;
    let steadily = u128::from(end.wrapping_sub(start)) * UDP_RX_STEADY_POLL_GAP.as_nanos() >= pause.as_nanos();
    if !wait_readable(sock, Duration::ZERO) {
        return Some(Pause::Polled { steadily });
    }
    // Datagrams wait: the application may be busy with what it took, or have stopped polling.
    // One that polls again within the grace takes them.
    std::thread::sleep(UDP_RX_PAUSE_GRACE);
    if polls()? != end || !wait_readable(sock, Duration::ZERO) {
        return Some(Pause::Polled { steadily });
    }
    Some(Pause::Missed)
}

/// The pause after one of `pause` that ended as `paused` ([`pause_for_poller`]): twice as long,
/// up to [`UDP_RX_POLLED_PAUSE_MAX`], after one through which the application polled steadily
/// (and took what arrived), unless a pause left datagrams waiting within
/// [`UDP_RX_LONG_PAUSE_AFTER_MISS`] (`missed_lately`); else [`UDP_RX_POLLED_PAUSE`].
fn next_pause(pause: Duration, paused: Option<&Pause>, missed_lately: bool) -> Duration {
    match paused {
        Some(Pause::Polled { steadily: true }) if !missed_lately => (pause * 2).min(UDP_RX_POLLED_PAUSE_MAX),
        _ => UDP_RX_POLLED_PAUSE,
    }
}

/// A UDP wire's receive thread: waits for datagrams, queues those waiting (up to
/// [`UDP_RX_BATCH`]) and has the device handle them together; polls without blocking for
/// [`UDP_RX_SPIN`] after the last frame (yielding its core between looks), then blocks; the
/// ACKs its run leaves waiting get [`UDP_RX_ACK_GRACE`] to leave with the application's
/// reply. A thread preempted while spinning (the cores are wanted by others, e.g.
/// applications that busy-poll their CQs and never yield) blocks for [`UDP_RX_SPIN_BACKOFF`]:
/// spinning then only delays those applications by a scheduler time slice. While an application polls the wire
/// itself ([`Port::poll_wire`]), the thread leaves the socket to it ([`pause_for_poller`]).
pub(super) fn udp_rx(weak: Weak<PortInner>, sock: Arc<WireSocket>) {
    crate::device::prepare_own_thread();
    let mut slots = RecvSlots::new();
    let mut last_frame: Option<Instant> = None;
    let mut last_look: Option<Instant> = None;
    let mut spin_off_until: Option<Instant> = None;
    let mut pause_off_until: Option<Instant> = None;
    // The last pause that ended as `Pause::Missed`.
    let mut last_miss: Option<Instant> = None;
    let mut pause = UDP_RX_POLLED_PAUSE;
    // The wire's polls counted at the last look (`PortInner::polls`).
    let mut polls_seen = 0;
    // Until when the thread's runs send ACKs at once (`UDP_RX_ACK_WAIT_HOLDOFF`).
    let mut acks_wait_off_until: Option<Instant> = None;
    // Runs in a row whose ACKs no reply carried (`UDP_RX_ACK_WAIT_MISSES`).
    let mut acks_not_carried = 0;
    loop {
        if pause_off_until.is_none_or(|t| Instant::now() >= t) {
            let paused = pause_for_poller(&weak, &sock, pause, &mut polls_seen);
            let missed_lately = last_miss.is_some_and(|t| t.elapsed() < UDP_RX_LONG_PAUSE_AFTER_MISS);
            pause = next_pause(pause, paused.as_ref(), missed_lately);
            match paused {
                None => return,
                Some(Pause::NotPolled) => {}
                Some(Pause::Polled { .. }) => {
                    // Neither a sign of preemption nor of a conversation to spin for.
                    (last_look, last_frame) = (None, None);
                    continue;
                }
                Some(Pause::Missed) => {
                    // One miss may only mean the application was preempted, or busy with what
                    // it took, while it polled; a second one soon after means it stopped.
                    // (The miss that starts a hold-off stays the last one: the next miss comes
                    // after the hold-off, outside the window.)
                    let now = Instant::now();
                    if last_miss.is_some_and(|t| now.duration_since(t) < UDP_RX_PAUSE_MISS_WINDOW) {
                        pause_off_until = Some(now + UDP_RX_PAUSE_HOLDOFF);
                    }
                    last_miss = Some(now);
                    (last_look, last_frame) = (None, None);
                }
            }
        }
        let now = Instant::now();
        // A look that comes this late after the previous one means the thread waited for a
        // core: other threads (a busy-polling application) need the CPUs, so stop spinning
        // for a while and let a datagram's arrival wake the thread instead.
        if last_look.is_some_and(|t| now.duration_since(t) > UDP_RX_PREEMPTED) {
            spin_off_until = Some(now + UDP_RX_SPIN_BACKOFF);
        }
        let spinning =
            last_frame.is_some_and(|t| now.duration_since(t) < UDP_RX_SPIN) && spin_off_until.is_none_or(|t| now >= t);
        last_look = spinning.then_some(now);
        if !spinning {
            let _ = wait_readable(&sock, Duration::from_millis(50));
        }
        let Some(port) = weak.upgrade() else { return };
        // Frames held for a send doorbell that did not come, by an application that has not
        // looked at its CQs since (`tx_hold`).
        if port.holds_frames_for(TX_HOLD_LONGEST) {
            Port { inner: port.clone() }.send_held_now();
        }
        let drained = {
            let mut view = lock(&port.drain);
            port.drain_wire(&mut view, Some(&sock), &mut slots)
        };
        // Stop when the port moved to another socket or wire.
        let Some(drained) = drained else { return };
        if drained.datagrams > 0 {
            // ACKs may wait for a reply from an application that rang a send doorbell since
            // the thread's last run that answered requests: it replies to what comes. A
            // stream's receiver, which sends nothing, has its ACKs sent at once, and frames
            // that owe none (the ACKs a requester receives) are handled beside its doorbells.
            if drained.rc_requests
                && port.take_send_doorbell_rung()
                && acks_wait_off_until.is_none_or(|t| Instant::now() >= t)
            {
                match receive_letting_acks_wait(&port, &sock) {
                    AckWait::NoneOwed => {}
                    AckWait::Carried => acks_not_carried = 0,
                    AckWait::NotCarried => {
                        acks_not_carried += 1;
                        if acks_not_carried >= UDP_RX_ACK_WAIT_MISSES {
                            acks_wait_off_until = Some(Instant::now() + UDP_RX_ACK_WAIT_HOLDOFF);
                            acks_not_carried = 0;
                        }
                    }
                }
            } else {
                port.notify();
            }
            last_frame = Some(Instant::now());
        } else if spinning {
            std::thread::yield_now();
        }
    }
}

/// What became of the ACKs a receive thread's run left waiting ([`receive_letting_acks_wait`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AckWait {
    /// The run owed none (or another thread holds the device, and runs the frames).
    NoneOwed,
    /// What the application did next (its reply) sent them.
    Carried,
    /// No reply carried them: the grace ended first (they are sent now), or a datagram came
    /// first (the run of it sends them); the peer is then not waiting for a reply but sending
    /// a stream.
    NotCarried,
}

/// Has the device handle the frames a receive thread queued, the ACKs they owe left waiting
/// for the application's reply ([`Port::acks_may_wait`]) while the thread watches the socket
/// for up to [`UDP_RX_ACK_GRACE`].
fn receive_letting_acks_wait(port: &PortInner, sock: &UdpSocket) -> AckWait {
    port.letting_acks_wait(|| port.notify());
    if !port.acks_deferred.load(Ordering::Relaxed) {
        return AckWait::NoneOwed;
    }
    let datagram = wait_readable(sock, UDP_RX_ACK_GRACE);
    if !port.acks_deferred.load(Ordering::Relaxed) {
        return AckWait::Carried;
    }
    if !datagram {
        port.notify();
    }
    AckWait::NotCarried
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_for_a_steady_poller_double_up_to_their_longest_and_any_other_end_starts_them_again() {
        let steady = Pause::Polled { steadily: true };
        let mut pause = UDP_RX_POLLED_PAUSE;
        let mut seen = vec![pause];
        while pause < UDP_RX_POLLED_PAUSE_MAX {
            pause = next_pause(pause, Some(&steady), false);
            seen.push(pause);
        }
        let ms = |n| Duration::from_millis(n);
        assert_eq!(seen, [ms(1), ms(2), ms(4), ms(8)]);
        assert_eq!(next_pause(pause, Some(&steady), false), UDP_RX_POLLED_PAUSE_MAX, "no longer than the longest");
        // An application that polled now and then, or left datagrams waiting, or did not poll;
        // or a steady one soon after a pause that it left datagrams waiting through.
        for other in [Pause::Polled { steadily: false }, Pause::Missed, Pause::NotPolled] {
            assert_eq!(next_pause(pause, Some(&other), false), UDP_RX_POLLED_PAUSE);
        }
        assert_eq!(next_pause(pause, Some(&steady), true), UDP_RX_POLLED_PAUSE);
        assert_eq!(next_pause(pause, None, false), UDP_RX_POLLED_PAUSE);
    }

    #[test]
    fn a_connected_wire_sends_every_frame_whole_whatever_its_segment_option() {
        // The receiver asks for no UDP_GRO: the kernel hands it each segment as a datagram.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let peer = rx.local_addr().unwrap();
        let tx = WireSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        tx.connect(peer).unwrap();
        // IP frames exactly as long as they say (only those are sent segmented).
        let frames_of = |frames: &[(usize, u8)]| -> Vec<Vec<u8>> {
            frames.iter().map(|&(len, k)| ip_frame(len, len - 14, k)).collect()
        };
        let send = |frames: &[(usize, u8)]| {
            let frames = frames_of(frames);
            let dests: Vec<(usize, SocketAddr)> = (0..frames.len()).map(|i| (i, peer)).collect();
            send_datagrams(&tx, &frames, &dests, true);
        };
        // Each datagram, which must be one whole frame of the sent ones.
        let received = |n: usize| -> Vec<(usize, u8)> {
            let mut buf = vec![0u8; 65536];
            (0..n)
                .map(|_| {
                    let len = rx.recv(&mut buf).unwrap();
                    let k = buf[len - 1];
                    assert_eq!(&buf[..len], &frames_of(&[(len, k)])[0][..], "a datagram holds one frame");
                    (len, k)
                })
                .collect()
        };
        let segmenting = GSO_SEGMENT_LIMIT.load(Ordering::Relaxed) > 4000;

        // Two 122-byte frames and a 62-byte one (replies and an ACK): one segmented datagram,
        // whose segment size becomes the socket's option.
        let burst = [(122, 1), (122, 2), (62, 3)];
        send(&burst);
        assert_eq!(received(3), burst);
        if segmenting {
            assert_eq!(*tx.segment.read().unwrap(), 122);
        }
        // A lone frame within the option, and one longer than it: neither is cut.
        send(&[(100, 4)]);
        send(&[(4000, 5)]);
        assert_eq!(received(2), [(100, 4), (4000, 5)]);
        // Lone frames longer than the option in a batch of several datagrams (the second one
        // cannot join the first), then a segmented datagram of another size.
        let batch = [(200, 6), (4000, 7), (300, 8), (300, 9)];
        send(&batch);
        assert_eq!(received(4), batch);
        let burst = [(1000, 10), (1000, 11), (500, 12)];
        send(&burst);
        assert_eq!(received(3), burst);
        if segmenting {
            assert_eq!(*tx.segment.read().unwrap(), 1000);
        }
        send(&[(1500, 13)]);
        assert_eq!(received(1), [(1500, 13)]);
    }

    #[test]
    fn a_receive_after_an_empty_one_takes_one_datagram_and_the_next_takes_a_batch() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut slots = RecvSlots::new();
        let mut took = Vec::new();
        let take = |slots: &mut RecvSlots, took: &mut Vec<u8>| {
            recv_batch(&rx, slots, false, |frame, truncated| {
                assert!(!truncated);
                took.push(frame[0]);
            })
        };
        assert_eq!(take(&mut slots, &mut took), 0);
        for k in 1..=5u8 {
            tx.send_to(&[k; 64], rx.local_addr().unwrap()).unwrap();
        }
        assert!(wait_readable(&rx, Duration::from_secs(10)));
        // Loopback queues a datagram at the receiver before `send_to` returns.
        assert_eq!(take(&mut slots, &mut took), 1, "after an empty call, one datagram");
        assert_eq!(take(&mut slots, &mut took), 4, "after a call that found one, the rest together");
        assert_eq!(take(&mut slots, &mut took), 0);
        assert_eq!(took, [1, 2, 3, 4, 5]);
    }

    /// An IPv4 frame of `len` bytes whose IP packet is `ip_len` bytes (the rest padding), its
    /// payload bytes `k`.
    fn ip_frame(len: usize, ip_len: usize, k: u8) -> Vec<u8> {
        let mut f = vec![k; len];
        f[12..14].copy_from_slice(&umlx_wire::packet::ETHERTYPE_IPV4.to_be_bytes());
        f[14] = (4 << 4) | 5;
        f[16..18].copy_from_slice(&(ip_len as u16).to_be_bytes());
        f[14 + ip_len..].fill(0);
        f
    }

    #[test]
    fn a_look_for_one_datagram_from_this_machine_splits_a_coalesced_one_at_its_frames_own_lengths() {
        // A connected pair on loopback, the receiver with UDP_GRO, as a UDP wire's sockets.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_gro(&rx);
        let tx = WireSocket::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        let (rx_addr, tx_addr) = (rx.local_addr().unwrap(), tx.local_addr().unwrap());
        tx.connect(rx_addr).unwrap();
        rx.connect(tx_addr).unwrap();
        let mut slots = RecvSlots::new();
        let look = |slots: &mut RecvSlots| {
            let mut took = Vec::new();
            let n = recv_batch(&rx, slots, true, |frame, truncated| {
                assert!(!truncated);
                took.push(frame.to_vec());
            });
            (n, took)
        };
        let send = |frames: &[Vec<u8>]| {
            let dests: Vec<(usize, SocketAddr)> = (0..frames.len()).map(|i| (i, rx_addr)).collect();
            send_datagrams(&tx, frames, &dests, true);
            assert!(wait_readable(&rx, Duration::from_secs(10)));
        };
        let reply_and_ack = vec![ip_frame(122, 108, 1), ip_frame(62, 48, 2)];
        let burst = vec![ip_frame(300, 286, 3), ip_frame(300, 286, 4), ip_frame(300, 286, 5), ip_frame(100, 86, 6)];
        // Padded after their IP packets: each is sent alone, and taken whole.
        let padded = vec![ip_frame(60, 30, 7), ip_frame(60, 30, 8)];
        let mut arp = vec![9u8; 42];
        arp[12..14].copy_from_slice(&umlx_wire::packet::ETHERTYPE_ARP.to_be_bytes());
        for frames in [&reply_and_ack, &burst] {
            assert_eq!(look(&mut slots), (0, vec![]), "an empty look: the next takes one datagram");
            send(frames);
            assert_eq!(look(&mut slots), (1, frames.clone()), "one coalesced datagram, split");
            // The same datagram taken by a look for a batch (its segment size from the kernel).
            send(frames);
            assert_eq!(look(&mut slots), (1, frames.clone()), "the same, by the batch look");
        }
        assert_eq!(look(&mut slots), (0, vec![]));
        send(&padded);
        assert_eq!(look(&mut slots), (1, vec![padded[0].clone()]), "a padded frame is sent and taken alone");
        assert_eq!(look(&mut slots), (1, vec![padded[1].clone()]));
        assert_eq!(look(&mut slots), (0, vec![]));
        // A padded frame, then one as long as it says: neither joins the other.
        let padded_then_whole = vec![ip_frame(60, 30, 10), ip_frame(60, 46, 11)];
        send(&padded_then_whole);
        assert_eq!(look(&mut slots), (1, vec![padded_then_whole[0].clone()]), "the padded frame alone");
        assert_eq!(look(&mut slots), (1, vec![padded_then_whole[1].clone()]));
        assert_eq!(look(&mut slots), (0, vec![]));
        send(std::slice::from_ref(&arp));
        assert_eq!(look(&mut slots), (1, vec![arp]), "a frame that does not say its length is one frame");
    }

    #[test]
    fn a_look_for_one_datagram_on_a_lan_socket_splits_a_bundle() {
        // A LAN member's socket (unconnected, on 127.0.0.1) and a lane of another member.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_gro(&rx);
        let lane = WireSocket::to_lan_members(UdpSocket::bind("127.0.0.1:0").unwrap());
        lane.connect(rx.local_addr().unwrap()).unwrap();
        let mut slots = RecvSlots::new();
        let mut look = || {
            let mut took = Vec::new();
            let n = recv_batch(&rx, &mut slots, true, |frame, truncated| {
                took.push((frame.to_vec(), truncated));
            });
            (n, took)
        };
        assert_eq!(look(), (0, vec![]), "an empty look: the next takes one datagram");
        let frames = vec![ip_frame(122, 108, 1), ip_frame(62, 48, 2)];
        let dests: Vec<(usize, SocketAddr)> = (0..2).map(|i| (i, rx.local_addr().unwrap())).collect();
        send_datagrams(&lane, &frames, &dests, true);
        assert!(wait_readable(&rx, Duration::from_secs(10)));
        let expected = frames.into_iter().map(|f| (f, false)).collect();
        assert_eq!(look(), (1, expected));
    }

    #[test]
    fn frames_sent_together_to_a_lan_member_go_as_one_plain_datagram_that_both_looks_split() {
        // The receiver asks for no UDP_GRO: a segmented datagram would reach it as one
        // datagram per frame, a bundle as one datagram of all their bytes.
        let plain_rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        plain_rx.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let member = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_gro(&member);
        let reply_and_ack = vec![ip_frame(122, 108, 1), ip_frame(62, 48, 2)];
        let burst = vec![ip_frame(300, 286, 3), ip_frame(300, 286, 4), ip_frame(300, 286, 5), ip_frame(100, 86, 6)];
        let padded = vec![ip_frame(60, 30, 7), ip_frame(60, 30, 8)];
        let send = |lane: &WireSocket, to: SocketAddr, frames: &[Vec<u8>]| {
            let dests: Vec<(usize, SocketAddr)> = (0..frames.len()).map(|i| (i, to)).collect();
            // Connected (one `send`) and not (`sendmmsg`): both paths bundle.
            send_datagrams(lane, frames, &dests, lane.peer_addr().is_ok());
        };
        let unconnected = WireSocket::to_lan_members(UdpSocket::bind("127.0.0.1:0").unwrap());
        let connected = WireSocket::to_lan_members(UdpSocket::bind("127.0.0.1:0").unwrap());
        connected.connect(plain_rx.local_addr().unwrap()).unwrap();
        let mut buf = vec![0u8; 65536];
        for lane in [&connected, &unconnected] {
            for frames in [&reply_and_ack, &burst] {
                send(lane, plain_rx.local_addr().unwrap(), frames);
                let len = plain_rx.recv(&mut buf).unwrap();
                assert_eq!(&buf[..len], &frames.concat()[..], "one datagram, all the frames' bytes");
            }
            // Padded frames cannot be split at their lengths: each goes alone.
            send(lane, plain_rx.local_addr().unwrap(), &padded);
            for frame in &padded {
                let len = plain_rx.recv(&mut buf).unwrap();
                assert_eq!(&buf[..len], &frame[..]);
            }
            assert_eq!(*lane.segment.read().unwrap(), 0, "the socket's segment option is never set");
        }
        // A member takes a bundle apart with either look: the look for one datagram (after an
        // empty one) and the batch look (after one that found a datagram).
        let lane = WireSocket::to_lan_members(UdpSocket::bind("127.0.0.1:0").unwrap());
        lane.connect(member.local_addr().unwrap()).unwrap();
        let mut slots = RecvSlots::new();
        let mut look = || {
            let mut took = Vec::new();
            let n = recv_batch(&member, &mut slots, true, |frame, truncated| {
                assert!(!truncated);
                took.push(frame.to_vec());
            });
            (n, took)
        };
        assert_eq!(look(), (0, vec![]), "an empty look: the next takes one datagram");
        for frames in [&reply_and_ack, &burst] {
            send(&lane, member.local_addr().unwrap(), frames);
            assert!(wait_readable(&member, Duration::from_secs(10)));
            assert_eq!(look(), (1, frames.clone()));
        }
        assert_eq!(look(), (0, vec![]));
    }
}
