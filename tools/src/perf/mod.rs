//! `umlx perf`: perftest's seven RC benchmarks (`ib_write_bw`, `ib_write_lat`, `ib_send_bw`,
//! `ib_send_lat`, `ib_read_bw`, `ib_read_lat`, `ib_atomic_bw`) on umlx devices, with perftest's
//! options, result tables and TCP exchange, so that either side can be perftest itself.
//!
//! A run: open the device, wait for (server) or connect to (client) the peer on TCP port 18515,
//! exchange versions, page / cache-line sizes, MTU and (perftest 6.28+) the test parameters,
//! create the MR, CQs and QPs, exchange the per-QP connection data (QPN, PSN, RKey, address,
//! GID) and connect, then the test:
//!
//! * WRITE / READ / atomic bandwidth: the server is passive; after the client's run a sync and
//!   the client's result travel to the server, which prints it;
//! * SEND bandwidth: the server posts receives and measures what arrives (no peak), a sync
//!   before each size, each side prints its own result;
//! * WRITE latency: both sides ping-pong RDMA WRITEs, polling the last byte of their buffer;
//! * SEND latency: both sides ping-pong SENDs;
//! * READ latency: the client READs, the server waits for the final sync.
//!
//! The parameter negotiation block is 320 bytes from a perftest linked with libmlx5 (the usual
//! build) and 312 without: a `umlx perf` server detects the length, a client sends 320 unless
//! told `--negotiate-bytes 312`.
//!
//! Differences from perftest: time is measured with the monotonic clock (ns), not CPU cycles
//! (`-F` is accepted and ignored); the latency standard deviation is computed exactly (perftest
//! truncates every deviation to whole microseconds); the peak search samples its start points
//! above 2·10^8 pairs; a client retries a refused TCP connection for 5 s; a run gives up after
//! 120 s without progress; with the software ConnectX the polling loops yield the CPU when a
//! poll finds nothing (its engine threads need it); `--all-max` limits `-a` (both sides must
//! agree: it changes the negotiated size); RC only, no bidirectional, rdma_cm, events or
//! infinite mode. The page size announced is 4096 (both sides keep the larger one). Without
//! `-x` the GID is the RoCEv2 GID of the port's IPv4 address, as perftest picks it, and a line
//! says which (`local GID index N (...), chosen automatically; -x overrides`). The options are
//! one clap struct ([`PerfArgs`]) shared by the seven test subcommands ([`PerfCmd`]); perftest's
//! names work too (`umlx perf ib_write_bw`).

mod comm;
mod engine;
mod exchange;
mod params;
mod report;

use comm::Session;
use engine::{Geometry, Progress, Resources};
use exchange::{BwReportWire, Dest, DeviceAttrWire, Negotiate};
use params::Params;
pub use params::PerfArgs;
use report::RESULT_LINE;
use std::io::IsTerminal;
use std::result::Result;
use umlx_verbs::*;

/// The seven tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `ib_write_bw`.
    WriteBw,
    /// `ib_write_lat`.
    WriteLat,
    /// `ib_send_bw`.
    SendBw,
    /// `ib_send_lat`.
    SendLat,
    /// `ib_read_bw`.
    ReadBw,
    /// `ib_read_lat`.
    ReadLat,
    /// `ib_atomic_bw`.
    AtomicBw,
}

impl Test {
    /// A bandwidth test.
    pub fn is_bw(self) -> bool {
        matches!(self, Test::WriteBw | Test::SendBw | Test::ReadBw | Test::AtomicBw)
    }

    /// The receiver sees completions (SEND tests).
    pub fn has_recv(self) -> bool {
        matches!(self, Test::SendBw | Test::SendLat)
    }

    /// The test uses outstanding RDMA READ / atomic resources.
    fn uses_reads(self) -> bool {
        matches!(self, Test::ReadBw | Test::ReadLat | Test::AtomicBw)
    }

