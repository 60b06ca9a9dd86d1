//! `umlx rc-pingpong` and `umlx ud-pingpong`: rdma-core's `ibv_rc_pingpong` and
//! `ibv_ud_pingpong` on the umlx driver, so that either side of a run can be rdma-core's tool.
//!
//! What matches rdma-core (libibverbs/examples/{rc,ud}_pingpong.c, pingpong.c):
//!
//! * Options, short and long, with getopt_long's forms (`-p 1`, `-p1`, `--port=1`, `--port 1`,
//!   clustered flags, unambiguous long prefixes, the last occurrence winning, numbers in C's
//!   base-0 syntax; parsed by clap, see [`RcArgs`] and [`UdArgs`]), their defaults
//!   (TCP port 18515, IB port 1, size 4096 for RC and 1024 for UD — the UD usage text says 2048,
//!   its code uses 1024 —, path MTU 1024, rx depth 500, 1000 iterations, SL 0, no GID index).
//!   Without a host argument the tool is the server; `umlx rc-pingpong [opts] HOST` is the client.
//! * The TCP exchange: the client connects and sends its address first, the server reads it,
//!   connects its QP, answers with its own address, and the client ends with `done`. An address is
//!   the C string `LID:QPN:PSN:GID` (`%04x:%06x:%06x:` and the GID as 32 hex digits, the GID's
//!   bytes in order, which is what `gid_to_wire_gid` produces) sent with its terminating NUL:
//!   52 bytes; `done` is sent as 5 bytes with its NUL.
//! * The PSN (random, 24 bits), the QP attributes (RC: access 0, max_dest_rd_atomic 1,
//!   min_rnr_timer 12, hop limit 1, timeout 14, retry 7, RNR retry 7, max_rd_atomic 1; UD: Q_Key
//!   0x11111111 and an AH with hop limit 64), one buffer filled with 0x7b used for both sending
//!   and receiving (UD: 40 bytes of GRH room in front), IBV_SEND_INLINE when the QP's inline size
//!   covers the message, a CQ of rx_depth + 1 entries, rx_depth receives posted up front and
//!   topped up again when one or fewer remain, work request ids 1 (receive) and 2 (send), the
//!   next send posted when both the previous send and a receive completed, and the run ending
//!   when `iters` sends and `iters` receives completed.
//! * `-e`: the CQ is bound to a completion channel, armed before the exchange, and each event is
//!   followed by re-arming and one poll of up to two completions; the events are acknowledged
//!   at the end.
//! * `-c`: the client sets byte 0 of every page of its buffer to 0 before the first send; the
//!   server checks its buffer after the run and prints `invalid data in page N`.
//! * Output: the `local address` and `remote address` lines (UD's local line has its `: GID`
//!   quirk), the GID printed as `inet_ntop(AF_INET6)` prints it, and the two result lines.
//! * With `-g` the address carries that GID and the peer builds a global address to it
//!   (on the sim, `-g 1` is the IPv4 GID 10.77.0.N, `-g 0` the link-local IPv6 GID).
//!
//! Deviations, each for a reason: `-o`, `-O`, `-P` (on-demand paging), `-t` (completion time
//! stamps) and `-j` (device memory) are refused with rdma-core's message for a device without the
//! feature; `-N` (the new post-send API) and `-U` (CoCo unprotected memory) are accepted and change
//! nothing (same wire behaviour, plain memory). `-c` compares every byte of the buffer with what
//! the peer sends (0x7b, 0 at page starts) instead of only the page starts, and a mismatch makes
//! the exit status 1 (rdma-core exits 0). `-g` naming an empty GID table entry is an error
//! (rdma-core would send a zero GID). Without `-g` on a RoCE port umlx picks the RoCEv2 GID of
//! the port's IPv4 address (perftest's `-x` default; on the sim GID 1, 10.77.0.N) and prints
//! `local GID index N (RoCEv2 ...), chosen automatically; -g overrides`, where rdma-core sends a
//! zero GID that no RoCE peer can reach: two umlx processes need no options. A umlx server that
//! cannot connect its QP to a client's address answers, in place of its own address, a 52-byte
//! `umlx refused: REASON` (an address's size, NUL-terminated) before closing, and a umlx client
//! prints that reason; a client whose server closes without a word says the server probably
//! rejected its parameters. The server binds its TCP port before printing its local
//! address (so a script can start the client once that line appears). Unknown numbers are errors
//! instead of 0, and option errors exit with status 2 (clap's usage errors). A peer that stops answering ends the run with an error after `--timeout` seconds
//! (default 30; 0 waits forever like rdma-core), and so does a TCP peer that connects and stays
//! silent. `-r` must be at least 1 and `-l` at most 15. umlx options: `-d sim|pci:ADDR`, `--wire`,
//! `--pcap`, `--ip`, `--index` (see [`crate::device`]) and `--timeout`.

use crate::cli::{c_number, parse_c_number};
use crate::common::IdlePolls;
use crate::device::{self, DeviceOpts};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::result::Result;
use std::time::{Duration, Instant};
use umlx_verbs::*;

/// Work request id of receives.
const RECV_WRID: u64 = 1;
/// Work request id of sends.
const SEND_WRID: u64 = 2;
/// The UD Q_Key both sides use.
pub const QKEY: u32 = 0x1111_1111;
/// Room for the GRH in front of every UD receive.
const GRH_LEN: usize = 40;
/// Bytes of an address message: `sizeof "0000:000000:000000:00000000000000000000000000000000"`.
pub const MSG_LEN: usize = 52;
/// The client's last message: `sizeof "done"` bytes.
pub const DONE: &[u8; 5] = b"done\0";
/// The byte the buffer is filled with.
const FILL: u8 = 0x7b;

/// Which tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ibv_rc_pingpong`.
    Rc,
    /// `ibv_ud_pingpong`.
    Ud,
}

