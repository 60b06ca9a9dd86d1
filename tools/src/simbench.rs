//! `umlx bench sim [--json] [--quick]`: what the software ConnectX delivers, measured, next to a
//! raw reference measured on the same machine, so that two machines compare as ratios.
//!
//! This module owns the whole benchmark: the in-process figures (64-byte and 64 KiB RDMA WRITE
//! throughput between two `SimDevice`s on a perfect in-process fabric, with the data checked,
//! and the process's resident memory before and after the 64-byte run; and, as a reference,
//! the 64-byte rate of several such pairs at once, one thread each), the two-process figures
//! (`umlx perf send-lat`, `umlx perf write-lat` and `umlx rc-pingpong` run as a server and a
//! client process of this same binary on loopback UDP wires), the raw reference (a 64-byte UDP
//! ping-pong between two busy-polling processes, the hidden `umlx bench udp-echo`), the child
//! processes' supervision (a timeout, killed on any error, a failure reported with the command
//! and the tail of its stderr), and the report (a table, or one JSON object with `--json`).
//!
//! Targets: 64-byte WRITEs at 5 M msg/s or more (stretch 15), 64 KiB WRITEs at 4 GB/s
//! (10^9 bytes/s) or more, no resident-memory growth over the 64-byte run, each perftest-style
//! 64-byte latency's median at most 1.5 times half the raw UDP round trip, and the 4 KiB RC
//! ping-pong's time per iteration (the median of three runs) at most 3 raw UDP round trips.

use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::result::Result;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use umlx_sim::fabric::{Fabric, FabricConfig};
use umlx_sim::{SimConfig, SimDevice};
use umlx_verbs::*;

/// 64-byte WRITEs of a full run.
const MESSAGES: u64 = 10_000_000;
/// 64-byte WRITEs of a `--quick` run.
const MESSAGES_QUICK: u64 = 1_000_000;
/// 64-byte WRITEs before the measured run (at most the measured count). The process's
/// resident memory grows by about 120 KiB over the first million while queues and the
/// allocator reach their working size, then stays within a few pages: the memory target is
/// about the run after that.
const WARMUP: u64 = 1_000_000;
/// Bytes of 64 KiB WRITEs of a full run (4 GiB).
const BULK_BYTES: u64 = 4 << 30;
/// Bytes of 64 KiB WRITEs of a `--quick` run (512 MiB).
const BULK_BYTES_QUICK: u64 = 512 << 20;
/// Measured UDP round trips (a tenth as many before them).
const ROUND_TRIPS: u64 = 100_000;
/// How long one child process may run.
const CHILD_LIMIT: Duration = Duration::from_secs(120);
/// A WRITE run with no completion for this long is stuck.
const STALL: Duration = Duration::from_secs(20);

/// 64-byte WRITE target (M msg/s), and the stretch.
const TARGET_WRITE64_MMSGS: f64 = 5.0;
const STRETCH_WRITE64_MMSGS: f64 = 15.0;
/// 64 KiB WRITE target (GB/s).
const TARGET_WRITE64K_GBS: f64 = 4.0;
/// Latency medians: at most this times half the raw UDP round trip.
const TARGET_LAT_HALF_RTTS: f64 = 1.5;
/// RC ping-pong: at most this many raw UDP round trips per iteration.
const TARGET_PINGPONG_RTTS: f64 = 3.0;

/// The options of `umlx bench sim`.
#[derive(clap::Args, Debug)]
pub struct SimBenchArgs {
    /// One JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// A shorter run: 1,000,000 64-byte WRITEs and 512 MiB of 64 KiB WRITEs
    #[arg(long)]
    pub quick: bool,
    /// 64-byte WRITEs to measure (warm-up: as many, at most 1,000,000)
    #[arg(long, value_name = "N", hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub messages: Option<u64>,
    /// MiB of 64 KiB WRITEs to measure
    #[arg(long, value_name = "MIB", hide = true, value_parser = clap::value_parser!(u64).range(1..))]
    pub bulk_mib: Option<u64>,
    /// Measured UDP round trips of the raw reference (a tenth as many before them)
    #[arg(long, value_name = "N", hide = true, value_parser = clap::value_parser!(u64).range(10..))]
    pub round_trips: Option<u64>,
    /// Iterations of the perf latency tests and the RC ping-pong (default: theirs, 1000)
    #[arg(long, value_name = "N", hide = true, value_parser = clap::value_parser!(u64).range(5..))]
    pub iters: Option<u64>,
}

/// The options of the hidden `umlx bench udp-echo`: one side of the raw UDP ping-pong.
#[derive(clap::Args, Debug)]
pub struct UdpEchoArgs {
    /// server (echoes until the client says stop) or client (measures)
    #[arg(long, value_parser = ["server", "client"])]
    pub role: String,
    /// The address this side binds
    #[arg(long, value_name = "ADDR")]
    pub local: SocketAddr,
    /// The other side's address
    #[arg(long, value_name = "ADDR")]
    pub peer: SocketAddr,
    /// Measured round trips (client)
    #[arg(long, value_name = "N", default_value_t = ROUND_TRIPS)]
    pub iters: u64,
    /// Round trips before the measured ones (client)
    #[arg(long, value_name = "N", default_value_t = ROUND_TRIPS / 10)]
    pub warmup: u64,
}

// ---------------------------------------------------------------------------------------------
// In process: two adapters on a perfect fabric.

/// One adapter with what the WRITE runs use: a CQ, one MR (source at 0, sink at `BUF`) and an
/// RC QP.
struct Node {
    ctx: Context,
    cq: Cq,
    mr: Mr,
    qp: Qp,
    _pd: Pd,
}

/// Bytes of the source (and of the sink) area of each node's MR.
const BUF: usize = 64 << 10;

/// A fabric without impairments (the demo's), or the operating system's refusal of its thread.
pub(crate) fn perfect_fabric() -> Result<Fabric, String> {
    Fabric::try_new(FabricConfig::default()).map_err(|e| e.to_string())
}

/// Adapter `n` on `fabric`, opened as `name`.
fn adapter(fabric: &Fabric, n: u8, name: &str) -> Result<Context, String> {
    let cfg = SimConfig::numbered(n);
    let ips = cfg.ips.clone();
    let dev = SimDevice::try_new(cfg).map_err(|e| format!("adapter {name}: {e}"))?;
    fabric.attach(&dev.port());
    Context::attach_sim(dev, name, ips).map_err(|e| format!("adapter {name}: {e}"))
}