    /// perftest's verb number (SEND 0, WRITE 2, READ 4, ATOMIC 5).
    fn verb(self) -> i32 {
        match self {
            Test::SendBw | Test::SendLat => 0,
            Test::WriteBw | Test::WriteLat => 2,
            Test::ReadBw | Test::ReadLat => 4,
            Test::AtomicBw => 5,
        }
    }

    /// The opcode in messages.
    pub fn opcode_name(self) -> &'static str {
        match self {
            Test::SendBw | Test::SendLat => "SEND",
            Test::WriteBw | Test::WriteLat => "RDMA WRITE",
            Test::ReadBw | Test::ReadLat => "RDMA READ",
            Test::AtomicBw => "atomic",
        }
    }

    /// perftest's name of the verb in the banner.
    fn banner_name(self) -> &'static str {
        match self {
            Test::SendBw | Test::SendLat => "Send",
            Test::WriteBw | Test::WriteLat => "RDMA_Write",
            Test::ReadBw | Test::ReadLat => "RDMA_Read",
            Test::AtomicBw => "Atomic",
        }
    }

    /// Messages per measured interval of a latency sample (2 for ping-pongs).
    fn rtt_factor(self) -> f64 {
        if matches!(self, Test::ReadLat | Test::ReadBw | Test::AtomicBw) { 1.0 } else { 2.0 }
    }
}

/// `printf("%#0Nx")`: `0x` and at least `width - 2` hex digits; zero is `width` zeros.
fn c_hex(v: u64, width: usize) -> String {
    if v == 0 {
        return "0".repeat(width);
    }
    let d = format!("{v:x}");
    format!("0x{}{d}", "0".repeat(width.saturating_sub(2 + d.len())))
}

fn print_dest(side: &str, d: &Dest, test: Test) {
    let mut s = format!(
        " {side} address: LID {} QPN {} PSN {}",
        c_hex(d.lid as u64, 4),
        c_hex(d.qpn as u64, 6),
        c_hex(d.psn as u64, 6)
    );
    if matches!(test, Test::ReadBw | Test::ReadLat) {
        s += &format!(" OUT {}", c_hex(d.out_reads as u64, 4));
    }
    if matches!(test, Test::ReadBw | Test::ReadLat | Test::WriteBw | Test::WriteLat) {
        s += &format!(" RKey {} VAddr {}", c_hex(d.rkey as u64, 8), c_hex(d.vaddr, 16));
    }
    println!("{s}");
    // perftest prints the GID bytes in decimal.
    let g: Vec<String> = d.gid.iter().map(|b| format!("{b:02}")).collect();
    println!(" GID: {}", g.join(":"));
}

/// A pseudo-random 24-bit PSN (time and process id mixed by xorshift).
fn random_psn(state: &mut u64) -> u32 {
    let mut x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    (x >> 20) as u32 & 0xff_ffff
}

fn seed() -> u64 {
    let t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    (t ^ ((std::process::id() as u64) << 32)) | 1
}

/// The cache-line size (sysfs; 64 when unknown).
fn cache_line_size() -> i32 {
    std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&v: &i32| v > 0)
        .unwrap_or(64)
}

/// The GID perftest would pick: `-x`, or the best entry (IPv4-mapped first, then global scope).
fn pick_gid(ctx: &Context, p: &Params) -> Result<(u32, Gid), String> {
    if let Some(i) = p.gid_index {
        let g = ctx.query_gid(p.ib_port, i).map_err(|e| format!("GID index {i}: {e}"))?;
        if g == Gid::default() {
            return Err(format!("GID index {i} is empty"));
        }
        return Ok((i, g));
    }
    let (i, g) =
        ctx.default_gid().ok_or_else(|| "the port has no GID: give the device an address (--ip)".to_string())?;
    println!("{}", crate::device::auto_gid_line(i, &g, "-x"));
    Ok((i, g))
}

fn mtu_of_bytes(b: u32) -> Mtu {
    match b {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        _ => Mtu::Mtu4096,
    }
}

struct Info<'a> {
    dev: &'a str,
    mtu: Mtu,
    gid_index: u32,
    out_reads: u32,
}