impl Kind {
    #[cfg(test)]
    fn name(self) -> &'static str {
        match self {
            Kind::Rc => "rc-pingpong",
            Kind::Ud => "ud-pingpong",
        }
    }
}

/// Runs `umlx rc-pingpong`.
pub fn run_rc(a: &RcArgs) -> Result<(), String> {
    run(&Opts::rc(a)?)
}

/// Runs `umlx ud-pingpong`.
pub fn run_ud(a: &UdArgs) -> Result<(), String> {
    run(&Opts::ud(a)?)
}

fn run(o: &Opts) -> Result<(), String> {
    let ctx = device::open(&o.dev)?;
    pingpong(&ctx, o)
}

/// The options both ping-pongs have (rdma-core's names, short forms and defaults).
#[derive(clap::Args, Clone, Debug)]
pub struct CommonArgs {
    /// Connect to the server at HOST; without it, start a server and wait for a connection
    #[arg(value_name = "HOST")]
    pub servername: Option<String>,
    /// Listen on / connect to TCP port `<port>`
    #[arg(short = 'p', long, value_name = "port", default_value = "18515", value_parser = c_number::<u16, 0, 65535>)]
    pub port: u16,
    /// Use port `<port>` of the IB device
    #[arg(short = 'i', long = "ib-port", value_name = "port", default_value = "1", value_parser = c_number::<u8, 1, 255>)]
    pub ib_port: u8,
    /// Number of receives to post at a time
    #[arg(short = 'r', long = "rx-depth", value_name = "dep", default_value = "500", value_parser = c_number::<u32, 1, { 1 << 20 }>)]
    pub rx_depth: u32,
    /// Number of exchanges
    #[arg(short = 'n', long, value_name = "iters", default_value = "1000", value_parser = c_number::<u32, 0, { u32::MAX as i64 }>)]
    pub iters: u32,
    /// Service level value
    #[arg(short = 'l', long, value_name = "sl", default_value = "0", value_parser = c_number::<u8, 0, 15>)]
    pub sl: u8,
    /// Sleep on CQ events (default poll)
    #[arg(short = 'e', long)]
    pub events: bool,
    /// Local port GID index (default on RoCE: the GID of the port's IPv4 address, printed)
    #[arg(short = 'g', long = "gid-idx", value_name = "gid index", value_parser = c_number::<i32, { i32::MIN as i64 }, { i32::MAX as i64 }>, allow_negative_numbers = true)]
    pub gidx: Option<i32>,
    /// Validate the received buffer
    #[arg(short = 'c', long = "chk")]
    pub validate: bool,
    /// The device.
    #[command(flatten)]
    pub dev: DeviceOpts,
    /// Give up when the peer is silent this long (0: never)
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = c_number::<u64, 0, { 1 << 31 }>, help_heading = "umlx options")]
    pub timeout: u64,
}

/// The options of `umlx rc-pingpong` (`ibv_rc_pingpong`).
#[derive(clap::Args, Clone, Debug)]
pub struct RcArgs {
    /// The common options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Size of message to exchange [default: 4096]
    #[arg(short = 's', long, value_name = "size", value_parser = c_number::<u32, 0, { u32::MAX as i64 - GRH_LEN as i64 }>)]
    pub size: Option<u32>,
    /// Path MTU: 256, 512, 1024, 2048 or 4096
    #[arg(short = 'm', long, value_name = "size", default_value = "1024", value_parser = parse_mtu)]
    pub mtu: Mtu,
    /// Use on-demand paging (refused: not supported)
    #[arg(short = 'o', long)]
    pub odp: bool,
    /// Use implicit on-demand paging (refused: not supported)
    #[arg(short = 'O', long)]
    pub iodp: bool,
    /// Prefetch an ODP MR (refused: not supported)
    #[arg(short = 'P', long)]
    pub prefetch: bool,
    /// Get completion time stamps (refused: not supported)
    #[arg(short = 't', long)]
    pub ts: bool,
    /// Use device memory (refused: not supported)
    #[arg(short = 'j', long)]
    pub dm: bool,
    /// Use the new post send API (accepted, no effect)
    #[arg(short = 'N', long = "new_send")]
    pub new_send: bool,
    /// Allow CoCo unprotected memory (accepted, no effect)
    #[arg(short = 'U', long = "allow-cc-unprotected")]
    pub allow_cc_unprotected: bool,
}

/// The options of `umlx ud-pingpong` (`ibv_ud_pingpong`).
#[derive(clap::Args, Clone, Debug)]
pub struct UdArgs {
    /// The common options.
    #[command(flatten)]
    pub common: CommonArgs,
    /// Size of message to exchange [default: 1024]
    #[arg(short = 's', long, value_name = "size", value_parser = c_number::<u32, 0, { u32::MAX as i64 - GRH_LEN as i64 }>)]
    pub size: Option<u32>,
}

/// `pp_mtu_to_enum` as a value parser.
fn parse_mtu(s: &str) -> Result<Mtu, String> {
    mtu_from_bytes(parse_c_number(s)?).ok_or_else(|| "the MTU is 256, 512, 1024, 2048 or 4096".to_string())
}

/// The parsed command line.
#[derive(Clone, Debug)]
pub struct Opts {
    /// Which tool.
    pub kind: Kind,
    /// TCP port of the exchange.
    pub port: u16,
    /// The device.
    pub dev: DeviceOpts,
    /// Port of the device.
    pub ib_port: u8,
    /// Message size.
    pub size: u32,
    /// Path MTU (RC).
    pub mtu: Mtu,
    /// Receives kept posted.
    pub rx_depth: u32,
    /// Exchanges.
    pub iters: u32,
    /// Service level.
    pub sl: u8,
    /// Sleep on completion events.
    pub events: bool,
    /// Local GID index (negative: none).
    pub gidx: i32,
    /// Validate the received buffer.
    pub validate: bool,
    /// The server to connect to (client mode).
    pub servername: Option<String>,
    /// Give up after this long without progress (`None`: never).
    pub timeout: Option<Duration>,
}

