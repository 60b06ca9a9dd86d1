//! `umlx perf` end to end: the built binary as server and client, each with its own software
//! ConnectX on an explicit loopback UDP wire, for each of the seven tests; the result tables
//! are parsed and checked. The wire formats of perftest's TCP exchange are checked byte for
//! byte against strings built by hand from perftest's formats.
//!
//! Every pair uses its own TCP port, UDP ports and sim indices, so test binaries may run side
//! by side; inside this binary the pairs take turns (each one is two busy-polling processes).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[allow(dead_code)]
#[path = "../src/perf/exchange.rs"]
mod exchange;

use exchange::{BwReportWire, DEST_MSG_LEN, Dest, NEGOTIATE_LEN, NEGOTIATE_LEN_MLX5DV, Negotiate};

const BIN: &str = env!("CARGO_BIN_EXE_umlx");
static TURN: Mutex<()> = Mutex::new(());

/// What one side printed and how it ended.
struct Side {
    ok: bool,
    stdout: String,
    stderr: String,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ok={}\n--- stdout\n{}--- stderr\n{}", self.ok, self.stdout, self.stderr)
    }
}

fn out_path(tag: &str, side: &str, stream: &str) -> PathBuf {
    std::env::temp_dir().join(format!("umlx-perf-test-{}-{tag}-{side}.{stream}", std::process::id()))
}

fn spawn(tag: &str, side: &str, args: &[String]) -> Child {
    let o = std::fs::File::create(out_path(tag, side, "out")).expect("create stdout file");
    let e = std::fs::File::create(out_path(tag, side, "err")).expect("create stderr file");
    Command::new(BIN).args(args).stdin(Stdio::null()).stdout(o).stderr(e).spawn().expect("spawn umlx")
}

fn finish(tag: &str, side: &str, ok: bool) -> Side {
    let read = |s| std::fs::read_to_string(out_path(tag, side, s)).unwrap_or_default();
    let r = Side { ok, stdout: read("out"), stderr: read("err") };
    let _ = std::fs::remove_file(out_path(tag, side, "out"));
    let _ = std::fs::remove_file(out_path(tag, side, "err"));
    r
}