fn print_test_info(p: &Params, i: &Info<'_>) {
    let t = p.test;
    println!("{RESULT_LINE}");
    let mut title = format!("                    {} ", t.banner_name());
    if t == Test::AtomicBw {
        title += if p.fetch_add { "FETCH_AND_ADD " } else { "CMP_AND_SWAP " };
    }
    title += if t.is_bw() { "BW Test" } else { "Latency Test" };
    println!("{title}");
    println!(" Dual-port       : OFF\t\tDevice         : {}", i.dev);
    println!(" Number of qps   : {}\t\tTransport type : IB", p.qps);
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    if p.is_client() {
        println!(" TX depth        : {}", p.tx_depth);
    }
    if t.has_recv() && !p.is_client() {
        println!(" RX depth        : {}", p.rx_depth);
    }
    if t.is_bw() {
        println!(" CQ Moderation   : {}", p.cq_mod);
    }
    println!(" Mtu             : {}[B]", i.mtu.bytes());
    println!(" Link type       : Ethernet");
    println!(" GID index       : {}", i.gid_index);
    if t.uses_reads() {
        println!(" Outstand reads  : {}", i.out_reads);
    } else {
        println!(" Max inline data : {}[B]", p.inline_size());
    }
    println!(" rdma_cm QPs\t : OFF");
    println!(" Data ex. method : Ethernet");
    println!("{RESULT_LINE}");
}

/// `umlx perf TEST`: one subcommand per test, each with perftest's options ([`PerfArgs`]).
#[derive(clap::Subcommand, Debug)]
#[command(after_help = "Without SERVER a test is the server and waits for a client; either side may be \
                        perftest's ib_write_bw, ib_write_lat, ib_send_bw, ib_send_lat, ib_read_bw, ib_read_lat or ib_atomic_bw.")]
pub enum PerfCmd {
    /// ib_write_bw: RDMA WRITE bandwidth
    #[command(alias = "ib_write_bw", alias = "write_bw")]
    WriteBw(PerfArgs),
    /// ib_write_lat: RDMA WRITE latency (ping-pong)
    #[command(alias = "ib_write_lat", alias = "write_lat")]
    WriteLat(PerfArgs),
    /// ib_send_bw: SEND bandwidth
    #[command(alias = "ib_send_bw", alias = "send_bw")]
    SendBw(PerfArgs),
    /// ib_send_lat: SEND latency (ping-pong)
    #[command(alias = "ib_send_lat", alias = "send_lat")]
    SendLat(PerfArgs),
    /// ib_read_bw: RDMA READ bandwidth
    #[command(alias = "ib_read_bw", alias = "read_bw")]
    ReadBw(PerfArgs),
    /// ib_read_lat: RDMA READ latency
    #[command(alias = "ib_read_lat", alias = "read_lat")]
    ReadLat(PerfArgs),
    /// ib_atomic_bw: atomic (fetch-and-add / compare-and-swap) bandwidth
    #[command(alias = "ib_atomic_bw", alias = "atomic_bw")]
    AtomicBw(PerfArgs),
}

impl PerfCmd {
    /// The test and its options.
    pub fn test(&self) -> (Test, &PerfArgs) {
        match self {
            PerfCmd::WriteBw(a) => (Test::WriteBw, a),
            PerfCmd::WriteLat(a) => (Test::WriteLat, a),
            PerfCmd::SendBw(a) => (Test::SendBw, a),
            PerfCmd::SendLat(a) => (Test::SendLat, a),
            PerfCmd::ReadBw(a) => (Test::ReadBw, a),
            PerfCmd::ReadLat(a) => (Test::ReadLat, a),
            PerfCmd::AtomicBw(a) => (Test::AtomicBw, a),
        }
    }
}

/// Runs `umlx perf TEST [options] [SERVER]`.
pub fn run(c: &PerfCmd) -> Result<(), String> {
    let (test, a) = c.test();
    if a.version {
        println!("Version: {}", exchange::PROTOCOL_VERSION);
        return Ok(());
    }
    let p = Params::new(test, a)?;
    let ctx = crate::device::open(&a.dev)?;
    let dev_name = ctx.name().to_string();
    let sim = ctx.sim_backend().is_some();
    run_on(&ctx, &p, &dev_name, sim)
}

