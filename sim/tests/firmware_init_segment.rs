//! The initialization segment: identity registers, queue geometry, `initializing`, the health
//! counter, the internal timer and `nic_interface`, and the doorbell while initializing.

mod firmware_common;

use firmware_common::*;
use std::time::{Duration, Instant};
use umlx_hwdesc::enums::{CmdOpcode, CmdStatus, HealthSyndrome, NicInterface};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::iseg;

fn slow_init(ms: u64) -> SimDevice {
    SimDevice::new(SimConfig { init_delay: Duration::from_millis(ms), ..Default::default() })
}

#[test]
fn identity_registers() {
    let dev = SimDevice::new(SimConfig::default());
    let (major, minor, sub) = SimConfig::default().fw_version;
    assert_eq!((major, minor, sub), (22, 39, 1002));
    let fw_rev = dev.bar0_read32(iseg::FW_REV as u64);
    assert_eq!(fw_rev & iseg::FW_REV_MAJOR_MASK, major as u32, "fw_rev bits 15:0 = major");
    assert_eq!(fw_rev >> iseg::FW_REV_MINOR_SHIFT, minor as u32, "fw_rev bits 31:16 = minor");
    let cmdif = dev.bar0_read32(iseg::CMDIF_REV_FW_SUB as u64);
    assert_eq!(cmdif >> iseg::CMDIF_REV_SHIFT, iseg::CMDIF_REV, "command interface revision");
    assert_eq!(cmdif & iseg::FW_SUB_MINOR_MASK, sub as u32, "firmware sub-minor");
    let fw_ver = dev.bar0_read32(iseg::HEALTH_FW_VER as u64);
    assert_ne!(fw_ver, 0xffff_ffff, "health fw_ver must not read as a dead function");
    assert_eq!(health_synd(&dev), HealthSyndrome(0), "healthy: synd 0");
    assert_eq!(dev.bar0_read32(iseg::HEALTH_RFR as u64) >> iseg::RFR_BIT, 0, "no recovery flow required");
    // PCI identity.
    let mut id = [0u8; 4];
    dev.config_read(0, &mut id).unwrap();
    assert_eq!(u16::from_le_bytes([id[0], id[1]]), 0x15b3);
    assert_eq!(u16::from_le_bytes([id[2], id[3]]), 0x101d);
}

#[test]
fn queue_geometry_and_address() {
    let dev = SimDevice::new(SimConfig::default());
    let log_sizes = |v: u32| (v >> iseg::LOG_CMDQ_SIZE_SHIFT & iseg::LOG_CMDQ_MASK, v & iseg::LOG_CMDQ_MASK);
    let v = dev.bar0_read32(iseg::CMDQ_ADDR_L_SZ as u64);
    assert_eq!(log_sizes(v), (5, 6), "log_cmdq_size, log_cmdq_stride");
    // The address reads back; the size bits are read-only.
    dev.bar0_write32(iseg::CMDQ_ADDR_H as u64, 0x1);
    let all_ones = (iseg::LOG_CMDQ_MASK << iseg::LOG_CMDQ_SIZE_SHIFT) | iseg::LOG_CMDQ_MASK;
    dev.bar0_write32(iseg::CMDQ_ADDR_L_SZ as u64, 0x0023_4000 | all_ones);
    assert_eq!(dev.bar0_read32(iseg::CMDQ_ADDR_H as u64), 1);
    let v = dev.bar0_read32(iseg::CMDQ_ADDR_L_SZ as u64);
    assert_eq!(v & iseg::CMDQ_ADDR_L_MASK, 0x0023_4000);
    assert_eq!(log_sizes(v), (5, 6), "log sizes are read-only");
}

#[test]
fn initializing_set_after_reset_then_cleared() {
    let dev = slow_init(200);
    let t0 = Instant::now();
    let init = |d: &SimDevice| d.bar0_read32(iseg::INITIALIZING as u64) >> iseg::INITIALIZING_BIT == 1;
    assert!(init(&dev), "initializing right after power-on");
    let host = CmdHost::new(&dev);
    assert!(host.wait_ready(Duration::from_secs(2)));
    assert!(t0.elapsed() >= Duration::from_millis(190), "cleared too early: {:?}", t0.elapsed());
    assert!(!init(&dev));
    // bit 30: firmware reset supported.
    assert_eq!(dev.bar0_read32(iseg::INITIALIZING as u64) >> iseg::FW_RESET_SUPPORTED_BIT & 1, 1);
    dev.reset();
    assert!(init(&dev), "initializing again right after a function-level reset");
    assert!(host.wait_ready(Duration::from_secs(2)));
}

#[test]
fn health_counter_and_internal_timer_advance() {
    let dev = SimDevice::new(SimConfig::default());
    let hc = |d: &SimDevice| d.bar0_read32(iseg::HEALTH_COUNTER as u64);
    let timer = |d: &SimDevice| {
        let h = d.bar0_read32(iseg::INTERNAL_TIMER_H as u64) as u64;
        let l = d.bar0_read32(iseg::INTERNAL_TIMER_L as u64) as u64;
        (h << 32) | l
    };
    let (c0, t0) = (hc(&dev), timer(&dev));
    std::thread::sleep(Duration::from_millis(5));
    let (c1, t1) = (hc(&dev), timer(&dev));
    assert_eq!(c0 >> iseg::HEALTH_COUNTER_SYNDROME_SHIFT, 0, "health syndrome byte 0 while healthy");
    assert_ne!(c1 & iseg::HEALTH_COUNTER_MASK, c0 & iseg::HEALTH_COUNTER_MASK, "health counter must advance");
    assert!(t1 > t0, "internal timer must advance ({t0} -> {t1})");
    assert!(t1 - t0 >= 4_000_000, "timer runs at 1 GHz: {} ticks in 5 ms", t1 - t0);
}

