//! Helpers the tools share: waiting for one completion, how a polling loop spends an empty
//! poll ([`IdlePolls`]), printing MACs.

use std::cell::{Cell, OnceCell};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::result::Result;
use std::time::{Duration, Instant};
use umlx_verbs::*;

/// Polls `cq` until one completion arrives or `secs` pass.
pub fn wait_one(cq: &mut Cq, secs: u64) -> Result<Wc, String> {
    let mut wc = [Wc::default(); 1];
    let start = Instant::now();
    loop {
        if cq.poll(&mut wc) == 1 {
            return Ok(wc[0]);
        }
        if start.elapsed() > Duration::from_secs(secs) {
            return Err(format!("no completion on CQ {:#x} within {secs} s", cq.cqn()));
        }
        std::hint::spin_loop();
    }
}

/// How a tool's busy-polling loop spends an empty poll on the software ConnectX, whose threads,
/// and the peer process of a ping-pong, may share the loop's CPU: it gives the CPU away at each
/// empty poll (`sched_yield`) while others wait for that CPU, and spins, as perftest does,
/// while the CPU is its own. A yield costs an empty poll about 0.5 µs (Linux 6.18), so a loop
/// that yields on a CPU of its own finds what arrives later: 0.27 µs a one-way trip in a C
/// ping-pong over UDP loopback (3.34 against 3.07 µs, medians of seven alternated runs).
///
/// Others wait for the CPU when the polling thread's run delay (the time it spent runnable on
/// a run queue, `/proc/thread-self/schedstat`) grows: read every [`IDLE_CHECK`] or so, the loop
/// yields until the next reading if it grew by more than 1/16 of the time between the two.
/// The file is the thread's that polls first; where it cannot be read, the loop yields at
/// every empty poll. On a real adapter ([`IdlePolls::new`] with `false`) it spins.
///
/// Until the first two readings, a thread allowed on one CPU only yields, so that a loop that
/// shares that CPU does not spin through a scheduler time slice first; one allowed on more
/// spins, as perftest does. Two busy-polling processes that start on one CPU and yield to
/// each other from their first poll stay there: each has always run just now (cache-hot), so
/// the idle CPU takes neither for tens of milliseconds, and a ping-pong of a thousand
/// iterations (perftest's and `umlx perf`'s default) may run in that phase throughout
/// (`umlx perf send-lat -s 2 -n 1000` on two cores, 35 runs each: typical 4.8 - 10.9 µs,
/// median 7.1, yielding first; 4.5 - 6.9, median 5.8, spinning first).
pub struct IdlePolls {
    /// Whether the loop ever yields (the software ConnectX).
    enabled: bool,
    yielding: Cell<bool>,
    polls: Cell<u32>,
    /// The polling thread's `schedstat`, opened at its first empty poll (`None`: cannot be read).
    schedstat: OnceCell<Option<File>>,
    /// The last reading: when, and the run delay then (ns).
    last: Cell<Option<(Instant, u64)>>,
}

/// About how often [`IdlePolls`] reads the run delay.
pub const IDLE_CHECK: Duration = Duration::from_millis(1);

impl IdlePolls {
    /// For a loop on the software ConnectX (`sim`), or on an adapter.
    pub fn new(sim: bool) -> IdlePolls {
        IdlePolls::on_cpus(sim, std::thread::available_parallelism().map_or(1, |n| n.get()))
    }

    /// [`IdlePolls::new`] for a thread allowed on `cpus` CPUs: it yields until its first two
    /// readings when that is one.
    fn on_cpus(sim: bool, cpus: usize) -> IdlePolls {
        IdlePolls {
            enabled: sim,
            yielding: Cell::new(cpus <= 1),
            polls: Cell::new(0),
            schedstat: OnceCell::new(),
            last: Cell::new(None),
        }
    }

