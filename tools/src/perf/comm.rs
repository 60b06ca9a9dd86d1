//! The TCP session beside the RDMA traffic: connecting (client) or accepting (server) on port
//! 18515, and the exchanges of `exchange.rs` in perftest's order and direction (the client
//! writes first and then reads, the server reads first and then writes).

use super::exchange::{
    self, BwReportWire, DEST_MSG_LEN, Dest, NEGOTIATE_LEN, NEGOTIATE_LEN_MLX5DV, Negotiate, VERSION_LEN,
};
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// How long a client keeps retrying a refused connection (the server may still be starting).
const CONNECT_RETRY: Duration = Duration::from_secs(5);

/// One side of the exchange.
pub struct Session {
    stream: TcpStream,
    client: bool,
    /// The version the peer announced (0 before [`Session::versions`]).
    pub remote_version: f64,
}

fn io_err(what: &str, e: std::io::Error) -> String {
    match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => format!(
            "{what}: the peer closed the connection (during the exchange: it probably rejected our parameters, see its output)"
        ),
        _ => format!("{what}: {e}"),
    }
}

impl Session {
    /// Connects to `host:port` (retrying refused connections for a few seconds).
    pub fn connect(host: &str, port: u16) -> Result<Session, String> {
        let addrs: Vec<SocketAddr> = (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("resolving {host}: {e}"))?
            .filter(|a| a.is_ipv4())
            .collect();
        if addrs.is_empty() {
            return Err(format!("{host} has no IPv4 address"));
        }
        let start = Instant::now();
        loop {
            let mut last = None;
            for a in &addrs {
                match TcpStream::connect(a) {
                    Ok(s) => return Session::new(s, true),
                    Err(e) => last = Some(e),
                }
            }
            let e = last.unwrap_or_else(|| std::io::Error::other("no address"));
            if e.kind() != ErrorKind::ConnectionRefused || start.elapsed() > CONNECT_RETRY {
                return Err(format!("couldn't connect to {host}:{port}: {e}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Listens on `port` (all IPv4 addresses) and accepts one client.
    pub fn accept(port: u16) -> Result<Session, String> {
        let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, port))
            .map_err(|e| format!("couldn't listen to port {port}: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept on port {port}: {e}"))?;
        Session::new(s, false)
    }

    fn new(stream: TcpStream, client: bool) -> Result<Session, String> {
        stream.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
        Ok(Session { stream, client, remote_version: 0.0 })
    }

    fn send(&mut self, what: &str, b: &[u8]) -> Result<(), String> {
        // One write per message: perftest reads each message with a single read().
        self.stream.write_all(b).map_err(|e| io_err(what, e))
    }

    fn recv(&mut self, what: &str, b: &mut [u8]) -> Result<(), String> {
        self.stream.read_exact(b).map_err(|e| io_err(what, e))
    }

    /// Exchanges one item: `mine` goes out, the peer's item of the same length comes back.
    pub fn xchg(&mut self, what: &str, mine: &[u8]) -> Result<Vec<u8>, String> {
        let mut theirs = vec![0u8; mine.len()];
        if self.client {
            self.send(what, mine)?;
            self.recv(what, &mut theirs)?;
        } else {
            self.recv(what, &mut theirs)?;
            self.send(what, mine)?;
        }
        Ok(theirs)
    }

    /// Step 1: versions. Fails (as perftest) when the peer is older than 5.70.
    pub fn versions(&mut self) -> Result<f64, String> {
        let theirs = self.xchg("version exchange", &exchange::encode_version(exchange::PROTOCOL_VERSION))?;
        let v = exchange::parse_version(&theirs[..VERSION_LEN]);
        if !exchange::version_at_least(v, 570) {
            return Err(format!(
                "the peer announced version {:?}: not compatible with versions older than 5.70",
                exchange::field_text(&theirs)
            ));
        }
        self.remote_version = v;
        Ok(v)
    }

    /// Step 2: page size and cache-line size; returns the larger of each side's values.
    pub fn sys_data(&mut self, cycle_buffer: i32, cache_line: i32) -> Result<(i32, i32), String> {
        if !exchange::version_at_least(self.remote_version, 532) {
            return Ok((cycle_buffer, cache_line));
        }
        let c = exchange::decode_be_i32(&self.xchg("page size exchange", &exchange::encode_be_i32(cycle_buffer))?);
        let l = exchange::decode_be_i32(&self.xchg("cache line exchange", &exchange::encode_be_i32(cache_line))?);
        Ok((cycle_buffer.max(c), cache_line.max(l)))
    }

    /// Step 3: MTU (`enum ibv_mtu` value); returns the smaller of the two when the peer's is valid.
    pub fn mtu(&mut self, mtu_enum: u32) -> Result<u32, String> {
        let len = exchange::mtu_msg_len(self.remote_version);
        if len == 0 {
            return Ok(mtu_enum);
        }
        let theirs = self.xchg("MTU exchange", &exchange::encode_mtu(mtu_enum, len))?;
        Ok(match exchange::decode_mtu(&theirs) {
            Some(r) if r < mtu_enum => r,
            _ => mtu_enum,
        })
    }

    /// Step 4: parameter negotiation (peers of 6.28 and later); `None` with older peers.
    ///
    /// The block is 320 bytes from a perftest built with libmlx5 and 312 without. A client
    /// sends `client_len` bytes; a server reads 312 and takes 8 more when the client sent them
    /// (they come in the same write), then answers with the same length.
    pub fn negotiate(&mut self, local: &Negotiate, client_len: usize) -> Result<Option<Negotiate>, String> {
        if !exchange::version_at_least(self.remote_version, 628) {
            return Ok(None);
        }
        let what = "parameter negotiation";
        let theirs = if self.client {
            let theirs = self.xchg(what, &local.encode(client_len))?;
            Negotiate::decode(&theirs)?
        } else {
            let mut b = vec![0u8; NEGOTIATE_LEN];
            self.recv(what, &mut b)?;
            let len = if self.more_within(NEGOTIATE_LEN_MLX5DV - NEGOTIATE_LEN, &mut b)? {
                NEGOTIATE_LEN_MLX5DV
            } else {
                NEGOTIATE_LEN
            };
            self.send(what, &local.encode(len))?;
            Negotiate::decode(&b)?
        };
        Ok(Some(theirs))
    }

    /// Reads `n` more bytes onto `b` if they start arriving within a short time.
    fn more_within(&mut self, n: usize, b: &mut Vec<u8>) -> Result<bool, String> {
        let what = "parameter negotiation";
        self.stream.set_read_timeout(Some(Duration::from_millis(300))).map_err(|e| io_err(what, e))?;
        let mut extra = vec![0u8; n];
        let got = match self.stream.read(&mut extra) {
            Ok(0) => Err(io_err(what, ErrorKind::UnexpectedEof.into())),
            Ok(k) => Ok(k),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(0),
            Err(e) => Err(io_err(what, e)),
        };
        self.stream.set_read_timeout(None).map_err(|e| io_err(what, e))?;
        let got = got?;
        if got == 0 {
            return Ok(false);
        }
        self.recv(what, &mut extra[got..])?;
        b.extend_from_slice(&extra);
        Ok(true)
    }

    /// One destination exchange (connection data, and every later sync).
    pub fn hand_shake(&mut self, mine: &Dest) -> Result<Dest, String> {
        let theirs = self.xchg("connection data exchange", &mine.encode())?;
        Dest::decode(&theirs[..DEST_MSG_LEN])
    }

    /// The result exchange of the passive-server tests: five fields, one exchange each.
    pub fn bw_reports(&mut self, mine: &BwReportWire) -> Result<BwReportWire, String> {
        let mut theirs = Vec::new();
        for f in mine.fields(self.remote_version) {
            theirs.push(self.xchg("result exchange", &f)?);
        }
        BwReportWire::from_fields(&theirs)
    }
}
