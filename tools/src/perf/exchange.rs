//! The bytes of perftest's out-of-band TCP exchange, so that either side of a `umlx perf` run
//! can be perftest's `ib_*_bw` / `ib_*_lat`.
//!
//! Everything here is plain data (no verbs, no sockets): the session in `comm.rs` moves these
//! buffers, the tests check them byte for byte.
//!
//! The exchange, in order (client writes first and then reads, the server reads and then writes,
//! for every item):
//!
//! 1. the version string, 16 bytes, NUL padded ([`encode_version`]);
//! 2. when the peer is 5.32 or later: the page size ("cycle buffer") and the cache-line size,
//!    each a big-endian `int`; both sides keep the larger value ([`encode_be_i32`]);
//! 3. when the peer is 5.1 or later: the MTU as the decimal text of its `enum ibv_mtu` value,
//!    2 bytes from 5.31 on (4 before); both sides keep the smaller one ([`encode_mtu`]);
//! 4. when the peer is 6.28 or later: the parameter negotiation, a binary `struct` of the test
//!    parameters (big-endian) and the `ibv_device_attr` (host order) ([`Negotiate`]);
//! 5. the per-QP destination messages ([`Dest`], 108 bytes of text), repeated as syncs;
//! 6. for the passive-server tests (RDMA WRITE / READ / atomic bandwidth): the client's result
//!    as separate 8-byte fields, integers big-endian and doubles byte-swapped ([`BwReportWire`]).

use std::fmt::Write as _;

/// Length of a destination message with a GID (perftest's `KEY_MSG_SIZE_GID`): 107 characters
/// of text and a NUL.
pub const DEST_MSG_LEN: usize = 108;

/// Length of the version field (perftest's `MAX_VERSION`).
pub const VERSION_LEN: usize = 16;

/// The perftest protocol level umlx speaks (and announces as its version): the exchange of
/// perftest 6.29, parameter negotiation included.
pub const PROTOCOL_VERSION: &str = "6.29";

/// Whether a peer's announced version is at least `hundredths / 100` (perftest compares
/// `atof(version)` with decimal constants such as 5.33).
pub fn version_at_least(v: f64, hundredths: u32) -> bool {
    v >= hundredths as f64 / 100.0
}

/// Length of the negotiation block of a perftest built without mlx5 direct verbs.
pub const NEGOTIATE_LEN: usize = 312;

/// Length of the negotiation block of a perftest built with mlx5 direct verbs (`libmlx5`, the
/// usual build): the block above plus the 8-byte `mlx5dv_comp_mask`.
pub const NEGOTIATE_LEN_MLX5DV: usize = 320;

/// Byte offset of `struct ibv_device_attr` inside the negotiation block.
const ATTR_OFFSET: usize = 80;

/// Size of `struct ibv_device_attr` (x86-64 / aarch64 layout).
const ATTR_LEN: usize = 232;

/// One QP's connection data (perftest's `struct pingpong_dest` as it travels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Outstanding RDMA READ / atomic operations this side accepts as responder.
    pub out_reads: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// Remote key of the buffer.
    pub rkey: u32,
    /// Address of the buffer the peer writes to / reads from.
    pub vaddr: u64,
    /// GID, network order.
    pub gid: [u8; 16],
    /// SRQ number (XRC / DC only; 0 here).
    pub srqn: u32,
}

impl Dest {
    /// The 108-byte message: `lid:out_reads:qpn:psn:rkey:vaddr:` in fixed-width lower-case hex
    /// (4, 4, 6, 6, 8, 16 digits), the 16 GID bytes as 2-digit hex each followed by `:`, the SRQ
    /// number in 8 digits and `:`, then a NUL.
    pub fn encode(&self) -> [u8; DEST_MSG_LEN] {
        let mut s = String::with_capacity(DEST_MSG_LEN);
        let _ = write!(
            s,
            "{:04x}:{:04x}:{:06x}:{:06x}:{:08x}:{:016x}:",
            self.lid,
            self.out_reads,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff,
            self.rkey,
            self.vaddr
        );
        for b in self.gid {
            let _ = write!(s, "{b:02x}:");
        }
        let _ = write!(s, "{:08x}:", self.srqn);
        let mut out = [0u8; DEST_MSG_LEN];
        let n = s.len().min(DEST_MSG_LEN - 1);
        out[..n].copy_from_slice(&s.as_bytes()[..n]);
        out
    }

