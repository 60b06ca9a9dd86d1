//! `umlx bench datapath [--json] [--instructions]`: the driver's own data-path cost per
//! operation on the software ConnectX, in ns (median of repeated runs) and, where valgrind is
//! installed, in instructions (callgrind, counting only inside the measured kernel).
//!
//! Doorbells are plain stores (`SimBackend::with_plain_doorbells`), as rdma-core's figures are
//! measured with the doorbell pointing at plain memory. Completions for the poll benchmark are
//! real CQEs written by the device model: signaled RDMA WRITEs on a QP connected to itself.

use std::hint::black_box;
use std::process::Command;
use std::result::Result;
use std::time::Instant;
use umlx_verbs::*;

/// Operations per measured run.
const OPS: usize = 2048;
/// Runs per figure (median taken).
const RUNS: usize = 15;

struct Bench {
    ctx: Context,
    pd: Pd,
    cq: Cq,
    qp: Qp,
    mr: Mr,
}

/// An RC QP of `depth` send and receive WRs, in RTS, connected to itself.
fn loopback_qp(ctx: &Context, pd: &Pd, cq: &Cq, depth: u32) -> Result<Qp, String> {
    loopback_qp_inline(ctx, pd, cq, depth, 0)
}

/// [`loopback_qp`] taking `inline` bytes inline in a send WR.
fn loopback_qp_inline(ctx: &Context, pd: &Pd, cq: &Cq, depth: u32, inline: u32) -> Result<Qp, String> {
    let mut qp = pd
        .create_qp(QpType::Rc, cq)
        .max_send_wr(depth)
        .max_recv_wr(depth)
        .max_inline_data(inline)
        .build()
        .map_err(|e| e.to_string())?;
    qp.connect(&itself(ctx, &qp)?, &ConnectParams::default()).map_err(|e| e.to_string())?;
    Ok(qp)
}

/// A QP as its own peer: its number, PSN 0, the port's default GID (the one `connect` sources
/// from).
fn itself(ctx: &Context, qp: &Qp) -> Result<RcPeer, String> {
    let (_, gid) = ctx.default_gid().ok_or("the bench device has no GID")?;
    Ok(RcPeer { qp_num: qp.qp_num(), psn: 0, gid })
}

/// Back to RESET (the rings start over) and connected to itself again.
fn reset(b: &mut Bench) -> Result<(), String> {
    reset_qp(&b.ctx, &mut b.qp)
}

/// [`reset`] of `qp`, a QP of `ctx`.
fn reset_qp(ctx: &Context, qp: &mut Qp) -> Result<(), String> {
    qp.modify(&ModifyQp::to(QpState::Reset)).map_err(|e| e.to_string())?;
    let me = itself(ctx, qp)?;
    qp.connect(&me, &ConnectParams::default()).map_err(|e| e.to_string())
}

fn setup(plain: bool) -> Result<Bench, String> {
    let cfg = umlx_sim::SimConfig::numbered(9);
    let ips = cfg.ips.clone();
    // Poll runs need real completions: the QP talks to itself (the port loops frames to its
    // own MAC back inside the adapter).
    let backend = if plain { SimBackend::with_plain_doorbells("bench", cfg) } else { SimBackend::new("bench", cfg) }
        .map_err(|e| e.to_string())?;
    let ctx = Context::open(backend, ips).map_err(|e| e.to_string())?;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(4 * OPS as u32, None).map_err(|e| e.to_string())?;
    let qp = loopback_qp(&ctx, &pd, &cq, OPS as u32)?;
    let mr = pd.alloc_mr(1 << 16, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).map_err(|e| e.to_string())?;
    Ok(Bench { ctx, pd, cq, qp, mr })
}

// Each kernel returns how many operations succeeded, stopping at the first failure.

#[inline(never)]
fn kernel_post_send_single(qp: &mut Qp, wr: &SendWr<'_>, n: usize) -> usize {
    for i in 0..n {
        if qp.post_send(std::slice::from_ref(black_box(wr))).is_err() {
            return i;
        }
    }
    n
}

