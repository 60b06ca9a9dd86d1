//! The loopback LAN: any number of processes' ports on one machine, each a member socket on
//! 127.0.0.1, learning which member has which MAC as a switch does ([`LoopbackLan`]).

use super::*;

/// A LAN of processes on one machine, with no switch and no daemon: member `n` of a LAN based
/// at UDP port `B` is the socket bound to 127.0.0.1:`B + n`, and a frame travels as one
/// datagram (the UDP wire's encapsulation), or with the frames sent with it to the same
/// member in one plain datagram of their bytes, which the member splits at the frames' own
/// lengths (a bundle: every member is a umlx sim). A process joins by binding the first free member
/// port ([`LoopbackLan::join`]). Each member learns which member a MAC is at, as a learning
/// switch does, from the neighbour frames (ARP, IPv6 neighbour discovery) the other members
/// send, each tagged with its sender's member number ([`LoopbackLan::tag_neighbour_frame`]): a
/// member's receive then never asks the kernel who sent a datagram, which costs a busy poller
/// 0.17 - 0.19 µs a datagram. A frame to a learnt MAC goes to that member only; broadcast,
/// multicast and frames to a MAC not learnt yet go to every other member (ARP requests find
/// their target that way, and its reply teaches the asker). A member drops frames for unicast
/// MACs other than its own. A member's RoCE frames to a learnt member leave on a lane, a
/// socket of its own connected to that member; ARP and flooded frames leave from the member
/// port, where all frames arrive.
#[derive(Debug)]
pub struct LoopbackLan {
    sock: UdpSocket,
    base: u16,
    members: u16,
    member: u16,
}

impl LoopbackLan {
    /// Joins the LAN of `members` UDP ports from 127.0.0.1:`base` as the first member whose
    /// port is free. Fails with `AddrInUse` when every member port is taken.
    pub fn join(base: u16, members: u16) -> std::io::Result<LoopbackLan> {
        for member in 0..members {
            let Some(port) = base.checked_add(member) else { break };
            match UdpSocket::bind(loopback(port)) {
                Ok(sock) => return Ok(LoopbackLan { sock, base, members, member }),
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("every port of the loopback LAN (UDP 127.0.0.1:{base}..+{members}) is taken"),
        ))
    }

    /// This process's member number (its port is the base plus this).
    pub fn member(&self) -> u16 {
        self.member
    }

    /// The LAN's first UDP port (member 0's).
    pub fn base(&self) -> u16 {
        self.base
    }

    /// The first member port that is free now (a look, not a reservation), if any.
    pub fn first_free(base: u16, members: u16) -> Option<u16> {
        (0..members).find(|&m| base.checked_add(m).is_some_and(|p| UdpSocket::bind(loopback(p)).is_ok()))
    }
}

/// What begins the tag a member puts after the neighbour frames it sends from its member socket
/// (then its member number, 16 bits big-endian).
const LAN_TAG_MAGIC: [u8; 8] = *b"umlxLAN:";

/// The length of a member's tag.
const LAN_TAG_LEN: usize = LAN_TAG_MAGIC.len() + 2;

impl LoopbackLan {
    /// Puts member `member`'s tag after the neighbour frame (ARP, IPv6 neighbour discovery)
    /// `frame`: how a member learns which member port a MAC is at, without asking the kernel
    /// for each datagram's sender (a receive that asks costs 0.17 - 0.19 µs more on loopback,
    /// in a C ping-pong). Neighbour frames ignore bytes after their message (Ethernet padding
    /// or trailer).
    pub fn tag_neighbour_frame(frame: &mut Vec<u8>, member: u16) {
        frame.extend_from_slice(&LAN_TAG_MAGIC);
        frame.extend_from_slice(&member.to_be_bytes());
    }
}

/// The member whose tag `frame` ends with, if it does.
fn tagged_member(frame: &[u8]) -> Option<u16> {
    let tag = frame.get(frame.len().checked_sub(LAN_TAG_LEN)?..)?;
    (tag[..LAN_TAG_MAGIC.len()] == LAN_TAG_MAGIC).then(|| u16::from_be_bytes([tag[8], tag[9]]))
}

