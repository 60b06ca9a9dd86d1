//! Frames for the tests of a port's wires: not RoCE (a local experimental ethertype), so a
//! device counts them (`rx_not_roce`) and does nothing else with them.

/// IEEE 802 "local experimental ethertype 1".
const ETHERTYPE_LOCAL_EXPERIMENTAL: u16 = 0x88b5;

/// Frames of the given lengths from `src` to `dst`, each filled with bytes that say which
/// frame and which byte they are.
pub fn frames(lens: &[usize], dst: [u8; 6], src: [u8; 6]) -> Vec<Vec<u8>> {
    lens.iter()
        .enumerate()
        .map(|(n, &len)| {
            let mut f: Vec<u8> = (0..len).map(|i| (i * 7 + n * 13) as u8).collect();
            f[..6].copy_from_slice(&dst);
            f[6..12].copy_from_slice(&src);
            f[12..14].copy_from_slice(&ETHERTYPE_LOCAL_EXPERIMENTAL.to_be_bytes());
            f
        })
        .collect()
}

/// One minimum-size (60-byte) frame from `src` to `dst`.
#[allow(dead_code)] // not every test file that includes this module uses it
pub fn frame(dst: [u8; 6], src: [u8; 6]) -> Vec<u8> {
    frames(&[60], dst, src).remove(0)
}
