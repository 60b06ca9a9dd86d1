//! `umlx perf` options: perftest's names, defaults and the adjustments perftest makes after
//! parsing (depths limited by the iteration count, CQ moderation off for large messages, ...).

use super::Test;
use crate::cli::{c_number, parse_c_number};

/// Largest message size of `-a` (perftest's `MAX_SIZE`).
pub const MAX_ALL_SIZE: u64 = 1 << 23;

/// What an option parser saw.
#[derive(Clone, Debug)]
pub struct Params {
    /// The test.
    pub test: Test,
    /// Server name (client side); `None`: this side is the server.
    pub server: Option<String>,
    /// TCP port of the exchange (`-p`).
    pub port: u16,
    /// IB port (`-i`).
    pub ib_port: u8,
    /// GID index (`-x`); `None`: chosen like perftest (IPv4, global scope first).
    pub gid_index: Option<u32>,
    /// Requested MTU in bytes (`-m`); `None`: the port's active MTU.
    pub mtu: Option<u32>,
    /// Message size (`-s`).
    pub size: u64,
    /// Iterations per QP (`-n`).
    pub iters: u64,
    /// All sizes 2..2^23 (`-a`).
    pub all: bool,
    /// Largest size of `-a` (umlx extension `--all-max`).
    pub all_max: u64,
    /// QPs (`-q`).
    pub qps: u32,
    /// Send queue depth (`-t`).
    pub tx_depth: u32,
    /// Receive queue depth (`-r`).
    pub rx_depth: u32,
    /// Inline size (`-I`); `None`: perftest's default for the test.
    pub inline: Option<u32>,
    /// Duration in seconds (`-D`); `None`: iterations.
    pub duration: Option<u32>,
    /// Margin of a duration run (`-f`, default duration / 4).
    pub margin: u32,
    /// Report Gb/s (`--report_gbits`).
    pub gbits: bool,
    /// CQ moderation (`-Q`).
    pub cq_mod: u32,
    /// Whether `-Q` was given.
    pub cq_mod_given: bool,
    /// No peak bandwidth (`-N`, and forced in some modes).
    pub no_peak: bool,
    /// Outstanding reads (`-o`), 0: the device maximum.
    pub out_reads: u32,
    /// Atomic type: true fetch-and-add (default), false compare-and-swap (`-A`).
    pub fetch_add: bool,
    /// Local ACK timeout code (`-u`).
    pub qp_timeout: u8,
    /// Negotiation block length a client sends (umlx extension `--negotiate-bytes`).
    pub negotiate_len: usize,
    /// Live progress line on stderr (`--progress` / `--no-progress`; default: when stderr is a
    /// terminal).
    pub progress: Option<bool>,
}

