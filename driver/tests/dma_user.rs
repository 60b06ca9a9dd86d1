//! Registered user memory (`UserMemory`): pinned and mapped in place, reached only by copies,
//! and given back unchanged but for what was written.

use umlx_driver::dma::UserMemory;
use umlx_driver::{Error, Hca, HcaOptions, SimBackend};
use umlx_sim::SimConfig;

fn is_send_sync<T: Send + Sync>() {}

#[test]
fn user_memory_is_mapped_in_place_and_given_back() {
    is_send_sync::<UserMemory<SimBackend>>();
    let b = SimBackend::new("user", SimConfig::default()).unwrap();
    let h = Hca::open(b, HcaOptions::default()).unwrap();
    let data: Box<[u8]> = (0..10_000u32).map(|i| i as u8).collect();
    let addr = data.as_ptr() as u64;
    let m = UserMemory::new(h.dma_space(), data).unwrap();
    assert_eq!((m.addr(), m.len()), (addr, 10_000), "registered where it lies, not copied");
    // The MTT's view: whole pages from the one holding the first byte.
    let (base, page, pages) = m.pages();
    assert_eq!(m.iova() - base, addr % page as u64);
    assert!(m.iova() + 10_000 <= base + (page * pages) as u64);

    m.write(9_990, &[0xaa; 10]).unwrap();
    let mut out = [0u8; 12];
    m.read(9_988, &mut out).unwrap();
    assert_eq!(
        out,
        [(9_988u32 % 256) as u8, (9_989u32 % 256) as u8, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa, 0xaa]
    );
    let mut past = [0u8; 11];
    assert!(matches!(m.read(9_990, &mut past), Err(Error::OutOfBounds { offset: 9_990, len: 11, size: 10_000, .. })));
    assert!(matches!(m.write(usize::MAX, &[1]), Err(Error::OutOfBounds { .. })));

    let back = m.into_inner().expect("unmapped and returned");
    assert_eq!(back.as_ptr() as u64, addr);
    assert_eq!(&back[..4], &[0, 1, 2, 3]);
    assert_eq!(&back[9_990..], &[0xaa; 10]);
}

#[test]
fn external_memory_is_registered_in_place_and_stays_its_owners() {
    use umlx_driver::dma::ExternalBuffer;
    let b = SimBackend::new("external", SimConfig::default()).unwrap();
    let h = Hca::open(b, HcaOptions::default()).unwrap();
    let mut owner = vec![7u8; 5_000];
    let addr = owner.as_mut_ptr();
    // SAFETY: `owner` outlives `m` (dropped below before `owner` is read) and no reference into
    // it is used while `m` exists.
    let buf = unsafe { ExternalBuffer::new(std::ptr::NonNull::new(addr).unwrap(), owner.len()) };
    let m = UserMemory::external(h.dma_space(), buf).unwrap();
    assert!(m.is_external());
    assert_eq!((m.addr(), m.len()), (addr as u64, 5_000), "registered where it lies");
    m.write(100, b"in place").unwrap();
    let mut out = [0u8; 3];
    m.read(99, &mut out).unwrap();
    assert_eq!(out, [7, b'i', b'n']);
    assert!(m.into_inner().is_none(), "external memory is not handed back: it never left its owner");
    assert_eq!(&owner[100..108], b"in place");
    owner[0] = 1; // still the owner's to use and free
}