/// `pp_mtu_to_enum`.
fn mtu_from_bytes(n: i64) -> Option<Mtu> {
    match n {
        256 => Some(Mtu::Mtu256),
        512 => Some(Mtu::Mtu512),
        1024 => Some(Mtu::Mtu1024),
        2048 => Some(Mtu::Mtu2048),
        4096 => Some(Mtu::Mtu4096),
        _ => None,
    }
}

impl Opts {
    fn common(kind: Kind, c: &CommonArgs, size: Option<u32>, mtu: Mtu) -> Opts {
        Opts {
            kind,
            port: c.port,
            dev: c.dev.clone(),
            ib_port: c.ib_port,
            size: size.unwrap_or(if kind == Kind::Rc { 4096 } else { 1024 }),
            mtu,
            rx_depth: c.rx_depth,
            iters: c.iters,
            sl: c.sl,
            events: c.events,
            gidx: c.gidx.unwrap_or(-1),
            validate: c.validate,
            servername: c.servername.clone(),
            timeout: (c.timeout > 0).then(|| Duration::from_secs(c.timeout)),
        }
    }

    /// `ibv_rc_pingpong`'s options, with its checks of the features umlx lacks.
    pub fn rc(a: &RcArgs) -> Result<Opts, String> {
        let odp = a.odp || a.iodp;
        let (cc, dm) = (a.allow_cc_unprotected, a.dm);
        if odp && dm {
            return Err("DM memory region can't be on demand".into());
        }
        if cc && odp {
            return Err("CoCo unprotected memory cannot be used with ODP".into());
        }
        if cc && dm {
            return Err("CoCo unprotected memory cannot be used with device memory".into());
        }
        if !odp && a.prefetch {
            return Err("prefetch is valid only with on-demand memory region".into());
        }
        if odp {
            return Err(if a.iodp {
                "The device doesn't support implicit ODP (umlx has no on-demand paging)".into()
            } else {
                "The device isn't ODP capable or does not support RC send and receive with ODP \
                 (umlx has no on-demand paging)"
                    .into()
            });
        }
        if a.ts {
            return Err("The device isn't completion timestamp capable (umlx completions carry no time stamp)".into());
        }
        if dm {
            return Err("Device doesn't support dm allocation (umlx has no device memory)".into());
        }
        Ok(Opts::common(Kind::Rc, &a.common, a.size, a.mtu))
    }

    /// `ibv_ud_pingpong`'s options.
    pub fn ud(a: &UdArgs) -> Result<Opts, String> {
        Ok(Opts::common(Kind::Ud, &a.common, a.size, Mtu::Mtu1024))
    }
}

/// One side's address, as the exchange carries it (`struct pingpong_dest`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on Ethernet).
    pub lid: u32,
    /// QP number.
    pub qpn: u32,
    /// First PSN.
    pub psn: u32,
    /// GID (zero when no GID index was given).
    pub gid: Gid,
}

/// `gid_to_wire_gid`: the GID as 32 hex digits, its bytes in order.
pub fn gid_to_wire(gid: &Gid) -> String {
    gid.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// `wire_gid_to_gid`: 32 hex digits to a GID.
pub fn wire_to_gid(s: &str) -> Result<Gid, String> {
    if s.len() != 32 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("the GID `{s}` is not 32 hex digits"));
    }
    let mut g = [0u8; 16];
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok(Gid(g))
}

/// The GID as `inet_ntop(AF_INET6)` writes it (`::`, `::ffff:10.77.0.1`, `fe80::...`).
pub fn gid_text(gid: &Gid) -> String {
    Ipv6Addr::from(gid.0).to_string()
}

impl Dest {
    /// The 52 bytes sent: `"%04x:%06x:%06x:%s"` and its NUL.
    pub fn to_wire(self) -> [u8; MSG_LEN] {
        let s = format!("{:04x}:{:06x}:{:06x}:{}", self.lid, self.qpn, self.psn, gid_to_wire(&self.gid));
        let mut m = [0u8; MSG_LEN];
        let n = s.len().min(MSG_LEN - 1);
        m[..n].copy_from_slice(&s.as_bytes()[..n]);
        m
    }

    /// Parses an address message (what `sscanf("%x:%x:%x:%s")` and `wire_gid_to_gid` accept,
    /// with the GID required to be 32 hex digits).
    pub fn from_wire(m: &[u8]) -> Result<Dest, String> {
        let end = m.iter().position(|&b| b == 0).unwrap_or(m.len());
        let text =
            std::str::from_utf8(&m[..end]).map_err(|_| format!("bad exchange string {:?}: not text", &m[..end]))?;
        let bad = |why: &str| format!("bad exchange string {text:?} (expected LID:QPN:PSN:GID): {why}");
        let parts: Vec<&str> = text.split(':').collect();
        let [lid, qpn, psn, gid] = parts.as_slice() else {
            return Err(bad("not four fields"));
        };
        let hex = |what: &str, s: &str, max: u32| -> Result<u32, String> {
            match u32::from_str_radix(s, 16) {
                Ok(v) if v <= max && !s.is_empty() => Ok(v),
                _ => Err(bad(&format!("the {what} `{s}` is not a hex number up to {max:#x}"))),
            }
        };
        Ok(Dest {
            lid: hex("LID", lid, 0xffff)?,
            qpn: hex("QPN", qpn, 0xff_ffff)?,
            psn: hex("PSN", psn, 0xff_ffff)?,
            gid: wire_to_gid(gid).map_err(|e| bad(&e))?,
        })
    }

