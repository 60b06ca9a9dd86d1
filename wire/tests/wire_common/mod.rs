//! Helpers shared by the `wire_*` integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

use umlx_wire::pcap::PcapReader;

/// The real ConnectX captures: `shared/rocev2_vectors` beside the workspace, or `UMLX_VECTORS`
/// (found by `sim/build.rs`). Tests that read them carry
/// `#[cfg_attr(not(umlx_vectors), ignore = ...)]`, so on a clone without them they report as
/// ignored; with `UMLX_REQUIRE_VECTORS=1` (CI) they run, and a missing directory fails here.
pub fn vectors_dir() -> PathBuf {
    let dir = PathBuf::from(env!("UMLX_VECTORS_DIR"));
    assert!(
        dir.is_dir(),
        "the RoCE captures are not at {} (UMLX_REQUIRE_VECTORS=1 asks for them): put \
         shared/rocev2_vectors beside the workspace or point UMLX_VECTORS at the directory",
        dir.display()
    );
    dir
}

/// Every record of a pcap file in the vectors directory: (1-based number, bytes, orig_len).
pub fn pcap_frames(name: &str) -> Vec<(u64, Vec<u8>, u32)> {
    let path = vectors_dir().join(name);
    let f = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let reader = PcapReader::new(std::io::BufReader::new(f)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    reader
        .enumerate()
        .map(|(i, r)| {
            let r = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            (i as u64 + 1, r.data, r.orig_len)
        })
        .collect()
}

/// The hex vectors of `scapy_roce_uts_vectors.txt`: (name, frame).
pub fn scapy_vectors() -> Vec<(String, Vec<u8>)> {
    let path = vectors_dir().join("scapy_roce_uts_vectors.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut name: Option<String> = None;
    let mut hex = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        let s = line.trim();
        if let Some(n) = s.strip_prefix("vector:") {
            name = Some(n.trim().to_string());
            hex.clear();
        } else if s.starts_with('#') {
        } else if s.is_empty() {
            if let Some(n) = name.take().filter(|_| !hex.is_empty()) {
                out.push((n, from_hex(&hex)));
            }
            hex.clear();
        } else if name.is_some() {
            hex.extend(s.chars().filter(|c| !c.is_whitespace()));
        }
    }
    out
}

/// Decodes a hex string (whitespace ignored).
pub fn from_hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s
        .chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| c.to_digit(16).unwrap_or_else(|| panic!("bad hex digit {c:?}")) as u8)
        .collect();
    assert_eq!(digits.len() & 1, 0, "odd number of hex digits");
    digits.chunks(2).map(|p| (p[0] << 4) | p[1]).collect()
}

/// A small deterministic PRNG (xorshift64*), so property tests are reproducible.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }
    pub fn u8(&mut self) -> u8 {
        self.next_u64() as u8
    }
    pub fn u16(&mut self) -> u16 {
        self.next_u64() as u16
    }
    pub fn u32(&mut self) -> u32 {
        self.next_u64() as u32
    }
    pub fn bool(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.u8()).collect()
    }
}

/// The pcaps of the vectors directory with the RoCEv2 / RoCEv1 frame counts the README
/// table gives for each.
pub const PCAP_COUNTS: &[(&str, u64, u64)] = &[
    ("write.pcap", 17, 0),
    ("read2.pcap", 13, 0),
    ("send.pcap", 9, 0),
    ("ib_send_bw_over_roce.pcap", 10, 0),
    ("nvme-discover.pcap", 61, 0),
    ("nvme-discover2.pcap", 31, 0),
    ("nvme-rdma-25echoTo27.pcap", 45, 0),
    ("nvme-rdma-idle.pcap", 4, 0),
    ("rocev2_test.pcap", 708, 0),
    ("rocev1_test.pcap", 301, 323),
];

use std::net::{Ipv4Addr, Ipv6Addr};

