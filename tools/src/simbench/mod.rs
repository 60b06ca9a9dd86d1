//! `umlx bench sim [--json] [--quick]`: what the software ConnectX delivers, measured, next to a
//! raw reference measured on the same machine, so that two machines compare as ratios.
//!
//! This module owns the whole benchmark: the in-process figures (64-byte and 64 KiB RDMA WRITE
//! throughput between two `SimDevice`s on a perfect in-process fabric, with the data checked,
//! and the process's resident memory before and after the 64-byte run; and, as a reference,
//! the 64-byte rate of several such pairs at once, one thread each), the two-process figures
//! (`umlx perf send-lat`, `umlx perf write-lat` and `umlx rc-pingpong` run as a server and a
//! client process of this same binary on the automatic wire, the loopback LAN, as a user runs
//! them; and, as references, the two latencies' 99th percentiles and one `rc-pingpong` run with
//! both processes on one CPU), the raw
//! reference (a 64-byte UDP
//! ping-pong between two busy-polling processes, the hidden `umlx bench udp-echo`), the child
//! processes' supervision (a timeout, killed on any error, a failure reported with the command
//! and the tail of its stderr), and the report (a table, or one JSON object with `--json`).
//! `one_process` runs the in-process figures, `two_processes` the child processes and the raw
//! reference; this file holds the arguments, the targets and the report.
//!
//! Targets: 64-byte WRITEs at 5 M msg/s or more (stretch 15), 64 KiB WRITEs at 4 GB/s
//! (10^9 bytes/s) or more, no resident-memory growth over the 64-byte run, each perftest-style
//! 64-byte latency's median at most 1.5 times half the raw UDP round trip, and the 4 KiB RC
//! ping-pong's time per iteration (the median of three runs) at most 3 raw UDP round trips;
//! each two-process figure judged against the raw round trip measured just before it (the
//! report's raw figures are the median of those three).

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

mod one_process;
mod two_processes;

pub(crate) use one_process::perfect_fabric;
use one_process::*;
pub use two_processes::run_udp_echo;
use two_processes::*;

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
/// 64-byte SENDs of the two-process `send-bw` figure (a reference: a stream between two
/// processes, where the latencies are ping-pongs). It stalled for 8 - 10 ms every 10 ms
/// (22 - 29 thousand messages a second) until `390bb0f`, unseen by the other figures.
const SEND_BW_MESSAGES: u64 = 100_000;
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
    /// Iterations of the perf latency tests (default: the raw reference's round trips), the
    /// RC ping-pong (default: its own, 1000) and messages of the send-bw (default: 100,000)
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
// The report.

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
    /// Pairs that ran 64-byte streams at once, one thread each (`one_process::in_parallel`).
    parallel_pairs: usize,
    /// Their 64-byte WRITEs, together.
    parallel_msgs: u64,
    /// Their rate, together.
    parallel_msgs_per_s: f64,
    /// The rate of as many 64-byte streams on as many QP pairs of one pair of adapters, one
    /// thread each (`one_process::in_one_pair`), together.
    shared_msgs_per_s: f64,
}

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