/// UDP `port` on 127.0.0.1 (a LAN member's address).
fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// A joined [`LoopbackLan`] as a port's link.
pub(super) struct Lan {
    pub(super) sock: Arc<WireSocket>,
    base: u16,
    members: u16,
    member: u16,
    /// MACs learnt from received frames and the member port they came from.
    learnt: Mutex<Vec<(MacAddr, u16)>>,
    /// How many times `learnt` changed: a sender's copy of it ([`LanSendCache`]) is current
    /// while this is what it was when the copy was taken.
    learnt_changes: AtomicU64,
}

/// What a port's sends on its LAN keep between batches, under the port's transmit lock (and
/// dropped with the link): a copy of the MACs learnt, so that a send to a learnt member takes
/// no lock of the LAN's, and the lanes, which only sends use.
#[derive(Default)]
pub(super) struct LanSendCache {
    /// `Lan::learnt_changes` when `learnt` was copied (`None`: never).
    learnt_seen: Option<u64>,
    learnt: Vec<(MacAddr, u16)>,
    /// The lanes opened, by member port: a socket connected to that member (`None` when one
    /// could not be opened: that member's frames leave from the member socket). See
    /// [`LanSendCache::lane`].
    lanes: Vec<(u16, Option<WireSocket>)>,
}

/// Most MACs a LAN member remembers (the oldest is forgotten first).
const LAN_LEARNT_LIMIT: usize = 256;

/// Most members a LAN member opens a lane to (the frames to others leave from its member
/// socket).
const LAN_LANES: usize = 8;

impl Lan {
    /// The link of a port that joined `lan`.
    pub(super) fn new(lan: LoopbackLan) -> Lan {
        Lan {
            sock: Arc::new(WireSocket::to_lan_members(lan.sock)),
            base: lan.base,
            members: lan.members,
            member: lan.member,
            learnt: Mutex::new(Vec::new()),
            learnt_changes: AtomicU64::new(0),
        }
    }

    /// Tags `frame` if it is a neighbour frame ([`LoopbackLan::tag_neighbour_frame`]): what
    /// teaches the other members where this one is.
    pub(super) fn tag_if_neighbour_frame(&self, frame: &mut Vec<u8>) {
        // An untagged IPv4 frame (a RoCEv2 packet: nearly every frame) is never one, and is
        // not decoded.
        if frame.get(12..14) == Some(&ETHERTYPE_IPV4.to_be_bytes()[..]) {
            return;
        }
        if arp::parse(frame).is_some() {
            LoopbackLan::tag_neighbour_frame(frame, self.member);
        }
    }

    /// Where `frame` goes: to the member that has its destination MAC, or to every other
    /// member. A RoCE frame to a learnt member goes on that member's lane: its member port is
    /// returned. Every other destination, a member socket's, is given to `to` (ARP goes there
    /// even to a learnt member: what teaches a member where this one is must leave from its
    /// member port).
    pub(super) fn destinations(
        &self,
        cache: &mut LanSendCache,
        frame: &[u8],
        mut to: impl FnMut(SocketAddr),
    ) -> Option<u16> {
        let dst = frame.get(0..6)?;
        if dst[0] & 1 == 0
            && let Some(port) = self.learnt_port(cache, dst)
        {
            if frame.get(12..14) != Some(&ETHERTYPE_ARP.to_be_bytes()[..]) {
                return Some(port);
            }
            to(loopback(port));
            return None;
        }
        for m in (0..self.members).filter(|&m| m != self.member) {
            if let Some(port) = self.base.checked_add(m) {
                to(loopback(port));
            }
        }
        None
    }

    /// The member port of the learnt MAC `dst`, from the sender's copy of what was learnt
    /// (taken again when it changed).
    fn learnt_port(&self, cache: &mut LanSendCache, dst: &[u8]) -> Option<u16> {
        let changes = self.learnt_changes.load(Ordering::Acquire);
        if cache.learnt_seen != Some(changes) {
            let learnt = lock(&self.learnt);
            cache.learnt.clone_from(&learnt);
            cache.learnt_seen = Some(self.learnt_changes.load(Ordering::Relaxed));
        }
        cache.learnt.iter().find(|(m, _)| m[..] == *dst).map(|&(_, p)| p)
    }