    /// The `  local address:` / `  remote address:` line.
    pub fn line(&self, local: bool, kind: Kind) -> String {
        let (label, sep) = match (local, kind) {
            (true, Kind::Ud) => ("  local address: ", ":"),
            (true, Kind::Rc) => ("  local address: ", ","),
            (false, _) => ("  remote address:", ","),
        };
        format!(
            "{label} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}{sep} GID {}",
            self.lid,
            self.qpn,
            self.psn,
            gid_text(&self.gid)
        )
    }
}

/// Whether a GID has a non-zero interface id (`gid.global.interface_id`, its last 8 bytes):
/// rdma-core's test for building a global address.
fn has_interface_id(g: &Gid) -> bool {
    g.0[8..].iter().any(|&b| b != 0)
}

/// `lrand48() & 0xffffff`, seeded from the process and the clock.
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    h.write_u128(now.as_nanos());
    (h.finish() & 0xff_ffff) as u32
}

/// The system page size (AT_PAGESZ from the auxiliary vector; 4096 if unreadable).
fn page_size() -> usize {
    let Ok(aux) = std::fs::read("/proc/self/auxv") else { return 4096 };
    for e in aux.chunks_exact(16) {
        let key = u64::from_ne_bytes(e[..8].try_into().unwrap_or_default());
        let val = u64::from_ne_bytes(e[8..].try_into().unwrap_or_default());
        if key == 6 && val.is_power_of_two() {
            return val as usize;
        }
    }
    4096
}

fn io_text(e: &std::io::Error, t: Option<Duration>) -> String {
    match e.kind() {
        ErrorKind::UnexpectedEof => "the peer closed the connection".into(),
        ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted | ErrorKind::BrokenPipe => {
            format!("the peer closed the connection ({e})")
        }
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            format!("no answer within {} s", t.map(|d| d.as_secs()).unwrap_or(0))
        }
        _ => e.to_string(),
    }
}

/// Binds the server's TCP port (dual-stack `[::]`, else `0.0.0.0`; SO_REUSEADDR like rdma-core).
fn listen(port: u16) -> Result<TcpListener, String> {
    TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("Couldn't listen to port {port}: {e}"))
}

/// `pp_client_exch_dest`.
fn client_exchange(host: &str, port: u16, my: &Dest, timeout: Option<Duration>) -> Result<Dest, String> {
    let addrs: Vec<_> = (host, port).to_socket_addrs().map_err(|e| format!("{e} for {host}:{port}"))?.collect();
    let mut s = addrs
        .iter()
        .find_map(|a| TcpStream::connect(a).ok())
        .ok_or_else(|| format!("Couldn't connect to {host}:{port}"))?;
    s.set_read_timeout(timeout).map_err(|e| e.to_string())?;
    s.write_all(&my.to_wire()).map_err(|e| format!("Couldn't send local address: {}", io_text(&e, timeout)))?;
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg).map_err(|e| {
        let why = match e.kind() {
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
                "the peer closed the connection during the exchange: it probably rejected our parameters, see its output"
                    .to_string()
            }
            _ => io_text(&e, timeout),
        };
        format!("Couldn't read/write remote address: {why}")
    })?;
    if let Some(why) = refused(&msg) {
        return Err(format!("the server refused our address: {why} (its output says more)"));
    }
    s.write_all(DONE).map_err(|e| format!("Couldn't read/write remote address: {}", io_text(&e, timeout)))?;
    Dest::from_wire(&msg)
}

