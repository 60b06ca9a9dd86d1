//! Helpers the tools share: waiting for one completion, giving the CPU away while polling,
//! printing MACs.

use std::cell::Cell;
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

/// When a busy-polling loop gives its CPU away (`sched_yield`) while it waits for a completion.
///
/// Alone on its core, a poller that yields at every empty poll pays for a system call between
/// its looks (about 0.4 µs here: the median 64-byte `umlx perf send-lat` went from 5.15 to
/// 5.57 µs), so it yields only at every `every`th. But the two processes of a ping-pong on a
/// machine of two cores may share one for a while, each waiting for the other to run, and
/// then every turn of the ping-pong waits for the poller's next yield: with one in 64 polls,
/// 40 µs (a `write-lat` median of 39.9 µs, in one full `umlx bench sim` run of five). Two
/// yields in a row that took long show it: other threads ran meanwhile, so the CPU is shared,
/// and the poller yields at every empty poll for the next [`SHARED_POLLS`]. One long yield is
/// not enough: a sim's own threads, which wake every millisecond or so, and the machine's
/// noise make one every few milliseconds (50 - 80 in a 20,000-iteration `send-lat` of 0.1 s,
/// where the median yield took 0.55 µs), and yielding at every poll after each cost the
/// ping-pong what yielding now and then saves.
pub struct Yielder {
    every: u32,
    polls: Cell<u32>,
    /// Whether the last yield took long.
    last_long: Cell<bool>,
    /// Empty polls left in which the poller yields at each (the CPU was found shared).
    shared: Cell<u32>,
}

/// A yield that took at least this long let another thread run. Alone, a `sched_yield`
/// returns in about half a microsecond.
const SHARED_YIELD: Duration = Duration::from_micros(20);

/// Empty polls for which a poller that found its CPU shared yields at each.
pub const SHARED_POLLS: u32 = 4096;

impl Yielder {
    /// A poller that, alone on its CPU, yields at every `every`th empty poll.
    pub fn new(every: u32) -> Yielder {
        Yielder { every: every.max(1), polls: Cell::new(0), last_long: Cell::new(false), shared: Cell::new(0) }
    }

    /// One empty poll: yields the CPU when it is this poll's turn.
    pub fn idle(&self) {
        self.idle_with(std::thread::yield_now);
    }

    /// [`Yielder::idle`] with `give_away` for the yield.
    fn idle_with(&self, give_away: impl FnOnce()) {
        let shared = self.shared.get();
        if shared == 0 {
            let n = self.polls.get().wrapping_add(1);
            self.polls.set(n);
            if !n.is_multiple_of(self.every) {
                return;
            }
        } else {
            self.shared.set(shared - 1);
        }
        let t = Instant::now();
        give_away();
        let long = t.elapsed() >= SHARED_YIELD;
        if long && self.last_long.get() {
            self.shared.set(SHARED_POLLS);
        }
        self.last_long.set(long);
    }
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn fmt_mac(m: [u8; 6]) -> String {
    m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many of `polls` empty polls yielded, each yield taking `yield_takes`.
    fn yields(y: &Yielder, polls: u32, yield_takes: Duration) -> u32 {
        let n = Cell::new(0);
        for _ in 0..polls {
            y.idle_with(|| {
                n.set(n.get() + 1);
                if !yield_takes.is_zero() {
                    std::thread::sleep(yield_takes);
                }
            });
        }
        n.get()
    }

    #[test]
    fn a_poller_alone_yields_now_and_then_and_at_each_poll_while_its_cpu_is_shared() {
        let y = Yielder::new(64);
        // Alone: one yield in 64 empty polls.
        assert_eq!(yields(&y, 640, Duration::ZERO), 10);
        // One yield that took long is not enough; a quick one after it starts the count again.
        assert_eq!(yields(&y, 64, SHARED_YIELD * 2), 1);
        assert_eq!(yields(&y, 64, Duration::ZERO), 1);
        assert_eq!(yields(&y, 64, SHARED_YIELD * 2), 1);
        assert_eq!(yields(&y, 640, Duration::ZERO), 10);
        // Two in a row (other threads ran): from then on, a yield at each poll.
        assert_eq!(yields(&y, 128, SHARED_YIELD * 2), 2);
        assert_eq!(yields(&y, 100, Duration::ZERO), 100);
        // Two more long ones in a row restart the count; SHARED_POLLS polls with quick yields
        // end it.
        assert_eq!(yields(&y, 2, SHARED_YIELD * 2), 2);
        assert_eq!(yields(&y, SHARED_POLLS, Duration::ZERO), SHARED_POLLS);
        assert_eq!(yields(&y, 640, Duration::ZERO), 10);
    }
}
