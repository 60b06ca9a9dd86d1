//! Reclaiming the pollers' table of work-request rings (`QpTable`): a removed ring is freed at
//! once when no poll is under way, and only after the polls that could have found it. Alone in
//! its test binary: the registry of pollers is process-wide, so another test's polls would
//! be waited for too.

use std::sync::Arc;
use umlx_driver::datapath::{QpCache, QpTable, WrRing};

#[test]
fn removed_rings_are_freed_once_no_poll_can_hold_them() {
    let table = QpTable::default();
    assert!(table.reclaims(), "membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is available here");
    let mut cache = QpCache::default();
    let ring = Arc::new(WrRing::new(0x20, 1, 1));
    table.insert(ring.clone());
    table.insert_srq(Arc::new(WrRing::new(0x20, 1, 1)));
    assert_eq!(table.retained(), 2);
    // Outside a poll: removal frees at once (only the test's own reference is left).
    table.remove(0x20);
    assert_eq!((table.retained(), Arc::strong_count(&ring)), (1, 1));
    // Inside a poll that has the ring: removal waits for the poll to end.
    table.insert(ring.clone());
    let pinned = cache.pin(&table);
    let held = pinned.qp(0x20).unwrap();
    table.remove(0x20);
    assert_eq!(table.retained(), 2, "removed but still held by a poll");
    assert_eq!(Arc::strong_count(&ring), 2);
    assert_eq!(held.qpn, 0x20, "still readable inside the poll");
    drop(pinned);
    assert_eq!(table.reclaim(), 0, "the poll ended: freed");
    assert_eq!((table.retained(), Arc::strong_count(&ring)), (1, 1));
    // Replacing a ring under the same number retires the old one; a dropped cache is not
    // waited for.
    table.insert(ring.clone());
    let other = Arc::new(WrRing::new(0x20, 1, 1));
    std::mem::forget(cache.pin(&table)); // a poll that never ends...
    table.insert(other.clone());
    assert_eq!(Arc::strong_count(&ring), 2, "...keeps the replaced ring");
    drop(cache);
    assert_eq!(table.reclaim(), 0);
    assert_eq!(Arc::strong_count(&ring), 1, "until its poller is gone");
    table.remove_srq(0x20);
    table.remove(0x20);
    assert_eq!(table.retained(), 0);
}