/// `pp_server_exch_dest`: accepts one client, reads its address, connects the QP (`connect`),
/// answers and waits for `done`.
fn server_exchange(
    listener: TcpListener,
    my: &Dest,
    timeout: Option<Duration>,
    connect: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, String> {
    let (mut s, _) = listener.accept().map_err(|e| format!("accept() failed: {e}"))?;
    drop(listener);
    s.set_read_timeout(timeout).map_err(|e| e.to_string())?;
    let mut msg = [0u8; MSG_LEN];
    s.read_exact(&mut msg).map_err(|e| format!("Couldn't read remote address: {}", io_text(&e, timeout)))?;
    let rem = Dest::from_wire(&msg)?;
    if let Err(e) = connect(&rem) {
        // Tell a umlx client why before closing (an rdma-core client reads it as a bad address).
        let _ = s.write_all(&refusal(&rem));
        return Err(format!("{e}\nCouldn't connect to remote QP"));
    }
    s.write_all(&my.to_wire()).map_err(|e| format!("Couldn't send/recv local address: {}", io_text(&e, timeout)))?;
    let mut done = [0u8; DONE.len()];
    s.read_exact(&mut done).map_err(|e| format!("Couldn't send/recv local address: {}", io_text(&e, timeout)))?;
    if &done != DONE {
        return Err(format!("Couldn't send/recv local address: expected \"done\", got {done:?}"));
    }
    Ok(rem)
}

/// How a umlx server that could not connect its QP to a client's address says so: this prefix
/// and a short reason, in place of its own address (52 bytes, NUL-terminated, like an address).
const REFUSAL: &str = "umlx refused: ";

/// The refusal a server sends for `rem`.
fn refusal(rem: &Dest) -> [u8; MSG_LEN] {
    let why = if has_interface_id(&rem.gid) { "see the server's output" } else { "it carries no GID (use -g)" };
    let text = format!("{REFUSAL}{why}");
    let mut m = [0u8; MSG_LEN];
    let n = text.len().min(MSG_LEN - 1);
    m[..n].copy_from_slice(&text.as_bytes()[..n]);
    m
}

/// The reason in a server's refusal, if `msg` is one.
fn refused(msg: &[u8]) -> Option<String> {
    let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
    let text = std::str::from_utf8(&msg[..end]).ok()?;
    text.strip_prefix(REFUSAL).map(str::to_string)
}

const NO_GID_HINT: &str = "the peer's address carries no GID and RoCE needs one: run the peer with -g \
                           (rdma-core's ibv_*_pingpong send a zero GID without it; umlx picks one)";
const NO_SGID_HINT: &str = "no local GID index (-g) to source the global address RoCE needs: give -g \
                            (on the sim, -g 1 is its IPv4 GID)";

/// The source GID index of a global address to `dest`, which rdma-core builds when `dest`'s
/// GID has an interface id (RoCE always needs one).
fn sgid_for(o: &Opts, dest: &Dest) -> Result<u8, String> {
    if !has_interface_id(&dest.gid) {
        return Err(NO_GID_HINT.into());
    }
    u8::try_from(o.gidx).map_err(|_| NO_SGID_HINT.to_string())
}

/// The address rdma-core builds for `dest` (ud_pingpong's AH).
fn address_to(o: &Opts, dest: &Dest, hop_limit: u8) -> Result<AhAttr, String> {
    Ok(AhAttr {
        grh: GlobalRoute { dgid: dest.gid, sgid_index: sgid_for(o, dest)?, hop_limit, ..Default::default() },
        sl: o.sl,
        port_num: o.ib_port,
        dmac: None,
    })
}

/// `pp_connect_ctx`: the QP (in INIT, its receives posted) to RTR and RTS towards `dest`; for
/// UD also the address handle to it. rdma-core's attributes: RC with path MTU `-m`, rd_atomic
/// 1 both ways, min RNR timer 12, hop limit 1, timeout 14, retry 7, RNR retry 7; UD with an AH
/// of hop limit 64. A failure names the transition, as rdma-core's messages do.
fn connect_ctx(pd: &Pd, qp: &mut Qp, o: &Opts, my_psn: u32, dest: &Dest) -> Result<Option<Ah>, String> {
    let failed = |qp: &Qp, e: Error| match qp.state() {
        QpState::Rtr => format!("Failed to modify QP to RTS: {e}"),
        _ => format!("Failed to modify QP to RTR: {e}"),
    };
    match o.kind {
        Kind::Rc => {
            let sgid_index = sgid_for(o, dest).map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
            let params = ConnectParams {
                sq_psn: my_psn,
                path_mtu: Some(o.mtu),
                sgid_index: Some(sgid_index),
                port_num: o.ib_port,
                rd_atomic: Some(1),
                min_rnr_timer: 12,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                hop_limit: 1,
                sl: o.sl,
                ..Default::default()
            };
            let peer = RcPeer { qp_num: dest.qpn, psn: dest.psn, gid: dest.gid };
            qp.connect(&peer, &params).map_err(|e| failed(qp, e))?;
            Ok(None)
        }
        Kind::Ud => {
            qp.ud_to_rts(QKEY, my_psn).map_err(|e| failed(qp, e))?;
            let attr = address_to(o, dest, 64).map_err(|e| format!("Failed to create AH: {e}"))?;
            pd.create_ah(&attr).map(Some).map_err(|e| format!("Failed to create AH: {e}"))
        }
    }
}

/// The resources of one side (`struct pingpong_context`).
struct Pp {
    kind: Kind,
    qp: Qp,
    cq: Cq,
    mr: Mr,
    size: u32,
    rx_depth: u32,
    inline: bool,
    ah: Option<Ah>,
    remote_qpn: u32,
    pending: u64,
}

impl Pp {
    /// `pp_post_recv`: posts `n` receives, returns how many were posted.
    fn post_recv(&mut self, n: u32) -> u32 {
        let len = match self.kind {
            Kind::Rc => self.size,
            Kind::Ud => self.size + GRH_LEN as u32,
        };
        let sge = [self.mr.sge(0, len)];
        let sg: &[Sge] = if len == 0 { &[] } else { &sge };
        let wrs = vec![RecvWr { wr_id: RECV_WRID, sg_list: sg }; n as usize];
        match self.qp.post_recv(&wrs) {
            Ok(()) => n,
            Err(e) => e.work_request().unwrap_or(0) as u32,
        }
    }

    /// `pp_post_send`.
    fn post_send(&mut self) -> Result<(), String> {
        let off = match self.kind {
            Kind::Rc => 0,
            Kind::Ud => GRH_LEN,
        };
        let sge = [self.mr.sge(off, self.size)];
        let bytes;
        let data = if self.inline {
            bytes = self.mr.to_vec(off, self.size as usize).map_err(|e| e.to_string())?;
            Payload::Inline(&bytes)
        } else if self.size == 0 {
            Payload::Sges(&[])
        } else {
            Payload::Sges(&sge)
        };
        let flags = SendFlags::SIGNALED;
        match &self.ah {
            Some(ah) => {
                let dest = UdDest { ah, remote_qpn: self.remote_qpn, remote_qkey: QKEY };
                self.qp.post_send_ud(&[UdSendWr { wr_id: SEND_WRID, dest, data, imm: None, flags }])
            }
            None => self.qp.post_send(&[SendWr { wr_id: SEND_WRID, op: SendOp::Send { data, imm: None }, flags }]),
        }
        .map_err(|e| format!("Couldn't post send: {e}"))
    }
}

/// Counters of the completion loop.
struct Counts {
    scnt: u32,
    rcnt: u32,
    routs: u32,
}

/// `parse_single_wc`: counts one completion, tops the receives up, posts the next send.
fn handle_wc(pp: &mut Pp, c: &mut Counts, iters: u32, wc: &Wc) -> Result<(), String> {
    if wc.status != WcStatus::Success {
        return Err(format!("Failed status {} ({}) for wr_id {}", wc.status, wc.status as u32, wc.wr_id as i32));
    }
    match wc.wr_id {
        SEND_WRID => c.scnt += 1,
        RECV_WRID => {
            c.routs = c.routs.saturating_sub(1);
            if c.routs <= 1 {
                c.routs += pp.post_recv(pp.rx_depth - c.routs);
                if c.routs < pp.rx_depth {
                    return Err(format!("Couldn't post receive ({})", c.routs));
                }
            }
            c.rcnt += 1;
        }
        other => return Err(format!("Completion for unknown wr_id {}", other as i32)),
    }
    pp.pending &= !wc.wr_id;
    if c.scnt < iters && pp.pending == 0 {
        pp.post_send()?;
        pp.pending = RECV_WRID | SEND_WRID;
    }
    Ok(())
}

fn stalled(c: &Counts, iters: u32, t: Option<Duration>) -> String {
    format!(
        "no completion within {} s ({} of {iters} sends and {} of {iters} receives completed): \
         is the peer still running?",
        t.map(|d| d.as_secs()).unwrap_or(0),
        c.scnt,
        c.rcnt
    )
}

/// The pages of `buf` that differ from what a `-c` client sends: byte 0 of each page 0, the
/// rest 0x7b.
fn invalid_pages(buf: &[u8], page: usize) -> Vec<usize> {
    let page_ok = |chunk: &[u8]| chunk.iter().enumerate().all(|(i, &b)| b == if i == 0 { 0 } else { FILL });
    buf.chunks(page).enumerate().filter(|(_, c)| !page_ok(c)).map(|(n, _)| n).collect()
}

fn pingpong(ctx: &Context, o: &Opts) -> Result<(), String> {
    let kind = o.kind;
    let port = ctx.query_port(o.ib_port).map_err(|e| format!("Couldn't get port info: {e}"))?;
    if kind == Kind::Ud && o.size > port.active_mtu.bytes() {
        return Err(format!("Requested size larger than port MTU ({})", port.active_mtu.bytes()));
    }
    // pp_init_ctx.
    let channel = if o.events {
        Some(ctx.create_comp_channel().map_err(|e| format!("Couldn't create completion channel: {e}"))?)
    } else {
        None
    };
    let pd = ctx.alloc_pd().map_err(|e| format!("Couldn't allocate PD: {e}"))?;
    let buf_len = o.size as usize + if kind == Kind::Ud { GRH_LEN } else { 0 };
    let mr = pd.alloc_mr(buf_len.max(1), AccessFlags::LOCAL_WRITE).map_err(|e| format!("Couldn't register MR: {e}"))?;
    mr.fill(0, buf_len, FILL).map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(o.rx_depth + 1, channel.as_ref()).map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let qp_type = if kind == Kind::Rc { QpType::Rc } else { QpType::Ud };
    let mut qp = pd
        .create_qp(qp_type, &cq)
        .max_send_wr(1)
        .max_recv_wr(o.rx_depth)
        .build()
        .map_err(|e| format!("Couldn't create QP: {e}"))?;
    let inline = qp.cap.max_inline_data >= o.size;
    // INIT now, so that the receives are posted before the exchange (connect_ctx takes the QP
    // on from INIT). RC: no remote access; UD: the Q_Key.
    let init = ModifyQp::to(QpState::Init).pkey_index(0).port_num(o.ib_port);
    let init = match kind {
        Kind::Rc => init.qp_access_flags(AccessFlags(0)),
        Kind::Ud => init.qkey(QKEY),
    };
    qp.modify(&init).map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    let mut pp =
        Pp { kind, qp, cq, mr, size: o.size, rx_depth: o.rx_depth, inline, ah: None, remote_qpn: 0, pending: 0 };

    let routs = pp.post_recv(o.rx_depth);
    if routs < o.rx_depth {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    if o.events {
        pp.cq.req_notify(false).map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
    }
    if port.link_layer != "Ethernet" && port.lid == 0 {
        return Err("Couldn't get local LID".into());
    }
    let roce = port.link_layer == "Ethernet";
    // Without -g on RoCE: the GID of the port's IPv4 address, as perftest's -x default (rdma-core
    // would send a zero GID, which no RoCE peer can reach).
    let chosen = if o.gidx < 0 && roce {
        let (i, g) = ctx.default_gid().ok_or("the port's GID table is empty: give the device an address (--ip)")?;
        println!("{}", device::auto_gid_line(i, &g, "-g"));
        Some(i as i32)
    } else {
        None
    };
    let o = &Opts { gidx: chosen.unwrap_or(o.gidx), ..o.clone() };
    let gid = if o.gidx >= 0 {
        let fail = |e: String| match kind {
            Kind::Rc => format!("can't read sgid of index {}: {e}", o.gidx),
            Kind::Ud => format!("Could not get local gid for gid index {}: {e}", o.gidx),
        };
        let g = ctx.query_gid(o.ib_port, o.gidx as u32).map_err(|e| fail(e.to_string()))?;
        let table = ctx.gids();
        if g == Gid::default() && !table.iter().any(|(i, _)| *i == o.gidx as u32) {
            let have: Vec<String> = table.iter().map(|(i, g)| format!("{i} ({})", g.to_ip())).collect();
            return Err(fail(format!("the entry is empty; the GID table holds {}", have.join(", "))));
        }
        g
    } else {
        Gid::default()
    };
    let my = Dest { lid: port.lid as u32, qpn: pp.qp.qp_num(), psn: random_psn(), gid };
    let listener = match &o.servername {
        None => Some(listen(o.port)?),
        Some(_) => None,
    };
    println!("{}", my.line(true, kind));

    let rem = match (&o.servername, listener) {
        (Some(host), _) => client_exchange(host, o.port, &my, o.timeout)?,
        (None, Some(l)) => server_exchange(l, &my, o.timeout, |rem| {
            pp.ah = connect_ctx(&pd, &mut pp.qp, o, my.psn, rem)?;
            Ok(())
        })?,
        (None, None) => unreachable!("a server always has its listener"),
    };
    println!("{}", rem.line(false, kind));
    pp.remote_qpn = rem.qpn;
    if o.servername.is_some() {
        pp.ah = connect_ctx(&pd, &mut pp.qp, o, my.psn, &rem)?;
    }

    let page = page_size();
    let data_off = if kind == Kind::Ud { GRH_LEN } else { 0 };
    pp.pending = RECV_WRID;
    if o.servername.is_some() {
        if o.validate {
            for i in (0..o.size as usize).step_by(page) {
                pp.mr.write(data_off + i, &[0]).map_err(|e| e.to_string())?;
            }
        }
        pp.post_send()?;
        pp.pending |= SEND_WRID;
    }

    let start = Instant::now();
    let mut c = Counts { scnt: 0, rcnt: 0, routs };
    let mut num_cq_events = 0u32;
    let mut wc = [Wc::default(); 2];
    // On the software ConnectX, the CPU is given away at every empty poll while others wait for
    // it, as `umlx perf` does (`IdlePolls`): its threads, and the peer process of a ping-pong,
    // may share the core with this loop. At one yield in 256 polls, a ping-pong whose two
    // processes shared one core took 337 - 349 µs per 4 KiB iteration (22 - 24 µs at every
    // poll). On an adapter, one yield in 256 polls.
    let sim_idle = ctx.sim_backend().is_some().then(|| IdlePolls::new(true));
    while c.rcnt < o.iters || c.scnt < o.iters {
        let ne = if let Some(ch) = &channel {
            let waited = Instant::now();
            let ev = loop {
                let slice = o.timeout.unwrap_or(Duration::from_secs(1)).min(Duration::from_secs(1));
                match ch.get_cq_event(slice).map_err(|e| format!("Failed to get cq_event: {e}"))? {
                    Some(ev) => break ev,
                    None if o.timeout.is_some_and(|t| waited.elapsed() >= t) => {
                        return Err(stalled(&c, o.iters, o.timeout));
                    }
                    None => {}
                }
            };
            num_cq_events += 1;
            if !ev.is_for(&pp.cq) {
                return Err(format!("CQ event for unknown CQ {:#x}", ev.cqn()));
            }
            pp.cq.req_notify(false).map_err(|e| format!("Couldn't request CQ notification: {e}"))?;
            pp.cq.poll(&mut wc)
        } else {
            let waited = Instant::now();
            let mut spins = 0u32;
            loop {
                let n = pp.cq.poll(&mut wc);
                if n > 0 {
                    break n;
                }
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(256) && o.timeout.is_some_and(|t| waited.elapsed() >= t) {
                    return Err(stalled(&c, o.iters, o.timeout));
                }
                match &sim_idle {
                    Some(idle) => idle.idle(),
                    None if spins.is_multiple_of(256) => std::thread::yield_now(),
                    None => {}
                }
                std::hint::spin_loop();
            }
        };
        for w in &wc[..ne] {
            handle_wc(&mut pp, &mut c, o.iters, w).map_err(|e| format!("{e}\nparse WC failed {ne}"))?;
        }
    }
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = o.size as u64 * o.iters as u64 * 2;
    println!("{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec", usec / 1e6, bytes as f64 * 8.0 / usec);
    println!("{} iters in {:.2} seconds = {:.2} usec/iter", o.iters, usec / 1e6, usec / o.iters as f64);

    let mut invalid = 0;
    if o.servername.is_none() && o.validate {
        let got = pp.mr.to_vec(data_off, o.size as usize).map_err(|e| e.to_string())?;
        for n in invalid_pages(&got, page) {
            println!("invalid data in page {n}");
            invalid += 1;
        }
    }
    pp.cq.ack_events(num_cq_events);
    drop(pp);
    drop(channel);
    if invalid > 0 {
        return Err(format!("{invalid} page(s) of the received buffer hold unexpected data"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_message_is_byte_exact() {
        // sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, gid) for GID ::ffff:10.77.0.2, then
        // write(sockfd, msg, sizeof msg): 51 characters and the NUL.
        let gid = Gid::from_ip("10.77.0.2".parse().unwrap());
        let d = Dest { lid: 0, qpn: 0x108, psn: 0xabcdef, gid };
        let mut want = b"0000:000108:abcdef:00000000000000000000ffff0a4d0002".to_vec();
        want.push(0);
        assert_eq!(want.len(), MSG_LEN);
        assert_eq!(d.to_wire().to_vec(), want);
        assert_eq!(Dest::from_wire(&want).unwrap(), d);
        // A link-local GID: every byte in order.
        let g = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0x5e, 0xff, 0xfe, 0x10, 0, 1]);
        assert_eq!(gid_to_wire(&g), "fe8000000000000000005efffe100001");
        assert_eq!(wire_to_gid("fe8000000000000000005efffe100001").unwrap(), g);
        // Zero GID (no -g).
        let z = Dest { lid: 0x12, qpn: 0xffffff, psn: 0, gid: Gid::default() };
        assert_eq!(&z.to_wire()[..51], b"0012:ffffff:000000:00000000000000000000000000000000");
        assert_eq!(DONE, b"done\0");
    }

    #[test]
    fn bad_messages_are_clear_errors() {
        for m in
            [&b"garbage"[..], b"0000:000108:abcdef:xyz", b"0000:1000000:000000:00000000000000000000000000000000", b""]
        {
            let e = Dest::from_wire(m).unwrap_err();
            assert!(e.contains("bad exchange string"), "{e}");
        }
        assert!(Dest::from_wire(&[0xff; 52]).unwrap_err().contains("bad exchange string"));
    }

    #[test]
    fn lines_match_rdma_core() {
        let d = Dest { lid: 0, qpn: 0x100, psn: 0x1234, gid: Gid::from_ip("10.77.0.1".parse().unwrap()) };
        assert_eq!(
            d.line(true, Kind::Rc),
            "  local address:  LID 0x0000, QPN 0x000100, PSN 0x001234, GID ::ffff:10.77.0.1"
        );
        assert_eq!(
            d.line(true, Kind::Ud),
            "  local address:  LID 0x0000, QPN 0x000100, PSN 0x001234: GID ::ffff:10.77.0.1"
        );
        assert_eq!(
            d.line(false, Kind::Ud),
            "  remote address: LID 0x0000, QPN 0x000100, PSN 0x001234, GID ::ffff:10.77.0.1"
        );
        let z = Dest { gid: Gid::default(), ..d };
        assert!(z.line(false, Kind::Rc).ends_with("GID ::"));
    }

    #[test]
    fn validation_finds_the_bad_pages() {
        let mut b = vec![FILL; 10000];
        for i in (0..b.len()).step_by(4096) {
            b[i] = 0;
        }
        assert!(invalid_pages(&b, 4096).is_empty());
        b[4097] = 1;
        b[8192] = FILL;
        assert_eq!(invalid_pages(&b, 4096), vec![1, 2]);
        assert!(page_size().is_power_of_two());
    }

    /// The real command line (`umlx rc-pingpong ARGS` / `umlx ud-pingpong ARGS`) through clap,
    /// then the tool's own checks; clap's error text on failure.
    fn parse(kind: Kind, line: &str) -> Result<Opts, String> {
        let argv = ["umlx", kind.name()].into_iter().chain(line.split_whitespace());
        match crate::parse_from(argv).map_err(|e| e.to_string())?.cmd {
            crate::Cmd::RcPingpong(a) => Opts::rc(&a),
            crate::Cmd::UdPingpong(a) => Opts::ud(&a),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn options_follow_getopt_long() {
        let o = parse(Kind::Rc, "").unwrap();
        assert_eq!((o.port, o.size, o.mtu, o.rx_depth, o.iters, o.gidx), (18515, 4096, Mtu::Mtu1024, 500, 1000, -1));
        assert!(o.servername.is_none());
        assert_eq!(o.timeout, Some(Duration::from_secs(30)));
        let o = parse(Kind::Ud, "").unwrap();
        assert_eq!(o.size, 1024);
        let o = parse(Kind::Rc, "-p0x4000 host -ec --size=10000 --it 5 -g 1 -m 2048 --ib-dev=sim").unwrap();
        assert_eq!((o.port, o.size, o.iters, o.gidx, o.mtu), (0x4000, 10000, 5, 1, Mtu::Mtu2048));
        assert!(o.events && o.validate);
        assert_eq!(o.servername.as_deref(), Some("host"));
        // The four getopt_long spellings of a value.
        for line in ["-p18515", "-p 18515", "--port=18515", "--port 18515", "--po 18515"] {
            assert_eq!(parse(Kind::Rc, &format!("{line} -p 1 {line}")).unwrap().port, 18515, "{line}");
        }
        assert_eq!(parse(Kind::Ud, "-p 010 -g1 --timeout 0").unwrap().port, 8, "octal, as strtol base 0");
        assert_eq!(parse(Kind::Ud, "--timeout 0").unwrap().timeout, None);
        assert!(parse(Kind::Rc, "-m 1000").unwrap_err().contains("the MTU is 256, 512, 1024, 2048 or 4096"));
        let e = parse(Kind::Ud, "-m 1024").unwrap_err();
        assert!(e.contains("unexpected argument '-m'") && e.contains("Usage: umlx ud-pingpong"), "ud has no -m: {e}");
        assert!(parse(Kind::Rc, "-o").unwrap_err().contains("ODP"));
        assert!(parse(Kind::Rc, "-t").unwrap_err().contains("timestamp"));
        assert!(parse(Kind::Rc, "-P").unwrap_err().contains("prefetch"));
        assert!(parse(Kind::Rc, "-N -U").is_ok());
        assert!(parse(Kind::Rc, "a b").unwrap_err().contains("unexpected argument 'b'"));
        let e = parse(Kind::Rc, "-s ten").unwrap_err();
        assert!(e.contains("invalid value 'ten' for '--size <size>'") && e.contains("not a number"), "{e}");
        assert!(parse(Kind::Rc, "-l 16").unwrap_err().contains("16 must be between 0 and 15"));
        // Unknown options and missing values name the option and show the usage line.
        let e = parse(Kind::Rc, "-x").unwrap_err();
        assert!(e.contains("unexpected argument '-x'") && e.contains("Usage: umlx rc-pingpong"), "{e}");
        let e = parse(Kind::Rc, "--frobnicate").unwrap_err();
        assert!(e.contains("unexpected argument '--frobnicate'"), "{e}");
        let e = parse(Kind::Rc, "-p").unwrap_err();
        assert!(e.contains("a value is required for '--port <port>'") && e.contains("Usage:"), "{e}");
        let e = parse(Kind::Ud, "host --port").unwrap_err();
        assert!(e.contains("a value is required for '--port <port>'"), "{e}");
        // Device options.
        let o = parse(Kind::Rc, "-d pci:0000:3b:00.0 --ip 192.0.2.1 --ip 192.0.2.2").unwrap();
        assert_eq!(o.dev.ips.len(), 2, "--ip is repeatable");
        assert_eq!(o.dev.device(), device::DeviceArg::Pci("0000:3b:00.0".into()));
        assert!(parse(Kind::Rc, "-d eth0").unwrap_err().contains("unknown device `eth0`"));
        // Help is not an error: clap reports it as such a "failure" with the usage text.
        let e = parse(Kind::Rc, "--help").unwrap_err();
        assert!(e.contains("Usage: umlx rc-pingpong [OPTIONS] [HOST]") && e.contains("--gid-idx"), "{e}");
    }
}
