//! Command delivery: mailbox chains of several blocks both ways, delivery errors (block
//! numbers, alignment, descriptor type, lengths), and signatures and tokens once
//! `cmdif_checksum` is enabled.

mod firmware_common;

use firmware_common::*;
use umlx_hwdesc::enums::{CmdOpcode, DeliveryStatus, HcaCapType, ManagePagesOpMod, PagesOpMod};
use umlx_hwdesc::ifc::*;
use umlx_hwdesc::plain::{cmd, cmd_layout, cmd_prot_block};
use zerocopy::FromBytes;

/// ENABLE_HCA, ISSI and the boot pages: enough for QUERY/SET_HCA_CAP.
fn booted() -> (SimDevice, CmdHost) {
    let dev = SimDevice::new(SimConfig::default());
    let mut host = CmdHost::new(&dev);
    host.attach();
    host.enable_hca().unwrap();
    host.set_issi(1).unwrap();
    host.satisfy_pages(PagesOpMod::BOOT).unwrap();
    (dev, host)
}

fn query_cap_input() -> Vec<u8> {
    cmd_input(CmdOpcode::QUERY_HCA_CAP, HcaCapType::GENERAL.op_mod(true), query_hca_cap_in::SIZE_BYTES)
}

#[test]
fn query_hca_cap_output_spans_eight_blocks() {
    let (_dev, mut host) = booted();
    let outlen = query_hca_cap_out::SIZE_BYTES;
    assert_eq!(outlen, 0x1010);
    let p = host.prepare(0, &query_cap_input(), outlen);
    assert_eq!((p.in_blocks, p.out_blocks), (0, 8));
    // Poison the output blocks: the device must write every data byte.
    for i in 0..8 {
        p.mailbox.as_ref().unwrap().fill(p.out_block_offset(i), cmd::CMD_DATA_BLOCK_SIZE, 0xa5);
    }
    host.post(&p);
    let out = host.poll(&p).expect("QUERY_HCA_CAP");
    assert_eq!(out.len(), 0x1010);
    let cap = cap_of(&out);
    assert_eq!(cmd_hca_cap::port_type.get(cap), 1);
    assert_eq!(cmd_hca_cap::log_max_qp.get(cap), 18);
    assert_eq!(cmd_hca_cap::device_frequency_khz.get(cap), 1_000_000);
    assert!(out[0x200..].iter().all(|&b| b == 0), "the unused part of the area is zero, not left over");
    // The chain links were kept: block numbers count up, `next` links the blocks.
    for i in 0..8 {
        let b = p.out_block(i);
        let b = cmd_prot_block::read_from_bytes(&b[..]).unwrap();
        assert_eq!(b.block_num.get(), i as u32);
        let next = b.next.get();
        assert_eq!(next, if i < 7 { p.out_block_iova(i + 1) } else { 0 });
    }
}

#[test]
fn set_hca_cap_input_spans_eight_blocks() {
    let (_dev, mut host) = booted();
    let mut cap = host.query_hca_cap(HcaCapType::GENERAL, true).unwrap();
    cmd_hca_cap::log_max_qp.set(&mut cap, 10);
    let mut input = cmd_input(CmdOpcode::SET_HCA_CAP, HcaCapType::GENERAL.op_mod(false), set_hca_cap_in::SIZE_BYTES);
    set_cap(&mut input, &cap);
    let p = host.prepare(0, &input, 16);
    assert_eq!((p.in_blocks, p.out_blocks), (8, 0));
    host.post(&p);
    host.poll(&p).expect("SET_HCA_CAP through 8 input blocks");
    assert_eq!(cmd_hca_cap::log_max_qp.get(&host.query_hca_cap(HcaCapType::GENERAL, true).unwrap()), 10);
}

#[test]
fn page_lists_span_several_blocks_both_ways() {
    let (dev, mut host) = booted();
    host.satisfy_pages(PagesOpMod::INIT).unwrap();
    // 300 extra pages: 2400 bytes of addresses = 5 input blocks.
    let given = host.give_pages(300).expect("GIVE through 5 input blocks");
    assert_eq!(dev.page_accounting().held, 288 + 300);
    // TAKE 300: the output is 16 + 2400 bytes = 5 output blocks, and exactly the surplus.
    let mut taken = host.take_pages(300).expect("TAKE through 5 output blocks");
    assert_eq!(taken.len(), 300);
    taken.sort_unstable();
    let mut all: Vec<u64> = given.clone();
    all.sort_unstable();
    // The firmware returns the highest addresses it holds: exactly the 300 last given.
    assert_eq!(taken, all);
    assert_eq!(dev.page_accounting().held, 288);
    assert!(host.take_pages(10).unwrap().is_empty(), "no surplus left");
}