/// `xs` as a JSON array of numbers ([`js`] each).
fn js_array(xs: &[f64]) -> String {
    format!("[{}]", xs.iter().map(|&x| js(x)).collect::<Vec<_>>().join(", "))
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
    // The raw reference is measured again just before each two-process figure, which is
    // judged against that one: a machine's speed can change from one second to the next (the
    // raw round trip of one machine here came out at 5.3 or 7.0 µs from run to run), and a
    // reference taken seconds before a figure judged it against another machine.
    let raw = |before: &str| {
        say(&format!(
            "raw reference: {round_trips} UDP round trips of 64 bytes between two processes, before {before}"
        ));
        raw_udp(round_trips)
    };
    // The latencies are medians of as many round trips as the reference's: of perftest's
    // default 1,000, the first ones (cold caches, the wire's receive thread still looking)
    // weighed a hundred times more than the reference's, which also leaves out a warm-up.
    let lat_iters = a.iters.unwrap_or(round_trips);
    let raw_send = raw("send-lat")?;
    say(&format!("umlx perf send-lat -s 64 -n {lat_iters}, two processes"));
    let (send_lat, send_lat_p99) = perf_lat("send-lat", Some(lat_iters))?;
    let raw_write = raw("write-lat")?;
    say(&format!("umlx perf write-lat -s 64 -n {lat_iters}, two processes"));
    let (write_lat, write_lat_p99) = perf_lat("write-lat", Some(lat_iters))?;
    let bw_messages = a.iters.unwrap_or(SEND_BW_MESSAGES);
    say(&format!("umlx perf send-bw -s 64 -n {bw_messages}, two processes"));
    let send_bw = perf_bw_rate("send-bw", bw_messages)?;
    let raw_pingpong = raw("rc-pingpong")?;
    say(&format!("umlx rc-pingpong -s 4096, two processes, {PINGPONG_RUNS} runs"));
    let (pingpong, pingpong_runs) = rc_pingpong(a.iters)?;
    say("umlx rc-pingpong -s 4096, two processes on one CPU");
    let pingpong_one_cpu = rc_pingpong_one_cpu(a.iters)?;

    let raws = [raw_send, raw_write, raw_pingpong];
    let rtt = crate::bench::median(raws.iter().map(|r| r.0).collect());
    let rtt_p99 = crate::bench::median(raws.iter().map(|r| r.1).collect());
    let half = rtt / 2.0;
    let (before, after) = (ip.memory.before, ip.memory.after);
    let growth = after.all as f64 - before.all as f64;
    let anon_growth = after.anon as f64 - before.anon as f64;
    let rows = [
        Row {
            key: "raw_udp_rtt_p50_us",
            label: "raw UDP round trip, p50 (median of 3)".into(),
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
            goal: Goal::AtMost(TARGET_LAT_HALF_RTTS * raw_send.0 / 2.0),
        },
        Row { key: "send_lat_p99_us", label: "  p99".into(), unit: "µs", value: send_lat_p99, goal: Goal::Info },
        Row {
            key: "write_lat_p50_us",
            label: "perf write-lat -s 64, p50".into(),
            unit: "µs",
            value: write_lat,
            goal: Goal::AtMost(TARGET_LAT_HALF_RTTS * raw_write.0 / 2.0),
        },
        Row { key: "write_lat_p99_us", label: "  p99".into(), unit: "µs", value: write_lat_p99, goal: Goal::Info },
        Row {
            key: "send_bw64_msgs_per_s",
            label: "perf send-bw -s 64".into(),
            unit: "M msg/s",
            value: send_bw / 1e6,
            goal: Goal::Info,
        },
        Row {
            key: "rc_pingpong_4k_us",
            label: "rc-pingpong -s 4096, per iteration".into(),
            unit: "µs",
            value: pingpong,
            goal: Goal::AtMost(TARGET_PINGPONG_RTTS * raw_pingpong.0),
        },
        Row {
            key: "rc_pingpong_4k_one_cpu_us",
            label: "  both processes on one CPU".into(),
            unit: "µs",
            // No CPU to pin to (one allowed, or no `taskset`): not measured.
            value: pingpong_one_cpu.unwrap_or(f64::NAN),
            goal: Goal::Info,
        },
    ];
    let raw_runs = raws.map(|r| r.0);
    if json {
        print_json(&rows, &ip, &pingpong_runs, &raw_runs);
    } else {
        print_table(&rows, &ip, &pingpong_runs, &raw_runs);
    }
    Ok(())
}