/// The options of every `umlx perf TEST`: perftest's names, short forms and defaults (the
/// defaults that depend on the test are applied by [`Params::new`]).
#[derive(clap::Args, Clone, Debug)]
#[command(disable_version_flag = true)]
pub struct PerfArgs {
    /// The server to connect to; without it this side is the server
    #[arg(value_name = "SERVER")]
    pub server: Option<String>,
    /// TCP port of the exchange
    #[arg(short = 'p', long, value_name = "N", default_value = "18515", value_parser = c_number::<u16, 1, 65535>)]
    pub port: u16,
    /// IB port
    #[arg(short = 'i', long = "ib-port", value_name = "N", default_value = "1", value_parser = c_number::<u8, 1, 255>)]
    pub ib_port: u8,
    /// GID index (default: the RoCEv2 GID of the port's IPv4 address, printed)
    #[arg(short = 'x', long = "gid-index", value_name = "N", value_parser = c_number::<u32, 0, 64>)]
    pub gid_index: Option<u32>,
    /// MTU: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU)
    #[arg(short = 'm', long, value_name = "N", value_parser = parse_mtu)]
    pub mtu: Option<u32>,
    /// Message size, N[K|M] (bw 65536, lat 2, atomic 8)
    #[arg(short = 's', long, value_name = "N[K|M]", value_parser = parse_size)]
    pub size: Option<u64>,
    /// Iterations (write-bw 5000, others 1000)
    #[arg(short = 'n', long, value_name = "N", value_parser = c_number::<u64, 5, { 1 << 32 }>)]
    pub iters: Option<u64>,
    /// All sizes from 2 to 2^23
    #[arg(short = 'a', long)]
    pub all: bool,
    /// QPs (bandwidth tests)
    #[arg(short = 'q', long = "qp", value_name = "N", value_parser = c_number::<u32, 1, 16384>)]
    pub qps: Option<u32>,
    /// Send queue depth (bw 128, lat 1)
    #[arg(short = 't', long = "tx-depth", value_name = "N", value_parser = c_number::<u32, 1, 15000>)]
    pub tx_depth: Option<u32>,
    /// Receive queue depth (send tests, 512)
    #[arg(short = 'r', long = "rx-depth", value_name = "N", value_parser = c_number::<u32, 1, 16384>)]
    pub rx_depth: Option<u32>,
    /// Inline size (write-lat 220, send-lat 236, otherwise 0)
    #[arg(short = 'I', long = "inline_size", value_name = "N", value_parser = c_number::<u32, 0, 1024>)]
    pub inline: Option<u32>,
    /// Run for S seconds instead of -n iterations
    #[arg(short = 'D', long, value_name = "S", value_parser = c_number::<u32, 1, { u32::MAX as i64 }>)]
    pub duration: Option<u32>,
    /// Duration margin (S/4)
    #[arg(short = 'f', long, value_name = "S", value_parser = c_number::<u32, 0, { u32::MAX as i64 }>)]
    pub margin: Option<u32>,
    /// Completion every N sends (100)
    #[arg(short = 'Q', long = "cq-mod", value_name = "N", value_parser = c_number::<u32, 1, 1024>)]
    pub cq_mod: Option<u32>,
    /// Outstanding reads / atomics (device maximum)
    #[arg(short = 'o', long = "outs", value_name = "N", value_parser = c_number::<u32, 0, { u32::MAX as i64 }>)]
    pub out_reads: Option<u32>,
    /// Atomic type: FETCH_AND_ADD (default) or CMP_AND_SWAP
    #[arg(short = 'A', long = "atomic_type", value_name = "T", value_parser = parse_atomic_type)]
    pub atomic_type: Option<bool>,
    /// Local ACK timeout code
    #[arg(short = 'u', long = "qp-timeout", value_name = "N", default_value = "14", value_parser = c_number::<u8, 0, 31>)]
    pub qp_timeout: u8,
    /// Don't measure the peak bandwidth
    #[arg(short = 'N', long = "noPeak")]
    pub no_peak: bool,
    /// Accepted (umlx measures time, not cycles)
    #[arg(short = 'F', long = "CPU-freq")]
    pub cpu_freq: bool,
    /// Connection type (RC only)
    #[arg(short = 'c', long, value_name = "RC", value_parser = parse_connection)]
    pub connection: Option<String>,
    /// Report Gb/s instead of MiB/s
    #[arg(long = "report_gbits", visible_alias = "report-gbits")]
    pub gbits: bool,
    /// Print the exchange's protocol version and exit
    #[arg(short = 'V', long)]
    pub version: bool,
    /// Refused: bidirectional runs are not supported
    #[arg(short = 'b', long, hide = true)]
    pub bidirectional: bool,
    /// Refused: use -D
    #[arg(long = "run_infinitely", hide = true)]
    pub run_infinitely: bool,
    /// Refused: the exchange is TCP
    #[arg(short = 'R', long = "rdma_cm", hide = true)]
    pub rdma_cm: bool,
    /// Refused: the exchange is TCP
    #[arg(short = 'z', hide = true)]
    pub rdma_cm_z: bool,
    /// The device.
    #[command(flatten)]
    pub dev: crate::device::DeviceOpts,
    /// With -a, stop at N bytes (both sides must agree)
    #[arg(long = "all-max", value_name = "N[K|M]", value_parser = parse_size, help_heading = "umlx options")]
    pub all_max: Option<u64>,
    /// The negotiation block a client sends: 320 (perftest built with libmlx5, the default) or 312
    #[arg(long = "negotiate-bytes", value_name = "N", value_parser = parse_negotiate_len, help_heading = "umlx options")]
    pub negotiate_len: Option<usize>,
    /// Live progress line on stderr (default: when stderr is a terminal)
    #[arg(long, overrides_with = "no_progress", help_heading = "umlx options")]
    pub progress: bool,
    /// No progress line
    #[arg(long = "no-progress", help_heading = "umlx options")]
    pub no_progress: bool,
}