#[test]
fn bad_block_number() {
    let (_dev, mut host) = booted();
    // Output chain.
    let p = host.prepare(0, &query_cap_input(), query_hca_cap_out::SIZE_BYTES);
    p.mailbox.as_ref().unwrap().write_u32_be(p.out_block_offset(3) + cmd_prot_block::block_num, 7);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::BAD_BLK_NUM_ERR);
    // Input chain.
    let cap = host.query_hca_cap(HcaCapType::GENERAL, true).unwrap();
    let mut input = cmd_input(CmdOpcode::SET_HCA_CAP, 0, set_hca_cap_in::SIZE_BYTES);
    set_cap(&mut input, &cap);
    let p = host.prepare(0, &input, 16);
    p.mailbox.as_ref().unwrap().write_u32_be(p.in_block_offset(2) + cmd_prot_block::block_num, 0);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::BAD_BLK_NUM_ERR);
}

#[test]
fn misaligned_mailbox_pointers() {
    let (dev, mut host) = booted();
    let entry = CmdHost::entry_offset(0);
    // Output pointer not on a 1 KiB boundary.
    let p = host.prepare(0, &query_cap_input(), query_hca_cap_out::SIZE_BYTES);
    host.queue().write_u64_be(entry + cmd_layout::out_ptr, p.out_block_iova(0) + 0x40);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::OUT_PTR_ALIGN_ERR);
    // A misaligned `next` further down the output chain.
    let p = host.prepare(0, &query_cap_input(), query_hca_cap_out::SIZE_BYTES);
    p.mailbox.as_ref().unwrap().write_u64_be(p.out_block_offset(4) + cmd_prot_block::next, p.out_block_iova(5) + 0x200);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::OUT_PTR_ALIGN_ERR);
    // Input pointer.
    let input = cmd_input(CmdOpcode::SET_HCA_CAP, 0, set_hca_cap_in::SIZE_BYTES);
    let p = host.prepare(0, &input, 16);
    host.queue().write_u64_be(entry + cmd_layout::in_ptr, p.in_block_iova(0) + 8);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::IN_PTR_ALIGN_ERR);
    // A missing input chain (pointer 0 while inlen needs blocks).
    let p = host.prepare(0, &input, 16);
    host.queue().write_u64_be(entry + cmd_layout::in_ptr, 0);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::IN_PTR_ALIGN_ERR);
    let s = dev.stats();
    assert_eq!(s.delivery_errors, 4);
}