fn print_json(rows: &[Row], ip: &InProcess, pingpong_runs: &[f64], raw_runs: &[f64; 3]) {
    let mut kv: Vec<String> = Vec::new();
    for r in rows {
        // The message rate in messages per second, as its key says; the table shows millions.
        let v = match r.key {
            "inprocess_write64_msgs_per_s"
            | "inprocess_write64_parallel_msgs_per_s"
            | "inprocess_write64_one_pair_flows_msgs_per_s"
            | "send_bw64_msgs_per_s" => js(r.value * 1e6),
            _ if r.unit == "KiB" => format!("{:.0}", r.value),
            _ => js(r.value),
        };
        kv.push(format!("\"{}\": {v}", r.key));
    }
    kv.push(format!("\"inprocess_write64_messages\": {}", ip.write64_msgs));
    kv.push(format!("\"inprocess_write64k_bytes\": {}", ip.write64k_bytes));
    kv.push(format!("\"inprocess_write64_parallel_pairs\": {}", ip.parallel_pairs));
    kv.push(format!("\"inprocess_write64_parallel_messages\": {}", ip.parallel_msgs));
    kv.push(format!("\"rc_pingpong_4k_us_runs\": {}", js_array(pingpong_runs)));
    // Each measured just before send-lat, write-lat and rc-pingpong, in that order.
    kv.push(format!("\"raw_udp_rtt_p50_us_runs\": {}", js_array(raw_runs)));
    // A run whose data check failed is an error (no JSON): reaching here means both held.
    kv.push("\"inprocess_write_data_verified\": true".into());
    let cpus = pair_cpus().map_or("null".into(), |[a, b]| format!("[{a}, {b}]"));
    kv.push(format!("\"two_process_cpus\": {cpus}"));
    kv.push(format!("\"build\": \"{}\"", build_kind()));
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

/// Which build of umlx this is: `tools/pgo-build.sh` sets `UMLX_BUILD=pgo` for its optimised
/// build (whose panics abort); a plain `cargo build` has none. The bench's figures say which
/// they are of.
fn build_kind() -> String {
    let kind = match option_env!("UMLX_BUILD") {
        Some("pgo") => "release, profile-guided (tools/pgo-build.sh)",
        _ if cfg!(debug_assertions) => "debug",
        _ => "release",
    };
    if cfg!(panic = "abort") { format!("{kind}, panics abort") } else { kind.to_string() }
}

fn print_table(rows: &[Row], ip: &InProcess, pingpong_runs: &[f64], raw_runs: &[f64; 3]) {
    println!(
        "umlx bench sim: the software ConnectX; build: {}; in process: two adapters on a perfect \
         fabric; two processes: the automatic wire (the loopback LAN), {}",
        build_kind(),
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
        let value = if r.value.is_finite() { format!("{:.prec$}", r.value) } else { "-".into() };
        println!("{:<38} {:>12} {:<8} {:>12} {:>8} {:>6}", r.label, value, r.unit, target, ratio, result);
    }
    println!(
        "\n64 B: {} messages (after {} warm-up and one full window held at the responder), window 256, every 32nd \
         signaled; 64 KiB: {} bytes, window 16, every 4th signaled; the last message's bytes verified at the \
         remote end of both. {} pairs at once: {} messages together, each pair on a fabric and a thread of its own, \
         after its own warm-up; a reference. QPs of one pair: as many streams on as many QP pairs of one pair of \
         adapters, a thread each (the adapters' queues run on several cores at once). rc-pingpong: the median of {} \
         runs ({} µs per iteration); on one CPU: one run, both processes pinned to the first CPU of the pair, each \
         turn waiting for the other to yield it (a reference).",
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
         {TARGET_LAT_HALF_RTTS} x raw one-way; rc-pingpong <= {TARGET_PINGPONG_RTTS} x raw round trip, each from the raw \
         round trip measured just before it ({:.3}, {:.3} and {:.3} µs); ratio = value / target.",
        raw_runs[0], raw_runs[1], raw_runs[2]
    );
}
