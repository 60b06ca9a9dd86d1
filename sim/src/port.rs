//! The device's Ethernet port: what connects the transport to a wire.
//!
//! A [`Port`] has a MAC and the device's addresses. It owns the frames in both directions
//! outside the device lock: frames arriving from a wire wait in its receive queue until the
//! device's engine thread takes them (the port wakes the engine), and frames the transport
//! built are handed to the port after the device lock is dropped. It answers ARP and IPv6
//! neighbour solicitation for its own addresses ([`umlx_wire::arp`]), drops and counts
//! malformed frames ([`WireStats`]), and can record every frame sent and received in a pcap.
//!
//! Wires: an in-process [`crate::fabric::Fabric`], or a UDP socket carrying one Ethernet
//! frame per datagram (QEMU's `-netdev socket,udp=...,localaddr=...` encapsulation), so that
//! another process or a VM can be the peer. The UDP socket asks for large buffers
//! (`setsockopt`, this module's only `unsafe`), so that a burst of a long message survives while
//! the receiving sim's thread waits for a core.

use crate::fabric::FabricShared;
use crate::firmware::Hca;
use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::Thread;
use std::time::{Duration, Instant, SystemTime};
use umlx_wire::packet::{ETHERTYPE_ARP, ETHERTYPE_IPV6, MacAddr};
use umlx_wire::pcap::PcapWriter;
use umlx_wire::{WireStats, arp, parse_frame_verified};

/// Where the port's frames go.
enum Link {
    Down,
    Fabric(Arc<FabricShared>),
    Udp { sock: Arc<UdpSocket>, peer: SocketAddr },
}

pub(crate) struct PortInner {
    pub(crate) mac: MacAddr,
    ips: Vec<IpAddr>,
    rx: Mutex<VecDeque<Vec<u8>>>,
    link: Mutex<Link>,
    stats: Mutex<WireStats>,
    pcap: Mutex<Option<PcapWriter<BufWriter<File>>>>,
    waker: Mutex<Option<Thread>>,
    /// Neighbours learnt from ARP replies and neighbour advertisements.
    neighbors: Mutex<Vec<(IpAddr, MacAddr)>>,
}

/// A device's Ethernet port. Cloning gives another handle to the same port.
#[derive(Clone)]
pub struct Port {
    pub(crate) inner: Arc<PortInner>,
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port").field("mac", &self.inner.mac).finish_non_exhaustive()
    }
}

