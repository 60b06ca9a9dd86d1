//! `decode_pcap`: the lines and counts of `umlx wire decode` on real and crafted captures.

mod wire_common;

use std::io::Cursor;
use std::net::Ipv6Addr;
use std::time::Duration;

use umlx_wire::decode::{DecodeError, decode_pcap, decode_pcap_file};
use umlx_wire::packet::{Aeth, Bth, ExtHeaders, FrameBuilder, NakCode, Opcode, Reth, parse_frame};
use umlx_wire::pcap::PcapWriter;
use umlx_wire::{arp, icrc};
use wire_common::{PCAP_COUNTS, vectors_dir};

fn decode_to_string(bytes: &[u8]) -> (umlx_wire::decode::DecodeSummary, String) {
    let mut out = Vec::new();
    let s = decode_pcap(Cursor::new(bytes), &mut out).expect("decodes");
    (s, String::from_utf8(out).expect("utf-8"))
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn read2_lines_and_summary() {
    let mut out = Vec::new();
    let s = decode_pcap_file(vectors_dir().join("read2.pcap"), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    // 13 RoCE frames + the summary; the 3 TCP frames are skipped.
    assert_eq!(lines.len(), 14, "{text}");
    let line = |n: u32| {
        let prefix = format!("#{n} ");
        *lines.iter().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no line for frame {n}:\n{text}"))
    };
    assert!(lines.iter().all(|l| !l.starts_with("#1 ") && !l.starts_with("#2 ")));

    assert_eq!(
        line(13),
        "#13 v2 172.17.242.47 > 172.17.242.56 sport=63431 RC_RDMA_READ_REQUEST dqpn=0x000169 \
         psn=7010278 ackreq=1 se=0 m=1 padcnt=0 RETH va=0x55f4e59cedb0 rkey=0x1350d len=22 \
         payload=0 icrc=ok"
    );
    assert_eq!(
        line(14),
        "#14 v2 172.17.242.56 > 172.17.242.47 sport=63431 RC_RDMA_READ_RESPONSE_ONLY \
         dqpn=0x000139 psn=7010278 ackreq=0 se=0 m=1 padcnt=2 AETH ACK msn=3 credit=0x00 \
         payload=22 icrc=ok"
    );
    assert!(line(11).contains("RC_RDMA_WRITE_ONLY"));
    assert!(line(11).contains("padcnt=2 RETH va=0x55f4e59cedb0 rkey=0x1350d len=22 payload=22"));
    assert!(line(8).contains("RC_ACKNOWLEDGE") && line(8).contains("AETH ACK msn=1 "));
    assert!(line(12).contains("AETH ACK msn=2 "));
    assert!(line(4).contains("UD_SEND_ONLY dqpn=0x000001"));
    assert!(line(4).contains("DETH qkey=0x80010000 srcqp=0x000001 payload=256 icrc=ok"));

    assert_eq!(
        *lines.last().unwrap(),
        "summary: frames=16 rocev2=13 rocev1=0 non_roce=3 icrc_ok=13 icrc_bad=0 malformed=0 \
         capture_truncated=0 opcodes: RC_SEND_ONLY=2 RC_RDMA_WRITE_ONLY=1 \
         RC_RDMA_READ_REQUEST=1 RC_RDMA_READ_RESPONSE_ONLY=1 RC_ACKNOWLEDGE=3 UD_SEND_ONLY=5"
    );
    assert_eq!(
        (s.frames, s.rocev2, s.rocev1, s.non_roce, s.icrc_ok, s.icrc_bad, s.malformed),
        (16, 13, 0, 3, 13, 0, 0)
    );
    assert_eq!(s.opcode_count(Opcode::RC_ACKNOWLEDGE), 3);
    assert_eq!(s.opcode_count(Opcode::UD_SEND_ONLY), 5);
    assert_eq!(s.file_error, None);
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn every_vector_pcap_decodes_clean() {
    for &(name, v2, v1) in PCAP_COUNTS {
        let mut sink = Vec::new();
        let s = decode_pcap_file(vectors_dir().join(name), &mut sink).unwrap();
        assert_eq!((s.rocev2, s.rocev1), (v2, v1), "{name}");
        assert_eq!(s.icrc_ok, v2 + v1, "{name}");
        assert_eq!((s.icrc_bad, s.malformed, s.capture_truncated), (0, 0, 0), "{name}");
        assert_eq!(s.frames, s.rocev2 + s.rocev1 + s.non_roce, "{name}");
        assert_eq!(s.opcodes().map(|(_, n)| n).sum::<u64>(), v2 + v1, "{name}");
    }
}

#[test]
fn crafted_capture_counts_every_kind() {
    let a = [0x02, 0, 0, 0, 0, 1];
    let b = [0x02, 0, 0, 0, 0, 2];
    let v6a: Ipv6Addr = "2001:db8::1".parse().unwrap();
    let v6b: Ipv6Addr = "2001:db8::2".parse().unwrap();
    let ipa = [10, 0, 0, 1].into();
    let ipb = [10, 0, 0, 2].into();
    let mut frames: Vec<Vec<u8>> = Vec::new();

    // 1: a good WRITE_ONLY over IPv4.
    let reth = ExtHeaders { reth: Some(Reth { va: 0x1000, rkey: 0x42, dma_len: 5 }), ..ExtHeaders::default() };
    let w = FrameBuilder::ipv4(a, b, ipa, ipb, Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 0x11, 7))
        .with_ext(reth)
        .with_payload(b"hello")
        .to_vec()
        .unwrap();
    frames.push(w.clone());
    // 2: the same with a damaged payload byte: icrc=BAD.
    let mut bad = w.clone();
    bad[w.len() - 6] ^= 0xFF;
    frames.push(bad);
    // 3: a NAK over IPv6.
    let nak = ExtHeaders { aeth: Some(Aeth::nak(9, NakCode::PsnSeqErr)), ..ExtHeaders::default() };
    frames.push(
        FrameBuilder::ipv6(b, a, v6b, v6a, Bth::new(Opcode::RC_ACKNOWLEDGE, 0x22, 100)).with_ext(nak).to_vec().unwrap(),
    );
    // 4: an RNR NAK over RoCEv1.
    let rnr = ExtHeaders { aeth: Some(Aeth::rnr_nak(4, 14)), ..ExtHeaders::default() };
    frames.push(
        FrameBuilder::rocev1(b, a, &v6b.octets(), &v6a.octets(), Bth::new(Opcode::RC_ACKNOWLEDGE, 0x22, 101))
            .with_ext(rnr)
            .to_vec()
            .unwrap(),
    );
    // 5: an unknown opcode (ICRC fixed so only the opcode is wrong): MALFORMED.
    let mut unk = w.clone();
    unk[42] = 0x1F;
    let c = icrc::compute(&unk).unwrap();
    let n = unk.len();
    unk[n - 4..].copy_from_slice(&c.to_le_bytes());
    frames.push(unk);
    // 6: ARP: not RoCE.
    frames.push(arp::arp_request(a, ipa, ipb));
    // 7: a CNP.
    let cnp = FrameBuilder::ipv4(a, b, ipa, ipb, Bth { becn: true, ..Bth::new(Opcode::CNP, 0x33, 0) })
        .with_ext(ExtHeaders { cnp: Some(Default::default()), ..ExtHeaders::default() })
        .to_vec()
        .unwrap();
    assert!(parse_frame(&cnp).unwrap().icrc_ok);
    frames.push(cnp);

    let mut file = Vec::new();
    let mut wr = PcapWriter::new(&mut file).unwrap();
    for (i, f) in frames.iter().enumerate() {
        wr.write_record(Duration::from_millis(i as u64), f).unwrap();
    }
    // 8: a RoCE frame cut by a small snaplen.
    let mut cut = PcapWriter::with_options(Vec::new(), umlx_wire::pcap::TsResolution::Micro, 50, 1).unwrap();
    cut.write_record(Duration::ZERO, &w).unwrap();
    file.extend_from_slice(&cut.into_inner()[24..]);

    let (s, text) = decode_to_string(&file);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("#1 v2 10.0.0.1 > 10.0.0.2 sport=49152 RC_RDMA_WRITE_ONLY dqpn=0x000011 psn=7"));
    assert!(lines[0].ends_with("RETH va=0x1000 rkey=0x42 len=5 payload=5 icrc=ok"), "{}", lines[0]);
    assert!(lines[1].starts_with("#2 ") && lines[1].ends_with("icrc=BAD"), "{}", lines[1]);
    assert!(lines[2].starts_with("#3 v2 2001:db8::2 > 2001:db8::1 sport=49152 RC_ACKNOWLEDGE"));
    assert!(lines[2].contains("AETH NAK PSN_SEQ_ERR msn=9 payload=0 icrc=ok"), "{}", lines[2]);
    assert!(lines[3].starts_with("#4 v1 2001:db8::2 > 2001:db8::1 sport=- RC_ACKNOWLEDGE"));
    assert!(lines[3].contains("AETH RNR_NAK msn=4 timer=14"), "{}", lines[3]);
    assert_eq!(lines[4], "#5 MALFORMED unknown_opcode: unknown BTH opcode 0x1f");
    assert!(lines[5].starts_with("#7 v2 10.0.0.1 > 10.0.0.2 sport=49152 CNP dqpn=0x000033"));
    assert!(lines[5].contains(" becn CNP payload=0 icrc=ok"), "{}", lines[5]);
    assert!(lines[6].starts_with("#8 CAPTURE_TRUNCATED 50 of "), "{}", lines[6]);
    assert!(lines[7].starts_with(
        "summary: frames=8 rocev2=4 rocev1=1 non_roce=1 icrc_ok=4 icrc_bad=1 malformed=1 capture_truncated=1 opcodes:"
    ));
    assert_eq!(s.opcode_count(Opcode::RC_ACKNOWLEDGE), 2);
    assert_eq!(s.opcode_count(Opcode::CNP), 1);
    assert_eq!(lines.len(), 8);
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn damaged_files() {
    let full = std::fs::read(vectors_dir().join("read2.pcap")).unwrap();
    // Cut inside the 10th record: the first 9 are decoded, then a pcap error line.
    let mut off = 24;
    for _ in 0..9 {
        let incl = u32::from_le_bytes(full[off + 8..off + 12].try_into().unwrap()) as usize;
        off += 16 + incl;
    }
    let (s, text) = decode_to_string(&full[..off + 30]);
    assert_eq!(s.frames, 9);
    assert_eq!(s.rocev2, 6);
    assert!(text.contains("# pcap error: pcap file truncated in record 10"), "{text}");
    assert!(s.file_error.is_some());
    assert!(text.lines().last().unwrap().starts_with("summary: frames=9 "));

    let mut sink = Vec::new();
    assert!(matches!(decode_pcap(Cursor::new(b"hello world, not a pcap"), &mut sink), Err(DecodeError::Pcap(_))));
    let mut raw_ip = PcapWriter::with_options(Vec::new(), umlx_wire::pcap::TsResolution::Micro, 65535, 101).unwrap();
    raw_ip.write_record(Duration::ZERO, &[0x45]).unwrap();
    let bytes = raw_ip.into_inner();
    assert!(matches!(
        decode_pcap(Cursor::new(bytes), &mut sink),
        Err(DecodeError::UnsupportedLinkType { linktype: 101 })
    ));
    let e = decode_pcap_file("/nonexistent/x.pcap", &mut sink).unwrap_err();
    assert!(e.to_string().contains("/nonexistent/x.pcap"), "{e}");
}
