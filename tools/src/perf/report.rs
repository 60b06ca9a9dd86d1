//! Results as perftest computes and prints them.
//!
//! Bandwidth: MiB/s are bytes / 2^20 per second (`--report_gbits`: bits / 10^9 per second);
//! the message rate is millions of messages per second. The average is over the whole run
//! (first post to last completion); the peak is the best "time per message" over every
//! stretch from a post to a later completion (perftest's search; not measured with `-N`,
//! duration runs, SEND receivers and runs of more than 20000 iterations).
//!
//! Latency: samples are the times between consecutive posts, halved for the ping-pong tests
//! (WRITE, SEND: a round trip carries two messages), taken whole for READ. They are sorted and
//! the two largest dropped; t_typical is the median, the percentiles index the sorted samples.

use super::engine::{BwRun, LatRun};
use super::exchange::BwReportWire;

/// The dashed line around result tables.
pub const RESULT_LINE: &str = "---------------------------------------------------------------------------------------";

/// Header of the bandwidth table.
pub fn bw_header(gbits: bool) -> String {
    let u = if gbits { "Gb/sec" } else { "MiB/sec" };
    format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]")
}

/// One row of the bandwidth table (6 decimals when a Gb/s average is below 0.1, as perftest).
pub fn bw_row(r: &BwReportWire, gbits: bool) -> String {
    if gbits && r.bw_avg < 0.1 {
        format!(
            " {:<7}    {}           {:<7.6}            {:<7.6}            {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    } else {
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t     {:<7.6}",
            r.size, r.iters, r.bw_peak, r.bw_avg, r.msg_rate
        )
    }
}

/// Header of the latency table (iterations).
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// Header of the latency table (duration).
pub const LAT_DUR_HEADER: &str = " #bytes        #iterations       t_avg[usec]    tps average";

/// Bytes per second in the report unit.
fn unit(gbits: bool) -> f64 {
    if gbits { 125_000_000.0 } else { (1u64 << 20) as f64 }
}

/// The bandwidth result of one run of `size`-byte messages.
pub fn bw_result(run: &BwRun, size: u64, gbits: bool) -> BwReportWire {
    let n = run.msgs;
    let secs = run.end_ns.saturating_sub(run.start_ns) as f64 / 1e9;
    let (bw_avg, msg_rate) =
        if secs > 0.0 { (size as f64 * n as f64 / secs / unit(gbits), n as f64 / secs / 1e6) } else { (0.0, 0.0) };
    let bw_peak = match peak_time_per_msg(run) {
        Some(t) if t > 0.0 => size as f64 / (t / 1e9) / unit(gbits),
        _ => 0.0,
    };
    BwReportWire { size, iters: n, bw_peak, bw_avg, msg_rate }
}

/// The smallest time per message (ns) over every stretch from the post of message `i` to a
/// completion covering message `j >= i`, `(t_completed[j] - t_posted[i]) / (j - i + 1)`.
fn peak_time_per_msg(run: &BwRun) -> Option<f64> {
    let n = run.tcompleted.len();
    if n == 0 || run.tposted.len() != n {
        return None;
    }
    // Completion indices: every cq_mod-th message, plus the partial ones at the ends.
    let done: Vec<(usize, u64)> =
        run.tcompleted.iter().enumerate().filter(|(_, t)| **t != u64::MAX).map(|(j, t)| (j, *t)).collect();
    // perftest searches every pair (it allows peaks up to 20000 messages); above 2·10^8 pairs
    // the start messages are sampled.
    let stride = ((n as u64 * done.len() as u64) / 200_000_000).max(1) as usize;
    let mut best = f64::INFINITY;
    let mut start = 0;
    for i in (0..n).step_by(stride) {
        while start < done.len() && done[start].0 < i {
            start += 1;
        }
        let tp = run.tposted[i];
        for &(j, tc) in &done[start..] {
            let t = tc.saturating_sub(tp) as f64 / (j - i + 1) as f64;
            if t < best {
                best = t;
            }
        }
    }
    best.is_finite().then_some(best)
}

/// Latency statistics of an iterations run (µs).
#[derive(Clone, Debug, PartialEq)]
pub struct LatStats {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample kept (the two largest are dropped; this is the next one).
    pub max: f64,
    /// Median.
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Computes the latency table row from the post times (`rtt_factor` 2 for ping-pongs).
pub fn lat_stats(run: &LatRun, size: u64, iters: u64, rtt_factor: f64) -> Option<LatStats> {
    let t = &run.tposted;
    if t.len() < 5 {
        return None;
    }
    let mut d: Vec<f64> = t.windows(2).map(|w| w[1].saturating_sub(w[0]) as f64 / 1000.0 / rtt_factor).collect();
    d.sort_by(|a, b| a.total_cmp(b));
    let m = d.len() - 2;
    let typical = if (m - 1) % 2 == 1 { (d[m / 2] + d[m / 2 - 1]) / 2.0 } else { d[m / 2] };
    let avg = d[..m].iter().sum::<f64>() / m as f64;
    let var = d[..m].iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / m as f64;
    let idx = |q: f64| ((m as f64 * q).ceil() as usize).min(d.len() - 1);
    Some(LatStats {
        size,
        iters,
        min: d[0],
        max: d[m],
        typical,
        avg,
        stdev: var.sqrt(),
        p99: d[idx(0.99)],
        p999: d[idx(0.999)],
    })
}

/// One row of the latency table.
pub fn lat_row(s: &LatStats) -> String {
    format!(
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        s.size, s.iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
    )
}

/// One row of the duration latency table: average latency (µs) and transactions per second.
pub fn lat_dur_row(run: &LatRun, size: u64, rtt_factor: f64) -> String {
    let secs = run.window_ns as f64 / 1e9;
    let (lat, tps) = if run.msgs > 0 && secs > 0.0 {
        (secs * 1e6 / rtt_factor / run.msgs as f64, run.msgs as f64 / secs)
    } else {
        (0.0, 0.0)
    };
    format!(" {:<7}       {}            {:<7.2}        {:<7.2}", size, run.msgs, lat, tps)
}