#[inline(never)]
fn kernel_post_send_chain32(qp: &mut Qp, chain: &[SendWr<'_>], n: usize) -> usize {
    for i in 0..n / 32 {
        if qp.post_send(black_box(chain)).is_err() {
            return i * 32;
        }
    }
    n / 32 * 32
}

#[inline(never)]
fn kernel_post_recv(qp: &mut Qp, wr: &RecvWr<'_>, n: usize) -> usize {
    for i in 0..n {
        if qp.post_recv(std::slice::from_ref(black_box(wr))).is_err() {
            return i;
        }
    }
    n
}

#[inline(never)]
fn kernel_poll_cq(cq: &mut Cq, wc: &mut [Wc], batch: usize) -> usize {
    if batch == 1 {
        return kernel_poll_cq_one(cq, wc);
    }
    // Each poll fills the next `batch` entries of `wc` (checked by the caller afterwards).
    let mut got = 0;
    let mut spins = 0;
    while got < wc.len() && spins < 100_000_000 {
        let end = (got + batch).min(wc.len());
        // (No black_box: `poll` is not inlined here, so nothing can be hoisted across calls.)
        got += cq.poll(&mut wc[got..end]);
        spins += 1;
    }
    got
}

/// `ibv_poll_cq(cq, 1, &wc[i])` until it returns 1, for each entry in turn. Returns how many
/// entries were filled (all, or 0 if the CQ stalled).
#[inline(always)]
fn kernel_poll_cq_one(cq: &mut Cq, wc: &mut [Wc]) -> usize {
    let mut spins = 0u32;
    for w in wc.iter_mut() {
        while cq.poll(std::slice::from_mut(w)) == 0 {
            spins += 1;
            if spins == 100_000_000 {
                return 0;
            }
        }
    }
    wc.len()
}

#[inline(never)]
fn kernel_poll_cq_one_each(cqs: &mut [Cq], out: &mut [[Wc; 16]]) -> usize {
    // One poll with room for 16 on each CQ, each holding one CQE; returns the completions
    // (the caller checks that each poll filled its first entry and not its second).
    let mut got = 0;
    for (cq, wc) in cqs.iter_mut().zip(out.iter_mut()) {
        got += cq.poll(wc);
    }
    got
}

#[inline(never)]
fn kernel_poll_cq_empty(cq: &mut Cq, wc: &mut [Wc; 16], n: usize) -> usize {
    let mut empty = 0;
    for _ in 0..n {
        empty += (cq.poll(wc) == 0) as usize;
    }
    empty
}

/// What one kernel measures.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kernel {
    PostSend1,
    PostSend32,
    PostSendInline,
    PostRecv,
    Poll1,
    Poll16,
    Poll16One,
    PollEmpty,
    PollEmptyWire,
}

impl Kernel {
    const ALL: [Kernel; 9] = [
        Kernel::PostSend1,
        Kernel::PostSend32,
        Kernel::PostSendInline,
        Kernel::PostRecv,
        Kernel::Poll1,
        Kernel::Poll16,
        Kernel::Poll16One,
        Kernel::PollEmpty,
        Kernel::PollEmptyWire,
    ];

