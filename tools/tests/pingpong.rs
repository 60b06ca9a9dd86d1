//! `umlx rc-pingpong`, `umlx ud-pingpong` and `umlx sim` as processes: a server and a client on
//! one machine, each with its own software ConnectX, joined by a loopback UDP wire, exchanging
//! addresses over TCP as rdma-core's tools do.
//!
//! Every test has its own TCP port and UDP wire ports (tests run in parallel); only
//! `zero_configuration_two_processes` uses the automatic wire's fixed ports.

#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_umlx");
/// How long one process may run before the test kills it.
const LIMIT: Duration = Duration::from_secs(120);

/// What a finished process left.
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: Vec<String>,
    stderr: String,
}

/// A running process whose stdout is read line by line as it comes.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    fn spawn(args: &[String]) -> Proc {
        let mut child = Command::new(BIN)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting umlx");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines, seen: Vec::new() }
    }

    /// Waits for a stdout line containing `pat` (the server prints its local address once its
    /// TCP port is listening).
    fn wait_line(&mut self, pat: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(pat) {
                        return l;
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    let mut err = String::new();
                    if let Some(mut e) = self.child.stderr.take() {
                        let _ = e.read_to_string(&mut err);
                    }
                    panic!("no line with {pat:?}; stdout {:?}, stderr {err}", self.seen);
                }
            }
        }
    }

    /// Waits for the exit (killing the process after [`LIMIT`]).
    fn finish(mut self) -> Run {
        let deadline = Instant::now() + LIMIT;
        let code = loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                break s.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        let mut stdout = self.seen;
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            stdout.push(l);
        }
        Run { code, stdout, stderr }
    }
}

fn args(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// Distinct ports per test: TCP `28600 + n`, UDP `29600 + 2n` and `+ 1`.
fn ports(n: u16) -> (u16, u16, u16) {
    (28600 + n, 29600 + 2 * n, 29601 + 2 * n)
}

fn wire(local: u16, peer: u16) -> String {
    format!("--wire udp:127.0.0.1:{local},127.0.0.1:{peer}")
}

/// Runs a server (sim 0) and a client (sim 1) of `tool` with `opts`; the client connects to
/// `client_port` (the server's port unless a test puts something in between).
fn pair_via(tool: &str, opts: &str, n: u16, client_port: Option<u16>) -> (Run, Run) {
    let (tcp, a, b) = ports(n);
    let mut server = Proc::spawn(&args(&format!("{tool} {opts} -p {tcp} {} --index 0", wire(a, b))));
    server.wait_line("local address");
    let cport = client_port.unwrap_or(tcp);
    let client = Proc::spawn(&args(&format!("{tool} {opts} -p {cport} {} --index 1 127.0.0.1", wire(b, a))));
    let c = client.finish();
    let s = server.finish();
    (s, c)
}

fn pair(tool: &str, opts: &str, n: u16) -> (Run, Run) {
    pair_via(tool, opts, n, None)
}

/// An address line's fields: (QPN, PSN, GID text).
fn address(line: &str) -> (u32, u32, String) {
    let after = |key: &str| -> &str {
        let i = line.find(key).unwrap_or_else(|| panic!("{key} in {line:?}"));
        &line[i + key.len()..]
    };
    let hex = |s: &str| u32::from_str_radix(&s[..6], 16).unwrap_or_else(|e| panic!("{s}: {e}"));
    assert!(after("LID 0x").starts_with("0000,"), "{line}");
    (hex(after("QPN 0x")), hex(after("PSN 0x")), after("GID ").to_string())
}

fn line_with<'a>(r: &'a Run, pat: &str) -> &'a str {
    r.stdout.iter().find(|l| l.contains(pat)).unwrap_or_else(|| panic!("no {pat:?} line in {r:?}"))
}

/// Checks both sides exited 0, printed the two address lines that agree with each other and the
/// result lines with `size * iters * 2` bytes and `iters` iterations.
fn check_success(s: &Run, c: &Run, kind: &str, size: u64, iters: u64) {
    let (sl, cl) = check_exchange(s, c, kind, size, iters);
    assert_eq!(sl, "::ffff:10.77.0.1");
    assert_eq!(cl, "::ffff:10.77.0.2");
}

