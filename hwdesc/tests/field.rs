//! Field accessor tests: known positions and the "every other bit unchanged" property.
use umlx_hwdesc::ifc::{enable_hca_in, mbox_in, mbox_out};

#[test]
fn header_fields_sit_where_the_prm_says() {
    let mut buf = [0u8; 16];
    assert!(mbox_in::opcode.set(&mut buf, 0x104));
    assert!(mbox_in::op_mod.set(&mut buf, 0xabcd));
    assert_eq!(&buf[..8], &[0x01, 0x04, 0, 0, 0, 0, 0xab, 0xcd]);
    assert_eq!(mbox_in::opcode.get(&buf), 0x104);
    let mut out = [0u8; 16];
    mbox_out::status.set(&mut out, 0x05);
    mbox_out::syndrome.set(&mut out, 0x1234_5678);
    assert_eq!(&out[..8], &[0x05, 0, 0, 0, 0x12, 0x34, 0x56, 0x78]);
    enable_hca_in::embedded_cpu_function.set(&mut buf, 1);
    assert_eq!(buf[8], 0x80);
    assert_eq!(enable_hca_in::function_id.offset_bits, 0x50);
    // Both headers are 128 bits in the public mlx5_ifc.h: a 64-bit reserved tail follows.
    assert_eq!((mbox_in::SIZE_BITS, mbox_out::SIZE_BITS), (0x80, 0x80));
    assert_eq!((mbox_in::reserved_at_40.offset_bits, mbox_out::reserved_at_40.offset_bits), (0x40, 0x40));
}

#[test]
fn short_buffer_is_refused_not_overrun() {
    let mut buf = [0u8; 4];
    assert!(!mbox_out::syndrome.set(&mut buf, 1));
    assert_eq!(buf, [0; 4]);
    assert_eq!(mbox_out::syndrome.get(&buf), 0);
}