    fn key(self) -> &'static str {
        match self {
            Kernel::PostSend1 => "post_send_1",
            Kernel::PostSend32 => "post_send_chain32",
            Kernel::PostSendInline => "post_send_inline64",
            Kernel::PostRecv => "post_recv_1",
            Kernel::Poll1 => "poll_cq_batch1",
            Kernel::Poll16 => "poll_cq_batch16",
            Kernel::Poll16One => "poll_cq_room16_one",
            Kernel::PollEmpty => "poll_cq_empty",
            Kernel::PollEmptyWire => "poll_cq_empty_wire",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Kernel::PostSend1 => "post_send, 1 RDMA WRITE (1 SGE)",
            Kernel::PostSend32 => "post_send, chain of 32, per WR",
            Kernel::PostSendInline => "post_send, 1 SEND of 64 B inline",
            Kernel::PostRecv => "post_recv, 1 SGE",
            Kernel::Poll1 => "poll_cq per CQE, batch 1",
            Kernel::Poll16 => "poll_cq per CQE, batch 16",
            Kernel::Poll16One => "poll_cq, room for 16, 1 CQE there",
            Kernel::PollEmpty => "poll_cq, empty CQ",
            Kernel::PollEmptyWire => "poll_cq, empty CQ, a look at the wire",
        }
    }

    fn function(self) -> &'static str {
        match self {
            Kernel::PostSend1 | Kernel::PostSendInline => "kernel_post_send_single",
            Kernel::PostSend32 => "kernel_post_send_chain32",
            Kernel::PostRecv => "kernel_post_recv",
            Kernel::Poll1 | Kernel::Poll16 => "kernel_poll_cq",
            Kernel::Poll16One => "kernel_poll_cq_one_each",
            Kernel::PollEmpty | Kernel::PollEmptyWire => "kernel_poll_cq_empty",
        }
    }

    /// rdma-core 65 mlx5 baseline (instructions, single-threaded, -O2, hot caches, doorbell
    /// to plain memory) and our target.
    fn baseline(self) -> Option<(u32, u32)> {
        match self {
            Kernel::PostSend1 => Some((308, 100)),
            Kernel::PostSend32 => Some((188, 60)),
            // A latency test's WR (perftest's `ib_send_lat` sends inline): the driver's general
            // path, which the WRITE fast path above does not take. No baseline measured.
            Kernel::PostSendInline => None,
            Kernel::PostRecv => Some((120, 40)),
            Kernel::Poll1 => Some((180, 60)),
            Kernel::Poll16 => Some((110, 40)),
            Kernel::Poll16One => Some((204, 70)),
            Kernel::PollEmpty => Some((83, 25)),
            // A look at the automatic wire is the sim's, not the driver's: no baseline.
            Kernel::PollEmptyWire => None,
        }
    }
}

/// Runs one kernel `runs` times over `OPS` operations; returns ns per op of each run.
fn run_kernel(k: Kernel, runs: usize) -> Result<Vec<f64>, String> {
    if k == Kernel::Poll16One {
        return run_poll_one_each(runs);
    }
    if k == Kernel::PollEmptyWire {
        return run_poll_empty_wire(runs);
    }
    if k == Kernel::PostSendInline {
        return run_post_send_inline(runs);
    }
    let plain = !matches!(k, Kernel::Poll1 | Kernel::Poll16);
    let mut b = setup(plain)?;
    let sge = [b.mr.sge(0, 64)];
    let remote = Remote { addr: b.mr.addr() + 4096, rkey: b.mr.rkey() };
    let write = |signaled: bool| SendWr {
        wr_id: 7,
        op: SendOp::Write { data: Payload::Sges(&sge), remote, imm: None },
        flags: if signaled { SendFlags::SIGNALED } else { SendFlags(0) },
    };
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let ns = match k {
            Kernel::PostSend1 => {
                let wr = write(false);
                let t = Instant::now();
                let ok = kernel_post_send_single(&mut b.qp, &wr, OPS);
                let e = t.elapsed();
                check(ok, OPS, k)?;
                e
            }
            Kernel::PostSend32 => {
                let chain = [write(false); 32];
                let t = Instant::now();
                let ok = kernel_post_send_chain32(&mut b.qp, &chain, OPS);
                let e = t.elapsed();
                check(ok, OPS, k)?;
                e
            }
            Kernel::PostRecv => {
                let wr = RecvWr { wr_id: 9, sg_list: &sge };
                let t = Instant::now();
                let ok = kernel_post_recv(&mut b.qp, &wr, OPS);
                let e = t.elapsed();
                check(ok, OPS, k)?;
                e
            }
            Kernel::Poll1 | Kernel::Poll16 => {
                // Let the device complete OPS signaled WRITEs first (untimed).
                let wr = write(true);
                // Start from an empty CQ.
                let mut scratch = [Wc::default(); 16];
                while b.cq.poll(&mut scratch) > 0 {}
                let base = b.cq.device_produced().map_err(|e| e.to_string())?;
                for i in 1..=OPS / 32 {
                    let chain = [wr; 32];
                    b.qp.post_send(&chain).map_err(|e| e.to_string())?;
                    wait_produced(&b.cq, base.wrapping_add((i * 32) as u32))?;
                }
                let batch = if k == Kernel::Poll1 { 1 } else { 16 };
                let mut wc = vec![Wc::default(); OPS];
                let t = Instant::now();
                let got = kernel_poll_cq(&mut b.cq, &mut wc, batch);
                let e = t.elapsed();
                // Only successful completions of the WRITEs count: an error CQE measures nothing.
                let good = wc[..got]
                    .iter()
                    .filter(|w| (w.status, w.opcode, w.wr_id) == (WcStatus::Success, WcOpcode::RdmaWrite, 7))
                    .count();
                check(good, OPS, k)?;
                e
            }
            Kernel::PollEmpty => timed_empty_polls(&mut b.cq, k)?,
            Kernel::Poll16One | Kernel::PollEmptyWire | Kernel::PostSendInline => {
                unreachable!("a setup of its own")
            }
        };
        out.push(ns.as_nanos() as f64 / OPS as f64);
        reset(&mut b)?;
    }
    Ok(out)
}