/// Checks a successful run of both sides, wherever their addresses are; returns the server's
/// and the client's GID.
fn check_exchange(s: &Run, c: &Run, kind: &str, size: u64, iters: u64) -> (String, String) {
    for (who, r) in [("server", s), ("client", c)] {
        assert_eq!(r.code, Some(0), "{who} failed: {r:?}");
        assert!(r.stderr.is_empty(), "{who} wrote to stderr: {r:?}");
        let local = line_with(r, "local address");
        assert!(local.starts_with("  local address:  LID 0x0000, QPN 0x"), "{local}");
        if kind == "ud" {
            assert!(local.contains(": GID "), "ud_pingpong's local line has `: GID`: {local}");
        } else {
            assert!(local.contains(", GID "), "{local}");
        }
        let remote = line_with(r, "remote address");
        assert!(remote.starts_with("  remote address: LID 0x0000, QPN 0x"), "{remote}");
        assert!(!r.stdout.iter().any(|l| l.contains("invalid data")), "{who}: {r:?}");

        let bytes = line_with(r, "Mbit/sec");
        let want = format!("{} bytes in ", size * iters * 2);
        assert!(bytes.starts_with(&want), "{bytes} (want {want})");
        let secs: f64 = bytes[want.len()..].split(' ').next().unwrap().parse().unwrap();
        let mbit: f64 = bytes.split("= ").nth(1).unwrap().trim_end_matches(" Mbit/sec").parse().unwrap();
        assert!(secs < 100.0 && (size == 0 || mbit > 0.0), "{bytes}");
        let it = line_with(r, "usec/iter");
        assert!(it.starts_with(&format!("{iters} iters in ")), "{it}");
        let usec: f64 = it.split("= ").nth(1).unwrap().trim_end_matches(" usec/iter").parse().unwrap();
        assert!(usec > 0.0 && usec < 1e6, "{it}");
        assert!(it.contains(" seconds = "), "{it}");
    }
    // Each side's remote address is the other's local address.
    let (sl, cl) = (address(line_with(s, "local address")), address(line_with(c, "local address")));
    assert_eq!(address(line_with(c, "remote address")), sl);
    assert_eq!(address(line_with(s, "remote address")), cl);
    assert!(sl.1 <= 0xff_ffff && cl.1 <= 0xff_ffff);
    (sl.2, cl.2)
}

#[test]
fn rc_pingpong_default_size() {
    let (s, c) = pair("rc-pingpong", "-g 1", 1);
    check_success(&s, &c, "rc", 4096, 1000);
}

#[test]
fn rc_pingpong_message_larger_than_the_path_mtu() {
    let (s, c) = pair("rc-pingpong", "-g 1 -s 10000 -n 300", 2);
    check_success(&s, &c, "rc", 10000, 300);
}

#[test]
fn rc_pingpong_validates_data() {
    let (s, c) = pair("rc-pingpong", "--gid-idx=1 --chk -s 20000 -n 200", 3);
    check_success(&s, &c, "rc", 20000, 200);
}

#[test]
fn rc_pingpong_sleeps_on_completion_events() {
    let (s, c) = pair("rc-pingpong", "-g 1 -e -n 500", 4);
    check_success(&s, &c, "rc", 4096, 500);
}

#[test]
fn rc_pingpong_inline_and_small_rx_depth() {
    // 8 bytes fit the QP's inline size (IBV_SEND_INLINE); rx depth 2 refills on every receive.
    let (s, c) = pair("rc-pingpong", "-g1 -s 8 -r 2 -n 300 -m 512", 5);
    check_success(&s, &c, "rc", 8, 300);
}

#[test]
fn ud_pingpong_default_size() {
    let (s, c) = pair("ud-pingpong", "-g 1", 6);
    check_success(&s, &c, "ud", 1024, 1000);
}

#[test]
fn ud_pingpong_events_and_validation() {
    let (s, c) = pair("ud-pingpong", "-g 1 -e -c -n 300", 7);
    check_success(&s, &c, "ud", 1024, 300);
}

#[test]
fn ud_pingpong_refuses_messages_larger_than_the_mtu() {
    let r = Proc::spawn(&args(&format!("ud-pingpong -g 1 -s 2000 -p 28608 {}", wire(29616, 29617)))).finish();
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("Requested size larger than port MTU (1024)"), "{r:?}");
}