/// A [`Node`] on the adapter `ctx` (a PD, CQ, MR and QP of its own).
fn node(ctx: &Context) -> Result<Node, String> {
    let name = ctx.name();
    let pd = ctx.alloc_pd().map_err(|e| format!("adapter {name}: ibv_alloc_pd: {e}"))?;
    let cq = ctx.create_cq(1024, None).map_err(|e| format!("adapter {name}: ibv_create_cq (1024): {e}"))?;
    let mr = pd
        .alloc_mr(2 * BUF, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .map_err(|e| format!("adapter {name}: ibv_reg_mr ({} bytes): {e}", 2 * BUF))?;
    let qp = pd
        .create_qp(QpType::Rc, &cq)
        .max_send_wr(512)
        .max_recv_wr(16)
        .build()
        .map_err(|e| format!("adapter {name}: ibv_create_qp (RC, 512 send WRs): {e}"))?;
    Ok(Node { ctx: ctx.clone(), cq, mr, qp, _pd: pd })
}

/// Two adapters (1 and 2) on `fabric`, neighbours of each other, with a node pair for each of
/// `flows` WRITE streams, their RC QPs connected (as `umlx demo` does: GID index 1, first
/// PSNs 0x100 and 0x200).
fn flows(fabric: &Fabric, flows: usize) -> Result<Vec<(Node, Node)>, String> {
    let (ca, cb) = (adapter(fabric, 1, "a")?, adapter(fabric, 2, "b")?);
    let gid = |c: &Context| c.query_gid(1, 1).map_err(|e| format!("GID index 1 of {}: {e}", c.name()));
    let (gid_a, gid_b) = (gid(&ca)?, gid(&cb)?);
    ca.add_neighbor(gid_b.to_ip(), cb.mac());
    cb.add_neighbor(gid_a.to_ip(), ca.mac());
    let mut out = Vec::with_capacity(flows);
    for _ in 0..flows {
        let (mut a, mut b) = (node(&ca)?, node(&cb)?);
        let (qa, qb) = (a.qp.qp_num(), b.qp.qp_num());
        let from = |sq_psn| ConnectParams { sq_psn, sgid_index: Some(1), ..Default::default() };
        a.qp.connect(&RcPeer { qp_num: qb, psn: 0x200, gid: gid_b }, &from(0x100))
            .map_err(|e| format!("connecting adapter a's QP {qa:#x}: {e}"))?;
        b.qp.connect(&RcPeer { qp_num: qa, psn: 0x100, gid: gid_a }, &from(0x200))
            .map_err(|e| format!("connecting adapter b's QP {qb:#x}: {e}"))?;
        out.push((a, b));
    }
    Ok(out)
}

/// [`flows`] with one flow: a pair of nodes.
fn pair(fabric: &Fabric) -> Result<(Node, Node), String> {
    flows(fabric, 1)?.pop().ok_or_else(|| "no flow was set up".to_string())
}

/// One WRITE stream: `msgs` messages of `size` bytes from `a`'s source area to `b`'s sink
/// area, at most `window` outstanding, every `signal`-th and the last signaled.
#[derive(Clone, Copy)]
struct Stream {
    size: usize,
    msgs: u64,
    window: u64,
    signal: u64,
}

/// `size` bytes that differ from message to message (`seed`: the message number).
fn pattern(size: usize, seed: u64) -> Vec<u8> {
    let mut v: Vec<u8> =
        (0..size).map(|i| (i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed.wrapping_mul(31)) as u8).collect();
    let n = size.min(8);
    v[..n].copy_from_slice(&seed.to_le_bytes()[..n]);
    v
}

/// Runs `s` and returns its time. The sink is cleared first, the source holds one pattern for
/// every message and, from the last message on, the last message's own pattern; at the end the
/// sink must hold exactly that (RC delivers in order). Every completion must be a successful
/// RDMA WRITE. Chains of up to `signal` WRs are posted with one `post_send` (one doorbell),
/// each chain ending on a signaled WR.
fn write_stream(a: &mut Node, b: &Node, s: Stream, mut memory: Option<&mut Resident>) -> Result<Duration, String> {
    let what = |done: u64| format!("{}-byte RDMA WRITE, after {done} of {} messages", s.size, s.msgs);
    b.mr.fill(BUF, s.size, 0).map_err(|e| format!("clearing the sink: {e}"))?;
    a.mr.write(0, &pattern(s.size, u64::MAX)).map_err(|e| format!("filling the source: {e}"))?;
    let last = pattern(s.size, s.msgs - 1);
    let sge = [a.mr.sge(0, s.size as u32)];
    let remote = Remote { addr: b.mr.addr() + BUF as u64, rkey: b.mr.rkey() };
    let op = SendOp::Write { data: Payload::Sges(&sge), remote, imm: None };
    let mut chain: Vec<SendWr<'_>> = Vec::with_capacity(s.signal as usize);
    let mut wc = [Wc::default(); 32];
    let (mut posted, mut done) = (0u64, 0u64);
    let mut idle = 0u32;
    let mut progress = Instant::now();
    if let Some(m) = memory.as_deref_mut() {
        m.before = rss_kib()?;
    }
    let t = Instant::now();
    while done < s.msgs {
        while posted < s.msgs && posted - done < s.window {
            // Up to the next signaled WR, within the window.
            let to_signal = s.signal - posted % s.signal;
            let n = to_signal.min(s.msgs - posted).min(s.window - (posted - done));
            if posted + n == s.msgs {
                a.mr.write(0, &last).map_err(|e| format!("writing the last message's pattern: {e}"))?;
            }
            chain_of(&mut chain, op, posted..posted + n, s.signal, s.msgs);
            a.qp.post_send(&chain).map_err(|e| format!("{}: post_send: {e}", what(done)))?;
            posted += n;
        }
        let got = a.cq.poll(&mut wc);
        for w in &wc[..got] {
            // Completions are cumulative: every WR up to this one is done.
            done = write_completed(w, || what(done))?;
        }
        if got > 0 {
            idle = 0;
            progress = Instant::now();
            continue;
        }
        // Nothing yet: let the adapters' engine threads run (they share the CPUs).
        std::thread::yield_now();
        idle += 1;
        if idle.is_multiple_of(1024) && progress.elapsed() > STALL {
            return Err(format!("{}: no completion for {} s", what(done), STALL.as_secs()));
        }
    }
    let e = t.elapsed();
    if let Some(m) = memory {
        m.after = rss_kib()?;
    }
    let got = b.mr.to_vec(BUF, s.size).map_err(|e| format!("reading the sink: {e}"))?;
    if got != last {
        let at = got.iter().zip(&last).position(|(x, y)| x != y).unwrap_or(0);
        return Err(format!(
            "{}: the remote buffer does not hold the last message (first difference at byte {at}: {:#04x}, expected {:#04x})",
            what(s.msgs),
            got[at],
            last[at]
        ));
    }
    Ok(e)
}

/// Fills `chain` with `op` as WRs `ids`: every `signal`-th signaled, and WR `count - 1`, the
/// stream's last.
fn chain_of<'a>(chain: &mut Vec<SendWr<'a>>, op: SendOp<'a>, ids: std::ops::Range<u64>, signal: u64, count: u64) {
    chain.clear();
    for i in ids {
        let sig = (i + 1) % signal == 0 || i + 1 == count;
        chain.push(SendWr { wr_id: i, op, flags: if sig { SendFlags::SIGNALED } else { SendFlags(0) } });
    }
}

