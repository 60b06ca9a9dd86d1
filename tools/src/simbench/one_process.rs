//! The in-process figures: two adapters on a perfect in-process fabric, RC WRITE streams
//! between them (64 bytes and 64 KiB, the data checked), several pairs or several QPs at once,
//! and the resident memory around the 64-byte run.

use super::*;

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
///
/// The next signaled WR is found once a chain, not by a `%` a WR: a division is tens of
/// cycles, a few percent of what the sims spend on a 64-byte WRITE, and the application's.
fn chain_of<'a>(chain: &mut Vec<SendWr<'a>>, op: SendOp<'a>, ids: std::ops::Range<u64>, signal: u64, count: u64) {
    chain.clear();
    let mut next_signaled = (ids.start / signal + 1) * signal - 1;
    for i in ids {
        let every = i == next_signaled;
        if every {
            next_signaled += signal;
        }
        let sig = every || i + 1 == count;
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
pub(super) fn rss_kib() -> Result<Rss, String> {
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

pub(super) fn in_process(msgs: u64, bulk_bytes: u64, say: &dyn Fn(&str)) -> Result<InProcess, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The WRs `chain_of` signals are every `signal`-th of the stream (WR `i` with
    /// `(i + 1) % signal == 0`) and its last, whatever range of it a chain covers.
    #[test]
    fn chains_signal_every_signalth_wr_and_the_streams_last() {
        let op = SendOp::Write { data: Payload::Inline(&[]), remote: Remote { addr: 0, rkey: 0 }, imm: None };
        let mut chain = Vec::new();
        for (signal, count) in [(1, 5), (4, 10), (32, 100), (7, 7), (5, 3)] {
            for start in 0..count {
                for end in start..=count {
                    chain_of(&mut chain, op, start..end, signal, count);
                    let ids: Vec<u64> = chain.iter().map(|w| w.wr_id).collect();
                    assert_eq!(ids, (start..end).collect::<Vec<_>>());
                    for w in &chain {
                        let want = (w.wr_id + 1) % signal == 0 || w.wr_id + 1 == count;
                        assert_eq!(
                            w.flags == SendFlags::SIGNALED,
                            want,
                            "WR {} of {start}..{end}, every {signal}",
                            w.wr_id
                        );
                    }
                }
            }
        }
    }
}