/// Forwards one connection between the client and the server, recording what each sent.
fn proxy(listener: TcpListener, server_port: u16) -> (Vec<u8>, Vec<u8>) {
    let (mut c, _) = listener.accept().unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", server_port)).unwrap();
    for x in [&c, &s] {
        x.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    }
    let mut from_client = vec![0u8; 52];
    c.read_exact(&mut from_client).unwrap();
    s.write_all(&from_client).unwrap();
    let mut from_server = vec![0u8; 52];
    s.read_exact(&mut from_server).unwrap();
    c.write_all(&from_server).unwrap();
    let mut done = vec![0u8; 5];
    c.read_exact(&mut done).unwrap();
    s.write_all(&done).unwrap();
    from_client.extend_from_slice(&done);
    // Nothing more comes: both close.
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "the client sent more: {rest:?}");
    (from_client, from_server)
}

#[test]
fn the_tcp_exchange_is_byte_exact() {
    // A proxy between client and server records the bytes; they must be what pingpong.c's
    // sprintf("%04x:%06x:%06x:%s") and gid_to_wire_gid produce, NUL included, then "done\0".
    let listener = TcpListener::bind("127.0.0.1:28609").unwrap();
    let (tcp, _, _) = ports(10);
    let h = std::thread::spawn(move || proxy(listener, tcp));
    let (s, c) = pair_via("rc-pingpong", "-g 1 -n 50", 10, Some(28609));
    check_success(&s, &c, "rc", 4096, 50);
    let (from_client, from_server) = h.join().unwrap();
    let build = |r: &Run, gid_hex: &str| {
        let (qpn, psn, _) = address(line_with(r, "local address"));
        let mut m = format!("0000:{qpn:06x}:{psn:06x}:{gid_hex}").into_bytes();
        assert_eq!(m.len(), 4 + 1 + 6 + 1 + 6 + 1 + 32);
        m.push(0);
        m
    };
    // ::ffff:10.77.0.2 and ::ffff:10.77.0.1, byte by byte.
    let mut want_client = build(&c, "00000000000000000000ffff0a4d0002");
    want_client.extend_from_slice(b"done\0");
    assert_eq!(String::from_utf8_lossy(&from_client), String::from_utf8_lossy(&want_client));
    assert_eq!(from_client, want_client);
    assert_eq!(from_server, build(&s, "00000000000000000000ffff0a4d0001"));
}

/// The GID line a side prints when it picked its GID itself.
fn auto_gid_line(r: &Run) -> &str {
    line_with(r, "chosen automatically")
}

#[test]
fn without_a_gid_both_sides_pick_their_ipv4_gid() {
    // No -g: each side uses the RoCEv2 GID of its IPv4 address (as perftest's -x default) and says so.
    let (s, c) = pair("rc-pingpong", "-c -s 6000 -n 200", 11);
    check_success(&s, &c, "rc", 6000, 200);
    assert_eq!(auto_gid_line(&s), "local GID index 1 (RoCEv2 ::ffff:10.77.0.1), chosen automatically; -g overrides");
    assert_eq!(auto_gid_line(&c), "local GID index 1 (RoCEv2 ::ffff:10.77.0.2), chosen automatically; -g overrides");
    let (s, c) = pair("ud-pingpong", "-c -n 200", 17);
    check_success(&s, &c, "ud", 1024, 200);
    assert!(auto_gid_line(&s).contains("::ffff:10.77.0.1"), "{s:?}");
    // An explicit -g wins and prints no such line.
    let (s, c) = pair("rc-pingpong", "-g 0 -n 20", 18);
    assert_eq!((s.code, c.code), (Some(0), Some(0)), "{s:?}\n{c:?}");
    assert!(!s.stdout.iter().chain(&c.stdout).any(|l| l.contains("chosen automatically")), "{s:?}");
    assert!(address(line_with(&s, "local address")).2.starts_with("fe80::"), "-g 0 is the link-local GID: {s:?}");
}