/// The WR count a completion of the stream says is done (completions are cumulative), or the
/// error it reports (`what`: where in the stream) if it is not a successful RDMA WRITE.
fn write_completed(w: &Wc, what: impl FnOnce() -> String) -> Result<u64, String> {
    if w.status != WcStatus::Success || w.opcode != WcOpcode::RdmaWrite {
        return Err(format!(
            "{}: WR {} completed with {} ({:?}, vendor syndrome {:#x})",
            what(),
            w.wr_id,
            w.status,
            w.opcode,
            w.vendor_err
        ));
    }
    Ok(w.wr_id + 1)
}

/// Has a whole window of `s`'s WRITEs wait at once for the responder (its device held while
/// they are posted), then completes them: the deepest the stream's queues get (the
/// requester's WQEs in flight, the responder's frames waiting), reached once in the warm-up.
/// In the stream they get that deep only when the responder's device is busy as the frames
/// come (its engine running its timers), rarely; the memory that depth first touches would
/// otherwise count as growth whenever that happened first.
fn fill_window(a: &mut Node, b: &Node, s: Stream) -> Result<(), String> {
    let what = "filling a window with the responder held";
    let responder = b.ctx.sim_backend().ok_or_else(|| format!("{what}: adapter b is not a software ConnectX"))?;
    let sge = [a.mr.sge(0, s.size as u32)];
    let remote = Remote { addr: b.mr.addr() + BUF as u64, rkey: b.mr.rkey() };
    let op = SendOp::Write { data: Payload::Sges(&sge), remote, imm: None };
    let held = responder.device().lock();
    let mut chain = Vec::with_capacity(s.signal as usize);
    for first in (0..s.window).step_by(s.signal as usize) {
        chain_of(&mut chain, op, first..(first + s.signal).min(s.window), s.signal, s.window);
        a.qp.post_send(&chain).map_err(|e| format!("{what}: post_send: {e}"))?;
    }
    drop(held);
    let mut wc = [Wc::default(); 32];
    let start = Instant::now();
    let mut done = 0;
    while done < s.window {
        let got = a.cq.poll(&mut wc);
        for w in &wc[..got] {
            done = write_completed(w, || what.to_string())?;
        }
        if got == 0 {
            if start.elapsed() > STALL {
                return Err(format!("{what}: {done} of {} WRs completed in {} s", s.window, STALL.as_secs()));
            }
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// The resident memory of this process (KiB): all of it (VmRSS), and its anonymous part
/// (RssAnon: heaps, stacks, the sims' queues and buffers; not the pages of the program's and
/// libraries' files, which come in as code is first run). Read into a buffer on the stack: a
/// reading taken around the stream must not allocate, or it would measure its own allocation.
fn rss_kib() -> Result<Rss, String> {
    let mut buf = [0u8; 16 * 1024];
    let mut n = 0;
    let mut f = std::fs::File::open("/proc/self/status").map_err(|e| format!("/proc/self/status: {e}"))?;
    loop {
        let Some(rest) = buf.get_mut(n..).filter(|r| !r.is_empty()) else {
            return Err(format!("/proc/self/status is longer than {} bytes", buf.len()));
        };
        match f.read(rest) {
            Ok(0) => break,
            Ok(got) => n += got,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("/proc/self/status: {e}")),
        }
    }
    let s = std::str::from_utf8(&buf[..n]).map_err(|e| format!("/proc/self/status: {e}"))?;
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| format!("/proc/self/status has no {name} line"))
    };
    Ok(Rss { all: field("VmRSS:")?, anon: field("RssAnon:")? })
}

/// A reading of [`rss_kib`].
#[derive(Default, Clone, Copy)]
struct Rss {
    all: u64,
    anon: u64,
}

/// The resident memory ([`rss_kib`]) when a stream's first WRITE is posted and after its last
/// completes: the stream's own, not the memory of setting it up or checking it.
#[derive(Default)]
struct Resident {
    before: Rss,
    after: Rss,
}

/// What the in-process part measured.
struct InProcess {
    write64_msgs: u64,
    write64_msgs_per_s: f64,
    write64k_bytes: u64,
    write64k_gb_per_s: f64,
    /// The resident memory around the measured 64-byte stream.
    memory: Resident,
    /// Pairs that ran 64-byte streams at once, one thread each ([`in_parallel`]).
    parallel_pairs: usize,
    /// Their 64-byte WRITEs, together.
    parallel_msgs: u64,
    /// Their rate, together.
    parallel_msgs_per_s: f64,
    /// The rate of as many 64-byte streams on as many QP pairs of one pair of adapters, one
    /// thread each ([`in_one_pair`]), together.
    shared_msgs_per_s: f64,
}