    /// Parses a 108-byte message (the text up to the first NUL).
    pub fn decode(msg: &[u8]) -> Result<Dest, String> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| "the peer's connection message is not text (is it running the same test?)".to_string())?;
        let fields: Vec<&str> = text.split(':').collect();
        if fields.len() < 23 {
            return Err(format!(
                "the peer's connection message has {} fields, expected 23: {text:?} (is it running the same test with a GID?)",
                fields.len()
            ));
        }
        let hex = |i: usize| -> Result<u64, String> {
            u64::from_str_radix(fields[i].trim(), 16)
                .map_err(|_| format!("the peer's connection message: field {} is not hex: {text:?}", i + 1))
        };
        let mut gid = [0u8; 16];
        for (k, g) in gid.iter_mut().enumerate() {
            *g = hex(6 + k)? as u8;
        }
        Ok(Dest {
            lid: hex(0)? as u16,
            out_reads: hex(1)? as u16,
            qpn: hex(2)? as u32 & 0xff_ffff,
            psn: hex(3)? as u32 & 0xff_ffff,
            rkey: hex(4)? as u32,
            vaddr: hex(5)?,
            gid,
            srqn: hex(22)? as u32,
        })
    }
}

/// The version field: `v` and NUL padding.
pub fn encode_version(v: &str) -> [u8; VERSION_LEN] {
    let mut out = [0u8; VERSION_LEN];
    let n = v.len().min(VERSION_LEN - 1);
    out[..n].copy_from_slice(&v.as_bytes()[..n]);
    out
}

/// The version a peer announced, as perftest reads it (`atof`: the leading decimal number, 0
/// when there is none).
pub fn parse_version(field: &[u8]) -> f64 {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    let text = String::from_utf8_lossy(&field[..end]);
    leading_number(text.trim_start())
}

fn leading_number(s: &str) -> f64 {
    let mut end = 0;
    let mut dot = false;
    for (i, c) in s.char_indices() {
        if c.is_ascii_digit() {
            end = i + 1;
        } else if c == '.' && !dot {
            dot = true;
        } else {
            break;
        }
    }
    s[..end].parse().unwrap_or(0.0)
}

/// The text of a NUL-padded field, for messages.
pub fn field_text(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// A big-endian `int` (the system-data exchange).
pub fn encode_be_i32(v: i32) -> [u8; 4] {
    v.to_be_bytes()
}

/// Reads a big-endian `int`.
pub fn decode_be_i32(b: &[u8]) -> i32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    i32::from_be_bytes(a)
}

/// How many bytes the MTU exchange carries with a peer of `remote_version` (none before 5.1).
pub fn mtu_msg_len(remote_version: f64) -> usize {
    if !version_at_least(remote_version, 510) {
        0
    } else if version_at_least(remote_version, 531) {
        2
    } else {
        4
    }
}

/// The MTU message: the decimal text of the `enum ibv_mtu` value (1..=5), NUL padded to `len`.
pub fn encode_mtu(mtu_enum: u32, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    let s = mtu_enum.to_string();
    let n = s.len().min(len.saturating_sub(1));
    out[..n].copy_from_slice(&s.as_bytes()[..n]);
    out
}

/// The peer's MTU (`enum ibv_mtu` value) when its message holds a valid one.
pub fn decode_mtu(msg: &[u8]) -> Option<u32> {
    let text = field_text(msg);
    let digits: String = text.trim_start().chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok().filter(|m| (1..=5).contains(m))
}

/// One side's result of a bandwidth test as it travels after a passive-server run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BwReportWire {
    /// Message size.
    pub size: u64,
    /// Messages counted.
    pub iters: u64,
    /// Peak bandwidth (in the report unit).
    pub bw_peak: f64,
    /// Average bandwidth (in the report unit).
    pub bw_avg: f64,
    /// Message rate, millions per second.
    pub msg_rate: f64,
}