fn run_on(ctx: &Context, p: &Params, dev_name: &str, sim: bool) -> Result<(), String> {
    let test = p.test;
    let port = ctx.query_port(p.ib_port).map_err(|e| format!("ibv_query_port: {e}"))?;
    if port.state != PortState::Active {
        return Err(format!("port {} state is {}", p.ib_port, port.state));
    }
    let (gid_index, gid) = pick_gid(ctx, p)?;
    let active = port.active_mtu;
    let mut mtu = match p.mtu {
        None => active,
        Some(b) => {
            let m = mtu_of_bytes(b);
            if m as u32 > active as u32 {
                println!("Requested mtu is higher than active mtu \nChanging to active mtu - {}", active as u32);
                active
            } else {
                m
            }
        }
    };
    let dev = ctx.query_device().map_err(|e| format!("ibv_query_device: {e}"))?;
    let mut out_reads = if test.uses_reads() {
        let max = dev.max_qp_rd_atom;
        if p.out_reads > max {
            println!("{RESULT_LINE}");
            eprintln!(" Number of outstanding reads is above max = {max}\n Changing to that max value");
            max
        } else if p.out_reads == 0 {
            max
        } else {
            p.out_reads
        }
    } else {
        1
    };
    if !p.is_client() {
        println!("\n************************************");
        println!("* Waiting for client to connect... *");
        println!("************************************");
    }
    let mut s = match &p.server {
        Some(h) => Session::connect(h, p.port)?,
        None => Session::accept(p.port)?,
    };
    s.versions()?;
    let (cycle_buffer, cache_line) = s.sys_data(4096, cache_line_size())?;
    mtu = Mtu::from_value(s.mtu(mtu as u32)?).unwrap_or(mtu);
    let local = Negotiate {
        test_method: p.all as i32,
        connection_type: 0,
        verb: test.verb(),
        tst: test.is_bw() as i32,
        atomic_type: (test == Test::AtomicBw && p.fetch_add) as i32,
        test_type: p.duration.is_some() as i32,
        report_fmt: (!p.gbits) as i32,
        size: p.size,
        iters: p.iters,
        num_of_qps: p.qps as i32,
        duration: p.duration.unwrap_or(5) as i32,
        attr: DeviceAttrWire {
            fw_ver: dev.fw_ver.clone(),
            node_guid: dev.node_guid,
            max_mr_size: dev.max_mr_size,
            page_size_cap: dev.page_size_cap,
            vendor_id: dev.vendor_id,
            vendor_part_id: dev.vendor_part_id,
            max_qp: dev.max_qp as i32,
            max_qp_wr: dev.max_qp_wr as i32,
            max_sge: dev.max_sge as i32,
            max_cq: dev.max_cq as i32,
            max_cqe: dev.max_cqe as i32,
            max_mr: dev.max_mr as i32,
            max_pd: dev.max_pd as i32,
            max_qp_rd_atom: dev.max_qp_rd_atom as i32,
            max_qp_init_rd_atom: dev.max_qp_init_rd_atom as i32,
            atomic_cap: dev.atomic_cap as i32,
            max_srq: dev.max_srq as i32,
            max_srq_wr: dev.max_srq_wr as i32,
            max_srq_sge: dev.max_srq_sge as i32,
            local_ca_ack_delay: dev.local_ca_ack_delay,
            phys_port_cnt: dev.phys_port_cnt,
        },
        ..Default::default()
    };
    if let Some(remote) = s.negotiate(&local, p.negotiate_len)? {
        let bad = local.mismatches(&remote);
        if !bad.is_empty() {
            for m in &bad {
                eprintln!("{m}");
            }
            return Err("failed to negotiate parameters: run both sides with the same test and options".into());
        }
        let remote_reads = remote.attr.max_qp_rd_atom;
        if remote_reads > 0 && out_reads > remote_reads as u32 {
            println!(" out_reads is greater than remote max_qp_rd_atom, using remote max_qp_rd_atom");
            out_reads = remote_reads as u32;
        }
    }
    let geo = Geometry { cycle_buffer: cycle_buffer.max(64) as u64, cache_line: cache_line.max(1) as u64 };
    let mut res = Resources::new(ctx, p, p.max_size(), geo)?;
    res.set_sim_polling(sim);
    let mut rng = seed();
    let my: Vec<Dest> = (0..res.qps.len())
        .map(|i| Dest {
            lid: 0,
            out_reads: out_reads.min(0xffff) as u16,
            qpn: res.qps[i].qp_num(),
            psn: random_psn(&mut rng),
            rkey: res.mr.rkey(),
            vaddr: res.mr.addr() + res.recv_base(i),
            gid: gid.0,
            srqn: 0,
        })
        .collect();
    print_test_info(p, &Info { dev: dev_name, mtu, gid_index, out_reads });
    let progress = p.progress.unwrap_or_else(|| std::io::stderr().is_terminal());
    let mut f = Flow { p, s: &mut s, res: &mut res, my, rem: Vec::new(), geo, gid_index, mtu, progress };
    match test {
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => f.passive_bw(),
        Test::SendBw => f.send_bw(),
        Test::WriteLat => f.write_lat(),
        Test::ReadLat => f.read_lat(),
        Test::SendLat => f.send_lat(),
    }
}