fn parse_mtu(v: &str) -> Result<u32, String> {
    let m = c_number::<u32, 0, { u32::MAX as i64 }>(v)?;
    if ![256, 512, 1024, 2048, 4096].contains(&m) {
        return Err(format!("choose the MTU from 256, 512, 1024, 2048, 4096 (not {m})"));
    }
    Ok(m)
}

fn parse_size(v: &str) -> Result<u64, String> {
    let (num, f) = match v.strip_suffix('K') {
        Some(n) => (n, 1024),
        None => match v.strip_suffix('M') {
            Some(n) => (n, 1024 * 1024),
            None => (v, 1),
        },
    };
    let n = parse_c_number(num)?.saturating_mul(f);
    if n < 1 || n > (u32::MAX / 2) as i64 {
        return Err(format!("message size should be between 1 and {}", u32::MAX / 2));
    }
    Ok(n as u64)
}

fn parse_atomic_type(v: &str) -> Result<bool, String> {
    match v {
        "FETCH_AND_ADD" => Ok(true),
        "CMP_AND_SWAP" => Ok(false),
        _ => Err("choose FETCH_AND_ADD or CMP_AND_SWAP".into()),
    }
}

fn parse_connection(v: &str) -> Result<String, String> {
    if v.eq_ignore_ascii_case("RC") { Ok(v.to_string()) } else { Err("umlx perf runs RC only".into()) }
}

fn parse_negotiate_len(v: &str) -> Result<usize, String> {
    match parse_c_number(v)? {
        312 => Ok(312),
        320 => Ok(320),
        _ => Err("312 or 320".into()),
    }
}

impl Params {
    /// perftest's defaults for `test`, the options `a` changes, the checks perftest makes.
    pub fn new(test: Test, a: &PerfArgs) -> Result<Params, String> {
        let bw = test.is_bw();
        let verb_send = matches!(test, Test::SendBw | Test::SendLat);
        let reads = matches!(test, Test::ReadBw | Test::ReadLat | Test::AtomicBw);
        if a.bidirectional {
            return Err("-b (bidirectional) is not supported by umlx perf".into());
        }
        if a.run_infinitely {
            return Err("--run_infinitely is not supported by umlx perf; use -D".into());
        }
        if a.rdma_cm || a.rdma_cm_z {
            return Err("rdma_cm is not supported by umlx perf (the exchange is TCP)".into());
        }
        if !bw && a.qps.is_some_and(|q| q > 1) {
            return Err("multiple QPs are only available in bandwidth tests".into());
        }
        if reads && a.inline.is_some() {
            return Err("inline data is not available with READ / atomic tests".into());
        }
        if !reads && a.out_reads.is_some() {
            return Err("-o (outstanding reads) is only available with READ / atomic tests".into());
        }
        if test != Test::AtomicBw && a.atomic_type.is_some() {
            return Err("-A: the atomic type applies to atomic-bw only".into());
        }
        if !bw && a.no_peak {
            return Err("-N is only valid in bandwidth tests".into());
        }
        let default_rx = if verb_send || matches!(test, Test::WriteBw | Test::WriteLat) { 512 } else { 1 };
        let mut p = Params {
            test,
            server: a.server.clone(),
            port: a.port,
            ib_port: a.ib_port,
            gid_index: a.gid_index,
            mtu: a.mtu,
            size: a.size.unwrap_or(if test == Test::AtomicBw {
                8
            } else if bw {
                65536
            } else {
                2
            }),
            iters: a.iters.unwrap_or(if test == Test::WriteBw { 5000 } else { 1000 }),
            all: a.all,
            all_max: a.all_max.unwrap_or(MAX_ALL_SIZE),
            qps: a.qps.unwrap_or(1),
            tx_depth: a.tx_depth.unwrap_or(if bw { 128 } else { 1 }),
            rx_depth: a.rx_depth.unwrap_or(default_rx),
            inline: a.inline,
            duration: a.duration,
            margin: 0,
            gbits: a.gbits,
            cq_mod: a.cq_mod.unwrap_or(100),
            cq_mod_given: a.cq_mod.is_some(),
            no_peak: a.no_peak,
            out_reads: a.out_reads.unwrap_or(0),
            fetch_add: a.atomic_type.unwrap_or(true),
            qp_timeout: a.qp_timeout,
            negotiate_len: a.negotiate_len.unwrap_or(super::exchange::NEGOTIATE_LEN_MLX5DV),
            progress: if a.progress {
                Some(true)
            } else if a.no_progress {
                Some(false)
            } else {
                None
            },
        };
        if a.rx_depth.is_some() && reads && p.rx_depth > 1 {
            return Err("-r: on RDMA READ / atomic tests the rx depth can only be 1".into());
        }
        p.derive(a.margin)?;
        Ok(p)
    }