#[test]
fn nic_interface_is_writable() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    let v = dev.bar0_read32(iseg::CMDQ_ADDR_L_SZ as u64);
    assert_eq!(nic_interface(&dev), NicInterface::FULL, "nic_interface FULL after programming the queue");
    set_nic_interface(&dev, NicInterface::DISABLED);
    let v2 = dev.bar0_read32(iseg::CMDQ_ADDR_L_SZ as u64);
    assert_eq!(nic_interface(&dev), NicInterface::DISABLED, "nic_interface DISABLED reads back");
    assert_eq!(v2 & iseg::CMDQ_ADDR_L_MASK, v & iseg::CMDQ_ADDR_L_MASK, "queue address kept");
    set_nic_interface(&dev, NicInterface::SW_RESET);
    assert_eq!(nic_interface(&dev), NicInterface::SW_RESET, "3-bit field (SW_RESET = 7)");
}

#[test]
fn doorbell_ignored_while_initializing() {
    let dev = slow_init(300);
    let mut host = CmdHost::new(&dev);
    host.enable_bus_master();
    host.program_queue(); // allowed while initializing
    let p = host.prepare(0, &cmd_input(CmdOpcode::ENABLE_HCA, 0, 16), 16);
    host.post(&p);
    std::thread::sleep(Duration::from_millis(5));
    let (done, commands) = (host.is_done(0), dev.stats().commands);
    // The doorbell is handled when it is written: if the firmware is still initializing now, it
    // was then.
    assert!(
        dev.bar0_read32(iseg::INITIALIZING as u64) >> iseg::INITIALIZING_BIT == 1,
        "test needs the firmware still initializing"
    );
    assert!(!done, "a doorbell while initializing must not execute the command");
    assert_eq!(commands, 0);
    assert!(host.wait_ready(Duration::from_secs(2)));
    std::thread::sleep(Duration::from_millis(5));
    assert!(!host.is_done(0), "the dropped doorbell is not replayed when the firmware becomes ready");
    host.ring(1);
    host.poll(&p).expect("ENABLE_HCA after the firmware is ready");
    assert_eq!(dev.stats().commands, 1);
}

#[test]
fn commands_need_bus_mastering() {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    assert!(host.wait_ready(Duration::from_secs(2)));
    host.program_queue();
    assert!(host.wait_ready(Duration::from_secs(2)), "the firmware takes the queue address");
    let p = host.prepare(0, &cmd_input(CmdOpcode::ENABLE_HCA, 0, enable_hca_in::SIZE_BYTES), 16);
    host.post(&p);
    std::thread::sleep(Duration::from_millis(5));
    assert!(!host.is_done(0), "no DMA (so no completion) without bus mastering");
    assert_eq!(dev.stats().dma_without_bus_master, 1);
    assert_eq!(dev.stats().commands, 0);
    host.enable_bus_master();
    host.ring(1);
    host.poll(&p).expect("ENABLE_HCA once bus mastering is on");
    assert_eq!(dev.stats().commands, 1);
    let again = host.enable_hca();
    expect_fail(again, CmdOpcode::ENABLE_HCA, CmdStatus::BAD_SYS_STATE_ERR, sy::ALREADY_DONE);
}

#[test]
fn initializing_is_set_again_after_the_queue_address_is_written() {
    let dev = SimDevice::new(SimConfig { cmdq_init_delay: Duration::from_millis(300), ..Default::default() });
    let mut host = CmdHost::new(&dev);
    host.enable_bus_master();
    assert!(host.wait_ready(Duration::from_secs(2)));
    host.program_queue();
    let init = |d: &SimDevice| d.bar0_read32(iseg::INITIALIZING as u64) >> iseg::INITIALIZING_BIT == 1;
    assert!(init(&dev), "initializing again while the firmware takes the queue address");
    // A command posted now (a driver that does not wait) is dropped.
    let p = host.prepare(0, &cmd_input(CmdOpcode::ENABLE_HCA, 0, 16), 16);
    host.post(&p);
    assert!(init(&dev), "test needs the firmware still initializing");
    assert!(!host.is_done(0), "a doorbell before the firmware took the queue must not execute");
    assert_eq!(dev.stats().commands, 0);
    assert!(host.wait_ready(Duration::from_secs(2)));
    host.ring(1);
    host.poll(&p).expect("ENABLE_HCA once the queue is taken");
}

#[test]
fn the_init_segment_reports_command_timeouts() {
    let dev = SimDevice::new(SimConfig::default());
    let init_to = dev.bar0_read32(iseg::CMD_Q_INIT_TO as u64);
    let exec_to = dev.bar0_read32(iseg::CMD_EXEC_TO as u64);
    assert_ne!(init_to, 0, "cmd_q_init_to non-zero: timeouts are reported");
    // Unit (bits 31:29) 1 = seconds, value (bits 19:0): 2 s and 60 s.
    assert_eq!((init_to >> iseg::TO_MULTIPLIER_SHIFT, init_to & iseg::TO_VALUE_MASK), (1, 2));
    assert_eq!((exec_to >> iseg::TO_MULTIPLIER_SHIFT, exec_to & iseg::TO_VALUE_MASK), (1, 60));
    let quiet = SimDevice::new(SimConfig { cmd_q_init_to: 0, ..Default::default() });
    assert_eq!(quiet.bar0_read32(iseg::CMD_Q_INIT_TO as u64), 0);
}
