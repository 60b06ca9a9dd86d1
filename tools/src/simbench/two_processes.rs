//! The two-process figures: the child processes and their supervision, each pair pinned to
//! two CPUs; the raw reference (`umlx bench udp-echo`); `umlx perf` latencies and
//! `umlx rc-pingpong`.

use super::*;

// ---------------------------------------------------------------------------------------------
// Child processes.

/// A child `umlx` process: stdout read line by line as it comes, stderr collected. Dropping it
/// kills it (if it still runs) and reaps it.
struct Kid {
    /// `umlx ARGS` (for messages).
    cmd: String,
    child: Child,
    lines: mpsc::Receiver<String>,
    stdout: Vec<String>,
    stderr: Option<JoinHandle<String>>,
    exited: Option<std::process::ExitStatus>,
}

impl Kid {
    /// `umlx ARGS`, on CPU `cpu` alone if given (`taskset -c CPU`).
    fn spawn(args: &[String], cpu: Option<usize>) -> Result<Kid, String> {
        let pin = cpu.map(|c| format!("taskset -c {c} ")).unwrap_or_default();
        let cmd = format!("{pin}umlx {}", args.join(" "));
        let exe = std::env::current_exe().map_err(|e| format!("finding this program to run `{cmd}`: {e}"))?;
        let mut command = match cpu {
            Some(c) => {
                let mut t = Command::new("taskset");
                t.arg("-c").arg(c.to_string()).arg(exe);
                t
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting `{cmd}`: {e}"))?;
        let (out, err) = (child.stdout.take(), child.stderr.take());
        let (tx, lines) = mpsc::channel();
        if let Some(out) = out {
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines().map_while(Result::ok) {
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = err.map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        });
        Ok(Kid { cmd, child, lines, stdout: Vec::new(), stderr, exited: None })
    }

    /// Takes the stdout lines that arrived.
    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            self.stdout.push(l);
        }
    }