/// Runs `umlx perf TEST` as server and client (pair number `id`: its own ports and sims), with
/// `server_extra` / `client_extra` after the common options.
// Both children are waited for: `try_wait` until they exit, `kill` + `wait` on timeout.
#[allow(clippy::zombie_processes)]
fn run_pair_with(test: &str, id: u16, server_extra: &[&str], client_extra: &[&str]) -> (Side, Side) {
    let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
    let tcp = 27180 + id;
    let (u1, u2) = (27300 + 2 * id, 27301 + 2 * id);
    let index = 140 + 2 * id as u8;
    let common = |local: u16, peer: u16, idx: u8| -> Vec<String> {
        ["perf", test, "-d", "sim", "--wire"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                format!("udp:127.0.0.1:{local},127.0.0.1:{peer}"),
                "--index".into(),
                idx.to_string(),
                "-p".into(),
                tcp.to_string(),
            ])
            .collect()
    };
    let tag = format!("{test}-{id}");
    let mut sargs = common(u1, u2, index);
    sargs.extend(server_extra.iter().map(|s| s.to_string()));
    let mut cargs = common(u2, u1, index + 1);
    cargs.extend(client_extra.iter().map(|s| s.to_string()));
    cargs.push("127.0.0.1".into());
    let mut server = spawn(&tag, "server", &sargs);
    std::thread::sleep(Duration::from_millis(100));
    let mut client = spawn(&tag, "client", &cargs);
    let deadline = Instant::now() + Duration::from_secs(180);
    let (mut s_ok, mut c_ok) = (None, None);
    while s_ok.is_none() || c_ok.is_none() {
        if s_ok.is_none() {
            s_ok = server.try_wait().expect("wait server").map(|st| st.success());
        }
        if c_ok.is_none() {
            c_ok = client.try_wait().expect("wait client").map(|st| st.success());
        }
        if Instant::now() > deadline {
            let _ = server.kill();
            let _ = client.kill();
            let _ = server.wait();
            let _ = client.wait();
            let s = finish(&tag, "server", false);
            let c = finish(&tag, "client", false);
            panic!("{tag}: timed out\nserver: {s:?}\nclient: {c:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (finish(&tag, "server", s_ok == Some(true)), finish(&tag, "client", c_ok == Some(true)))
}

fn run_pair(test: &str, id: u16, extra: &[&str]) -> (Side, Side) {
    run_pair_with(test, id, extra, extra)
}

/// The rows of the table under the header line containing `#bytes`, as numbers.
fn table(out: &str) -> Vec<Vec<f64>> {
    let mut rows = Vec::new();
    let mut inside = false;
    for l in out.lines() {
        if l.contains("#bytes") {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if l.starts_with("----") {
            break;
        }
        let nums: Option<Vec<f64>> = l.split_whitespace().map(|w| w.parse().ok()).collect();
        if let Some(n) = nums
            && !n.is_empty()
        {
            rows.push(n);
        }
    }
    rows
}

fn both_ok(test: &str, s: &Side, c: &Side) {
    assert!(s.ok && c.ok, "{test}: server {s:?}\nclient {c:?}");
}

/// A bandwidth row: size, iterations, peak, average, message rate.
fn check_bw_row(r: &[f64], size: f64, iters: f64, peak: bool) {
    assert_eq!(r.len(), 5, "bandwidth row {r:?}");
    assert_eq!(r[0], size, "size in {r:?}");
    assert_eq!(r[1], iters, "iterations in {r:?}");
    assert!(r[3] > 0.0 && r[3].is_finite(), "average bandwidth in {r:?}");
    assert!(r[4] > 0.0 && r[4].is_finite(), "message rate in {r:?}");
    if peak {
        assert!(r[2] > 0.0 && r[2].is_finite(), "peak bandwidth in {r:?}");
    } else {
        assert_eq!(r[2], 0.0, "no peak expected in {r:?}");
    }
    // MiB/s = bytes per second / 2^20 and Mpps = messages per second / 10^6.
    let implied = r[4] * 1e6 * size / (1u64 << 20) as f64;
    assert!((implied - r[3]).abs() <= 0.02 * r[3] + 0.01, "average {} vs message rate {} in {r:?}", r[3], r[4]);
}

/// A latency row: size, iterations, min, max, typical, average, stdev, 99%, 99.9%.
fn check_lat_row(r: &[f64], size: f64, iters: f64) {
    assert_eq!(r.len(), 9, "latency row {r:?}");
    assert_eq!((r[0], r[1]), (size, iters), "{r:?}");
    let (min, max, typ, avg, sd, p99, p999) = (r[2], r[3], r[4], r[5], r[6], r[7], r[8]);
    assert!(min > 0.0, "{r:?}");
    assert!(min <= typ && typ <= max && min <= avg && avg <= max, "{r:?}");
    assert!(typ <= p99 && p99 <= p999 && p999 <= max, "{r:?}");
    assert!(sd >= 0.0 && sd.is_finite(), "{r:?}");
}

#[test]
fn write_bw() {
    let (s, c) = run_pair("write-bw", 0, &["-n", "200", "-s", "4096"]);
    both_ok("write-bw", &s, &c);
    let (ct, st) = (table(&c.stdout), table(&s.stdout));
    assert_eq!(ct.len(), 1, "{c:?}");
    check_bw_row(&ct[0], 4096.0, 200.0, true);
    // The passive server prints the client's result, received over TCP.
    assert_eq!(st, ct, "server {s:?}");
    assert!(c.stdout.contains("BW peak[MiB/sec]"), "{c:?}");
    assert!(c.stdout.contains(" local address: LID 0000 QPN 0x"), "{c:?}");
    assert!(c.stdout.contains(" RKey 0x") && c.stdout.contains(" VAddr 0x"), "{c:?}");
    assert!(c.stdout.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:77:00:"), "{c:?}");
    // No -x: each side picked the RoCEv2 GID of its IPv4 address and said so.
    let auto = "), chosen automatically; -x overrides";
    assert!(s.stdout.contains(&format!("local GID index 1 (RoCEv2 ::ffff:10.77.0.141{auto}")), "{s:?}");
    assert!(c.stdout.contains(&format!("local GID index 1 (RoCEv2 ::ffff:10.77.0.142{auto}")), "{c:?}");
    assert!(c.stdout.contains(" GID index       : 1"), "{c:?}");
}

#[test]
fn an_explicit_gid_index_wins() {
    // -x 0 on both sides: the link-local IPv6 GIDs, and no line about an automatic choice.
    let (s, c) = run_pair("send-lat", 14, &["-n", "50", "-x", "0"]);
    both_ok("send-lat -x 0", &s, &c);
    for side in [&s, &c] {
        assert!(side.stdout.contains(" GID index       : 0"), "{side:?}");
        assert!(side.stdout.contains(" GID: 254:128:"), "the fe80:: GID: {side:?}");
        assert!(!side.stdout.contains("chosen automatically"), "{side:?}");
    }
}

#[test]
fn send_bw() {
    let (s, c) = run_pair("send-bw", 1, &["-n", "200", "-s", "1024"]);
    both_ok("send-bw", &s, &c);
    let (ct, st) = (table(&c.stdout), table(&s.stdout));
    assert_eq!((ct.len(), st.len()), (1, 1), "{s:?}\n{c:?}");
    check_bw_row(&ct[0], 1024.0, 200.0, true);
    // The receiver measures what arrives: no peak.
    check_bw_row(&st[0], 1024.0, 200.0, false);
    assert!(s.stdout.contains(" RX depth        : 200"), "{s:?}");
}

#[test]
fn read_bw() {
    let (s, c) = run_pair("read-bw", 2, &["-n", "200", "-s", "2048"]);
    both_ok("read-bw", &s, &c);
    let (ct, st) = (table(&c.stdout), table(&s.stdout));
    assert_eq!(ct.len(), 1, "{c:?}");
    check_bw_row(&ct[0], 2048.0, 200.0, true);
    assert_eq!(st, ct, "{s:?}");
    assert!(c.stdout.contains(" OUT 0x"), "{c:?}");
}

#[test]
fn atomic_bw() {
    let (s, c) = run_pair("atomic-bw", 3, &["-n", "200"]);
    both_ok("atomic-bw", &s, &c);
    let ct = table(&c.stdout);
    assert_eq!(ct.len(), 1, "{c:?}");
    check_bw_row(&ct[0], 8.0, 200.0, true);
    assert_eq!(table(&s.stdout), ct, "{s:?}");
    assert!(c.stdout.contains("Atomic FETCH_AND_ADD BW Test"), "{c:?}");
}

#[test]
fn atomic_bw_compare_and_swap() {
    let (s, c) = run_pair("atomic-bw", 4, &["-n", "100", "-A", "CMP_AND_SWAP", "--report_gbits"]);
    both_ok("atomic-bw CAS", &s, &c);
    let ct = table(&c.stdout);
    assert_eq!(ct.len(), 1, "{c:?}");
    assert_eq!((ct[0][0], ct[0][1]), (8.0, 100.0), "{c:?}");
    assert!(c.stdout.contains("BW average[Gb/sec]"), "{c:?}");
    assert!(c.stdout.contains("Atomic CMP_AND_SWAP BW Test"), "{c:?}");
}

#[test]
fn write_lat() {
    let (s, c) = run_pair("write-lat", 5, &["-n", "200", "-s", "64"]);
    both_ok("write-lat", &s, &c);
    for side in [&s, &c] {
        let t = table(&side.stdout);
        assert_eq!(t.len(), 1, "{side:?}");
        check_lat_row(&t[0], 64.0, 200.0);
        assert!(side.stdout.contains("t_typical[usec]"), "{side:?}");
        // 64 bytes is under the default inline size of ib_write_lat.
        assert!(side.stdout.contains(" Max inline data : 220[B]"), "{side:?}");
    }
}

#[test]
fn send_lat() {
    let (s, c) = run_pair("send-lat", 6, &["-n", "200"]);
    both_ok("send-lat", &s, &c);
    for side in [&s, &c] {
        let t = table(&side.stdout);
        assert_eq!(t.len(), 1, "{side:?}");
        check_lat_row(&t[0], 2.0, 200.0);
    }
}

#[test]
fn read_lat() {
    let (s, c) = run_pair("read-lat", 7, &["-n", "200", "-s", "512"]);
    both_ok("read-lat", &s, &c);
    let t = table(&c.stdout);
    assert_eq!(t.len(), 1, "{c:?}");
    check_lat_row(&t[0], 512.0, 200.0);
    // Only the client reads; the server just waits for the end.
    assert!(table(&s.stdout).is_empty(), "{s:?}");
}

#[test]
fn write_bw_with_a_completion_every_seventh_write_on_two_qps() {
    // 200 WRITEs a QP, a completion asked for every 7th and for the last (200 is not a multiple
    // of 7): each QP counts its own, and the client waits for every WRITE's completion.
    let (s, c) = run_pair("write-bw", 15, &["-q", "2", "-Q", "7", "-n", "200", "-s", "64"]);
    both_ok("write-bw -q 2 -Q 7", &s, &c);
    let ct = table(&c.stdout);
    assert_eq!(ct.len(), 1, "{c:?}");
    // The row counts the messages of both QPs, as perftest's does.
    check_bw_row(&ct[0], 64.0, 400.0, true);
    assert!(c.stdout.contains(" CQ Moderation   : 7"), "{c:?}");
}

#[test]
fn write_bw_all_sizes_two_qps() {
    let (s, c) = run_pair("write-bw", 8, &["-a", "--all-max", "1024", "-q", "2", "-n", "50"]);
    both_ok("write-bw -a -q 2", &s, &c);
    let ct = table(&c.stdout);
    let sizes: Vec<f64> = ct.iter().map(|r| r[0]).collect();
    assert_eq!(sizes, (1..=10).map(|i| (1u64 << i) as f64).collect::<Vec<_>>(), "{c:?}");
    for r in &ct {
        check_bw_row(r, r[0], 100.0, true);
    }
    assert_eq!(c.stdout.matches(" local address:").count(), 2, "{c:?}");
    assert_eq!(c.stdout.matches(" remote address:").count(), 2, "{c:?}");
    // The passive server prints the last result only.
    assert_eq!(table(&s.stdout), vec![ct[ct.len() - 1].clone()], "{s:?}");
}

#[test]
fn send_bw_all_sizes_two_qps() {
    let (s, c) = run_pair("send-bw", 9, &["-a", "--all-max", "256", "-q", "2", "-n", "20"]);
    both_ok("send-bw -a -q 2", &s, &c);
    let (ct, st) = (table(&c.stdout), table(&s.stdout));
    assert_eq!((ct.len(), st.len()), (8, 8), "{s:?}\n{c:?}");
    for (i, (cr, sr)) in ct.iter().zip(&st).enumerate() {
        let size = (2u64 << i) as f64;
        check_bw_row(cr, size, 40.0, true);
        check_bw_row(sr, size, 40.0, false);
    }
}

#[test]
fn write_bw_duration_with_progress() {
    let (s, c) = run_pair("write-bw", 10, &["-D", "2", "-s", "1024", "--progress"]);
    both_ok("write-bw -D 2", &s, &c);
    let ct = table(&c.stdout);
    assert_eq!(ct.len(), 1, "{c:?}");
    assert!(ct[0][1] > 0.0, "{c:?}");
    check_bw_row(&ct[0], 1024.0, ct[0][1], false);
    assert!(c.stderr.contains('\r') && c.stderr.contains("MiB/s"), "no progress line: {c:?}");
    assert_eq!(table(&s.stdout), ct, "{s:?}");
}

#[test]
fn send_lat_duration() {
    let (s, c) = run_pair("send-lat", 11, &["-D", "2"]);
    both_ok("send-lat -D 2", &s, &c);
    for side in [&s, &c] {
        assert!(side.stdout.contains("tps average"), "{side:?}");
        let t = table(&side.stdout);
        assert_eq!(t.len(), 1, "{side:?}");
        let r = &t[0];
        assert_eq!(r.len(), 4, "{side:?}");
        assert!(r[1] > 0.0 && r[2] > 0.0 && r[3] > 0.0, "{side:?}");
        // t_avg (µs, one way) and transactions per second describe the same round trips.
        let tps = 1e6 / (2.0 * r[2]);
        assert!((tps - r[3]).abs() < 0.02 * r[3], "{side:?}");
    }
}

#[test]
fn negotiation_mismatch_fails_both_sides() {
    let (s, c) = run_pair_with("write-bw", 12, &["-n", "200"], &["-n", "300"]);
    assert!(!s.ok && !c.ok, "{s:?}\n{c:?}");
    assert!(c.stderr.contains(" iters mismatch: local=300, remote=200"), "{c:?}");
    assert!(s.stderr.contains(" iters mismatch: local=200, remote=300"), "{s:?}");
}

#[test]
fn negotiation_without_mlx5dv_block() {
    // A client sending the 312-byte block (perftest built without libmlx5): the server detects it.
    let (s, c) = run_pair_with("send-lat", 13, &["-n", "50"], &["-n", "50", "--negotiate-bytes", "312"]);
    both_ok("send-lat 312-byte negotiation", &s, &c);
    assert_eq!(table(&c.stdout).len(), 1, "{c:?}");
}

#[test]
fn option_errors_are_messages() {
    let run = |args: &[&str]| Command::new(BIN).args(args).output().expect("run umlx");
    for (args, want) in [
        (&["perf", "write-lat", "-q", "2"][..], "multiple QPs"),
        (&["perf", "atomic-bw", "-a"][..], "atomic"),
        (&["perf", "atomic-bw", "-s", "16"][..], "atomic"),
        (&["perf", "read-bw", "-I", "64"][..], "inline"),
        (&["perf", "write-bw", "-c", "UD"][..], "RC only"),
        (&["perf", "write-bw", "-a", "-D", "3"][..], "duration"),
        (&["perf", "write-bw", "-n", "3"][..], "between 5"),
        (&["perf", "bogus-bw"][..], "unrecognized subcommand 'bogus-bw'"),
        (&["perf", "write-bw", "--nonsense"][..], "unexpected argument '--nonsense'"),
        (&["perf", "write-bw", "-m", "1000"][..], "choose the MTU from 256"),
        (&["perf", "write-bw", "-s"][..], "a value is required for '--size"),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    let o = run(&["perf", "--help"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout).contains("write-bw"));
    // perftest's -V: the exchange's version.
    let o = run(&["perf", "ib_send_lat", "-V"]);
    assert!(o.status.success() && String::from_utf8_lossy(&o.stdout) == "Version: 6.29\n", "{o:?}");
}

/// The destination message, built by hand from perftest's format: `%04x:%04x:%06x:%06x:%08x:
/// %016llx:` then sixteen `%02x:` GID bytes then `%08x:`, NUL-terminated, 108 bytes.
#[test]
fn dest_message_matches_perftest_format() {
    let d = Dest {
        lid: 0,
        out_reads: 0x10,
        qpn: 0x12a,
        psn: 0xabcdef,
        rkey: 0x1f2e3,
        vaddr: 0x7f00_1234_5000,
        gid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 1],
        srqn: 0,
    };
    let mut want = String::new();
    want += "0000:"; // lid
    want += "0010:"; // out_reads
    want += "00012a:"; // qpn
    want += "abcdef:"; // psn
    want += "0001f2e3:"; // rkey
    want += "00007f0012345000:"; // vaddr
    want += "00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:01:"; // gid
    want += "00000000:"; // srqn
    assert_eq!(want.len(), 107);
    let mut want = want.into_bytes();
    want.push(0);
    assert_eq!(want.len(), DEST_MSG_LEN);
    let got = d.encode();
    assert_eq!(String::from_utf8_lossy(&got), String::from_utf8_lossy(&want));
    assert_eq!(&got[..], &want[..]);
    assert_eq!(Dest::decode(&want).unwrap(), d);
    // Upper-case hex (strtol accepts it) decodes too; garbage is an error, not a panic.
    let upper = String::from_utf8_lossy(&want[..107]).to_uppercase();
    assert_eq!(Dest::decode(upper.as_bytes()).unwrap(), d);
    assert!(Dest::decode(b"0000:zz").is_err());
    assert!(Dest::decode(&[0xff; DEST_MSG_LEN]).is_err());
}

#[test]
fn version_and_small_fields() {
    let v = exchange::encode_version("6.29");
    assert_eq!(&v[..], b"6.29\0\0\0\0\0\0\0\0\0\0\0\0");
    assert_eq!(exchange::parse_version(b"5.70\0junk"), 5.70);
    assert_eq!(exchange::parse_version(b"6.28.1\0"), 628.0 / 100.0);
    assert!(exchange::version_at_least(exchange::parse_version(b"6.28\0"), 628));
    assert!(!exchange::version_at_least(exchange::parse_version(b"6.27\0"), 628));
    assert_eq!(exchange::parse_version(b"\0"), 0.0);
    assert_eq!(exchange::encode_be_i32(4096), [0, 0, 0x10, 0]);
    // MTU: the decimal text of enum ibv_mtu, 2 bytes from perftest 5.31 on.
    assert_eq!(exchange::mtu_msg_len(6.29), 2);
    assert_eq!(exchange::mtu_msg_len(5.2), 4);
    assert_eq!(exchange::mtu_msg_len(5.0), 0);
    assert_eq!(exchange::encode_mtu(3, 2), b"3\0");
    assert_eq!(exchange::decode_mtu(b"5\0"), Some(5));
    assert_eq!(exchange::decode_mtu(b"9\0"), None);
}

#[test]
fn bw_report_fields_are_big_endian() {
    let r = BwReportWire { size: 65536, iters: 5000, bw_peak: 1.5, bw_avg: 1.25, msg_rate: 0.5 };
    let f = r.fields(6.29);
    assert_eq!(f[0], 65536u64.to_be_bytes());
    assert_eq!(f[1], 5000u64.to_be_bytes());
    assert_eq!(f[2], 1.5f64.to_bits().to_be_bytes());
    assert_eq!(f[3], [0x3f, 0xf4, 0, 0, 0, 0, 0, 0]);
    assert_eq!(BwReportWire::from_fields(&f).unwrap(), r);
    // Peers before 5.33 exchange a 4-byte iteration count.
    assert_eq!(r.fields(5.2)[1], 5000u32.to_be_bytes());
}

#[test]
fn negotiation_block_layout() {
    let n = Negotiate {
        test_method: 1,
        verb: 2,
        tst: 1,
        report_fmt: 1,
        size: 8388608,
        iters: 5000,
        num_of_qps: 2,
        duration: 5,
        attr: exchange::DeviceAttrWire { fw_ver: "22.39.1002".into(), max_qp_rd_atom: 16, ..Default::default() },
        mlx5dv_comp_mask: 0x10,
        ..Default::default()
    };
    let b = n.encode(NEGOTIATE_LEN_MLX5DV);
    assert_eq!(b.len(), 320);
    assert_eq!(&b[0..4], &[0, 0, 0, 1]); // test_method RUN_ALL, big-endian
    assert_eq!(&b[8..12], &[0, 0, 0, 2]); // verb WRITE
    assert_eq!(&b[28..32], &[0, 0, 0, 0]); // padding before the 64-bit size
    assert_eq!(&b[32..40], &8388608u64.to_be_bytes());
    assert_eq!(&b[40..48], &5000u64.to_be_bytes());
    assert_eq!(&b[52..56], &[0, 0, 0, 2]);
    assert_eq!(&b[80..90], b"22.39.1002"); // ibv_device_attr.fw_ver
    assert_eq!(&b[80 + 144..80 + 148], &16i32.to_le_bytes()); // max_qp_rd_atom, host order
    assert_eq!(&b[312..320], &0x10u64.to_be_bytes());
    let back = Negotiate::decode(&b).unwrap();
    assert_eq!(back, n);
    let short = n.encode(NEGOTIATE_LEN);
    assert_eq!(short.len(), 312);
    assert_eq!(Negotiate::decode(&short).unwrap().mlx5dv_comp_mask, 0);
    let other = Negotiate { size: 65536, ..n.clone() };
    assert_eq!(n.mismatches(&other), vec![" size mismatch: local=8388608, remote=65536".to_string()]);
    let other = Negotiate { verb: 4, ..n.clone() };
    assert_eq!(n.mismatches(&other), vec![" verb mismatch: local=WRITE, remote=READ".to_string()]);
}