    /// Whether `port` is one of the LAN's member ports.
    fn is_member_port(&self, port: u16) -> bool {
        port >= self.base && u32::from(port) < u32::from(self.base) + u32::from(self.members)
    }

    /// A socket for a lane to the member at `port` ([`LanSendCache::lane`]): bound to a port of
    /// 127.0.0.1 outside the LAN's, connected to that member.
    fn open_lane(&self, port: u16) -> Option<UdpSocket> {
        // The kernel's ephemeral ports include the LAN's: a lane must not hold a member's.
        for _ in 0..8 {
            let sock = UdpSocket::bind(loopback(0)).ok()?;
            if self.is_member_port(sock.local_addr().ok()?.port()) {
                continue;
            }
            sock.connect(loopback(port)).ok()?;
            return Some(sock);
        }
        None
    }

    /// Sends the frames of `lanes` ((frame, member port) pairs) on the lanes to those members,
    /// each member's in order; `scratch` is a list to reuse.
    pub(super) fn send_on_lanes(
        &self,
        cache: &mut LanSendCache,
        frames: &[Vec<u8>],
        lanes: &mut [(usize, u16)],
        scratch: &mut Vec<(usize, SocketAddr)>,
    ) {
        lanes.sort_unstable_by_key(|&(i, port)| (port, i));
        for run in lanes.chunk_by(|a, b| a.1 == b.1) {
            let port = run[0].1;
            scratch.clear();
            scratch.extend(run.iter().map(|&(i, p)| (i, loopback(p))));
            match cache.lane(self, port) {
                Some(lane) => send_datagrams(lane, frames, scratch, true),
                None => send_datagrams(&self.sock, frames, scratch, false),
            }
        }
        scratch.clear();
    }

    /// Whether a frame belongs to this member (learning its source MAC on the way, from a
    /// neighbour frame another member tagged: [`LoopbackLan::tag_neighbour_frame`]).
    pub(super) fn accept(&self, frame: &[u8], mine: &MacAddr) -> bool {
        let (Some(dst), Some(src)) = (frame.get(0..6), frame.get(6..12)) else { return false };
        if let Some(member) = tagged_member(frame)
            && member < self.members
            && member != self.member
            && src[0] & 1 == 0
            && arp::parse(frame).is_some()
            && let Some(port) = self.base.checked_add(member)
        {
            let mut src_mac = [0u8; 6];
            src_mac.copy_from_slice(src);
            let mut l = lock(&self.learnt);
            let changed = match l.iter_mut().find(|(m, _)| *m == src_mac) {
                Some(e) => std::mem::replace(&mut e.1, port) != port,
                None => {
                    if l.len() >= LAN_LEARNT_LIMIT {
                        l.remove(0);
                    }
                    l.push((src_mac, port));
                    true
                }
            };
            if changed {
                self.learnt_changes.fetch_add(1, Ordering::Release);
            }
        }
        dst[0] & 1 != 0 || dst == &mine[..]
    }
}

impl LanSendCache {
    /// The lane to the member at `port` of `lan`: a UDP socket of its own, bound to a port of
    /// 127.0.0.1 outside the LAN's and connected to that member. A connected socket sends
    /// without an address (the kernel keeps the route), as a point-to-point wire does
    /// ([`Port::connect_udp`]); the member socket has many peers and cannot be connected. The
    /// member learns nothing from a lane's port (it is not a member's), so its frames for this
    /// one still come to the member socket. Opened at the first RoCE frame to that member, for
    /// at most [`LAN_LANES`] members; `None` (the member socket sends) past them or when it
    /// cannot be opened.
    fn lane(&mut self, lan: &Lan, port: u16) -> Option<&WireSocket> {
        let i = match self.lanes.iter().position(|(p, _)| *p == port) {
            Some(i) => i,
            None if self.lanes.len() >= LAN_LANES => return None,
            None => {
                self.lanes.push((port, lan.open_lane(port).map(WireSocket::to_lan_members)));
                self.lanes.len() - 1
            }
        };
        self.lanes.get(i).and_then(|(_, lane)| lane.as_ref())
    }
}