    /// Whether it exited (recording how).
    fn poll_exit(&mut self) -> Result<bool, String> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().map_err(|e| format!("waiting for `{}`: {e}", self.cmd))?;
        }
        Ok(self.exited.is_some())
    }

    /// Kills it (if it runs) and reaps it.
    fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            self.exited = self.child.wait().ok();
        }
    }

    /// The last lines of its stderr (after it exited or was killed).
    fn stderr_tail(&mut self) -> String {
        let all = self.stderr.take().and_then(|h| h.join().ok()).unwrap_or_default();
        let lines: Vec<&str> = all.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(8)..].join("\n    ");
        if tail.is_empty() { "(nothing on stderr)".into() } else { format!("stderr:\n    {tail}") }
    }

    /// An error about it, killing it first: `why` and its stderr's tail.
    fn fail(&mut self, why: &str) -> String {
        self.kill();
        let tail = self.stderr_tail();
        format!("`{}` {why}; {tail}", self.cmd)
    }

    /// Waits until a stdout line contains `pat` (before `deadline`, and while it runs).
    fn wait_line(&mut self, pat: &str, deadline: Instant) -> Result<(), String> {
        loop {
            self.drain();
            if self.stdout.iter().any(|l| l.contains(pat)) {
                return Ok(());
            }
            if self.poll_exit()? {
                // Lines written just before the exit may still be in the pipe.
                while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(200)) {
                    self.stdout.push(l);
                }
                if self.stdout.iter().any(|l| l.contains(pat)) {
                    return Ok(());
                }
                let st = self.exited.map(|s| s.to_string()).unwrap_or_default();
                return Err(self.fail(&format!("exited ({st}) before printing a line with {pat:?}")));
            }
            if Instant::now() > deadline {
                return Err(self.fail(&format!("printed no line with {pat:?} within {} s", CHILD_LIMIT.as_secs())));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Its stdout, once it exited (all of it: the reader reaches the end of the pipe).
    fn output(&mut self) -> Vec<String> {
        while let Ok(l) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.stdout.push(l);
        }
        std::mem::take(&mut self.stdout)
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits for both processes to exit successfully (before `deadline`); the first failure, or the
/// timeout, kills the other and is the error. Returns their stdout (server's, client's).
fn finish_pair(server: &mut Kid, client: &mut Kid, deadline: Instant) -> Result<(Vec<String>, Vec<String>), String> {
    /// Whether `k` exited; an error (after killing `other`) when it failed.
    fn check(k: &mut Kid, other: &mut Kid) -> Result<bool, String> {
        if !k.poll_exit()? {
            return Ok(false);
        }
        if let Some(st) = k.exited.filter(|s| !s.success()) {
            other.kill();
            return Err(k.fail(&format!("failed ({st})")));
        }
        Ok(true)
    }
    loop {
        let s = check(server, client)?;
        let c = check(client, server)?;
        if s && c {
            return Ok((server.output(), client.output()));
        }
        if Instant::now() > deadline {
            let who = if s { &mut *client } else { &mut *server };
            let e = who.fail(&format!("did not finish within {} s (killed)", CHILD_LIMIT.as_secs()));
            server.kill();
            client.kill();
            return Err(e);
        }
        server.drain();
        client.drain();
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Two free UDP ports on 127.0.0.1: bound to port 0, noted, released.
fn free_udp_ports() -> Result<(u16, u16), String> {
    let a = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("finding a free UDP port: {e}"))?;
    let b = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("finding a free UDP port: {e}"))?;
    let port = |s: &UdpSocket| s.local_addr().map(|a| a.port()).map_err(|e| format!("a UDP socket's port: {e}"));
    Ok((port(&a)?, port(&b)?))
}

fn free_tcp_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free TCP port: {e}"))?;
    l.local_addr().map(|a| a.port()).map_err(|e| format!("a TCP listener's port: {e}"))
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Runs a server and a client of `umlx TOOL ARGS` (with `-p` chosen here) on the automatic
/// wire, as a user runs them: each process's sim a member of the loopback LAN, with a MAC and
/// an IP of its own. The client is started once the server printed a line with `ready`.
/// Returns the client's stdout.
fn run_pair(tool: &[&str], args: &[String], ready: &str) -> Result<Vec<String>, String> {
    run_pair_on(tool, args, ready, pair_cpus())
}

/// [`run_pair`] with the server on `cpus[0]` and the client on `cpus[1]` (unpinned: `None`).
fn run_pair_on(tool: &[&str], args: &[String], ready: &str, cpus: Option<[usize; 2]>) -> Result<Vec<String>, String> {
    let tcp = free_tcp_port()?.to_string();
    let mut server = strings(tool);
    server.extend(args.iter().cloned());
    server.extend(strings(&["-p", &tcp]));
    let mut client = server.clone();
    client.push("127.0.0.1".into());
    run_two(&server, &client, ready, cpus)
}

/// The CPUs the two processes of each pair (the raw reference's and the tests') are pinned to,
/// one each: the first two this process may run on, when it may run on two and `taskset` is
/// there. Unpinned, the scheduler kept both busy-polling processes of a pair on one core of
/// two for whole runs now and then, each turn of the ping-pong then waiting for the other's
/// yield: `send-lat`/`write-lat` medians of 8.3 - 11.5 µs (8.4 with both pinned to one core)
/// in 5 and 7 of the 12 latency figures of two sets of six full runs of the binary of
/// `8d63463`, against 5.1 - 6.8 µs in six runs with each process on a core of its own.
pub(super) fn pair_cpus() -> Option<[usize; 2]> {
    // Found once: every pair of the run is placed alike.
    static PAIR_CPUS: std::sync::OnceLock<Option<[usize; 2]>> = std::sync::OnceLock::new();
    *PAIR_CPUS.get_or_init(|| {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let list = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
        let mut cpus = cpu_list(list.trim())?.into_iter();
        let pair = [cpus.next()?, cpus.next()?];
        let taskset = Command::new("taskset").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status();
        taskset.is_ok_and(|s| s.success()).then_some(pair)
    })
}

/// The CPUs of a list as the kernel writes it ("0-3,8,10-11"), in order; `None` if malformed.
fn cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                cpus.extend(a..=b.min(a + 4096));
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Runs `umlx SERVER_ARGS`, then, once it printed a line with `ready`, `umlx CLIENT_ARGS`, both
/// within [`CHILD_LIMIT`], the server on `cpus[0]` and the client on `cpus[1]` (unpinned:
/// `None`); returns the client's stdout.
fn run_two(
    server_args: &[String],
    client_args: &[String],
    ready: &str,
    cpus: Option<[usize; 2]>,
) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + CHILD_LIMIT;
    let mut server = Kid::spawn(server_args, cpus.map(|c| c[0]))?;
    server.wait_line(ready, deadline)?;
    let mut client = Kid::spawn(client_args, cpus.map(|c| c[1]))?;
    let (_, out) = finish_pair(&mut server, &mut client, deadline)?;
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// The raw reference: a UDP ping-pong between two busy-polling processes.

/// Runs `umlx bench udp-echo` (one side).
pub fn run_udp_echo(a: &UdpEchoArgs) -> Result<(), String> {
    let sock = UdpSocket::bind(a.local).map_err(|e| format!("binding UDP {}: {e}", a.local))?;
    sock.connect(a.peer).map_err(|e| format!("UDP connect to {}: {e}", a.peer))?;
    sock.set_nonblocking(true).map_err(|e| format!("UDP socket: {e}"))?;
    if a.role == "server" { echo_server(&sock) } else { echo_client(&sock, a.warmup, a.iters) }
}

/// The sequence number of the client's last packet.
const STOP: u64 = u64::MAX;

/// Echoes every 64-byte packet until the stop packet; gives up after 30 s without a packet.
fn echo_server(sock: &UdpSocket) -> Result<(), String> {
    println!("udp-echo server ready on {}", sock.local_addr().map_err(|e| e.to_string())?);
    let mut buf = [0u8; 64];
    let mut last = Instant::now();
    let mut spins = 0u32;
    loop {
        match sock.recv(&mut buf) {
            Ok(64) => {
                if u64::from_le_bytes(buf[..8].try_into().unwrap_or_default()) == STOP {
                    return Ok(());
                }
                send64(sock, &buf)?;
                last = Instant::now();
            }
            Ok(n) => return Err(format!("udp-echo server: a packet of {n} bytes (expected 64)")),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(4096) && last.elapsed() > Duration::from_secs(30) {
                    return Err("udp-echo server: no packet for 30 s".into());
                }
            }
            Err(e) => return Err(format!("udp-echo server: recv: {e}")),
        }
    }
}

/// Sends 64 bytes, retrying while the socket buffer is full.
fn send64(sock: &UdpSocket, buf: &[u8; 64]) -> Result<(), String> {
    loop {
        match sock.send(buf) {
            Ok(_) => return Ok(()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => {}
            Err(e) => return Err(format!("udp-echo: send: {e}")),
        }
    }
}

/// `warmup` then `iters` round trips, each timed from the send to the echo of its sequence
/// number (resent after 100 ms without it); prints the median and the 99th percentile.
fn echo_client(sock: &UdpSocket, warmup: u64, iters: u64) -> Result<(), String> {
    let mut samples = Vec::with_capacity(iters as usize);
    let mut out = [0u8; 64];
    let mut back = [0u8; 64];
    for i in 0..warmup + iters {
        out[..8].copy_from_slice(&i.to_le_bytes());
        out[8] = i as u8;
        let t = Instant::now();
        let mut sent = t;
        send64(sock, &out)?;
        let mut spins = 0u32;
        loop {
            match sock.recv(&mut back) {
                Ok(64) if back[..8] == out[..8] => break,
                Ok(_) => {} // a late echo of a resent packet
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::ConnectionRefused) => {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(1024) {
                        if t.elapsed() > Duration::from_secs(30) {
                            return Err(format!("udp-echo client: no echo of round trip {i} within 30 s"));
                        }
                        if sent.elapsed() > Duration::from_millis(100) {
                            send64(sock, &out)?;
                            sent = Instant::now();
                        }
                    }
                }
                Err(e) => return Err(format!("udp-echo client: recv: {e}")),
            }
        }
        if i >= warmup {
            samples.push(t.elapsed().as_secs_f64() * 1e6);
        }
    }
    for _ in 0..3 {
        send64(sock, &{
            let mut s = [0u8; 64];
            s[..8].copy_from_slice(&STOP.to_le_bytes());
            s
        })?;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| samples[((samples.len() as f64 * q) as usize).min(samples.len() - 1)];
    println!("udp-echo: {iters} round trips of 64 bytes: p50 {:.3} us, p99 {:.3} us", at(0.5), at(0.99));
    Ok(())
}

/// The raw UDP round trip (p50, p99 in µs): `umlx bench udp-echo` as two processes.
pub(super) fn raw_udp(round_trips: u64) -> Result<(f64, f64), String> {
    let (ua, ub) = free_udp_ports()?;
    let side = |role: &str, local: u16, peer: u16| -> Vec<String> {
        strings(&[
            "bench",
            "udp-echo",
            "--role",
            role,
            "--local",
            &format!("127.0.0.1:{local}"),
            "--peer",
            &format!("127.0.0.1:{peer}"),
            "--iters",
            &round_trips.to_string(),
            "--warmup",
            &(round_trips / 10).to_string(),
        ])
    };
    let client = side("client", ub, ua);
    let out = run_two(&side("server", ua, ub), &client, "ready", pair_cpus())?;
    let line = out
        .iter()
        .find(|l| l.starts_with("udp-echo:"))
        .ok_or_else(|| format!("`umlx {}` printed no result line (stdout: {out:?})", client.join(" ")))?;
    let num = |key: &str| -> Result<f64, String> {
        line.split(key)
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .and_then(|v| v.trim_end_matches(',').parse().ok())
            .ok_or_else(|| format!("no {key:?} number in the udp-echo line {line:?}"))
    };
    Ok((num("p50 ")?, num("p99 ")?))
}

/// The median and the 99th percentile of the one-way latency (µs) of `umlx perf TEST -s 64` as
/// two processes.
pub(super) fn perf_lat(test: &str, iters: Option<u64>) -> Result<(f64, f64), String> {
    let mut args = strings(&["-s", "64", "-d", "sim", "--no-progress"]);
    if let Some(n) = iters {
        args.extend(["-n".into(), n.to_string()]);
    }
    // The row: bytes, iterations, t_min, t_max, t_typical, t_avg, t_stdev, 99% percentile,
    // 99.9% percentile.
    let table = PerfTable::of(test, &args, "t_typical")?;
    Ok((table.column(4, "t_typical")?, table.column(7, "99% percentile")?))
}

/// The message rate (messages per second) of `umlx perf TEST -s 64 -n ITERS` (a bandwidth
/// test) as two processes: its MsgRate column.
pub(super) fn perf_bw_rate(test: &str, iters: u64) -> Result<f64, String> {
    let args = strings(&["-s", "64", "-n", &iters.to_string(), "-d", "sim", "--no-progress"]);
    // The row: bytes, iterations, BW peak, BW average, MsgRate (Mpps).
    let table = PerfTable::of(test, &args, "MsgRate")?;
    Ok(table.column(4, "MsgRate")? * 1e6)
}

/// The result row of a run of `umlx perf TEST ARGS` as two processes (the client's).
struct PerfTable {
    test: String,
    row: String,
}

impl PerfTable {
    /// Runs the pair; the row is the first line after the header line with `header` in it.
    fn of(test: &str, args: &[String], header: &str) -> Result<PerfTable, String> {
        let out = run_pair(&["perf", test], args, "Waiting for client")?;
        let at = out
            .iter()
            .position(|l| l.contains(header))
            .ok_or_else(|| format!("`umlx perf {test}` (client) printed no result table: {}", out.join("\n")))?;
        let row = out[at + 1..].iter().find(|l| !l.trim().is_empty()).cloned().unwrap_or_default();
        Ok(PerfTable { test: test.to_string(), row })
    }

    /// Column `n` (from 0) of the row, as a number; `name` for the error.
    fn column(&self, n: usize, name: &str) -> Result<f64, String> {
        self.row
            .split_whitespace()
            .nth(n)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("`umlx perf {}` (client): no {name} in the row {:?}", self.test, self.row))
    }
}

/// Runs of `umlx rc-pingpong` whose median the report gives.
pub(super) const PINGPONG_RUNS: usize = 3;

/// The time per iteration (µs) of `umlx rc-pingpong -s 4096` as two processes: the median of
/// [`PINGPONG_RUNS`] runs, and each run's.
///
/// A run's figure is its mean over all its iterations (as `ibv_rc_pingpong` prints it), so a
/// run whose two processes the scheduler keeps on one core for a while comes out several times
/// slower as a whole (260 - 370 µs per iteration with both pinned to one core of two, 23 - 27
/// µs on two): one such run decided the figure before. The latencies are medians of their
/// iterations, and the raw reference too, so they need no such care.
pub(super) fn rc_pingpong(iters: Option<u64>) -> Result<(f64, Vec<f64>), String> {
    let mut runs = Vec::with_capacity(PINGPONG_RUNS);
    for _ in 0..PINGPONG_RUNS {
        runs.push(rc_pingpong_once(iters, pair_cpus())?);
    }
    Ok((crate::bench::median(runs.clone()), runs))
}

/// The time per iteration (µs) of one run of `umlx rc-pingpong -s 4096` with both processes on
/// one CPU (the first of [`pair_cpus`]), as on a machine with a core for the two: each turn of
/// the ping-pong waits for the other process to yield the CPU (`umlx`'s polls yield when others
/// wait for theirs). `None` where the processes cannot be pinned.
pub(super) fn rc_pingpong_one_cpu(iters: Option<u64>) -> Result<Option<f64>, String> {
    let Some([cpu, _]) = pair_cpus() else { return Ok(None) };
    rc_pingpong_once(iters, Some([cpu, cpu])).map(Some)
}

/// One run of `umlx rc-pingpong -s 4096` as two processes, on `cpus` ([`run_pair_on`]): its
/// time per iteration (µs).
fn rc_pingpong_once(iters: Option<u64>, cpus: Option<[usize; 2]>) -> Result<f64, String> {
    let mut args = strings(&["-s", "4096"]);
    if let Some(n) = iters {
        args.extend(["-n".into(), n.to_string()]);
    }
    let out = run_pair_on(&["rc-pingpong"], &args, "local address", cpus)?;
    let line = out
        .iter()
        .find(|l| l.contains("usec/iter"))
        .ok_or_else(|| format!("`umlx rc-pingpong` (client) printed no usec/iter line: {}", out.join("\n")))?;
    line.split("= ")
        .nth(1)
        .and_then(|v| v.trim_end_matches(" usec/iter").trim().parse().ok())
        .ok_or_else(|| format!("`umlx rc-pingpong` (client): no number in {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_read_as_the_kernel_writes_them() {
        assert_eq!(cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(cpu_list("3"), Some(vec![3]));
        assert_eq!(cpu_list(""), Some(vec![]));
        assert_eq!(cpu_list("0-x"), None);
        assert_eq!(cpu_list("a"), None);
    }
}