use umlx_wire::packet::{
    Aeth, AtomicAckEth, AtomicEth, Bth, CnpBody, Deth, ExtHeaders, ExtKind, Feth, FrameBuilder, Ieth, ImmDt, IpHeader,
    Ipv4Header, Ipv6Header, Opcode, Rdeth, Reth, UdpChecksum, VlanTag,
};

/// Random values for every extension header `op` carries.
pub fn random_ext(rng: &mut XorShift, op: Opcode) -> ExtHeaders {
    let mut e = ExtHeaders::default();
    for kind in op.headers().iter() {
        match kind {
            ExtKind::Rdeth => e.rdeth = Some(Rdeth { ee_context: rng.u32() & 0xFF_FFFF }),
            ExtKind::Deth => e.deth = Some(Deth { qkey: rng.u32(), src_qp: rng.u32() & 0xFF_FFFF }),
            ExtKind::Feth => e.feth = Some(Feth { raw: rng.u32() }),
            ExtKind::Reth => e.reth = Some(Reth { va: rng.next_u64(), rkey: rng.u32(), dma_len: rng.u32() }),
            ExtKind::AtomicEth => {
                e.atomic_eth = Some(AtomicEth {
                    va: rng.next_u64(),
                    rkey: rng.u32(),
                    swap_add: rng.next_u64(),
                    compare: rng.next_u64(),
                })
            }
            ExtKind::Aeth => e.aeth = Some(Aeth { syndrome: rng.u8(), msn: rng.u32() & 0xFF_FFFF }),
            ExtKind::AtomicAckEth => e.atomic_ack_eth = Some(AtomicAckEth { orig_data: rng.next_u64() }),
            ExtKind::ImmDt => e.imm_dt = Some(ImmDt { imm: rng.u32() }),
            ExtKind::Ieth => e.ieth = Some(Ieth { rkey: rng.u32() }),
            ExtKind::Cnp => {
                let mut reserved = [0u8; 16];
                if rng.below(4) == 0 {
                    reserved.iter_mut().for_each(|b| *b = rng.u8());
                }
                e.cnp = Some(CnpBody { reserved })
            }
        }
    }
    e
}

/// Which L3 a random packet gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L3 {
    V4,
    V6,
    V1,
}

/// A random valid builder for `op` over `l3`; the payload is a slice of `pool`.
pub fn random_builder<'a>(rng: &mut XorShift, op: Opcode, l3: L3, pool: &'a [u8]) -> FrameBuilder<'a> {
    let mac = |rng: &mut XorShift| -> [u8; 6] { std::array::from_fn(|_| rng.u8()) };
    let (src_mac, dst_mac) = (mac(rng), mac(rng));
    let ip = match l3 {
        L3::V4 => IpHeader::Ipv4(Ipv4Header {
            tos: rng.u8(),
            ttl: rng.u8(),
            id: rng.u16(),
            dont_fragment: rng.bool(),
            ..Ipv4Header::new(Ipv4Addr::from(rng.u32()), Ipv4Addr::from(rng.u32()))
        }),
        L3::V6 | L3::V1 => {
            let h = Ipv6Header {
                traffic_class: rng.u8(),
                flow_label: rng.u32() & 0xF_FFFF,
                hop_limit: rng.u8(),
                ..Ipv6Header::new(
                    Ipv6Addr::from(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())),
                    Ipv6Addr::from(u128::from(rng.next_u64()) << 64 | u128::from(rng.next_u64())),
                )
            };
            if l3 == L3::V6 { IpHeader::Ipv6(h) } else { IpHeader::Grh(h) }
        }
    };
    let bth = Bth {
        se: rng.bool(),
        m: rng.bool(),
        pkey: rng.u16(),
        fecn: rng.bool(),
        becn: rng.bool(),
        ack_req: rng.bool(),
        ..Bth::new(op, rng.u32() & 0xFF_FFFF, rng.u32() & 0xFF_FFFF)
    };
    let payload_len = if op.info().is_some_and(|i| i.payload) {
        match rng.below(8) {
            0 => 0,
            1 => 256,
            2 => 1024,
            3 => pool.len().min(4096),
            _ => rng.below(64) as usize,
        }
    } else {
        0
    };
    let start = rng.below((pool.len() - payload_len + 1) as u64) as usize;
    let mut b = FrameBuilder::new(src_mac, dst_mac, ip, bth)
        .with_ext(random_ext(rng, op))
        .with_payload(&pool[start..start + payload_len])
        .with_udp_src_port(rng.u16())
        .with_udp_checksum(if rng.bool() { UdpChecksum::Zero } else { UdpChecksum::Compute });
    if rng.below(4) == 0 {
        b = b.with_vlan(Some(VlanTag::new(rng.u8() & 7, rng.u16() & 0xFFF)));
    }
    if rng.below(8) == 0 {
        b.pad_cnt = Some(rng.u8() & 3);
    }
    b.pad_to_min_frame = rng.bool();
    b
}