#[test]
fn zero_configuration_four_pairs_at_once() {
    // What the README promises: no -g, no --wire, no --index; every process joins the automatic
    // loopback LAN (UDP 127.0.0.1:47901 and up) and gets its own sim number and address
    // 10.77.0.N. Four client/server pairs run at once, eight processes on one LAN. Only this
    // test in this binary uses the automatic LAN (the others name their wires), so it can run
    // beside them.
    let tcp = 28622;
    let mut servers = Vec::new();
    for k in 0..4 {
        let mut server = Proc::spawn(&args(&format!("rc-pingpong -p {} -c -n 100", tcp + k)));
        server.wait_line("local address");
        servers.push(server);
    }
    let clients: Vec<Proc> =
        (0..4).map(|k| Proc::spawn(&args(&format!("rc-pingpong -p {} -c -n 100 localhost", tcp + k)))).collect();
    let mut gids = Vec::new();
    for (client, server) in clients.into_iter().zip(servers) {
        let c = client.finish();
        let s = server.finish();
        let (sg, cg) = check_exchange(&s, &c, "rc", 4096, 100);
        assert!(auto_gid_line(&s).contains(&sg) && auto_gid_line(&c).contains(&cg), "{s:?}\n{c:?}");
        gids.push(sg);
        gids.push(cg);
    }
    for g in &gids {
        assert!(g.starts_with("::ffff:10.77.0."), "{g}");
    }
    let mut distinct = gids.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 8, "each process has its own address: {gids:?}");
}

/// A peer that sends an address with no GID (what rdma-core's tools send without -g), then
/// reads what comes back.
fn zero_gid_client(port: u16) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut sock = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("connecting to the server: {e}"),
        }
    };
    let mut msg = b"0000:000123:000456:00000000000000000000000000000000".to_vec();
    msg.push(0);
    sock.write_all(&msg).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut back = Vec::new();
    sock.read_to_end(&mut back).unwrap();
    back
}

#[test]
fn a_peer_without_a_gid_is_told_why() {
    // The server detects the zero GID, says so, and tells the client in place of its address.
    let (tcp, a, b) = ports(19);
    let mut server = Proc::spawn(&args(&format!("rc-pingpong -p {tcp} {} --index 0", wire(a, b))));
    server.wait_line("local address");
    let back = zero_gid_client(tcp);
    let s = server.finish();
    assert_eq!(s.code, Some(1), "{s:?}");
    assert!(s.stderr.contains("Failed to modify QP to RTR: the peer's address carries no GID"), "{s:?}");
    assert_eq!(back.len(), 52, "{back:?}");
    assert!(back.starts_with(b"umlx refused: it carries no GID (use -g)\0"), "{}", String::from_utf8_lossy(&back));
    // A umlx client reads the refusal and reports it.
    let (tcp, a, b) = ports(20);
    let listener = TcpListener::bind(("127.0.0.1", tcp)).unwrap();
    let h = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        let mut m = [0u8; 52];
        c.read_exact(&mut m).unwrap();
        let mut r = b"umlx refused: it carries no GID (use -g)".to_vec();
        r.resize(52, 0);
        c.write_all(&r).unwrap();
    });
    let c = Proc::spawn(&args(&format!("rc-pingpong -p {tcp} {} --index 1 127.0.0.1", wire(a, b)))).finish();
    h.join().unwrap();
    assert_eq!(c.code, Some(1), "{c:?}");
    assert!(c.stderr.contains("the server refused our address: it carries no GID (use -g)"), "{c:?}");
    // A UD server: the address handle fails the same way.
    let (tcp, a, b) = ports(21);
    let mut server = Proc::spawn(&args(&format!("ud-pingpong -p {tcp} {}", wire(a, b))));
    server.wait_line("local address");
    let back = zero_gid_client(tcp);
    let s = server.finish();
    assert_eq!(s.code, Some(1), "{s:?}");
    assert!(s.stderr.contains("Failed to create AH: the peer's address carries no GID"), "{s:?}");
    assert!(back.starts_with(b"umlx refused: "), "{back:?}");
}

#[test]
fn a_bad_exchange_string_is_an_error() {
    let (tcp, a, b) = ports(12);
    let mut server = Proc::spawn(&args(&format!("rc-pingpong -g 1 -p {tcp} {}", wire(a, b))));
    server.wait_line("local address");
    let mut sock = TcpStream::connect(("127.0.0.1", tcp)).unwrap();
    let mut msg = b"this is not an address at all, but it is 52 bytes!!".to_vec();
    msg.push(0);
    sock.write_all(&msg).unwrap();
    let r = server.finish();
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("bad exchange string"), "{r:?}");
    // A client whose server closes at once.
    let listener = TcpListener::bind("127.0.0.1:28613").unwrap();
    let h = std::thread::spawn(move || drop(listener.accept()));
    let r = Proc::spawn(&args(&format!("rc-pingpong -g 1 -p 28613 {} 127.0.0.1", wire(29626, 29627)))).finish();
    h.join().unwrap();
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("the peer closed the connection during the exchange: it probably rejected our parameters"),
        "{r:?}"
    );
    // No server at all.
    let r = Proc::spawn(&args(&format!("rc-pingpong -g 1 -p 28614 {} localhost", wire(29628, 29629)))).finish();
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("Couldn't connect to localhost:28614"), "{r:?}");
}