impl BwReportWire {
    /// The five fields in exchange order, each as sent: size, iterations (8 bytes from 5.33
    /// on, 4 before), peak, average, message rate.
    pub fn fields(&self, remote_version: f64) -> Vec<Vec<u8>> {
        let iters = if version_at_least(remote_version, 533) {
            self.iters.to_be_bytes().to_vec()
        } else {
            (self.iters as u32).to_be_bytes().to_vec()
        };
        vec![
            self.size.to_be_bytes().to_vec(),
            iters,
            self.bw_peak.to_bits().to_be_bytes().to_vec(),
            self.bw_avg.to_bits().to_be_bytes().to_vec(),
            self.msg_rate.to_bits().to_be_bytes().to_vec(),
        ]
    }

    /// Rebuilds a report from the five received fields.
    pub fn from_fields(f: &[Vec<u8>]) -> Result<BwReportWire, String> {
        if f.len() != 5 {
            return Err("a bandwidth report has five fields".into());
        }
        let u = |b: &[u8]| -> u64 {
            match b.len() {
                8 => u64::from_be_bytes(b.try_into().unwrap_or([0; 8])),
                4 => u32::from_be_bytes(b.try_into().unwrap_or([0; 4])) as u64,
                _ => 0,
            }
        };
        let d = |b: &[u8]| f64::from_bits(u(b));
        Ok(BwReportWire { size: u(&f[0]), iters: u(&f[1]), bw_peak: d(&f[2]), bw_avg: d(&f[3]), msg_rate: d(&f[4]) })
    }
}

/// Value names perftest prints in a negotiation mismatch.
const TEST_METHODS: [&str; 3] = ["RUN_REGULAR", "RUN_ALL", "RUN_INFINITELY"];
const CONNECTIONS: [&str; 7] = ["RC", "UC", "UD", "RawEth", "XRC", "DC", "SRD"];
const VERBS: [&str; 6] = ["SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "ATOMIC"];
const TEST_TYPES: [&str; 4] = ["LAT", "BW", "LAT_BY_BW", "FS_RATE"];
const ATOMIC_TYPES: [&str; 2] = ["CMP_AND_SWAP", "FETCH_AND_ADD"];
const METHODS: [&str; 2] = ["ITERATIONS", "DURATION"];
const REPORT_FMTS: [&str; 2] = ["GBS", "MBS"];
const ON_OFF: [&str; 2] = ["OFF", "ON"];

/// The device attributes carried in the negotiation (`struct ibv_device_attr`, host order);
/// perftest reads `max_qp_rd_atom` from it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceAttrWire {
    /// Firmware version text.
    pub fw_ver: String,
    /// Node GUID (as a number; travels in network order).
    pub node_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Page sizes.
    pub page_size_cap: u64,
    /// PCI vendor.
    pub vendor_id: u32,
    /// PCI device.
    pub vendor_part_id: u32,
    /// QPs.
    pub max_qp: i32,
    /// WRs per queue.
    pub max_qp_wr: i32,
    /// SGEs.
    pub max_sge: i32,
    /// CQs.
    pub max_cq: i32,
    /// CQEs.
    pub max_cqe: i32,
    /// MRs.
    pub max_mr: i32,
    /// PDs.
    pub max_pd: i32,
    /// Outstanding READ / atomic per QP as responder.
    pub max_qp_rd_atom: i32,
    /// Outstanding READ / atomic per QP as initiator.
    pub max_qp_init_rd_atom: i32,
    /// Atomic capability.
    pub atomic_cap: i32,
    /// SRQs.
    pub max_srq: i32,
    /// WRs per SRQ.
    pub max_srq_wr: i32,
    /// SGEs per SRQ WR.
    pub max_srq_sge: i32,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Ports.
    pub phys_port_cnt: u8,
}

impl DeviceAttrWire {
    fn encode(&self, b: &mut [u8]) {
        let fw = self.fw_ver.as_bytes();
        let n = fw.len().min(63);
        b[..n].copy_from_slice(&fw[..n]);
        b[64..72].copy_from_slice(&self.node_guid.to_be_bytes());
        b[72..80].copy_from_slice(&self.node_guid.to_be_bytes());
        b[80..88].copy_from_slice(&self.max_mr_size.to_le_bytes());
        b[88..96].copy_from_slice(&self.page_size_cap.to_le_bytes());
        b[96..100].copy_from_slice(&self.vendor_id.to_le_bytes());
        b[100..104].copy_from_slice(&self.vendor_part_id.to_le_bytes());
        // hw_ver (104) 0. The ints from 108, in declaration order.
        let ints: [(usize, i32); 13] = [
            (0, self.max_qp),
            (1, self.max_qp_wr),
            (3, self.max_sge),
            (5, self.max_cq),
            (6, self.max_cqe),
            (7, self.max_mr),
            (8, self.max_pd),
            (9, self.max_qp_rd_atom),
            (12, self.max_qp_init_rd_atom),
            (14, self.atomic_cap),
            (26, self.max_srq),
            (27, self.max_srq_wr),
            (28, self.max_srq_sge),
        ];
        for (k, v) in ints {
            b[108 + 4 * k..112 + 4 * k].copy_from_slice(&v.to_le_bytes());
        }
        b[224..226].copy_from_slice(&1u16.to_le_bytes());
        b[226] = self.local_ca_ack_delay;
        b[227] = self.phys_port_cnt;
    }