/// `poll_cq_empty_wire`: empty polls of a CQ of a sim on the automatic wire (the loopback LAN),
/// as a two-process program's polls are while its peer works: each looks at the CQ, then takes
/// the wire's receive (one `recv` that finds nothing) in the polling thread. Its
/// instructions are the program's and the sim's user-space ones; the system call's kernel time
/// is in the ns only.
fn run_poll_empty_wire(runs: usize) -> Result<Vec<f64>, String> {
    let k = Kernel::PollEmptyWire;
    let ctx = Context::open_sim_on_wire(&umlx_verbs::simwire::SimWireOptions::default()).map_err(|e| e.to_string())?;
    let mut cq = ctx.create_cq(64, None).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        out.push(timed_empty_polls(&mut cq, k)?.as_nanos() as f64 / OPS as f64);
    }
    Ok(out)
}

/// `OPS` polls of the empty `cq` by `kernel_poll_cq_empty`, timed; each must find nothing.
fn timed_empty_polls(cq: &mut Cq, k: Kernel) -> Result<std::time::Duration, String> {
    let mut wc = [Wc::default(); 16];
    let t = Instant::now();
    let empty = kernel_poll_cq_empty(cq, &mut wc, OPS);
    let e = t.elapsed();
    check(empty, OPS, k)?;
    Ok(e)
}

/// `post_send_inline64`: unsignaled 64-byte SENDs, their data inline in the WQE, on a QP
/// connected to itself whose doorbells are plain stores (nothing is sent).
fn run_post_send_inline(runs: usize) -> Result<Vec<f64>, String> {
    let k = Kernel::PostSendInline;
    let b = setup(true)?;
    let mut qp = loopback_qp_inline(&b.ctx, &b.pd, &b.cq, OPS as u32, 64)?;
    let data = [0x5au8; 64];
    let wr = SendWr { wr_id: 13, op: SendOp::Send { data: Payload::Inline(&data), imm: None }, flags: SendFlags(0) };
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        let ok = kernel_post_send_single(&mut qp, &wr, OPS);
        let e = t.elapsed();
        check(ok, OPS, k)?;
        out.push(e.as_nanos() as f64 / OPS as f64);
        reset_qp(&b.ctx, &mut qp)?;
    }
    Ok(out)
}

/// CQs polled by one round of `poll_cq_room16_one` (each holds one CQE per round).
const EACH_CQS: usize = 128;