#[test]
fn unsupported_options_are_refused() {
    // Features umlx lacks: rdma-core's messages, exit status 1.
    for (opts, want) in [("-o", "ODP"), ("-t", "timestamp"), ("-j", "dm allocation"), ("-P", "prefetch is valid only")]
    {
        let r = Proc::spawn(&args(&format!("rc-pingpong {opts}"))).finish();
        assert_eq!(r.code, Some(1), "{opts}: {r:?}");
        assert!(r.stderr.contains(want), "{opts}: {r:?}");
    }
    // Bad values and unknown options: usage errors, exit status 2.
    for (opts, want) in [
        ("-m 1000", "invalid value '1000' for '--mtu <size>'"),
        ("-x", "unexpected argument '-x'"),
        ("-p", "a value is required for '--port <port>'"),
        ("-d", "a value is required for '--ib-dev <DEV>'"),
    ] {
        let r = Proc::spawn(&args(&format!("rc-pingpong {opts}"))).finish();
        assert_eq!(r.code, Some(2), "{opts}: {r:?}");
        assert!(r.stderr.contains(want) && r.stderr.contains("Usage: umlx rc-pingpong"), "{opts}: {r:?}");
    }
}

#[test]
fn sim_answers_arp_and_counts_frames() {
    let (_, a, b) = ports(15);
    let pcap = std::env::temp_dir().join(format!("umlx-sim-test-{}.pcap", std::process::id()));
    let sock = UdpSocket::bind(("127.0.0.1", b)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut p = Proc::spawn(&args(&format!("sim {} --index 4 --pcap {} --seconds 2", wire(a, b), pcap.display())));
    p.wait_line("answering ARP");
    // Who has 10.77.0.5? Tell 10.77.0.99 (02:00:5e:10:00:63).
    let me = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x63];
    let mut arp = vec![0xff; 6];
    arp.extend_from_slice(&me);
    arp.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
    arp.extend_from_slice(&me);
    arp.extend_from_slice(&[10, 77, 0, 99]);
    arp.extend_from_slice(&[0; 6]);
    arp.extend_from_slice(&[10, 77, 0, 5]);
    sock.send_to(&arp, ("127.0.0.1", a)).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = sock.recv_from(&mut buf).expect("an ARP reply");
    let reply = &buf[..n];
    let sim_mac = [0x02, 0x00, 0x5e, 0x10, 0x00, 0x04];
    assert_eq!(&reply[0..6], &me, "to the asker");
    assert_eq!(&reply[6..12], &sim_mac, "from the sim");
    assert_eq!(&reply[12..14], &[0x08, 0x06]);
    assert_eq!(&reply[20..22], &[0, 2], "an ARP reply");
    assert_eq!(&reply[28..32], &[10, 77, 0, 5]);
    let r = p.finish();
    assert_eq!(r.code, Some(0), "{r:?}");
    let out = r.stdout.join("\n");
    assert!(out.contains("MAC        02:00:5e:10:00:04"), "{out}");
    assert!(out.contains("IPv4 10.77.0.5"), "{out}");
    assert!(out.contains(&format!("UDP 127.0.0.1:{a} -> 127.0.0.1:{b}")), "{out}");
    assert!(out.contains("[   1.0s] rx 1 frames"), "a counter line every second: {out}");
    let total = line_with(&r, "total");
    assert!(total.contains("rx 1 frames") && total.contains("ARP/ND 1") && total.contains("tx 1 frames"), "{total}");
    // The capture holds both frames after the 24-byte header.
    let cap = std::fs::read(&pcap).unwrap();
    let _ = std::fs::remove_file(&pcap);
    assert_eq!(cap.len(), 24 + 2 * 16 + arp.len() + n, "{} bytes", cap.len());
}

#[test]
fn an_empty_gid_index_is_refused() {
    let r = Proc::spawn(&args(&format!("rc-pingpong -g 7 -p 28616 {}", wire(29632, 29633)))).finish();
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stderr.contains("can't read sgid of index 7") && r.stderr.contains("1 (10.77.0.1)"), "{r:?}");
}
