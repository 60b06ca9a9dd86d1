//! The pcap reader and writer: round trips, both byte orders, both resolutions, damage.

mod wire_common;

use std::io::Cursor;
use std::time::Duration;

use umlx_wire::pcap::{Endian, LINKTYPE_ETHERNET, PcapError, PcapReader, PcapWriter, TsResolution};
use wire_common::{XorShift, pcap_frames};

fn records(bytes: &[u8]) -> Vec<Result<umlx_wire::pcap::PcapRecord, PcapError>> {
    PcapReader::new(Cursor::new(bytes)).unwrap().collect()
}

#[test]
fn writer_reader_round_trip_both_resolutions() {
    let mut rng = XorShift::new(7);
    let frames: Vec<Vec<u8>> = (0..50).map(|i| rng.bytes(i * 37 % 1500)).collect();
    let stamps: Vec<Duration> =
        (0..50u64).map(|i| Duration::new(1_700_000_000 + i, (i * 123_456_789 % 1_000_000_000) as u32)).collect();
    for res in [TsResolution::Micro, TsResolution::Nano] {
        let mut w = PcapWriter::with_options(Vec::new(), res, 65535, LINKTYPE_ETHERNET).unwrap();
        for (f, t) in frames.iter().zip(&stamps) {
            w.write_record(*t, f).unwrap();
        }
        w.flush().unwrap();
        let bytes = w.into_inner();
        let expected_magic: [u8; 4] = match res {
            TsResolution::Micro => [0xd4, 0xc3, 0xb2, 0xa1],
            TsResolution::Nano => [0x4d, 0x3c, 0xb2, 0xa1],
        };
        assert_eq!(bytes[..4], expected_magic);
        assert_eq!(bytes.len(), 24 + frames.iter().map(|f| 16 + f.len()).sum::<usize>());

        let reader = PcapReader::new(Cursor::new(&bytes)).unwrap();
        let h = *reader.header();
        assert_eq!((h.endian, h.resolution, h.version, h.snaplen, h.linktype), (Endian::Little, res, (2, 4), 65535, 1));
        let got: Vec<_> = reader.map(|r| r.unwrap()).collect();
        assert_eq!(got.len(), frames.len());
        for ((r, f), t) in got.iter().zip(&frames).zip(&stamps) {
            assert_eq!(&r.data, f);
            assert_eq!(r.orig_len as usize, f.len());
            assert!(!r.is_truncated());
            let want = match res {
                TsResolution::Micro => Duration::new(t.as_secs(), t.subsec_micros() * 1000),
                TsResolution::Nano => *t,
            };
            assert_eq!(r.timestamp, want);
        }
    }
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn real_file_round_trips_byte_for_byte() {
    // read2.pcap is a microsecond little-endian file with snaplen 10000: rewriting its
    // records with the same options reproduces it exactly.
    let path = wire_common::vectors_dir().join("read2.pcap");
    let original = std::fs::read(&path).unwrap();
    let reader = PcapReader::new(Cursor::new(&original)).unwrap();
    let snaplen = reader.header().snaplen;
    let mut w = PcapWriter::with_options(Vec::new(), TsResolution::Micro, snaplen, 1).unwrap();
    for r in reader {
        let r = r.unwrap();
        w.write_record(r.timestamp, &r.data).unwrap();
    }
    assert_eq!(w.into_inner(), original);
    assert_eq!(pcap_frames("read2.pcap").len(), 16);
}

/// A big-endian nanosecond file written by hand.
#[test]
fn big_endian_nanosecond_file() {
    let mut f = Vec::new();
    f.extend_from_slice(&0xA1B2_3C4Du32.to_be_bytes());
    f.extend_from_slice(&2u16.to_be_bytes());
    f.extend_from_slice(&4u16.to_be_bytes());
    f.extend_from_slice(&[0; 8]);
    f.extend_from_slice(&1500u32.to_be_bytes());
    f.extend_from_slice(&1u32.to_be_bytes());
    for (i, data) in [&b"abc"[..], &b"0123456789"[..]].iter().enumerate() {
        f.extend_from_slice(&(100 + i as u32).to_be_bytes());
        f.extend_from_slice(&999_999_999u32.to_be_bytes());
        f.extend_from_slice(&(data.len() as u32).to_be_bytes());
        f.extend_from_slice(&(data.len() as u32 + 5).to_be_bytes());
        f.extend_from_slice(data);
    }
    let reader = PcapReader::new(Cursor::new(&f)).unwrap();
    assert_eq!(reader.header().endian, Endian::Big);
    assert_eq!(reader.header().resolution, TsResolution::Nano);
    assert_eq!(reader.header().snaplen, 1500);
    let recs: Vec<_> = reader.map(|r| r.unwrap()).collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(recs[0].data, b"abc");
    assert_eq!(recs[0].timestamp, Duration::new(100, 999_999_999));
    assert_eq!(recs[1].data, b"0123456789");
    assert_eq!(recs[1].orig_len, 15);
    assert!(recs[1].is_truncated());

    // The same as a big-endian microsecond file.
    let mut us = f.clone();
    us[..4].copy_from_slice(&0xA1B2_C3D4u32.to_be_bytes());
    us[28..32].copy_from_slice(&250_000u32.to_be_bytes());
    let recs: Vec<_> = records(&us).into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(recs[0].timestamp, Duration::new(100, 250_000_000));
}

#[test]
fn snaplen_cuts_on_write() {
    let mut w = PcapWriter::with_options(Vec::new(), TsResolution::Micro, 64, 1).unwrap();
    w.write_record(Duration::ZERO, &[7u8; 100]).unwrap();
    let bytes = w.into_inner();
    let recs = records(&bytes);
    let r = recs[0].as_ref().unwrap();
    assert_eq!(r.data.len(), 64);
    assert_eq!(r.orig_len, 100);
    assert!(r.is_truncated());
}

#[test]
fn damaged_files_are_errors_not_panics() {
    let mut w = PcapWriter::new(Vec::new()).unwrap();
    w.write_record(Duration::from_secs(1), &[1u8; 40]).unwrap();
    w.write_record(Duration::from_secs(2), &[2u8; 40]).unwrap();
    let good = w.into_inner();
    assert_eq!(good.len(), 24 + 2 * 56);

    // Every truncation: either a header error, or records followed by a record error.
    for n in 0..good.len() {
        match PcapReader::new(Cursor::new(&good[..n])) {
            Err(PcapError::TruncatedHeader { have }) => assert_eq!(have, n),
            Err(e) => panic!("cut at {n}: {e}"),
            Ok(r) => {
                assert!(n >= 24);
                let recs: Vec<_> = r.collect();
                let body = n - 24;
                let complete = body / 56;
                let partial = body % 56 != 0;
                assert_eq!(recs.len(), complete + usize::from(partial), "cut at {n}");
                for rec in &recs[..complete] {
                    assert!(rec.is_ok());
                }
                if partial {
                    match recs.last().unwrap() {
                        Err(PcapError::TruncatedRecord { index, .. }) => {
                            assert_eq!(*index as usize, complete + 1)
                        }
                        other => panic!("cut at {n}: {other:?}"),
                    }
                }
            }
        }
    }

    assert!(matches!(
        PcapReader::new(Cursor::new(b"\x0a\x0d\x0d\x0a\x1c\0\0\0\x4d\x3c\x2b\x1a")),
        Err(PcapError::Pcapng)
    ));
    let mut bad = good.clone();
    bad[0] = 0;
    assert!(matches!(PcapReader::new(Cursor::new(&bad)), Err(PcapError::BadMagic { .. })));
    // A record claiming 4 GiB: refused without allocating it.
    let mut huge = good.clone();
    huge[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_le_bytes());
    let recs = records(&huge);
    assert_eq!(recs.len(), 1);
    assert!(matches!(recs[0], Err(PcapError::RecordTooLong { index: 1, .. })));
    // A record claiming 1 MiB in a short file: a truncation error.
    let mut lying = good.clone();
    lying[24 + 8..24 + 12].copy_from_slice(&(1u32 << 20).to_le_bytes());
    let recs = records(&lying);
    assert!(matches!(recs[0], Err(PcapError::TruncatedRecord { index: 1, .. })));

    // Random garbage after a valid header never panics.
    let mut rng = XorShift::new(99);
    for _ in 0..500 {
        let mut f = good[..24].to_vec();
        let n = rng.below(200) as usize;
        f.extend(rng.bytes(n));
        for r in records(&f) {
            if let Err(e) = r {
                assert!(!e.to_string().is_empty());
            }
        }
    }
}
