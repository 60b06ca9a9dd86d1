//! Property test over every declared PRM field: setting any field to any value leaves every
//! other bit of the buffer unchanged, and the value reads back (truncated to the field width).

use umlx_hwdesc::registry;
use umlx_hwdesc::{FieldKind, IfcStruct};

struct XorShift(u64);
impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn bit(buf: &[u8], i: usize) -> bool {
    buf[i / 8] & (0x80 >> (i % 8)) != 0
}

fn check_struct(s: &IfcStruct, rng: &mut XorShift) -> usize {
    let mut checked = 0;
    let size = s.size_bytes().max(1);
    for f in s.fields {
        if f.width_bits == 0 || f.width_bits > 64 || matches!(f.kind, FieldKind::Struct(_) | FieldKind::Array { .. }) {
            continue;
        }
        for _ in 0..8 {
            let mut buf: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
            let before = buf.clone();
            let v = rng.next();
            assert!(f.set(&mut buf, v), "{}.{} does not fit its own struct", s.name, f.name);
            let mask = if f.width_bits == 64 { u64::MAX } else { (1u64 << f.width_bits) - 1 };
            assert_eq!(f.get(&buf), v & mask, "{}.{} reads back", s.name, f.name);
            for i in 0..size * 8 {
                let inside = i >= f.offset_bits && i < f.end_bits();
                if !inside {
                    assert_eq!(bit(&buf, i), bit(&before, i), "{}.{} changed bit {i}", s.name, f.name);
                }
            }
            checked += 1;
        }
    }
    checked
}

#[test]
fn every_field_sets_only_its_own_bits() {
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut n = 0;
    for s in registry::IFC {
        n += check_struct(s, &mut rng);
    }
    assert!(n > 5000, "checked {n} field writes");
}

#[test]
fn fields_tile_each_struct_exactly() {
    for s in registry::IFC {
        let mut at = 0;
        for f in s.fields {
            assert_eq!(f.offset_bits, at, "{}.{} does not follow the previous field", s.name, f.name);
            at = f.end_bits();
        }
        assert_eq!(at, s.size_bits, "{} fields do not add up to its size", s.name);
    }
}

#[test]
fn nested_and_array_fields_compose() {
    use umlx_hwdesc::ifc::{ads, create_eq_in, create_qp_in, qpc};
    let f = create_qp_in::qpc.inner(qpc::primary_address_path).inner(ads::src_addr_index);
    assert_eq!(
        f.offset_bits,
        create_qp_in::qpc.offset_bits + qpc::primary_address_path.offset_bits + ads::src_addr_index.offset_bits
    );
    let mut buf = vec![0u8; create_eq_in::SIZE_BYTES];
    create_eq_in::event_bitmask.elem(0).set(&mut buf, 0xc00);
    assert_eq!(&buf[0x58..0x60], &[0, 0, 0, 0, 0, 0, 0x0c, 0x00]);
}

#[test]
fn registry_names_are_unique() {
    let mut names: Vec<&str> =
        registry::IFC.iter().map(|s| s.name).chain(registry::PLAIN.iter().map(|s| s.name)).collect();
    names.sort();
    let n = names.len();
    names.dedup();
    assert_eq!(n, names.len());
}