fn in_process(msgs: u64, bulk_bytes: u64, say: &dyn Fn(&str)) -> Result<InProcess, String> {
    let fabric = perfect_fabric()?;
    let (mut a, b) = pair(&fabric)?;
    let small = Stream { size: 64, msgs, window: 256, signal: 32 };
    let warm = WARMUP.min(msgs);
    say(&format!("in process: {warm} 64-byte RDMA WRITEs (warm-up)"));
    write_stream(&mut a, &b, Stream { msgs: warm, ..small }, None)?;
    fill_window(&mut a, &b, small)?;
    say(&format!("in process: {msgs} 64-byte RDMA WRITEs"));
    let mut memory = Resident::default();
    let t = write_stream(&mut a, &b, small, Some(&mut memory))?;
    let big = Stream { size: BUF, msgs: bulk_bytes.div_ceil(BUF as u64), window: 16, signal: 4 };
    say(&format!("in process: {} 64 KiB RDMA WRITEs", big.msgs));
    let tb = write_stream(&mut a, &b, big, None)?;
    drop((a, b, fabric));
    let pairs = parallel_pairs();
    let each = msgs.div_ceil(pairs as u64);
    say(&format!("in process: {pairs} pairs of adapters at once, {each} 64-byte RDMA WRITEs each"));
    let tp = in_parallel(pairs, Stream { msgs: each, ..small })?;
    let parallel_msgs = each * pairs as u64;
    say(&format!("in process: {pairs} QP pairs of one pair of adapters at once, {each} 64-byte RDMA WRITEs each"));
    let ts = in_one_pair(pairs, Stream { msgs: each, ..small })?;
    Ok(InProcess {
        write64_msgs: msgs,
        write64_msgs_per_s: msgs as f64 / t.as_secs_f64(),
        write64k_bytes: big.msgs * BUF as u64,
        write64k_gb_per_s: (big.msgs * BUF as u64) as f64 / tb.as_secs_f64() / 1e9,
        memory,
        parallel_pairs: pairs,
        parallel_msgs,
        parallel_msgs_per_s: parallel_msgs as f64 / tp.as_secs_f64(),
        shared_msgs_per_s: parallel_msgs as f64 / ts.as_secs_f64(),
    })
}

/// How many pairs [`in_parallel`] runs: one per core, two to four.
fn parallel_pairs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(2, 4)
}

/// Runs `s` on `pairs` pairs of adapters at once, each pair on a fabric of its own and driven
/// by a thread of its own, as an application spreads its flows over devices ([`streams`]).
///
/// A reference, not a target: it shows what the other cores add when the work is spread over
/// devices, which share nothing.
fn in_parallel(pairs: usize, s: Stream) -> Result<Duration, String> {
    let setups = (0..pairs).map(|_| {
        || {
            let fabric = perfect_fabric()?;
            pair(&fabric).map(|(a, b)| (a, b, Some(fabric)))
        }
    });
    streams(setups.collect(), s)
}

/// Runs `s` on `flows` QP pairs of one pair of adapters at once, each flow driven by a thread
/// of its own ([`streams`]): what several cores do with one device's queues, next to
/// [`in_parallel`]'s pairs of devices.
fn in_one_pair(flows: usize, s: Stream) -> Result<Duration, String> {
    let fabric = perfect_fabric()?;
    let setups = self::flows(&fabric, flows)?.into_iter().map(|(a, b)| move || Ok((a, b, None)));
    streams(setups.collect(), s)
}

/// Runs `s` on each node pair `setups` make, each in a thread of its own (a setup runs in its
/// thread, and keeps what it returns, a fabric for instance, for the stream): the time from
/// when all of them are warmed up and start together until the last completes. Each stream's
/// last message is verified at its remote end ([`write_stream`]).
fn streams<F>(setups: Vec<F>, s: Stream) -> Result<Duration, String>
where
    F: FnOnce() -> Result<(Node, Node, Option<Fabric>), String> + Send + 'static,
{
    let pairs = setups.len();
    // Each thread says when it is ready (set up and warmed up, or failed) and then waits for
    // the go: every `go` sender dropped. A thread that could not be started, or that died
    // before it said so, holds none of the others back.
    let (ready_tx, ready) = mpsc::channel::<()>();
    let mut go = Vec::with_capacity(pairs);
    let mut streams: Vec<JoinHandle<Result<(), String>>> = Vec::with_capacity(pairs);
    let mut failed = None;
    for (i, setup) in setups.into_iter().enumerate() {
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let ready_tx = ready_tx.clone();
        let stream = move || {
            let set_up = setup().and_then(|(mut a, b, keep)| {
                write_stream(&mut a, &b, Stream { msgs: WARMUP.min(s.msgs), ..s }, None)?;
                Ok((a, b, keep))
            });
            let _ = ready_tx.send(());
            drop(ready_tx);
            let _ = go_rx.recv();
            let (mut a, b, _keep) = set_up.map_err(|e| format!("stream {i}: {e}"))?;
            write_stream(&mut a, &b, s, None).map(|_| ()).map_err(|e| format!("stream {i}: {e}"))
        };
        match std::thread::Builder::new().name(format!("umlx-bench-pair{i}")).spawn(stream) {
            Ok(h) => {
                go.push(go_tx);
                streams.push(h);
            }
            Err(e) => {
                failed = Some(format!("starting the thread of pair {i}: {e}"));
                break;
            }
        }
    }
    drop(ready_tx);
    if failed.is_none() {
        // Until every thread said it is ready, or the last sender is gone (a thread died).
        while ready.recv().is_ok() {}
    }
    let t = Instant::now();
    drop(go);
    for h in streams {
        let r = h.join().unwrap_or_else(|_| Err("a stream's thread panicked".into()));
        failed = failed.or(r.err());
    }
    let e = t.elapsed();
    failed.map_or(Ok(e), Err)
}

// ---------------------------------------------------------------------------------------------
// Child processes.

/// A child `umlx` process: stdout read line by line as it comes, stderr collected. Dropping it
/// kills it (if it still runs) and reaps it.
struct Kid {
    /// `umlx ARGS` (for messages).
    cmd: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<JoinHandle<String>>,
    exited: Option<std::process::ExitStatus>,
}

impl Kid {
    /// `umlx ARGS`, on CPU `cpu` alone if given (`taskset -c CPU`).
    fn spawn(args: &[String], cpu: Option<usize>) -> Result<Kid, String> {
        let pin = cpu.map(|c| format!("taskset -c {c} ")).unwrap_or_default();
        let cmd = format!("{pin}umlx {}", args.join(" "));
        let exe = std::env::current_exe().map_err(|e| format!("finding this program to run `{cmd}`: {e}"))?;
        let mut command = match cpu {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.arg("-c").arg(c.to_string()).arg(exe);
                t
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting `{cmd}`: {e}"))?;
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let (tx, lines) = mpsc::channel();
        if let Some(out) = out {
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = err.map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        });
        Ok(Kid { cmd, child, lines, stdout: Vec::new(), stderr, exited: None })
    }