    /// What the loop does after a poll that found nothing: yield, or not.
    #[inline]
    pub fn idle(&self) {
        if !self.enabled {
            return;
        }
        let polls = self.polls.get().wrapping_add(1);
        self.polls.set(polls);
        // A yield takes at least half a microsecond, and may take a scheduler time slice:
        // a yielding loop looks at the clock at each empty poll, a spinning one every 64th.
        if self.yielding.get() || polls.is_multiple_of(64) {
            self.check();
        }
        if self.yielding.get() {
            std::thread::yield_now();
        }
    }

    /// Whether the loop yields at its empty polls now.
    #[cfg(test)]
    fn yielding(&self) -> bool {
        self.enabled && self.yielding.get()
    }

    #[cold]
    fn check(&self) {
        let now = Instant::now();
        if self.last.get().is_some_and(|(t, _)| now.duration_since(t) < IDLE_CHECK) {
            return;
        }
        let file = self.schedstat.get_or_init(|| File::open("/proc/thread-self/schedstat").ok());
        let Some(delay) = file.as_ref().and_then(run_delay_ns) else {
            self.yielding.set(true);
            return;
        };
        self.reading(now, delay);
    }

    /// Takes a reading of the run delay (`delay` ns at `now`): yielding until the next one if it
    /// grew by more than 1/16 of the time since the last.
    fn reading(&self, now: Instant, delay: u64) {
        if let Some((t, before)) = self.last.get() {
            let waited = delay.saturating_sub(before);
            let elapsed = now.duration_since(t).as_nanos() as u64;
            self.yielding.set(waited.saturating_mul(16) > elapsed);
        }
        self.last.set(Some((now, delay)));
    }
}

/// The run delay in a thread's `schedstat` (its second number: nanoseconds spent runnable but
/// waiting for a CPU).
fn run_delay_ns(file: &File) -> Option<u64> {
    let mut buf = [0u8; 96];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_idle_loop_yields_while_its_run_delay_grows_and_spins_while_it_does_not() {
        let idle = IdlePolls::on_cpus(true, 1);
        assert!(idle.yielding(), "on one CPU, yields until the first two readings");
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        idle.reading(ms(0), 1_000_000);
        idle.reading(ms(1), 1_010_000); // waited 10 µs of 1 ms
        assert!(!idle.yielding());
        idle.reading(ms(2), 1_500_000); // 490 µs of 1 ms: another thread had the CPU
        assert!(idle.yielding());
        idle.reading(ms(4), 1_600_000); // 100 µs of 2 ms: under 1/16
        assert!(!idle.yielding());
        idle.reading(ms(5), 1_700_000); // 100 µs of 1 ms: over 1/16
        assert!(idle.yielding());
        assert!(!IdlePolls::new(false).yielding(), "a loop on an adapter spins");
    }

    #[test]
    fn an_idle_loop_allowed_on_several_cpus_spins_until_a_reading_says_otherwise() {
        let idle = IdlePolls::on_cpus(true, 2);
        assert!(!idle.yielding(), "on two CPUs, spins from the first poll");
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        idle.reading(ms(0), 1_000_000);
        assert!(!idle.yielding(), "one reading decides nothing");
        idle.reading(ms(1), 1_500_000); // 500 µs of 1 ms waiting for the CPU
        assert!(idle.yielding());
    }

    #[test]
    fn an_idle_loop_that_shares_its_cpu_with_busy_threads_yields() {
        // The run delay is real: busy threads, two for each CPU, keep every CPU wanted.
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let busy: Vec<_> = (0..2 * cpus)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        let idle = IdlePolls::new(true);
        let start = Instant::now();
        let mut yielding_at_end = false;
        while start.elapsed() < Duration::from_millis(200) {
            idle.idle();
            yielding_at_end = idle.yielding();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        busy.into_iter().for_each(|t| t.join().unwrap());
        assert!(yielding_at_end, "the loop waited for a CPU, so it yields");
        if std::path::Path::new("/proc/thread-self/schedstat").exists() {
            assert!(idle.last.get().is_some(), "the run delay was read");
        }
    }
}