/// `poll_cq_room16_one`: `EACH_CQS` CQs, each the send CQ of its own QP connected to itself.
/// A round has every QP complete one signaled WRITE (untimed), then polls each CQ once with
/// room for 16 (timed). The first round is not counted: it fills each CQ's QP cache, as a
/// program's earlier polls would. `OPS / EACH_CQS` counted rounds make a run.
fn run_poll_one_each(runs: usize) -> Result<Vec<f64>, String> {
    let k = Kernel::Poll16One;
    let b = setup(false)?;
    let mut cqs = Vec::with_capacity(EACH_CQS);
    let mut qps = Vec::with_capacity(EACH_CQS);
    for _ in 0..EACH_CQS {
        let cq = b.ctx.create_cq(64, None).map_err(|e| e.to_string())?;
        qps.push(loopback_qp(&b.ctx, &b.pd, &cq, 16)?);
        cqs.push(cq);
    }
    let sge = [b.mr.sge(0, 64)];
    let wr = SendWr {
        wr_id: 11,
        op: SendOp::Write {
            data: Payload::Sges(&sge),
            remote: Remote { addr: b.mr.addr() + 4096, rkey: b.mr.rkey() },
            imm: None,
        },
        flags: SendFlags::SIGNALED,
    };
    let mut out = vec![[Wc::default(); 16]; EACH_CQS];
    let mut round = |timed: bool| -> Result<std::time::Duration, String> {
        let mut bases = Vec::with_capacity(EACH_CQS);
        for (qp, cq) in qps.iter_mut().zip(&cqs) {
            bases.push(cq.device_produced().map_err(|e| e.to_string())?);
            qp.post_send(std::slice::from_ref(&wr)).map_err(|e| e.to_string())?;
        }
        for (cq, base) in cqs.iter().zip(bases) {
            wait_produced(cq, base.wrapping_add(1))?;
        }
        out.iter_mut().for_each(|w| w[..2].fill(Wc::default()));
        if !timed {
            // Outside the kernel function, which callgrind counts.
            for (cq, w) in cqs.iter_mut().zip(out.iter_mut()) {
                cq.poll(w);
            }
            return Ok(std::time::Duration::ZERO);
        }
        let t = Instant::now();
        let one = kernel_poll_cq_one_each(&mut cqs, &mut out);
        let e = t.elapsed();
        {
            check(one, EACH_CQS, k)?;
            let good = out
                .iter()
                .filter(|w| (w[0].status, w[0].opcode, w[0].wr_id) == (WcStatus::Success, WcOpcode::RdmaWrite, 11))
                .filter(|w| w[1] == Wc::default())
                .count();
            check(good, EACH_CQS, k)?;
        }
        Ok(e)
    };
    round(false)?;
    let mut ns = Vec::with_capacity(runs);
    for _ in 0..runs {
        let mut total = std::time::Duration::ZERO;
        for _ in 0..OPS / EACH_CQS {
            total += round(true)?;
        }
        ns.push(total.as_nanos() as f64 / OPS as f64);
    }
    Ok(ns)
}

/// Waits until the device has written CQEs up to producer counter `target`.
fn wait_produced(cq: &Cq, target: u32) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let p = cq.device_produced().map_err(|e| e.to_string())?;
        if p.wrapping_sub(target) & 0x80_0000 == 0 {
            return Ok(());
        }
        if start.elapsed().as_secs() > 20 {
            return Err(format!("the device completed only up to CQE {p} of {target}"));
        }
        std::thread::sleep(std::time::Duration::from_micros(50));
    }
}

fn check(ok: usize, want: usize, k: Kernel) -> Result<(), String> {
    if ok != want {
        return Err(format!("{}: only {ok} of {want} operations succeeded", k.key()));
    }
    Ok(())
}