#[test]
fn wrong_descriptor_type_and_lengths() {
    let (dev, mut host) = booted();
    let entry = CmdHost::entry_offset(0);
    let commands = dev.stats().commands;
    for ty in [0u8, 3, 8, 0xff] {
        let p = host.prepare(0, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
        host.queue().write_u8(entry + cmd_layout::type_, ty);
        host.post(&p);
        expect_delivery(host.poll(&p), DeliveryStatus::CMD_DESCR_ERR);
    }
    // Messages beyond what the firmware accepts (16 MiB).
    let p = host.prepare(0, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
    host.queue().write_u32_be(entry + cmd_layout::inlen, 16 << 20);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::IN_LENGTH_ERR);
    let p = host.prepare(0, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
    host.queue().write_u32_be(entry + cmd_layout::outlen, 16 << 20);
    host.post(&p);
    expect_delivery(host.poll(&p), DeliveryStatus::OUT_LENGTH_ERR);
    assert_eq!(dev.stats().commands, commands, "a delivery error executes nothing");
    // A valid NOP still works on the same slot.
    host.exec(CmdOpcode::NOP, 0, 16, 16, |_| {}).expect("NOP");
}

#[test]
fn signatures_ignored_while_checksum_is_off() {
    let (_dev, mut host) = booted();
    let entry = CmdHost::entry_offset(0);
    // Garbage signature, token and block signatures: accepted.
    let p = host.prepare(0, &query_cap_input(), query_hca_cap_out::SIZE_BYTES);
    host.queue().write_u8(entry + cmd_layout::sig, 0x5a);
    host.queue().write_u8(entry + cmd_layout::token, 0x77);
    host.post(&p);
    host.poll(&p).expect("no signature checks while cmdif_checksum is 0");
    // And the output blocks are not signed.
    let b = p.out_block(0);
    assert_eq!([b[cmd_prot_block::ctrl_sig], b[cmd_prot_block::sig]], [0, 0]);
}

fn enable_checksum(host: &mut CmdHost) {
    let mut cap = host.query_hca_cap(HcaCapType::GENERAL, true).unwrap();
    cmd_hca_cap::cmdif_checksum.set(&mut cap, 1);
    host.set_hca_cap(HcaCapType::GENERAL, &cap).expect("SET_HCA_CAP cmdif_checksum");
}

#[test]
fn signatures_required_once_checksum_is_enabled() {
    let (dev, mut host) = booted();
    enable_checksum(&mut host);
    // Unsigned commands now fail delivery.
    expect_delivery(host.exec(CmdOpcode::NOP, 0, 16, 16, |_| {}), DeliveryStatus::SIGNAT_ERR);
    expect_delivery(host.query_hca_cap(HcaCapType::GENERAL, true), DeliveryStatus::SIGNAT_ERR);
    // Signed ones pass: inline only ...
    host.sign = true;
    host.exec(CmdOpcode::NOP, 0, 16, 16, |_| {}).expect("signed NOP");
    // ... and with mailboxes both ways; the device signs the output blocks with the token.
    let p = host.prepare(0, &query_cap_input(), query_hca_cap_out::SIZE_BYTES);
    host.post(&p);
    let cap = host.poll(&p).expect("signed QUERY_HCA_CAP");
    assert_eq!(cmd_hca_cap::cmdif_checksum.get(cap_of(&cap)), 1);
    let token = host.queue().read_u8(CmdHost::entry_offset(0) + cmd_layout::token);
    assert_ne!(token, 0);
    for i in 0..p.out_blocks {
        let b = p.out_block(i);
        assert_eq!(b[cmd_prot_block::token], token, "output block {i} token");
        let ctrl = &b[cmd_prot_block::rsvd0..cmd_prot_block::sig];
        assert_eq!(ctrl.iter().fold(0u8, |a, x| a ^ x), 0xff, "output block {i} ctrl_sig");
        assert_eq!(b.iter().fold(0u8, |a, x| a ^ x), 0xff, "output block {i} sig");
    }
    // A GIVE through a signed input chain.
    host.satisfy_pages(PagesOpMod::INIT).expect("signed MANAGE_PAGES with an input chain");
    assert_eq!(dev.page_accounting().held, 288);
}

#[test]
fn signature_and_token_errors() {
    let (_dev, mut host) = booted();
    enable_checksum(&mut host);
    host.sign = true;
    let entry = CmdHost::entry_offset(0);
    let pages = host.alloc(2 * 4096);
    let give = |pages: &HostBuffer| {
        let mut i = cmd_input(CmdOpcode::MANAGE_PAGES, ManagePagesOpMod::GIVE.0, manage_pages_in::SIZE_BYTES + 16);
        manage_pages_in::input_num_entries.set(&mut i, 2);
        put_pas(&mut i, manage_pages_in::SIZE_BYTES, &[pages.iova(), pages.iova_at(4096)]);
        i
    };
    // A corrupted entry byte after signing.
    let p = host.prepare(0, &cmd_input(CmdOpcode::NOP, 0, 16), 16);
    host.sign(&p);
    host.queue().write_u8(entry + cmd_layout::in_ + 3, 1);
    host.queue().write_u8(entry + cmd_layout::status_own, cmd::CMD_OWNER_HW);
    host.ring(1);
    expect_delivery(host.poll(&p), DeliveryStatus::SIGNAT_ERR);
    // A corrupted data byte in an input block after signing.
    let p = host.prepare(0, &give(&pages), 16);
    host.sign(&p);
    p.mailbox.as_ref().unwrap().write_u8(p.in_block_offset(0) + cmd_prot_block::data + 3, 0xee);
    host.queue().write_u8(entry + cmd_layout::status_own, cmd::CMD_OWNER_HW);
    host.ring(1);
    expect_delivery(host.poll(&p), DeliveryStatus::SIGNAT_ERR);
    // A block token that differs from the entry's, with valid signatures.
    let p = host.prepare(0, &give(&pages), 16);
    host.sign(&p);
    let mb = p.mailbox.as_ref().unwrap();
    let off = p.in_block_offset(0);
    let mut b = mb.to_vec(off, cmd_prot_block::SIZE);
    b[cmd_prot_block::token] ^= 0x40;
    b[cmd_prot_block::ctrl_sig] = 0;
    b[cmd_prot_block::sig] = 0;
    b[cmd_prot_block::ctrl_sig] = signature(&b[cmd_prot_block::rsvd0..cmd_prot_block::ctrl_sig]);
    b[cmd_prot_block::sig] = signature(&b[..cmd_prot_block::sig]);
    mb.write(off, &b);
    host.queue().write_u8(entry + cmd_layout::status_own, cmd::CMD_OWNER_HW);
    host.ring(1);
    expect_delivery(host.poll(&p), DeliveryStatus::TOK_ERR);
    // The same command, signed properly, passes.
    host.run(&give(&pages), 16).expect("signed GIVE");
    // Turning the checksum off again (signed) restores unsigned operation.
    let mut cap = host.query_hca_cap(HcaCapType::GENERAL, true).unwrap();
    cmd_hca_cap::cmdif_checksum.set(&mut cap, 0);
    host.set_hca_cap(HcaCapType::GENERAL, &cap).unwrap();
    host.sign = false;
    host.exec(CmdOpcode::NOP, 0, 16, 16, |_| {}).expect("unsigned NOP after disabling the checksum");
}