    /// perftest's adjustments after parsing.
    fn derive(&mut self, margin: Option<u32>) -> Result<(), String> {
        let test = self.test;
        if matches!(test, Test::WriteBw | Test::WriteLat) {
            self.rx_depth = 1;
        }
        let iterations = self.duration.is_none();
        if iterations {
            self.tx_depth = self.tx_depth.min(self.iters.min(u32::MAX as u64) as u32);
            if test.has_recv() {
                self.rx_depth = self.rx_depth.min(self.iters.min(u32::MAX as u64) as u32);
            }
        }
        // CQ moderation is off for large messages (outside -a).
        if self.size > 8192 && !self.all && !self.cq_mod_given {
            self.cq_mod = 1;
        }
        self.cq_mod = self.cq_mod.min(self.tx_depth);
        if self.all {
            if test == Test::AtomicBw {
                return Err("message size cannot be changed for atomic tests (-a)".into());
            }
            if self.duration.is_some() {
                return Err("duration mode doesn't support running on all sizes (-a with -D)".into());
            }
            self.all_max = self.all_max.min(MAX_ALL_SIZE);
            if self.all_max < 2 {
                return Err("--all-max: at least 2".into());
            }
            self.size = if self.all_max == MAX_ALL_SIZE { MAX_ALL_SIZE } else { self.all_max };
        }
        if test == Test::AtomicBw && self.size != 8 {
            return Err("message size cannot be changed for atomic tests".into());
        }
        if let Some(d) = self.duration {
            self.iters = 0;
            if test.is_bw() && !self.no_peak {
                println!(" WARNING: BW peak won't be measured in this run.");
            }
            self.no_peak = true;
            self.margin = margin.unwrap_or(d / 4);
            if d <= 2 * self.margin {
                return Err("please check that DURATION > 2*MARGIN".into());
            }
        }
        if test.has_recv() && test.is_bw() && self.server.is_none() {
            if !self.no_peak {
                println!(" WARNING: BW peak won't be measured in this run.");
            }
            self.no_peak = true;
        }
        if test.has_recv() && self.rx_depth % 2 == 1 && !self.all {
            self.rx_depth += 1;
        }
        if iterations && self.iters > 20000 && !self.no_peak && test.is_bw() {
            println!(" WARNING: BW peak won't be measured in this run.");
            self.no_peak = true;
        }
        // The peak search keeps two timestamps per message (perftest allocates them always).
        if iterations && self.iters * self.qps as u64 > 4_000_000 && !self.no_peak {
            println!(" WARNING: BW peak won't be measured in this run.");
            self.no_peak = true;
        }
        if iterations && !test.is_bw() && self.iters > 100_000_000 {
            return Err(format!(
                "-n {}: a latency run keeps one timestamp per iteration; use at most 100000000, or -D",
                self.iters
            ));
        }
        Ok(())
    }

    /// The message sizes of the run.
    pub fn sizes(&self) -> Vec<u64> {
        if self.all { (1..24).map(|i| 1u64 << i).filter(|&s| s <= self.all_max).collect() } else { vec![self.size] }
    }

    /// The largest message size of the run.
    pub fn max_size(&self) -> u64 {
        self.sizes().into_iter().max().unwrap_or(self.size)
    }

    /// Whether this side is the client.
    pub fn is_client(&self) -> bool {
        self.server.is_some()
    }

    /// The inline size in effect: `-I`, or perftest's default for an mlx5 device.
    pub fn inline_size(&self) -> u32 {
        self.inline.unwrap_or(match self.test {
            Test::WriteLat => 220,
            Test::SendLat => 236,
            _ => 0,
        })
    }
}