/// The median of `v` (the upper of the two middle values when `v` has an even length).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Instructions per op under callgrind, counting only inside the kernel function.
fn instructions(k: Kernel) -> Option<f64> {
    let exe = std::env::current_exe().ok()?;
    let out = std::env::temp_dir().join(format!("umlx-callgrind-{}-{}.out", std::process::id(), k.key()));
    let status = Command::new("valgrind")
        .arg("--tool=callgrind")
        .arg(format!("--callgrind-out-file={}", out.display()))
        .arg(format!("--toggle-collect=*{}*", k.function()))
        .arg("--quiet")
        .arg(&exe)
        .args(["bench", "datapath", "--kernel", k.key()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .ok()?;
    let text = std::fs::read_to_string(&out).ok();
    let _ = std::fs::remove_file(&out);
    if !status.success() {
        return None;
    }
    let total: f64 = text?
        .lines()
        .find_map(|l| l.strip_prefix("totals: ").or_else(|| l.strip_prefix("summary: ")))?
        .trim()
        .parse()
        .ok()?;
    // The child ran the kernel once over OPS operations.
    Some(total / OPS as f64)
}

/// The subcommands of `umlx bench`.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCmd {
    /// Data-path cost per operation: ns, and instructions (callgrind) where valgrind exists
    Datapath(DatapathArgs),
    /// The software ConnectX: WRITE throughput and memory in process, latencies between two
    /// processes, against a raw UDP reference measured here
    Sim(crate::simbench::SimBenchArgs),
    /// One side of the raw UDP ping-pong `bench sim` measures (a child process of it)
    #[command(name = "udp-echo", hide = true)]
    UdpEcho(crate::simbench::UdpEchoArgs),
}

/// The options of `umlx bench datapath`.
#[derive(clap::Args, Debug)]
pub struct DatapathArgs {
    /// One JSON object instead of the table
    #[arg(long)]
    pub json: bool,
    /// Count instructions with callgrind (the default when valgrind is installed)
    #[arg(long, conflicts_with = "no_instructions")]
    pub instructions: bool,
    /// Don't count instructions (ns only)
    #[arg(long)]
    pub no_instructions: bool,
    /// Run one kernel once (the child process callgrind measures)
    #[arg(long, value_name = "NAME", hide = true)]
    pub kernel: Option<String>,
}

/// Runs `umlx bench ...`.
pub fn run(c: &BenchCmd) -> Result<(), String> {
    match c {
        BenchCmd::Datapath(a) => run_datapath(a),
        BenchCmd::Sim(a) => crate::simbench::run(a),
        BenchCmd::UdpEcho(a) => crate::simbench::run_udp_echo(a),
    }
}

/// Runs `umlx bench datapath`.
fn run_datapath(a: &DatapathArgs) -> Result<(), String> {
    let json = a.json;
    if let Some(key) = &a.kernel {
        // Child mode for callgrind: run one kernel once.
        let k = Kernel::ALL.into_iter().find(|k| k.key() == key).ok_or("unknown kernel")?;
        run_kernel(k, 1)?;
        return Ok(());
    }
    let want_instr = !a.no_instructions
        && Command::new("valgrind").arg("--version").output().map(|o| o.status.success()).unwrap_or(false);
    let mut rows = Vec::new();
    for k in Kernel::ALL {
        let ns = median(run_kernel(k, RUNS)?);
        let instr = if want_instr { instructions(k) } else { None };
        rows.push((k, ns, instr));
    }
    if json {
        let items: Vec<String> = rows
            .iter()
            .map(|(k, ns, i)| {
                let (base, target) = match k.baseline() {
                    Some((b, t)) => (b.to_string(), t.to_string()),
                    None => ("null".into(), "null".into()),
                };
                format!(
                    "\"{}\": {{\"ns\": {:.1}, \"instructions\": {}, \"rdma_core_instructions\": {base}, \"target_instructions\": {target}}}",
                    k.key(),
                    ns,
                    i.map(|v| format!("{v:.1}")).unwrap_or_else(|| "null".into())
                )
            })
            .collect();
        println!("{{{}}}", items.join(", "));
    } else {
        println!(
            "{:<36} {:>9} {:>13} {:>17} {:>8}",
            "operation", "ns/op", "instructions", "rdma-core 65 mlx5", "target"
        );
        for (k, ns, i) in &rows {
            let (base, target) = match k.baseline() {
                Some((b, t)) => (b.to_string(), format!("<= {t}")),
                None => ("-".into(), "-".into()),
            };
            let i = i.map(|v| format!("{v:.0}")).unwrap_or_else(|| "n/a".into());
            println!("{:<36} {:>9.1} {:>13} {:>17} {:>8}", k.label(), ns, i, base, target);
        }
        if !want_instr {
            println!("(instructions: install valgrind to count them with callgrind)");
        }
    }
    Ok(())
}
