//! A port's receive queue: frames beyond its 65,536 waiting ones are dropped and counted, as a
//! NIC's receive buffer overflows, never lost silently.

use umlx_sim::port::Port;
mod wire_common;
use wire_common::frame;

#[test]
fn frames_beyond_a_full_receive_queue_are_counted_as_dropped() {
    // A port with no device behind it: nothing takes the frames it receives.
    let port = Port::new([0x02, 0, 0, 0, 0, 0x01], Vec::new());
    let frame = frame(port.mac(), [0x02, 0, 0, 0, 0, 0x02]);
    for _ in 0..65_536 + 10 {
        port.inject(frame.clone());
    }
    let st = port.stats();
    assert_eq!(st.drop_rx_overflow, 10, "{st:?}");
    assert_eq!(st.dropped(), 10);
    assert_eq!(st.rx_frames, 10, "only the dropped frames are counted as seen: the rest wait");
}

#[test]
fn a_batch_from_the_fabric_beyond_a_full_receive_queue_is_counted_as_dropped_too() {
    // One transmit of 65,546 frames, all to one port: the fabric queues them there as a batch.
    let fabric = umlx_sim::fabric::Fabric::perfect();
    let (sender, receiver) =
        (Port::new([0x02, 0, 0, 0, 0, 0x02], Vec::new()), Port::new([0x02, 0, 0, 0, 0, 0x01], Vec::new()));
    fabric.attach(&sender);
    fabric.attach(&receiver);
    let frame = frame(receiver.mac(), sender.mac());
    sender.transmit(vec![frame; 65_536 + 10]);
    let st = receiver.stats();
    assert_eq!(st.drop_rx_overflow, 10, "{st:?}");
    assert_eq!(st.rx_frames, 10, "only the dropped frames are counted as seen: the rest wait");
    assert_eq!(fabric.stats().delivered, 65_536 + 10, "{:?}", fabric.stats());
}