/// Most frames kept waiting for the engine; more are dropped (a full receive buffer).
const RX_QUEUE_LIMIT: usize = 65536;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Port {
    /// A port with `mac` answering for `ips`, not connected to any wire.
    pub fn new(mac: MacAddr, ips: Vec<IpAddr>) -> Port {
        Port {
            inner: Arc::new(PortInner {
                mac,
                ips,
                rx: Mutex::new(VecDeque::new()),
                link: Mutex::new(Link::Down),
                stats: Mutex::new(WireStats::new()),
                pcap: Mutex::new(None),
                waker: Mutex::new(None),
                neighbors: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Resolves `ip` to a MAC the way a host stack does: from the neighbours already learnt,
    /// else by sending an ARP request (IPv4) or neighbour solicitation (IPv6) from `my_ip` and
    /// waiting up to `timeout` for the answer. This is the host's job, not the adapter's; the
    /// port offers it because an embedded device has no kernel beside it.
    pub fn resolve(&self, my_ip: IpAddr, ip: IpAddr, timeout: Duration) -> Option<MacAddr> {
        let known = |p: &Port| lock(&p.inner.neighbors).iter().find(|(i, _)| *i == ip).map(|(_, m)| *m);
        if let Some(m) = known(self) {
            return Some(m);
        }
        let req = arp::request(self.inner.mac, my_ip, ip)?;
        let start = Instant::now();
        let mut next_send = start;
        while start.elapsed() < timeout {
            if Instant::now() >= next_send {
                self.transmit(vec![req.clone()]);
                next_send = Instant::now() + Duration::from_millis(200);
            }
            std::thread::sleep(Duration::from_millis(2));
            if let Some(m) = known(self) {
                return Some(m);
            }
        }
        None
    }

    /// The port's MAC address.
    pub fn mac(&self) -> MacAddr {
        self.inner.mac
    }

    /// Receive and transmit counters.
    pub fn stats(&self) -> WireStats {
        *lock(&self.inner.stats)
    }

    /// Records every frame sent and received from now on in a pcap file at `path`.
    pub fn set_pcap(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let w = PcapWriter::new(BufWriter::new(File::create(path)?))?;
        *lock(&self.inner.pcap) = Some(w);
        Ok(())
    }

    /// Stops recording and flushes the pcap file.
    pub fn stop_pcap(&self) -> std::io::Result<()> {
        if let Some(mut w) = lock(&self.inner.pcap).take() {
            w.flush()?;
        }
        Ok(())
    }

    /// Connects the port to a UDP wire: frames are sent as datagrams from `local` to `peer`
    /// and every datagram arriving at `local` is a received frame. Returns the bound address.
    pub fn connect_udp(&self, local: SocketAddr, peer: SocketAddr) -> std::io::Result<SocketAddr> {
        let sock = Arc::new(UdpSocket::bind(local)?);
        sock.set_read_timeout(Some(Duration::from_millis(50)))?;
        enlarge_buffers(&sock);
        let bound = sock.local_addr()?;
        let weak = Arc::downgrade(&self.inner);
        let rsock = sock.clone();
        std::thread::Builder::new().name("umlx-sim-udp-rx".into()).spawn(move || udp_rx(weak, rsock))?;
        *lock(&self.inner.link) = Link::Udp { sock, peer };
        Ok(bound)
    }

    /// Disconnects the port from its wire.
    pub fn disconnect(&self) {
        *lock(&self.inner.link) = Link::Down;
    }

    pub(crate) fn set_fabric(&self, f: Arc<FabricShared>) {
        *lock(&self.inner.link) = Link::Fabric(f);
    }

    /// A frame arrives from the wire: it waits for the device's engine.
    pub fn inject(&self, frame: Vec<u8>) {
        self.inner.inject(frame);
    }

    /// Sends frames on the wire (the device calls it under its own lock: it takes only port and
    /// fabric locks, never a device lock).
    pub fn transmit(&self, frames: Vec<Vec<u8>>) {
        if frames.is_empty() {
            return;
        }
        {
            let mut s = lock(&self.inner.stats);
            for f in &frames {
                s.record_tx(f.len());
            }
        }
        self.inner.record(&frames);
        // Frames to our own MAC never reach the wire: the adapter loops them back inside, as a
        // ConnectX does for RoCE traffic between its own QPs.
        let (looped, frames): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
            frames.into_iter().partition(|f| f.get(0..6) == Some(&self.inner.mac[..]));
        for f in looped {
            self.inner.inject(f);
        }
        if frames.is_empty() {
            return;
        }
        let link = match &*lock(&self.inner.link) {
            Link::Down => return,
            Link::Fabric(f) => Some(Ok(f.clone())),
            Link::Udp { sock, peer } => Some(Err((sock.clone(), *peer))),
        };
        match link {
            Some(Ok(f)) => {
                for fr in frames {
                    f.send(&self.inner, fr);
                }
            }
            Some(Err((sock, peer))) => {
                for fr in frames {
                    let _ = sock.send_to(&fr, peer);
                }
            }
            None => {}
        }
    }

    /// Frames waiting for the engine.
    pub(crate) fn take_rx(&self) -> Vec<Vec<u8>> {
        lock(&self.inner.rx).drain(..).collect()
    }

    /// The thread to wake when a frame arrives.
    pub(crate) fn set_waker(&self, t: Thread) {
        *lock(&self.inner.waker) = Some(t);
    }

    /// Hands received frames to the device (under its lock): ARP/ND are answered, RoCE
    /// packets verified and given to the transport, anything else counted and dropped.
    pub(crate) fn process(&self, hca: &mut Hca, frames: Vec<Vec<u8>>, now: Instant) {
        if frames.is_empty() {
            return;
        }
        let mut ips = self.inner.ips.clone();
        for ip in hca.gid_ips() {
            if !ips.contains(&ip) {
                ips.push(ip);
            }
        }
        for f in &frames {
            let et = f.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
            if et == Some(ETHERTYPE_ARP) || (et == Some(ETHERTYPE_IPV6) && f.get(20) == Some(&arp::IPPROTO_ICMPV6)) {
                lock(&self.inner.stats).record_rx_frame(f.len());
                if let Some((ip, mac)) = arp::learn(f) {
                    let mut n = lock(&self.inner.neighbors);
                    n.retain(|(i, _)| *i != ip);
                    n.push((ip, mac));
                }
                if let Some(r) = arp::reply(f, self.inner.mac, &ips) {
                    hca.objects.xport.outbox.push(r);
                }
                continue;
            }
            let verdict = parse_frame_verified(f);
            lock(&self.inner.stats).record_rx(f.len(), &verdict);
            if let Ok(p) = verdict {
                hca.receive_packet(&p, now);
            }
        }
    }
}

impl PortInner {
    pub(crate) fn inject(&self, frame: Vec<u8>) {
        self.record(std::slice::from_ref(&frame));
        {
            let mut q = lock(&self.rx);
            if q.len() >= RX_QUEUE_LIMIT {
                return;
            }
            q.push_back(frame);
        }
        if let Some(t) = &*lock(&self.waker) {
            t.unpark();
        }
    }

    fn record(&self, frames: &[Vec<u8>]) {
        let mut p = lock(&self.pcap);
        if let Some(w) = p.as_mut() {
            let ts = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
            for f in frames {
                let _ = w.write_record(ts, f);
            }
        }
    }
}

/// The socket buffers a UDP wire asks for: a burst of a multi-packet message (an 8 MiB READ's
/// responses are 8192 datagrams) waits there while the receiving sim's thread is not running;
/// the kernel grants at most `net.core.rmem_max` / `wmem_max`.
const WIRE_SOCKET_BUFFER: libc::c_int = 16 << 20;

/// Asks for [`WIRE_SOCKET_BUFFER`] bytes of receive and send buffer: beyond the sysctl limits
/// where the process may (`SO_RCVBUFFORCE`, CAP_NET_ADMIN), else up to them (best effort: a
/// smaller grant only means earlier drops, which the RC transport retransmits).
fn enlarge_buffers(sock: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let set = |opt| {
        let v: libc::c_int = WIRE_SOCKET_BUFFER;
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&v`, a local that outlives
        // the call; the descriptor is the socket's own, open while `sock` is borrowed.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&raw const v).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            ) == 0
        }
    };
    for (forced, capped) in [(libc::SO_RCVBUFFORCE, libc::SO_RCVBUF), (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF)] {
        if !set(forced) {
            set(capped);
        }
    }
}

fn udp_rx(weak: Weak<PortInner>, sock: Arc<UdpSocket>) {
    let mut buf = vec![0u8; 65536];
    loop {
        let r = sock.recv_from(&mut buf);
        let Some(port) = weak.upgrade() else { return };
        // Stop when the port moved to another socket or wire.
        let current = matches!(&*lock(&port.link), Link::Udp { sock: s, .. } if Arc::ptr_eq(s, &sock));
        if !current {
            return;
        }
        if let Ok((n, _)) = r {
            port.inject(buf[..n].to_vec());
        }
    }
}
