//! Send doorbells rung back to back on a UDP wire: their frames held for one datagram.
//!
//! Between processes, a frame's cost is its datagram's: a `sendto` on loopback carries the
//! datagram through the kernel's receive path and wakes the receiver, several microseconds
//! against the sim's fraction of one to build the frame. An application that posts one WR per
//! `ibv_post_send` (perftest's bandwidth tests do) rang a doorbell, and so sent a datagram,
//! per message: 64-byte `ib_write_bw` moved 0.12 - 0.17 M messages a second.
//!
//! A ConnectX takes doorbells as fast as they come and its wire carries their packets back to
//! back. Here the frames of a send doorbell rung right after the last one ([`TX_HOLD_GAP`]),
//! with no look at the wire between them ([`crate::port::Port::poll_wire`], which every empty
//! CQ poll makes), by an application that polled lately ([`TX_HOLD_POLLED_LATELY`]), wait in
//! the port for the next: the frames of a burst leave as one datagram (a bundle or a segmented
//! one, [`TX_HOLD_FRAMES`] and [`TX_HOLD_BYTES`] at most). A doorbell rung alone, the first of
//! a burst, and the reply of a ping-pong (rung a round trip after the last send at least) are
//! sent at once; so is everything of a program that never polls a CQ (one that watches memory).
//!
//! What is held leaves, before anything else the port sends, at the first of: the
//! application's next look at an empty CQ; a doorbell that is not held; any other send of the
//! port (an ACK, a retransmission, an ARP request); a CQ's arm doorbell or a command; the
//! wire's receive thread's next look once it has waited [`TX_HOLD_LONGEST`]; the device
//! engine's next look (1 ms apart, 10 ms while an application polls); the process's exit.

use std::time::{Duration, Instant};

/// Longest time from the end of a send doorbell's send to the next doorbell for the next to
/// count as rung back to back. An application posting one WR at a time rings a doorbell every
/// fraction of a microsecond; a ping-pong's next doorbell comes a round trip (two trips through
/// the kernel, 5 µs or more on loopback) after its last.
pub(crate) const TX_HOLD_GAP: Duration = Duration::from_micros(2);

/// How soon before a burst's first doorbell the application must have looked at the wire (an
/// empty CQ poll) for the burst's frames to be held: an application that polls will look again
/// when the burst ends, and that look sends them.
pub(crate) const TX_HOLD_POLLED_LATELY: Duration = Duration::from_millis(1);

/// Most frames held: one segmented datagram's.
pub(crate) const TX_HOLD_FRAMES: usize = 64;

/// Most bytes held (frames that would take more are sent, with those held, at once).
pub(crate) const TX_HOLD_BYTES: usize = 32 * 1024;

/// Longest the wire's receive thread leaves held frames waiting when it looks.
pub(crate) const TX_HOLD_LONGEST: Duration = Duration::from_micros(50);

/// The frames held, and what decides whether a doorbell's frames join them: kept under the
/// port's `tx` lock.
pub(crate) struct TxHold {
    /// The frames held, in the order they were built (with their integrity fields).
    frames: Vec<Vec<u8>>,
    /// Their bytes.
    bytes: usize,
    /// When the last send doorbell's frames were sent or held, and the wire's polls counted
    /// then (`PortInner::polls`).
    last_doorbell: Option<(Instant, u64)>,
    /// When a send doorbell last found the polls moved since the doorbell before it.
    polled_at: Option<Instant>,
}

impl TxHold {
    /// Nothing held, with room for [`TX_HOLD_FRAMES`].
    pub(crate) fn new() -> TxHold {
        TxHold { frames: Vec::with_capacity(TX_HOLD_FRAMES), bytes: 0, last_doorbell: None, polled_at: None }
    }

    /// Whether `frames`, those of a send doorbell rung at `now` with the wire's polls at
    /// `polls`, wait with those held (they are then taken into the hold): rung back to back,
    /// no poll since the last doorbell, a poll lately, and room for them. Otherwise they go
    /// now, after those held, and the caller notes when with [`TxHold::doorbell_sent`].
    pub(crate) fn hold(&mut self, frames: &mut Vec<Vec<u8>>, now: Instant, polls: u64) -> bool {
        let (back_to_back, polled) = match self.last_doorbell {
            Some((at, seen)) => (now.saturating_duration_since(at) <= TX_HOLD_GAP, seen != polls),
            None => (false, false),
        };
        if polled {
            self.polled_at = Some(now);
        }
        self.last_doorbell = Some((now, polls));
        let polled_lately = self.polled_at.is_some_and(|t| now.saturating_duration_since(t) <= TX_HOLD_POLLED_LATELY);
        if !back_to_back || polled || !polled_lately || self.frames.len() + frames.len() > TX_HOLD_FRAMES {
            return false;
        }
        let bytes: usize = frames.iter().map(Vec::len).sum();
        if self.bytes + bytes > TX_HOLD_BYTES {
            return false;
        }
        self.frames.append(frames);
        self.bytes += bytes;
        true
    }