/// One connected run: the exchange session, the resources, both sides' connection data.
struct Flow<'a> {
    p: &'a Params,
    s: &'a mut Session,
    res: &'a mut Resources,
    my: Vec<Dest>,
    rem: Vec<Dest>,
    geo: Geometry,
    gid_index: u32,
    mtu: Mtu,
    progress: bool,
}

impl Flow<'_> {
    /// A sync: one more exchange of QP 0's data.
    fn sync(&mut self) -> Result<(), String> {
        self.s.hand_shake(&self.my[0]).map(|_| ())
    }

    /// The first exchange: every QP's data.
    fn exchange_all(&mut self) -> Result<(), String> {
        self.rem.clear();
        for i in 0..self.my.len() {
            let d = self.s.hand_shake(&self.my[i])?;
            self.rem.push(d);
        }
        if self.rem.first().map(|r| Gid(r.gid).to_ip().is_ipv4())
            != self.my.first().map(|m| Gid(m.gid).to_ip().is_ipv4())
        {
            return Err("found incompatibility issue with GID types (IPv4 / IPv6): use another GID index (-x)".into());
        }
        Ok(())
    }

    fn connect(&mut self) -> Result<(), String> {
        self.res.connect(&self.my, &self.rem, self.gid_index, self.mtu, self.p)
    }

    fn print_local(&self) {
        for d in &self.my {
            print_dest("local", d, self.p.test);
        }
    }

    /// The second exchange of every QP's data, printing the peer's.
    fn exchange_print_remote(&mut self) -> Result<(), String> {
        for i in 0..self.my.len() {
            let d = self.s.hand_shake(&self.my[i])?;
            print_dest("remote", &d, self.p.test);
        }
        Ok(())
    }

    fn bw_header(&self) {
        println!("{RESULT_LINE}");
        println!("{}", report::bw_header(self.p.gbits));
    }

    fn progress(&self, size: u64) -> Progress {
        Progress::new(self.progress, format!("{} {size} B", self.p.test.opcode_name()))
    }

    /// WRITE / READ / atomic bandwidth: the client runs, the server waits for its result.
    fn passive_bw(&mut self) -> Result<(), String> {
        self.exchange_all()?;
        self.connect()?;
        self.print_local();
        self.exchange_print_remote()?;
        self.sync()?;
        self.bw_header();
        if !self.p.is_client() {
            self.sync()?;
            let r = self.s.bw_reports(&BwReportWire::default())?;
            println!("{}", report::bw_row(&r, self.p.gbits));
            self.sync()?;
            println!("{RESULT_LINE}");
            return Ok(());
        }
        let mut last = BwReportWire::default();
        for size in self.p.sizes() {
            let mut pr = self.progress(size);
            let run = self.res.run_bw_client(self.p, &self.rem, size, self.geo, &mut pr)?;
            last = report::bw_result(&run, size, self.p.gbits);
            println!("{}", report::bw_row(&last, self.p.gbits));
        }
        println!("{RESULT_LINE}");
        self.sync()?;
        self.s.bw_reports(&last)?;
        self.sync()
    }

    /// SEND bandwidth: the server posts receives and counts, a sync before each size.
    fn send_bw(&mut self) -> Result<(), String> {
        self.exchange_all()?;
        self.connect()?;
        self.sync()?;
        self.print_local();
        self.exchange_print_remote()?;
        self.bw_header();
        let client = self.p.is_client();
        for size in self.p.sizes() {
            if !client {
                self.res.post_initial_recvs(self.p, size, self.geo)?;
            }
            self.sync()?;
            let mut pr = self.progress(size);
            let run = if client {
                self.res.run_bw_client(self.p, &self.rem, size, self.geo, &mut pr)?
            } else {
                self.res.run_bw_server(self.p, size, self.geo, &mut pr)?
            };
            let r = report::bw_result(&run, size, self.p.gbits);
            println!("{}", report::bw_row(&r, self.p.gbits));
            if self.p.all {
                self.sync()?;
            }
        }
        println!("{RESULT_LINE}");
        self.sync()
    }

    fn lat_header(&self) {
        println!("{RESULT_LINE}");
        println!("{}", if self.p.duration.is_some() { report::LAT_DUR_HEADER } else { report::LAT_HEADER });
    }

    fn lat_report(&self, run: &engine::LatRun, size: u64) {
        let f = self.p.test.rtt_factor();
        if self.p.duration.is_some() {
            println!("{}", report::lat_dur_row(run, size, f));
        } else if let Some(st) = report::lat_stats(run, size, self.p.iters, f) {
            println!("{}", report::lat_row(&st));
        }
    }

    /// WRITE latency: a sync, the exchange, connect, the printed exchange, a sync, ping-pongs.
    fn write_lat(&mut self) -> Result<(), String> {
        self.sync()?;
        self.exchange_all()?;
        self.connect()?;
        self.print_local();
        self.exchange_print_remote()?;
        self.sync()?;
        self.lat_header();
        for size in self.p.sizes() {
            let run = self.res.run_write_lat(self.p, &self.rem, size, &mut self.progress(size))?;
            self.lat_report(&run, size);
        }
        println!("{RESULT_LINE}");
        Ok(())
    }

    /// READ latency: the server only waits for the final sync.
    fn read_lat(&mut self) -> Result<(), String> {
        self.sync()?;
        self.exchange_all()?;
        self.connect()?;
        self.print_local();
        self.exchange_print_remote()?;
        self.sync()?;
        if !self.p.is_client() {
            self.sync()?;
            println!("{RESULT_LINE}");
            return Ok(());
        }
        self.lat_header();
        for size in self.p.sizes() {
            let run = self.res.run_read_lat(self.p, &self.rem, size, &mut self.progress(size))?;
            self.lat_report(&run, size);
        }
        self.sync()?;
        println!("{RESULT_LINE}");
        Ok(())
    }

    /// SEND latency: receives posted and a sync before each size, then ping-pongs.
    fn send_lat(&mut self) -> Result<(), String> {
        self.exchange_all()?;
        self.connect()?;
        self.sync()?;
        self.print_local();
        self.exchange_print_remote()?;
        self.lat_header();
        for size in self.p.sizes() {
            self.res.post_initial_recvs(self.p, size, self.geo)?;
            self.sync()?;
            let run = self.res.run_send_lat(self.p, size, &mut self.progress(size))?;
            self.lat_report(&run, size);
        }
        println!("{RESULT_LINE}");
        self.sync()
    }
}
