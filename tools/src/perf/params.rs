//! `umlx perf` options: perftest's names, defaults and the adjustments perftest makes after
//! parsing (depths limited by the iteration count, CQ moderation off for large messages, ...).

use super::Test;

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
    /// Whether `-s` was given.
    pub size_given: bool,
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

/// The usage text of `umlx perf`.
pub const USAGE: &str = "\
usage: umlx perf TEST [options] [SERVER]
  TEST: write-bw | write-lat | send-bw | send-lat | read-bw | read-lat | atomic-bw
  without SERVER this side is the server and waits for a client; either side may be perftest's
  ib_write_bw / ib_write_lat / ib_send_bw / ib_send_lat / ib_read_bw / ib_read_lat / ib_atomic_bw.

options (perftest's):
  -p, --port N           TCP port of the exchange (18515)
  -d, --ib-dev DEV       sim (default) or pci:0000:3b:00.0
  -i, --ib-port N        IB port (1)
  -x, --gid-index N      GID index (default: an IPv4 RoCEv2 GID)
  -m, --mtu N            MTU 256..4096 (default: the port's active MTU)
  -s, --size N[K|M]      message size (bw 65536, lat 2, atomic 8)
  -n, --iters N          iterations (write-bw 5000, others 1000)
  -a, --all              all sizes from 2 to 2^23
  -q, --qp N             QPs (bandwidth tests)
  -t, --tx-depth N       send queue depth (bw 128, lat 1)
  -r, --rx-depth N       receive queue depth (send tests, 512)
  -I, --inline_size N    inline size (write-lat 220, send-lat 236, otherwise 0)
  -D, --duration S       run for S seconds instead of -n iterations
  -f, --margin S         duration margin (S/4)
  -Q, --cq-mod N         completion every N sends (100)
  -o, --outs N           outstanding reads / atomics (device maximum)
  -A, --atomic_type T    FETCH_AND_ADD (default) or CMP_AND_SWAP
  -u, --qp-timeout N     local ACK timeout code (14)
  -N, --noPeak           don't measure the peak bandwidth
  -F, --CPU-freq         accepted (umlx measures time, not cycles)
  -c, --connection RC    connection type (RC only)
      --report_gbits     report Gb/s instead of MiB/s
umlx extensions:
  --wire udp:LOCAL,PEER  --pcap FILE  --ip ADDR  --index N   (the sim's wire, see `umlx help`)
  --all-max N            with -a, stop at N bytes (both sides must agree)
  --negotiate-bytes N    320 (perftest built with libmlx5, the default) or 312
  --progress, --no-progress   live progress line on stderr (default: when stderr is a terminal)
";

fn parse_num(opt: &str, v: &str) -> Result<u64, String> {
    let v = v.trim();
    let r = if let Some(h) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else {
        v.parse()
    };
    r.map_err(|_| format!("{opt} {v}: not a number"))
}

fn in_range(opt: &str, v: &str, lo: u64, hi: u64) -> Result<u64, String> {
    let n = parse_num(opt, v)?;
    if n < lo || n > hi {
        return Err(format!("{opt} {n}: must be between {lo} and {hi}"));
    }
    Ok(n)
}

fn parse_size(v: &str) -> Result<u64, String> {
    let (num, f) = match v.strip_suffix('K') {
        Some(n) => (n, 1024),
        None => match v.strip_suffix('M') {
            Some(n) => (n, 1024 * 1024),
            None => (v, 1),
        },
    };
    let n = parse_num("-s", num)? * f;
    if n < 1 || n > (u32::MAX / 2) as u64 {
        return Err(format!("-s {v}: message size should be between 1 and {}", u32::MAX / 2));
    }
    Ok(n)
}

/// Splits `--name=value` into two arguments and `-xVALUE` (short options with a value) into
/// `-x VALUE`, as getopt accepts them.
pub fn normalize(args: &[String]) -> Vec<String> {
    const WITH_VALUE: &str = "pdixmsnqtrIDfQoAuScSL";
    let mut out = Vec::new();
    for a in args {
        if let Some(rest) = a.strip_prefix("--") {
            if let Some((n, v)) = rest.split_once('=') {
                out.push(format!("--{n}"));
                out.push(v.to_string());
                continue;
            }
        } else if a.len() > 2 && a.starts_with('-') && WITH_VALUE.as_bytes().contains(&a.as_bytes()[1]) {
            out.push(a[..2].to_string());
            out.push(a[2..].to_string());
            continue;
        }
        out.push(a.clone());
    }
    out
}

impl Params {
    /// Parses the options after `umlx perf TEST` (device options already taken out).
    pub fn parse(test: Test, args: &[String]) -> Result<Params, String> {
        let bw = test.is_bw();
        let verb_send = matches!(test, Test::SendBw | Test::SendLat);
        let mut p = Params {
            test,
            server: None,
            port: 18515,
            ib_port: 1,
            gid_index: None,
            mtu: None,
            size: if test == Test::AtomicBw {
                8
            } else if bw {
                65536
            } else {
                2
            },
            size_given: false,
            iters: if test == Test::WriteBw { 5000 } else { 1000 },
            all: false,
            all_max: MAX_ALL_SIZE,
            qps: 1,
            tx_depth: if bw { 128 } else { 1 },
            rx_depth: if verb_send || matches!(test, Test::WriteBw | Test::WriteLat) { 512 } else { 1 },
            inline: None,
            duration: None,
            margin: 0,
            gbits: false,
            cq_mod: 100,
            cq_mod_given: false,
            no_peak: false,
            out_reads: 0,
            fetch_add: true,
            qp_timeout: 14,
            negotiate_len: super::exchange::NEGOTIATE_LEN_MLX5DV,
            progress: None,
        };
        let mut margin = None;
        let mut rx_given = false;
        let mut i = 0;
        while i < args.len() {
            let a = args[i].as_str();
            let val = |i: usize| args.get(i + 1).map(String::as_str).ok_or_else(|| format!("{a} needs a value"));
            let mut took = true;
            match a {
                "-p" | "--port" => p.port = in_range(a, val(i)?, 1, 65535)? as u16,
                "-i" | "--ib-port" => p.ib_port = in_range(a, val(i)?, 1, 255)? as u8,
                "-x" | "--gid-index" => p.gid_index = Some(in_range(a, val(i)?, 0, 64)? as u32),
                "-m" | "--mtu" => p.mtu = Some(parse_num(a, val(i)?)? as u32),
                "-s" | "--size" => {
                    p.size = parse_size(val(i)?)?;
                    p.size_given = true;
                }
                "-n" | "--iters" => p.iters = in_range(a, val(i)?, 5, 1 << 32)?,
                "-q" | "--qp" => {
                    p.qps = in_range(a, val(i)?, 1, 16384)? as u32;
                    if !bw && p.qps > 1 {
                        return Err("multiple QPs are only available in bandwidth tests".into());
                    }
                }
                "-t" | "--tx-depth" => p.tx_depth = in_range(a, val(i)?, 1, 15000)? as u32,
                "-r" | "--rx-depth" => {
                    p.rx_depth = in_range(a, val(i)?, 1, 16384)? as u32;
                    rx_given = true;
                }
                "-I" | "--inline_size" => {
                    if matches!(test, Test::ReadBw | Test::ReadLat | Test::AtomicBw) {
                        return Err("inline data is not available with READ / atomic tests".into());
                    }
                    p.inline = Some(in_range(a, val(i)?, 0, 1024)? as u32);
                }
                "-D" | "--duration" => p.duration = Some(in_range(a, val(i)?, 1, u32::MAX as u64)? as u32),
                "-f" | "--margin" => margin = Some(parse_num(a, val(i)?)? as u32),
                "-Q" | "--cq-mod" => {
                    p.cq_mod = in_range(a, val(i)?, 1, 1024)? as u32;
                    p.cq_mod_given = true;
                }
                "-o" | "--outs" => {
                    if !matches!(test, Test::ReadBw | Test::ReadLat | Test::AtomicBw) {
                        return Err("-o (outstanding reads) is only available with READ / atomic tests".into());
                    }
                    p.out_reads = parse_num(a, val(i)?)? as u32;
                }
                "-A" | "--atomic_type" => {
                    if test != Test::AtomicBw {
                        return Err("-A: the atomic type applies to atomic-bw only".into());
                    }
                    p.fetch_add = match val(i)? {
                        "FETCH_AND_ADD" => true,
                        "CMP_AND_SWAP" => false,
                        v => return Err(format!("-A {v}: choose FETCH_AND_ADD or CMP_AND_SWAP")),
                    };
                }
                "-u" | "--qp-timeout" => p.qp_timeout = in_range(a, val(i)?, 0, 31)? as u8,
                "-c" | "--connection" => {
                    let v = val(i)?;
                    if !v.eq_ignore_ascii_case("RC") {
                        return Err(format!("-c {v}: umlx perf runs RC only"));
                    }
                }
                "--all-max" => p.all_max = parse_size(val(i)?)?,
                "--negotiate-bytes" => {
                    p.negotiate_len = match parse_num(a, val(i)?)? {
                        312 => 312,
                        320 => 320,
                        n => return Err(format!("--negotiate-bytes {n}: 312 or 320")),
                    }
                }
                _ => {
                    took = false;
                    match a {
                        "-a" | "--all" => p.all = true,
                        "-N" | "--noPeak" => {
                            if !bw {
                                return Err("-N is only valid in bandwidth tests".into());
                            }
                            p.no_peak = true;
                        }
                        "-F" | "--CPU-freq" => {}
                        "--report_gbits" | "--report-gbits" => p.gbits = true,
                        "--progress" => p.progress = Some(true),
                        "--no-progress" => p.progress = Some(false),
                        "-b" | "--bidirectional" => {
                            return Err("-b (bidirectional) is not supported by umlx perf".into());
                        }
                        "--run_infinitely" => {
                            return Err("--run_infinitely is not supported by umlx perf; use -D".into());
                        }
                        "-R" | "--rdma_cm" | "-z" => {
                            return Err("rdma_cm is not supported by umlx perf (the exchange is TCP)".into());
                        }
                        _ if a.starts_with('-') && a.len() > 1 => {
                            return Err(format!("unknown option {a}\n{USAGE}"));
                        }
                        _ => {
                            if p.server.is_some() {
                                return Err(format!("unexpected argument {a}: one server name at most"));
                            }
                            p.server = Some(a.to_string());
                        }
                    }
                }
            }
            i += if took { 2 } else { 1 };
        }
        if rx_given && matches!(test, Test::ReadBw | Test::ReadLat | Test::AtomicBw) && p.rx_depth > 1 {
            return Err("-r: on RDMA READ / atomic tests the rx depth can only be 1".into());
        }
        p.derive(margin)?;
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
        if let Some(m) = self.mtu
            && ![256, 512, 1024, 2048, 4096].contains(&m)
        {
            return Err(format!("-m {m}: choose the MTU from 256, 512, 1024, 2048, 4096"));
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