    fn decode(b: &[u8]) -> DeviceAttrWire {
        let i = |k: usize| i32::from_le_bytes(b[108 + 4 * k..112 + 4 * k].try_into().unwrap_or([0; 4]));
        let u64le = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        let u32le = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        DeviceAttrWire {
            fw_ver: field_text(&b[..64]),
            node_guid: u64::from_be_bytes(b[64..72].try_into().unwrap_or([0; 8])),
            max_mr_size: u64le(80),
            page_size_cap: u64le(88),
            vendor_id: u32le(96),
            vendor_part_id: u32le(100),
            max_qp: i(0),
            max_qp_wr: i(1),
            max_sge: i(3),
            max_cq: i(5),
            max_cqe: i(6),
            max_mr: i(7),
            max_pd: i(8),
            max_qp_rd_atom: i(9),
            max_qp_init_rd_atom: i(12),
            atomic_cap: i(14),
            max_srq: i(26),
            max_srq_wr: i(27),
            max_srq_sge: i(28),
            local_ca_ack_delay: b[226],
            phys_port_cnt: b[227],
        }
    }
}

/// The parameter negotiation block (perftest 6.28 and later): both sides must agree on every
/// test parameter; the device attributes let the peer lower its outstanding reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Negotiate {
    /// 0 regular, 1 all sizes (`-a`), 2 run infinitely.
    pub test_method: i32,
    /// 0 RC.
    pub connection_type: i32,
    /// 0 SEND, 2 WRITE, 4 READ, 5 ATOMIC.
    pub verb: i32,
    /// 0 latency, 1 bandwidth.
    pub tst: i32,
    /// 0 compare-and-swap, 1 fetch-and-add (0 for non-atomic tests).
    pub atomic_type: i32,
    /// 0 iterations, 1 duration.
    pub test_type: i32,
    /// 0 Gb/s, 1 MiB/s.
    pub report_fmt: i32,
    /// Message size (8388608 with `-a`).
    pub size: u64,
    /// Iterations (0 in duration mode).
    pub iters: u64,
    /// AES-XTS.
    pub aes_xts: i32,
    /// QPs.
    pub num_of_qps: i32,
    /// Duration in seconds (5 unless `-D`).
    pub duration: i32,
    /// rdma_cm for the exchange.
    pub use_rdma_cm: i32,
    /// WRITE with immediate.
    pub use_write_with_imm: i32,
    /// Enhanced reorder disabled.
    pub no_enhanced_reorder: i32,
    /// Signature offload.
    pub sig_offload: i32,
    /// Data validation.
    pub data_validation: i32,
    /// The device attributes.
    pub attr: DeviceAttrWire,
    /// mlx5 direct-verbs context mask (only in the 320-byte form).
    pub mlx5dv_comp_mask: u64,
}