    /// Takes the stdout lines that arrived.
    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.stdout.push(l);
        }
    }

    /// Whether it exited (recording how).
    fn poll_exit(&mut self) -> Result<bool, String> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().map_err(|e| format!("waiting for `{}`: {e}", self.cmd))?;
        }
        Ok(self.exited.is_some())
    }

    /// Kills it (if it runs) and reaps it.
    fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    /// The last lines of its stderr (after it exited or was killed).
    fn stderr_tail(&mut self) -> String {
        let all = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        let lines: Vec<&str> = all.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n    ");
        if tail.is_empty() { "(nothing on stderr)".into() } else { format!("stderr:\n    {tail}") }
    }

    /// An error about it, killing it first: `why` and its stderr's tail.
    fn fail(&mut self, why: &str) -> String {
        self.kill();
        let tail = self.stderr_tail();
        format!("`{}` {why}; {tail}", self.cmd)
    }

    /// Waits until a stdout line contains `pat` (before `deadline`, and while it runs).
    fn wait_line(&mut self, pat: &str, deadline: Instant) -> Result<(), String> {
        loop {
            self.drain();
            if self.stdout.iter().any(|l| l.contains(pat)) {
                return Ok(());
            }
            if self.poll_exit()? {
                // Lines written just before the exit may still be in the pipe.
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.stdout.push(l);
                }
                if self.stdout.iter().any(|l| l.contains(pat)) {
                    return Ok(());
                }
                let st = self.exited.map(|s| s.to_string()).unwrap_or_default();
                return Err(self.fail(&format!("exited ({st}) before printing a line with {pat:?}")));
            }
            if Instant::now() > deadline {
                return Err(self.fail(&format!("printed no line with {pat:?} within {} s", CHILD_LIMIT.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Its stdout, once it exited (all of it: the reader reaches the end of the pipe).
    fn output(&mut self) -> Vec<String> {
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stdout.push(l);
        }
        std::mem::take(&mut self.stdout)
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits for both processes to exit successfully (before `deadline`); the first failure, or the
/// timeout, kills the other and is the error. Returns their stdout (server's, client's).
fn finish_pair(server: &mut Kid, client: &mut Kid, deadline: Instant) -> Result<(Vec<String>, Vec<String>), String> {
    /// Whether `k` exited; an error (after killing `other`) when it failed.
    fn check(k: &mut Kid, other: &mut Kid) -> Result<bool, String> {
        if !k.poll_exit()? {
            return Ok(false);
        }
        if let Some(st) = k.exited.filter(|s| !s.success()) {
            other.kill();
            return Err(k.fail(&format!("failed ({st})")));
        }
        Ok(true)
    }
    loop {
        let s = check(server, client)?;
        let c = check(client, server)?;
        if s && c {
            return Ok((server.output(), client.output()));
        }
        if Instant::now() > deadline {
            let who = if s { &mut *client } else { &mut *server };
            let e = who.fail(&format!("did not finish within {} s (killed)", CHILD_LIMIT.as_secs()));
            server.kill();
            client.kill();
            return Err(e);
        }
        server.drain();
        client.drain();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Two free UDP ports on 127.0.0.1: bound to port 0, noted, released.
fn free_udp_ports() -> Result<(u16, u16), String> {
    let a = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("finding a free UDP port: {e}"))?;
    let b = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("finding a free UDP port: {e}"))?;
    let port = |s: &UdpSocket| s.local_addr().map(|a| a.port()).map_err(|e| format!("a UDP socket's port: {e}"));
    Ok((port(&a)?, port(&b)?))
}

fn free_tcp_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free TCP port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("a TCP listener's port: {e}"))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Runs a server and a client of `umlx TOOL ARGS` (with `--wire`, `--index` and `-p` chosen
/// here); the client is started once the server printed a line with `ready`. Returns the
/// client's stdout.
fn run_pair(tool: &[&str], args: &[String], ready: &str) -> Result<Vec<String>, String> {
    let (ua, ub) = free_udp_ports()?;
    let tcp = free_tcp_port()?.to_string();
    let side = |local: u16, peer: u16, index: &str| -> Vec<String> {
        let mut v = strings(tool);
        v.extend(args.iter().cloned());
        v.extend(strings(&[
            "--wire",
            &format!("udp:127.0.0.1:{local},127.0.0.1:{peer}"),
            "--index",
            index,
            "-p",
            &tcp,
        ]));
        v
    };
    let mut cargs = side(ub, ua, "1");
    cargs.push("127.0.0.1".into());
    run_two(&side(ua, ub, "0"), &cargs, ready)
}

/// The CPUs the two processes of each pair (the raw reference's and the tests') are pinned to,
/// one each: the first two this process may run on, when it may run on two and `taskset` is
/// there. Unpinned, the scheduler kept both busy-polling processes of a pair on one core of
/// two for whole runs now and then, each turn of the ping-pong then waiting for the other's
/// yield: `send-lat`/`write-lat` medians of 8.3 - 11.5 µs (8.4 with both pinned to one core)
/// in 5 and 7 of the 12 latency figures of two sets of six full runs of the binary of
/// `8d63463`, against 5.1 - 6.8 µs in six runs with each process on a core of its own.
fn pair_cpus() -> Option<[usize; 2]> {
    // Found once: every pair of the run is placed alike.
    static PAIR_CPUS: std::sync::OnceLock<Option<[usize; 2]>> = std::sync::OnceLock::new();
    *PAIR_CPUS.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
        let mut cpus = cpu_list(list.trim())?.into_iter();
        let pair = [cpus.next()?, cpus.next()?];
        let taskset = Command::new("taskset").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
        taskset.is_ok_and(|s| s.success()).then_some(pair)
    })
}

/// The CPUs of a list as the kernel writes it ("0-3,8,10-11"), in order; `None` if malformed.
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                cpus.extend(a..=b.min(a + 4096));
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Runs `umlx SERVER_ARGS`, then, once it printed a line with `ready`, `umlx CLIENT_ARGS`, both
/// within [`CHILD_LIMIT`], each on a CPU of its own ([`pair_cpus`]); returns the client's stdout.
fn run_two(server_args: &[String], client_args: &[String], ready: &str) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + CHILD_LIMIT;
    let cpus = pair_cpus();
    let mut server = Kid::spawn(server_args, cpus.map(|c| c[0]))?;
    server.wait_line(ready, deadline)?;
    let mut client = Kid::spawn(client_args, cpus.map(|c| c[1]))?;
    let (_, out) = finish_pair(&mut server, &mut client, deadline)?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The raw reference: a UDP ping-pong between two busy-polling processes.

/// Runs `umlx bench udp-echo` (one side).
pub fn run_udp_echo(a: &UdpEchoArgs) -> Result<(), String> {
    let sock = UdpSocket::bind(a.local).map_err(|e| format!("binding UDP {}: {e}", a.local))?;
    sock.connect(a.peer).map_err(|e| format!("UDP connect to {}: {e}", a.peer))?;
    sock.set_nonblocking(true).map_err(|e| format!("UDP socket: {e}"))?;
    if a.role == "server" { echo_server(&sock) } else { echo_client(&sock, a.warmup, a.iters) }
}

/// The sequence number of the client's last packet.
const STOP: u64 = u64::MAX;

/// Echoes every 64-byte packet until the stop packet; gives up after 30 s without a packet.
fn echo_server(sock: &UdpSocket) -> Result<(), String> {
    println!("udp-echo server ready on {}", sock.local_addr().map_err(|e| e.to_string())?);
    let mut buf = [0u8; 64];
    let mut last = Instant::now();
    let mut spins = 0u32;
    loop {
        match sock.recv(&mut buf) {
            Ok(64) => {
                if u64::from_le_bytes(buf[..8].try_into().unwrap_or_default()) == STOP {
                    return Ok(());
                }
                send64(sock, &buf)?;
                last = Instant::now();
            }
            Ok(n) => return Err(format!("udp-echo server: a packet of {n} bytes (expected 64)")),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && last.elapsed() > Duration::from_secs(30) {
                    return Err("udp-echo server: no packet for 30 s".into());
                }
            }
            Err(e) => return Err(format!("udp-echo server: recv: {e}")),
        }
    }
}

/// Sends 64 bytes, retrying while the socket buffer is full.
fn send64(sock: &UdpSocket, buf: &[u8; 64]) -> Result<(), String> {
    loop {
        match sock.send(buf) {
            Ok(_) => return Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => {}
            Err(e) => return Err(format!("udp-echo: send: {e}")),
        }
    }
}

/// `warmup` then `iters` round trips, each timed from the send to the echo of its sequence
/// number (resent after 100 ms without it); prints the median and the 99th percentile.
fn echo_client(sock: &UdpSocket, warmup: u64, iters: u64) -> Result<(), String> {
    let mut samples = Vec::with_capacity(iters as usize);
    let mut out = [0u8; 64];
    let mut back = [0u8; 64];
    for i in 0..warmup + iters {
        out[..8].copy_from_slice(&i.to_le_bytes());
        out[8] = i as u8;
        let t = Instant::now();
        let mut sent = t;
        send64(sock, &out)?;
        let mut spins = 0u32;
        loop {
            match sock.recv(&mut back) {
                Ok(64) if back[..8] == out[..8] => break,
                Ok(_) => {} // a late echo of a resent packet
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(1024) {
                        if t.elapsed() > Duration::from_secs(30) {
                            return Err(format!("udp-echo client: no echo of round trip {i} within 30 s"));
                        }
                        if sent.elapsed() > Duration::from_millis(100) {
                            send64(sock, &out)?;
                            sent = Instant::now();
                        }
                    }
                }
                Err(e) => return Err(format!("udp-echo client: recv: {e}")),
            }
        }
        if i >= warmup {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    for _ in 0..3 {
        send64(sock, &{
            let mut s = [0u8; 64];
            s[..8].copy_from_slice(&STOP.to_le_bytes());
            s
        })?;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!("udp-echo: {iters} round trips of 64 bytes: p50 {:.3} us, p99 {:.3} us", at(0.5), at(0.99));
    Ok(())
}

/// The raw UDP round trip (p50, p99 in µs): `umlx bench udp-echo` as two processes.
fn raw_udp(round_trips: u64) -> Result<(f64, f64), String> {
    let (ua, ub) = free_udp_ports()?;
    let side = |role: &str, local: u16, peer: u16| -> Vec<String> {
        strings(&[
            "bench",
            "udp-echo",
            "--role",
            role,
            "--local",
            &format!("127.0.0.1:{local}"),
            "--peer",
            &format!("127.0.0.1:{peer}"),
            "--iters",
            &round_trips.to_string(),
            "--warmup",
            &(round_trips / 10).to_string(),
        ])
    };
    let client = side("client", ub, ua);
    let out = run_two(&side("server", ua, ub), &client, "ready")?;
    let line = out
        .iter()
        .find(|l| l.starts_with("udp-echo:"))
        .ok_or_else(|| format!("`umlx {}` printed no result line (stdout: {out:?})", client.join(" ")))?;
    let num = |key: &str| -> Result<f64, String> {
        line.split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.trim_end_matches(',').parse().ok())
            .ok_or_else(|| format!("no {key:?} number in the udp-echo line {line:?}"))
    };
    Ok((num("p50 ")?, num("p99 ")?))
}

/// The median latency (µs) of `umlx perf TEST -s 64` as two processes.
fn perf_lat(test: &str, iters: Option<u64>) -> Result<f64, String> {
    let mut args = strings(&["-s", "64", "-d", "sim", "--no-progress"]);
    if let Some(n) = iters {
        args.extend(["-n".into(), n.to_string()]);
    }
    let out = run_pair(&["perf", test], &args, "Waiting for client")?;
    // The row under the header with t_typical: bytes, iterations, t_min, t_max, t_typical, ...
    let at = out
        .iter()
        .position(|l| l.contains("t_typical"))
        .ok_or_else(|| format!("`umlx perf {test}` (client) printed no latency table: {}", out.join("\n")))?;
    let row = out[at + 1..].iter().find(|l| !l.trim().is_empty()).map(String::as_str).unwrap_or("");
    row.split_whitespace()
        .nth(4)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("`umlx perf {test}` (client): no t_typical in the row {row:?}"))
}

/// Runs of `umlx rc-pingpong` whose median the report gives.
const PINGPONG_RUNS: usize = 3;

/// The time per iteration (µs) of `umlx rc-pingpong -s 4096` as two processes: the median of
/// [`PINGPONG_RUNS`] runs, and each run's.
///
/// A run's figure is its mean over all its iterations (as `ibv_rc_pingpong` prints it), so a
/// run whose two processes the scheduler keeps on one core for a while comes out several times
/// slower as a whole (260 - 370 µs per iteration with both pinned to one core of two, 23 - 27
/// µs on two): one such run decided the figure before. The latencies are medians of their
/// iterations, and the raw reference too, so they need no such care.
fn rc_pingpong(iters: Option<u64>) -> Result<(f64, Vec<f64>), String> {
    let mut runs = Vec::with_capacity(PINGPONG_RUNS);
    for _ in 0..PINGPONG_RUNS {
        runs.push(rc_pingpong_once(iters)?);
    }
    Ok((crate::bench::median(runs.clone()), runs))
}

/// One run of `umlx rc-pingpong -s 4096` as two processes: its time per iteration (µs).
fn rc_pingpong_once(iters: Option<u64>) -> Result<f64, String> {
    let mut args = strings(&["-s", "4096"]);
    if let Some(n) = iters {
        args.extend(["-n".into(), n.to_string()]);
    }
    let out = run_pair(&["rc-pingpong"], &args, "local address")?;
    let line = out
        .iter()
        .find(|l| l.contains("usec/iter"))
        .ok_or_else(|| format!("`umlx rc-pingpong` (client) printed no usec/iter line: {}", out.join("\n")))?;
    line.split("= ")
        .nth(1)
        .and_then(|v| v.trim_end_matches(" usec/iter").trim().parse().ok())
        .ok_or_else(|| format!("`umlx rc-pingpong` (client): no number in {line:?}"))
}

// ---------------------------------------------------------------------------------------------
// The report.

/// Which way a figure should go.
#[derive(Clone, Copy, PartialEq)]
enum Goal {
    /// A reference: no target.
    Info,
    /// At least the target.
    AtLeast(f64),
    /// At most the target.
    AtMost(f64),
}

/// One row of the report.
struct Row {
    key: &'static str,
    label: String,
    unit: &'static str,
    value: f64,
    goal: Goal,
}

impl Row {
    fn target(&self) -> Option<f64> {
        match self.goal {
            Goal::Info => None,
            Goal::AtLeast(t) | Goal::AtMost(t) => Some(t),
        }
    }

    /// value / target (none for references and zero targets).
    fn ratio(&self) -> Option<f64> {
        self.target().filter(|t| *t != 0.0).map(|t| self.value / t)
    }

    fn pass(&self) -> Option<bool> {
        match self.goal {
            Goal::Info => None,
            Goal::AtLeast(t) => Some(self.value >= t),
            Goal::AtMost(t) => Some(self.value <= t),
        }
    }
}

/// A number for JSON (`null` when not finite).
fn js(v: f64) -> String {
    if v.is_finite() { format!("{v:.4}") } else { "null".into() }
}

/// Runs `umlx bench sim`.
pub fn run(a: &SimBenchArgs) -> Result<(), String> {
    let msgs = a.messages.unwrap_or(if a.quick { MESSAGES_QUICK } else { MESSAGES });
    let bulk = a.bulk_mib.map(|m| m << 20).unwrap_or(if a.quick { BULK_BYTES_QUICK } else { BULK_BYTES });
    let round_trips = a.round_trips.unwrap_or(ROUND_TRIPS);
    let json = a.json;
    let say = |s: &str| {
        if !json {
            eprintln!("umlx bench sim: {s} ...");
        }
    };
    // In process first; its adapters (and their engine threads) are gone before the processes
    // start.
    let ip = in_process(msgs, bulk, &say)?;
    say(&format!("raw reference: {round_trips} UDP round trips of 64 bytes between two processes"));
    let (rtt, rtt_p99) = raw_udp(round_trips)?;
    say("umlx perf send-lat -s 64, two processes");
    let send_lat = perf_lat("send-lat", a.iters)?;
    say("umlx perf write-lat -s 64, two processes");
    let write_lat = perf_lat("write-lat", a.iters)?;
    say(&format!("umlx rc-pingpong -s 4096, two processes, {PINGPONG_RUNS} runs"));
    let (pingpong, pingpong_runs) = rc_pingpong(a.iters)?;

    let half = rtt / 2.0;
    let (before, after) = (ip.memory.before, ip.memory.after);
    let growth = after.all as f64 - before.all as f64;
    let anon_growth = after.anon as f64 - before.anon as f64;
    let rows = [
        Row {
            key: "raw_udp_rtt_p50_us",
            label: "raw UDP round trip, p50".into(),
            unit: "µs",
            value: rtt,
            goal: Goal::Info,
        },
        Row {
            key: "raw_udp_half_rtt_us",
            label: "raw UDP one way (p50 / 2)".into(),
            unit: "µs",
            value: half,
            goal: Goal::Info,
        },
        Row {
            key: "raw_udp_rtt_p99_us",
            label: "raw UDP round trip, p99".into(),
            unit: "µs",
            value: rtt_p99,
            goal: Goal::Info,
        },
        Row {
            key: "inprocess_write64_msgs_per_s",
            label: "in process: 64 B RDMA WRITE".into(),
            unit: "M msg/s",
            value: ip.write64_msgs_per_s / 1e6,
            goal: Goal::AtLeast(TARGET_WRITE64_MMSGS),
        },
        Row {
            key: "inprocess_write64k_gb_per_s",
            label: "in process: 64 KiB RDMA WRITE".into(),
            unit: "GB/s",
            value: ip.write64k_gb_per_s,
            goal: Goal::AtLeast(TARGET_WRITE64K_GBS),
        },
        Row {
            key: "inprocess_write64_parallel_msgs_per_s",
            label: format!("  {} pairs at once, one thread each", ip.parallel_pairs),
            unit: "M msg/s",
            value: ip.parallel_msgs_per_s / 1e6,
            goal: Goal::Info,
        },
        Row {
            key: "inprocess_write64_one_pair_flows_msgs_per_s",
            label: format!("  {} QPs of one pair, one thread each", ip.parallel_pairs),
            unit: "M msg/s",
            value: ip.shared_msgs_per_s / 1e6,
            goal: Goal::Info,
        },
        Row {
            key: "rss_kib_after_warmup",
            label: "resident memory after the warm-up".into(),
            unit: "KiB",
            value: before.all as f64,
            goal: Goal::Info,
        },
        Row {
            key: "rss_kib_after_run",
            label: format!("resident memory after {} WRITEs", ip.write64_msgs),
            unit: "KiB",
            value: after.all as f64,
            goal: Goal::Info,
        },
        Row {
            key: "rss_kib_growth",
            label: "resident memory growth".into(),
            unit: "KiB",
            value: growth,
            goal: Goal::Info,
        },
        Row {
            key: "rss_anon_kib_after_warmup",
            label: "  anonymous (heaps, stacks), before".into(),
            unit: "KiB",
            value: before.anon as f64,
            goal: Goal::Info,
        },
        Row {
            key: "rss_anon_kib_after_run",
            label: "  anonymous, after".into(),
            unit: "KiB",
            value: after.anon as f64,
            goal: Goal::Info,
        },
        Row {
            key: "rss_anon_kib_growth",
            label: "  anonymous memory growth".into(),
            unit: "KiB",
            value: anon_growth,
            goal: Goal::AtMost(0.0),
        },
        Row {
            key: "send_lat_p50_us",
            label: "perf send-lat -s 64, p50".into(),
            unit: "µs",
            value: send_lat,
            goal: Goal::AtMost(TARGET_LAT_HALF_RTTS * half),
        },
        Row {
            key: "write_lat_p50_us",
            label: "perf write-lat -s 64, p50".into(),
            unit: "µs",
            value: write_lat,
            goal: Goal::AtMost(TARGET_LAT_HALF_RTTS * half),
        },
        Row {
            key: "rc_pingpong_4k_us",
            label: "rc-pingpong -s 4096, per iteration".into(),
            unit: "µs",
            value: pingpong,
            goal: Goal::AtMost(TARGET_PINGPONG_RTTS * rtt),
        },
    ];
    if json {
        print_json(&rows, &ip, &pingpong_runs);
    } else {
        print_table(&rows, &ip, &pingpong_runs);
    }
    Ok(())
}

fn print_json(rows: &[Row], ip: &InProcess, pingpong_runs: &[f64]) {
    let mut kv: Vec<String> = Vec::new();
    for r in rows {
        // The message rate in messages per second, as its key says; the table shows millions.
        let v = match r.key {
            "inprocess_write64_msgs_per_s"
            | "inprocess_write64_parallel_msgs_per_s"
            | "inprocess_write64_one_pair_flows_msgs_per_s" => js(r.value * 1e6),
            _ if r.unit == "KiB" => format!("{:.0}", r.value),
            _ => js(r.value),
        };
        kv.push(format!("\"{}\": {v}", r.key));
    }
    kv.push(format!("\"inprocess_write64_messages\": {}", ip.write64_msgs));
    kv.push(format!("\"inprocess_write64k_bytes\": {}", ip.write64k_bytes));
    kv.push(format!("\"inprocess_write64_parallel_pairs\": {}", ip.parallel_pairs));
    kv.push(format!("\"inprocess_write64_parallel_messages\": {}", ip.parallel_msgs));
    let runs: Vec<String> = pingpong_runs.iter().map(|&x| js(x)).collect();
    kv.push(format!("\"rc_pingpong_4k_us_runs\": [{}]", runs.join(", ")));
    // A run whose data check failed is an error (no JSON): reaching here means both held.
    kv.push("\"inprocess_write_data_verified\": true".into());
    let cpus = pair_cpus().map_or("null".into(), |[a, b]| format!("[{a}, {b}]"));
    kv.push(format!("\"two_process_cpus\": {cpus}"));
    for r in rows {
        if let Some(t) = r.target() {
            let t = if r.key == "inprocess_write64_msgs_per_s" { t * 1e6 } else { t };
            kv.push(format!("\"target_{}\": {}", r.key, js(t)));
        }
    }
    kv.push(format!("\"stretch_inprocess_write64_msgs_per_s\": {}", js(STRETCH_WRITE64_MMSGS * 1e6)));
    let ratios: Vec<String> =
        rows.iter().filter_map(|r| r.ratio().map(|x| format!("\"{}\": {}", r.key, js(x)))).collect();
    kv.push(format!("\"ratio_to_target\": {{{}}}", ratios.join(", ")));
    let pass: Vec<String> = rows.iter().filter_map(|r| r.pass().map(|p| format!("\"{}\": {p}", r.key))).collect();
    kv.push(format!("\"pass\": {{{}}}", pass.join(", ")));
    kv.push(format!("\"all_pass\": {}", rows.iter().all(|r| r.pass() != Some(false))));
    println!("{{{}}}", kv.join(", "));
}

fn print_table(rows: &[Row], ip: &InProcess, pingpong_runs: &[f64]) {
    println!(
        "umlx bench sim: the software ConnectX; in process: two adapters on a perfect fabric; \
         two processes: loopback UDP wires, {}",
        match pair_cpus() {
            Some([a, b]) => format!("each process of a pair on a CPU of its own ({a}, {b})"),
            None => "the processes unpinned".into(),
        }
    );
    println!("{:<38} {:>12} {:<8} {:>12} {:>8} {:>6}", "figure", "value", "unit", "target", "ratio", "result");
    for r in rows {
        let prec = if r.unit == "KiB" {
            0
        } else if r.value >= 100.0 {
            1
        } else {
            3
        };
        let target = match r.goal {
            Goal::Info => "reference".to_string(),
            Goal::AtLeast(t) => format!(">= {t:.prec$}", prec = if t >= 100.0 { 0 } else { 2 }),
            Goal::AtMost(t) => format!("<= {t:.prec$}", prec = if t >= 100.0 || t == 0.0 { 0 } else { 2 }),
        };
        let ratio = r.ratio().map(|x| format!("{x:.3}")).unwrap_or_else(|| "-".into());
        let result = match r.pass() {
            None => "",
            Some(true) => "pass",
            Some(false) => "miss",
        };
        println!("{:<38} {:>12.prec$} {:<8} {:>12} {:>8} {:>6}", r.label, r.value, r.unit, target, ratio, result);
    }
    println!(
        "\n64 B: {} messages (after {} warm-up and one full window held at the responder), window 256, every 32nd \
         signaled; 64 KiB: {} bytes, window 16, every 4th signaled; the last message's bytes verified at the \
         remote end of both. {} pairs at once: {} messages together, each pair on a fabric and a thread of its own, \
         after its own warm-up; a reference. QPs of one pair: as many streams on as many QP pairs of one pair of \
         adapters, a thread each (the adapters' queues run on several cores at once). rc-pingpong: the median of {} \
         runs ({} µs per iteration).",
        ip.write64_msgs,
        WARMUP.min(ip.write64_msgs),
        ip.write64k_bytes,
        ip.parallel_pairs,
        ip.parallel_msgs,
        pingpong_runs.len(),
        pingpong_runs.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ")
    );
    println!(
        "Targets: 64 B >= {TARGET_WRITE64_MMSGS} M msg/s (stretch {STRETCH_WRITE64_MMSGS}); latency p50 <= \
         {TARGET_LAT_HALF_RTTS} x raw one-way; rc-pingpong <= {TARGET_PINGPONG_RTTS} x raw round trip; ratio = value / target."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(cpu_list("3"), Some(vec![3]));
        assert_eq!(cpu_list(""), Some(vec![]));
        assert_eq!(cpu_list("0-x"), None);
        assert_eq!(cpu_list("a"), None);
    }
}
