//! Event queues: the command-completion EQE and its MSI-X interrupt on an eventfd, one-shot
//! arming through the UAR, EQE owner bits across wrap-around, and overrun detection.

mod firmware_common;

use firmware_common::*;
use std::time::Duration;
use umlx_hwdesc::enums::{CmdOpcode, EventType, HealthSyndrome, PortChangeSubtype};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::{self, cmd, cmd_layout, eq as eq_consts, eqe_port_state};
use zerocopy::FromBytes;

const CMD_MASK: u64 = 1 << EventType::CMD.0;

/// A brought-up device with a UAR (no EQ yet).
fn initialized() -> (SimDevice, CmdHost, u32) {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.bring_up().unwrap();
    let uar = host.alloc_uar().unwrap();
    (dev, host, uar)
}

fn nop(host: &mut CmdHost) {
    host.exec(CmdOpcode::NOP, 0, 16, 16, |_| {}).expect("NOP");
}

#[test]
fn command_completion_eqe_and_interrupt() {
    let (dev, mut host, uar) = initialized();
    let efd = EventFd::new().unwrap();
    dev.set_irq_eventfd(0, Some(efd.fd())).unwrap();
    let mut eq = host.create_eq(uar, 4, CMD_MASK, 0).unwrap();
    // CREATE_EQ's own completion lands on the new EQ; the EQ is not armed yet, so no interrupt.
    let first = eq.poll().expect("CMD EQE of CREATE_EQ");
    assert_eq!(eqe_type(&first), EventType::CMD.0);
    assert_eq!(eqe(&first).owner, 0, "owner 0 on the first pass over the ring");
    assert_eq!(efd.try_read(), None, "an EQ that was never armed raises no interrupt");

    // Arm with the consumer index caught up: no interrupt yet.
    eq.doorbell(true);
    assert_eq!(efd.try_read(), None);
    // A command on slot 3: EQE with vector bit 3, and the interrupt.
    host.slot = 3;
    nop(&mut host);
    assert_eq!(efd.wait(Duration::from_secs(1)), Some(1), "MSI-X vector 0 fired once");
    let e = eq.poll().expect("CMD EQE");
    assert_eq!(eqe_type(&e), EventType::CMD.0);
    assert_eq!(cmd_vector(&e), 1 << 3, "vector = bitmask of the completed slot");
    assert_eq!(eqe(&e).owner & eq_consts::EQE_OWNER_MASK, 0);
    assert!(eq.poll().is_none(), "one EQE per completion");

    // Arming is one-shot: the next completion writes an EQE but raises nothing.
    nop(&mut host);
    assert_eq!(efd.try_read(), None, "not re-armed: no interrupt");
    // Updating the CI without arming (0x48) does not arm either.
    assert!(eq.poll().is_some());
    eq.doorbell(false);
    nop(&mut host);
    assert_eq!(efd.try_read(), None);
    // Arming while an EQE is already pending fires at once.
    eq.doorbell(true);
    assert_eq!(efd.wait(Duration::from_secs(1)), Some(1), "armed with pending EQEs: immediate interrupt");
    assert!(eq.poll().is_some());
    eq.doorbell(true);
    // Two slots in one doorbell: one EQE naming both.
    host.slot = 0;
    let p0 = host.prepare(0, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
    let p5 = host.prepare(5, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
    host.queue().write_u8(CmdHost::entry_offset(0) + cmd_layout::status_own, cmd::CMD_OWNER_HW);
    host.queue().write_u8(CmdHost::entry_offset(5) + cmd_layout::status_own, cmd::CMD_OWNER_HW);
    host.ring((1 << 0) | (1 << 5));
    host.poll(&p0).unwrap();
    host.poll(&p5).unwrap();
    let e = eq.poll().expect("one EQE for the doorbell");
    assert_eq!(cmd_vector(&e), (1 << 0) | (1 << 5));
    assert!(eq.poll().is_none());
    assert_eq!(efd.wait(Duration::from_secs(1)), Some(1));
    let s = dev.stats();
    assert_eq!(s.interrupts, 3);
    assert_eq!(s.bad_doorbells, 0);
}

#[test]
fn eqe_owner_bit_across_wrap_around() {
    let (dev, mut host, uar) = initialized();
    let mut eq = host.create_eq(uar, 2, CMD_MASK, 0).unwrap(); // 4 entries
    assert!(eq.poll().is_some());
    eq.doorbell(false);
    let n = 4 * 3 + 1; // more than two passes over the ring
    for k in 0..n {
        nop(&mut host);
        let ci = eq.ci;
        let off = eq.entry_offset(ci);
        let e = eq.poll().unwrap_or_else(|| panic!("EQE {k} (ci {ci}) not valid for software"));
        assert_eq!(eqe_type(&e), EventType::CMD.0);
        let pass = ((ci >> 2) & 1) as u8;
        assert_eq!(
            eqe(&e).owner & eq_consts::EQE_OWNER_MASK,
            pass,
            "owner bit of pass {} at index {}",
            ci >> 2,
            ci & 3
        );
        assert_eq!(eq.buf.read_u8(off + plain::eqe::owner) & eq_consts::EQE_OWNER_MASK, pass);
        assert!(eq.poll().is_none(), "the next entry still belongs to the device (stale owner)");
        eq.doorbell(false);
    }
    assert_eq!(eq.ci, 1 + n);
    let s = dev.stats();
    assert_eq!((s.eq_overruns, s.eqes), (0, 1 + n as u64));
    // QUERY_EQ reports the counters.
    let o = host
        .exec(CmdOpcode::QUERY_EQ, 0, query_eq_in::SIZE_BYTES, query_eq_out::SIZE_BYTES, |i| {
            query_eq_in::eq_number.set(i, eq.eqn as u64);
        })
        .expect("QUERY_EQ with the fixed-size output");
    let ctx = query_eq_out::eq_context_entry;
    assert_eq!(ctx.inner(eqc::log_eq_size).get(&o), 2);
    assert_eq!(ctx.inner(eqc::uar_page).get(&o), uar as u64);
    assert_eq!(ctx.inner(eqc::consumer_counter).get(&o), eq.ci as u64);
    // QUERY_EQ's own completion was posted after the query ran.
    assert_eq!(ctx.inner(eqc::producer_counter).get(&o), eq.ci as u64);
    assert_eq!(query_eq_out::event_bitmask.get(&o), CMD_MASK);
}

#[test]
fn eq_overrun_is_a_fatal_error_unless_ignored() {
    let (dev, mut host, uar) = initialized();
    let eq = host.create_eq(uar, 1, CMD_MASK, 0).unwrap(); // 2 entries, CREATE_EQ's EQE in one
    // The consumer index is never updated: one more EQE fits, the next overruns.
    nop(&mut host);
    assert_eq!(health_synd(&dev), HealthSyndrome(0), "full, not yet overrun");
    nop(&mut host); // completes, but its EQE overruns the EQ
    assert_eq!(dev.stats().eq_overruns, 1);
    assert_eq!(health_synd(&dev), HealthSyndrome::ASYNC_EQ_OVERRUN_ERR);
    assert_eq!(health_counter_synd(&dev), HealthSyndrome::ASYNC_EQ_OVERRUN_ERR);
    // The entries already written are intact; nothing was overwritten.
    for k in 0..2 {
        assert_eq!(eq.buf.read_u8(eq.entry_offset(k) + plain::eqe::owner) & eq_consts::EQE_OWNER_MASK, 0);
    }
    assert_eq!(cmd_vector(&eq.peek().unwrap()), 1, "entry 0 still holds CREATE_EQ's completion");
    // The device is dead: the next command never completes.
    host.timeout = Duration::from_millis(30);
    assert!(host.exec(CmdOpcode::NOP, 0, 16, 16, |_| {}).unwrap_err().timed_out);
}

#[test]
fn overrun_ignore_drops_events() {
    let (dev, mut host, uar) = initialized();
    // CREATE_EQ with `oi` set, by hand.
    let buf = host.alloc(4096);
    for i in 0..2 {
        buf.write_u8(i * eq_consts::EQE_SIZE + plain::eqe::owner, eq_consts::EQE_OWNER_INIT_VAL);
    }
    let ctx = create_eq_in::eq_context_entry;
    let o = host
        .exec(CmdOpcode::CREATE_EQ, 0, create_eq_in::SIZE_BYTES + 8, create_eq_out::SIZE_BYTES, |i| {
            ctx.inner(eqc::oi).set(i, 1);
            ctx.inner(eqc::log_eq_size).set(i, 1);
            ctx.inner(eqc::uar_page).set(i, uar as u64);
            create_eq_in::event_bitmask.elem(0).set(i, CMD_MASK);
            put_pas(i, create_eq_in::SIZE_BYTES, &[buf.iova()]);
        })
        .unwrap();
    let _eqn = create_eq_out::eq_number.get(&o);
    for _ in 0..5 {
        nop(&mut host);
    }
    let s = dev.stats();
    assert_eq!((s.eq_overruns, s.eqes), (0, 2), "overrun ignored: extra events dropped");
    assert_eq!(health_synd(&dev), HealthSyndrome(0), "still healthy");
}

#[test]
fn port_change_event_at_init_hca() {
    // An EQ subscribed to PORT_CHANGE before INIT_HCA is impossible (EQs need INIT_HCA), so
    // the link is brought down and up through PAOS.
    let (_dev, mut host, uar) = initialized();
    let mut eq = host.create_eq(uar, 3, 1 << EventType::PORT_CHANGE.0, 0).unwrap();
    use umlx_hwdesc::enums::PortStatus;
    use umlx_hwdesc::ifc::paos_reg;
    let paos = |host: &mut CmdHost, admin: PortStatus| {
        let mut reg = [0u8; paos_reg::SIZE_BYTES];
        paos_reg::local_port.set(&mut reg, 1);
        paos_reg::admin_status.set(&mut reg, admin.0 as u64);
        host.access_reg(umlx_hwdesc::enums::AccessRegId::PAOS, true, &reg).expect("PAOS write")
    };
    let r = paos(&mut host, PortStatus::DOWN);
    assert_eq!(paos_reg::oper_status.get(&r), PortStatus::DOWN.0 as u64, "oper status down");
    let e = eq.poll().expect("port change EQE");
    assert_eq!((eqe_type(&e), eqe(&e).sub_type), (EventType::PORT_CHANGE.0, PortChangeSubtype::DOWN.0));
    let (port, _) = eqe_port_state::read_from_prefix(&eqe(&e).data[..]).expect("a PORT_CHANGE payload");
    assert_eq!((port.port >> eq_consts::PORT_STATE_PORT_SHIFT) & eq_consts::PORT_STATE_PORT_MASK, 1, "port 1");
    paos(&mut host, PortStatus::UP);
    let e = eq.poll().expect("port change EQE");
    assert_eq!(eqe(&e).sub_type, PortChangeSubtype::ACTIVE.0);
    paos(&mut host, PortStatus::UP);
    assert!(eq.poll().is_none(), "no event without a change");
}

#[test]
fn ptys_reports_the_link_mode_while_the_link_is_up() {
    use umlx_hwdesc::enums::{AccessRegId, EthLinkMode, ExtEthLinkMode, PtysProto};
    use umlx_hwdesc::ifc::ptys_reg;
    let (_dev, mut host, _uar) = initialized();
    let mut q = [0u8; ptys_reg::SIZE_BYTES];
    ptys_reg::local_port.set(&mut q, 1);
    ptys_reg::proto_mask.set(&mut q, PtysProto::EN.0 as u64);
    let r = host.access_reg(AccessRegId::PTYS, false, &q).expect("PTYS read");
    let cr4 = 1u64 << EthLinkMode::BASE_100G_CR4.0;
    let ext = 1u64 << ExtEthLinkMode::CAUI_4_100G_CR4_KR4.0;
    assert_eq!(ptys_reg::eth_proto_capability.get(&r), cr4);
    assert_eq!(ptys_reg::eth_proto_oper.get(&r), cr4);
    assert_eq!(ptys_reg::ext_eth_proto_oper.get(&r), ext);
    // Down (PAOS admin down): nothing operates.
    let mut paos = [0u8; umlx_hwdesc::ifc::paos_reg::SIZE_BYTES];
    umlx_hwdesc::ifc::paos_reg::local_port.set(&mut paos, 1);
    umlx_hwdesc::ifc::paos_reg::admin_status.set(&mut paos, umlx_hwdesc::enums::PortStatus::DOWN.0 as u64);
    host.access_reg(AccessRegId::PAOS, true, &paos).expect("PAOS write");
    let r = host.access_reg(AccessRegId::PTYS, false, &q).expect("PTYS read");
    assert_eq!((ptys_reg::eth_proto_oper.get(&r), ptys_reg::eth_proto_capability.get(&r)), (0, cr4));
    // Writes, other ports and the IB protocol are refused with BAD_PARAM.
    let e = host.access_reg(AccessRegId::PTYS, true, &q).expect_err("PTYS write");
    assert!(format!("{e:?}").contains("BAD_PARAM"), "{e:?}");
    ptys_reg::local_port.set(&mut q, 2);
    assert!(host.access_reg(AccessRegId::PTYS, false, &q).is_err(), "port 2");
}

#[test]
fn a_pulled_cable_takes_the_link_down_with_port_change_events_until_it_is_back() {
    use umlx_hwdesc::enums::{AccessRegId, IbPortState, PortPhysicalState, PortStatus, VportAdminState, VportState};
    use umlx_hwdesc::ifc::paos_reg;
    let (dev, mut host, uar) = initialized();
    let mut eq = host.create_eq(uar, 3, 1 << EventType::PORT_CHANGE.0, 0).unwrap();
    let fabric = umlx_sim::fabric::Fabric::perfect();
    fabric.attach(&dev.port());
    assert!(eq.poll().is_none(), "a port put on a wire was up already: no event");
    let paos = |host: &mut CmdHost, admin: Option<PortStatus>| {
        let mut reg = [0u8; paos_reg::SIZE_BYTES];
        paos_reg::local_port.set(&mut reg, 1);
        if let Some(admin) = admin {
            paos_reg::admin_status.set(&mut reg, admin.0 as u64);
        }
        let r = host.access_reg(AccessRegId::PAOS, admin.is_some(), &reg).expect("PAOS");
        (paos_reg::admin_status.get(&r) as u8, paos_reg::oper_status.get(&r) as u8)
    };
    // (PAOS admin and oper status, QUERY_VPORT_STATE state and admin state, the vport
    // context's port state and physical state)
    let states = |host: &mut CmdHost| {
        let (admin, oper) = paos(host, None);
        let v = query_vport_state(host).expect("QUERY_VPORT_STATE");
        let c = query_hca_vport(host, 1).expect("QUERY_HCA_VPORT_CONTEXT");
        let ctx = query_hca_vport_context_out::hca_vport_context;
        (
            (PortStatus(admin), PortStatus(oper)),
            (
                VportState(query_vport_state_out::state.get(&v) as u8),
                VportAdminState(query_vport_state_out::admin_state.get(&v) as u8),
            ),
            (
                IbPortState(ctx.inner(hca_vport_context::port_state).get(&c) as u8),
                PortPhysicalState(ctx.inner(hca_vport_context::port_physical_state).get(&c) as u8),
            ),
        )
    };
    let up = (
        (PortStatus::UP, PortStatus::UP),
        (VportState::UP, VportAdminState::UP),
        (IbPortState::ACTIVE, PortPhysicalState::LINK_UP),
    );
    assert_eq!(states(&mut host), up);

    // The cable out: the link goes down with an event; the port stays administratively up.
    dev.port().disconnect();
    let e = eq.poll().expect("a port change EQE");
    assert_eq!((eqe_type(&e), eqe(&e).sub_type), (EventType::PORT_CHANGE.0, PortChangeSubtype::DOWN.0));
    let pulled = (
        (PortStatus::UP, PortStatus::DOWN),
        (VportState::DOWN, VportAdminState::UP),
        (IbPortState::DOWN, PortPhysicalState::POLLING),
    );
    assert_eq!(states(&mut host), pulled);
    dev.port().disconnect();
    assert!(eq.poll().is_none(), "no event without a change");

    // Administratively down and the cable back: the link stays down, with no event.
    paos(&mut host, Some(PortStatus::DOWN));
    fabric.attach(&dev.port());
    assert!(eq.poll().is_none(), "the link was down and stays down");
    let disabled = (
        (PortStatus::DOWN, PortStatus::DOWN),
        (VportState::DOWN, VportAdminState::DOWN),
        (IbPortState::DOWN, PortPhysicalState::DISABLED),
    );
    assert_eq!(states(&mut host), disabled);

    // Administratively up again: the link comes up.
    paos(&mut host, Some(PortStatus::UP));
    let e = eq.poll().expect("a port change EQE");
    assert_eq!(eqe(&e).sub_type, PortChangeSubtype::ACTIVE.0);
    assert_eq!(states(&mut host), up);

    // The cable out and back in while up: down, then active.
    dev.port().disconnect();
    fabric.attach(&dev.port());
    let subs: Vec<u8> = std::iter::from_fn(|| eq.poll()).map(|e| eqe(&e).sub_type).collect();
    assert_eq!(subs, [PortChangeSubtype::DOWN.0, PortChangeSubtype::ACTIVE.0]);
    assert_eq!(states(&mut host), up);
}

#[test]
fn a_port_brought_down_by_paos_sends_and_receives_nothing_until_it_is_brought_up() {
    use umlx_hwdesc::enums::{AccessRegId, PortStatus};
    use umlx_hwdesc::ifc::paos_reg;
    let (dev, mut host, _uar) = initialized();
    let dev_ip = SimConfig::default().ips[0];
    let fabric = umlx_sim::fabric::Fabric::perfect();
    fabric.attach(&dev.port());
    let paos = |host: &mut CmdHost, admin: PortStatus| {
        let mut reg = [0u8; paos_reg::SIZE_BYTES];
        paos_reg::local_port.set(&mut reg, 1);
        paos_reg::admin_status.set(&mut reg, admin.0 as u64);
        host.access_reg(AccessRegId::PAOS, true, &reg).expect("PAOS write");
    };
    // A host on the wire, which asks for the device's MAC with ARP: another sim's port (no
    // driver brought it up, so it passes frames), a new one each time (nothing learnt before).
    let host_port = |n: u8| {
        let d = SimDevice::new(SimConfig::numbered(n));
        fabric.attach(&d.port());
        (d.port(), d)
    };
    let peer_ip = |n: u8| SimConfig::numbered(n).ips[0];
    let (up, _d1) = host_port(1);
    assert_eq!(up.resolve(peer_ip(1), dev_ip, Duration::from_secs(5)), Some(dev.port().mac()), "up: ARP answered");

    paos(&mut host, PortStatus::DOWN);
    let before = dev.port().stats();
    let (down, _d2) = host_port(2);
    assert_eq!(down.resolve(peer_ip(2), dev_ip, Duration::from_millis(300)), None, "down: no answer");
    // The device's own request goes nowhere either.
    let heard = down.stats().rx_frames;
    assert_eq!(dev.port().resolve(dev_ip, peer_ip(2), Duration::from_millis(100)), None);
    assert_eq!(down.stats().rx_frames, heard, "nothing left the device's port");
    let after = dev.port().stats();
    assert!(after.drop_link_down > before.drop_link_down, "the requests were dropped: {after:?}");
    assert!(after.tx_drop_link_down > before.tx_drop_link_down, "its own request was dropped: {after:?}");
    assert_eq!(after.tx_frames, before.tx_frames, "nothing counted as sent");

    paos(&mut host, PortStatus::UP);
    let (again, _d3) = host_port(3);
    assert_eq!(again.resolve(peer_ip(3), dev_ip, Duration::from_secs(5)), Some(dev.port().mac()), "up again");
}