impl Negotiate {
    /// The block as sent, `len` bytes ([`NEGOTIATE_LEN`] or [`NEGOTIATE_LEN_MLX5DV`]).
    pub fn encode(&self, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len.max(NEGOTIATE_LEN)];
        let ints = [
            (0, self.test_method),
            (4, self.connection_type),
            (8, self.verb),
            (12, self.tst),
            (16, self.atomic_type),
            (20, self.test_type),
            (24, self.report_fmt),
            (48, self.aes_xts),
            (52, self.num_of_qps),
            (56, self.duration),
            (60, self.use_rdma_cm),
            (64, self.use_write_with_imm),
            (68, self.no_enhanced_reorder),
            (72, self.sig_offload),
            (76, self.data_validation),
        ];
        for (o, v) in ints {
            b[o..o + 4].copy_from_slice(&v.to_be_bytes());
        }
        b[32..40].copy_from_slice(&self.size.to_be_bytes());
        b[40..48].copy_from_slice(&self.iters.to_be_bytes());
        self.attr.encode(&mut b[ATTR_OFFSET..ATTR_OFFSET + ATTR_LEN]);
        if len >= NEGOTIATE_LEN_MLX5DV {
            b[312..320].copy_from_slice(&self.mlx5dv_comp_mask.to_be_bytes());
        }
        b
    }

    /// Parses a received block (312 or 320 bytes).
    pub fn decode(b: &[u8]) -> Result<Negotiate, String> {
        if b.len() < NEGOTIATE_LEN {
            return Err(format!("negotiation block of {} bytes, expected {NEGOTIATE_LEN}", b.len()));
        }
        let i = |o: usize| i32::from_be_bytes(b[o..o + 4].try_into().unwrap_or([0; 4]));
        let u = |o: usize| u64::from_be_bytes(b[o..o + 8].try_into().unwrap_or([0; 8]));
        Ok(Negotiate {
            test_method: i(0),
            connection_type: i(4),
            verb: i(8),
            tst: i(12),
            atomic_type: i(16),
            test_type: i(20),
            report_fmt: i(24),
            size: u(32),
            iters: u(40),
            aes_xts: i(48),
            num_of_qps: i(52),
            duration: i(56),
            use_rdma_cm: i(60),
            use_write_with_imm: i(64),
            no_enhanced_reorder: i(68),
            sig_offload: i(72),
            data_validation: i(76),
            attr: DeviceAttrWire::decode(&b[ATTR_OFFSET..ATTR_OFFSET + ATTR_LEN]),
            mlx5dv_comp_mask: if b.len() >= NEGOTIATE_LEN_MLX5DV { u(312) } else { 0 },
        })
    }

    /// Every parameter that differs, in perftest's words (" size mismatch: local=..., remote=...").
    pub fn mismatches(&self, remote: &Negotiate) -> Vec<String> {
        let mut out = Vec::new();
        let named = |out: &mut Vec<String>, name: &str, names: &[&str], l: i32, r: i32| {
            if l != r {
                let n = |v: i32| names.get(v as usize).map(|s| s.to_string()).unwrap_or_else(|| v.to_string());
                out.push(format!(" {name} mismatch: local={}, remote={}", n(l), n(r)));
            }
        };
        let num = |out: &mut Vec<String>, name: &str, l: u64, r: u64| {
            if l != r {
                out.push(format!(" {name} mismatch: local={l}, remote={r}"));
            }
        };
        named(&mut out, "test_method", &TEST_METHODS, self.test_method, remote.test_method);
        named(&mut out, "connection_type", &CONNECTIONS, self.connection_type, remote.connection_type);
        named(&mut out, "verb", &VERBS, self.verb, remote.verb);
        named(&mut out, "tst", &TEST_TYPES, self.tst, remote.tst);
        named(&mut out, "atomicType", &ATOMIC_TYPES, self.atomic_type, remote.atomic_type);
        named(&mut out, "test_type", &METHODS, self.test_type, remote.test_type);
        named(&mut out, "report_fmt", &REPORT_FMTS, self.report_fmt, remote.report_fmt);
        num(&mut out, "size", self.size, remote.size);
        num(&mut out, "iters", self.iters, remote.iters);
        named(&mut out, "aes_xts", &ON_OFF, self.aes_xts, remote.aes_xts);
        num(&mut out, "num_of_qps", self.num_of_qps as u64, remote.num_of_qps as u64);
        num(&mut out, "duration", self.duration as u64, remote.duration as u64);
        named(&mut out, "use_rdma_cm", &ON_OFF, self.use_rdma_cm, remote.use_rdma_cm);
        named(&mut out, "use_write_with_imm", &ON_OFF, self.use_write_with_imm, remote.use_write_with_imm);
        named(&mut out, "no_enhanced_reorder", &ON_OFF, self.no_enhanced_reorder, remote.no_enhanced_reorder);
        named(&mut out, "sig_offload", &ON_OFF, self.sig_offload, remote.sig_offload);
        named(&mut out, "data_validation", &ON_OFF, self.data_validation, remote.data_validation);
        out
    }
}