    /// A send doorbell's frames (and those held before them) were sent, at `end`: the next
    /// doorbell counts from then.
    pub(crate) fn doorbell_sent(&mut self, end: Instant) {
        if let Some((at, _)) = &mut self.last_doorbell {
            *at = end;
        }
    }

    /// Whether frames are held.
    pub(crate) fn any(&self) -> bool {
        !self.frames.is_empty()
    }

    /// Takes the held frames, in the order they were held (whatever the caller leaves of them
    /// is dropped, and goes back to the allocator, not to `sim::buffers`).
    pub(crate) fn drain(&mut self) -> std::vec::Drain<'_, Vec<u8>> {
        self.bytes = 0;
        self.frames.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A clock for a test: `us(n)` is `n` µs after the call.
    fn micros_from_now() -> impl Fn(u64) -> Instant {
        let t0 = Instant::now();
        move |n| t0 + Duration::from_micros(n)
    }

    fn frames(n: usize, len: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| vec![i as u8; len]).collect()
    }

    #[test]
    fn a_burst_after_a_poll_is_held_from_its_second_doorbell_until_it_fills_a_datagram() {
        let us = micros_from_now();
        let mut h = TxHold::new();
        // The first doorbell ever, after polls: sent.
        assert!(!h.hold(&mut frames(1, 100), us(0), 5));
        h.doorbell_sent(us(8));
        // Polls since: the first of a burst, sent (and the poll noted).
        assert!(!h.hold(&mut frames(1, 100), us(20), 9));
        h.doorbell_sent(us(28));
        // Back to back, no poll between: held.
        let mut f = frames(1, 100);
        assert!(h.hold(&mut f, us(29), 9));
        assert!(f.is_empty(), "held frames are taken");
        for i in 0..62 {
            assert!(h.hold(&mut frames(1, 100), us(30 + i), 9), "doorbell {i} of the burst");
        }
        assert_eq!(h.frames.len(), 63);
        // Two more than a datagram takes: sent with those held.
        let mut two = frames(2, 100);
        assert!(!h.hold(&mut two, us(93), 9));
        assert_eq!(two.len(), 2, "frames not held stay with the caller");
    }

    #[test]
    fn a_doorbell_after_a_pause_or_a_poll_or_from_a_program_that_never_polls_is_sent() {
        let us = micros_from_now();
        let mut h = TxHold::new();
        assert!(!h.hold(&mut frames(1, 100), us(0), 1));
        assert!(!h.hold(&mut frames(1, 100), us(1), 2), "a poll moved the count: sent");
        h.doorbell_sent(us(2));
        assert!(h.hold(&mut frames(1, 100), us(3), 2), "back to back after a poll: held");
        // A ping-pong's reply comes a round trip after its request.
        assert!(!h.hold(&mut frames(1, 100), us(10), 2), "after a gap: sent");
        h.doorbell_sent(us(11));
        // Polled more than TX_HOLD_POLLED_LATELY ago: sent, however close the doorbells.
        let later = us(1) + TX_HOLD_POLLED_LATELY + Duration::from_micros(5);
        h.doorbell_sent(later);
        assert!(!h.hold(&mut frames(1, 100), later + Duration::from_micros(1), 2));

        // A program that never polls (the count never moves) has nothing held.
        let mut never = TxHold::new();
        for i in 0..100 {
            assert!(!never.hold(&mut frames(1, 100), us(i), 0), "doorbell {i}");
        }
    }

    #[test]
    fn frames_beyond_the_held_bytes_go_at_once() {
        let us = micros_from_now();
        let mut h = TxHold::new();
        assert!(!h.hold(&mut frames(1, 100), us(0), 0));
        assert!(!h.hold(&mut frames(1, 100), us(1), 1));
        assert!(h.hold(&mut frames(4, 4096), us(2), 1));
        assert!(h.hold(&mut frames(4, 4096), us(3), 1), "32 KiB exactly");
        assert!(!h.hold(&mut frames(1, 64), us(4), 1), "one byte more");
        assert_eq!(h.drain().count(), 8);
        assert!(!h.any());
        assert!(h.hold(&mut frames(1, 64), us(5), 1), "room again once released");
    }
}