/// A second ICRC computation, written from the doc's §3 rule list independently of
/// `icrc::compute`: build the masked byte string, then plain CRC-32.
pub fn reference_icrc(frame: &[u8]) -> u32 {
    let mut l3 = 14;
    let mut et = u16::from_be_bytes([frame[12], frame[13]]);
    if et == 0x8100 {
        et = u16::from_be_bytes([frame[16], frame[17]]);
        l3 = 18;
    }
    let mut m = vec![0xFFu8; 8];
    let end;
    match et {
        0x0800 => {
            let ihl = usize::from(frame[l3] & 15) * 4;
            end = l3 + usize::from(u16::from_be_bytes([frame[l3 + 2], frame[l3 + 3]]));
            let mut ip = frame[l3..l3 + ihl].to_vec();
            ip[1] = 0xFF;
            ip[8] = 0xFF;
            ip[10] = 0xFF;
            ip[11] = 0xFF;
            m.extend(ip);
            let mut udp = frame[l3 + ihl..l3 + ihl + 8].to_vec();
            udp[6] = 0xFF;
            udp[7] = 0xFF;
            m.extend(udp);
            let mut bth = frame[l3 + ihl + 8..l3 + ihl + 20].to_vec();
            bth[4] = 0xFF;
            m.extend(bth);
            m.extend(&frame[l3 + ihl + 20..end - 4]);
        }
        0x86DD | 0x8915 => {
            end = l3 + 40 + usize::from(u16::from_be_bytes([frame[l3 + 4], frame[l3 + 5]]));
            let mut ip = frame[l3..l3 + 40].to_vec();
            ip[0] |= 0x0F;
            ip[1] = 0xFF;
            ip[2] = 0xFF;
            ip[3] = 0xFF;
            ip[7] = 0xFF;
            m.extend(ip);
            let mut at = l3 + 40;
            if et == 0x86DD {
                let mut udp = frame[at..at + 8].to_vec();
                udp[6] = 0xFF;
                udp[7] = 0xFF;
                m.extend(udp);
                at += 8;
            }
            let mut bth = frame[at..at + 12].to_vec();
            bth[4] = 0xFF;
            m.extend(bth);
            m.extend(&frame[at + 12..end - 4]);
        }
        _ => panic!("not RoCE"),
    }
    umlx_wire::icrc::crc32(&m)
}

/// An independent check of the UDP checksum of an untagged RoCEv2/IPv6 frame: true when
/// the checksum is 0 (unused) or the one's complement sum over pseudo-header and segment
/// is 0xFFFF.
pub fn reference_ipv6_udp_checksum_ok(frame: &[u8]) -> bool {
    let ip = &frame[14..];
    let plen = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let seg = &ip[40..40 + plen];
    if seg[6] == 0 && seg[7] == 0 {
        return true;
    }
    let mut acc = 0u64;
    let mut add = |b: &[u8]| {
        for c in b.chunks(2) {
            acc += u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)]));
        }
    };
    add(&ip[8..40]);
    add(&(plen as u32).to_be_bytes());
    add(&[0, 0, 0, 17]);
    add(seg);
    while acc > 0xFFFF {
        acc = (acc & 0xFFFF) + (acc >> 16);
    }
    acc == 0xFFFF
}
