//! `umlx bench sim` end to end, shortened with its hidden knobs: the built binary runs the
//! in-process WRITE streams and starts its own child processes (the raw UDP ping-pong, perf
//! send-lat and write-lat, rc-pingpong); its JSON must parse and hold every figure as a positive
//! number, with the in-process data check passed. Speed is not asserted.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_umlx");

/// A JSON value (what the report uses).
#[derive(Debug, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(BTreeMap<String, Json>),
}

/// A small strict JSON parser: the whole text must be one value.
struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn parse(text: &str) -> Result<Json, String> {
        let mut p = Parser { s: text.as_bytes(), i: 0 };
        let v = p.value()?;
        p.ws();
        if p.i != p.s.len() {
            return Err(format!("trailing text at byte {}", p.i));
        }
        Ok(v)
    }

    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at byte {}", c as char, self.i))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.s.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut m = BTreeMap::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(m));
                }
                loop {
                    self.ws();
                    let Json::Str(k) = self.value()? else { return Err(format!("a key at byte {}", self.i)) };
                    self.eat(b':')?;
                    let v = self.value()?;
                    if m.insert(k.clone(), v).is_some() {
                        return Err(format!("key {k:?} twice"));
                    }
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(m));
                        }
                        _ => return Err(format!("expected , or }} at byte {}", self.i)),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut v = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(v));
                }
                loop {
                    v.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(v));
                        }
                        _ => return Err(format!("expected , or ] at byte {}", self.i)),
                    }
                }
            }
            Some(b'"') => {
                self.i += 1;
                let start = self.i;
                while self.i < self.s.len() && self.s[self.i] != b'"' {
                    if self.s[self.i] == b'\\' {
                        return Err("escapes are not expected in the report".into());
                    }
                    self.i += 1;
                }
                let s = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?.to_string();
                self.eat(b'"')?;
                Ok(Json::Str(s))
            }
            _ => {
                for (word, v) in [("true", Json::Bool(true)), ("false", Json::Bool(false)), ("null", Json::Null)] {
                    if self.s[self.i..].starts_with(word.as_bytes()) {
                        self.i += word.len();
                        return Ok(v);
                    }
                }
                let start = self.i;
                while self.i < self.s.len() && matches!(self.s[self.i], b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                {
                    self.i += 1;
                }
                let t = std::str::from_utf8(&self.s[start..self.i]).map_err(|e| e.to_string())?;
                t.parse().map(Json::Num).map_err(|_| format!("not a value at byte {start}: {t:?}"))
            }
        }
    }
}

#[test]
fn json_parser_accepts_and_refuses() {
    let v = Parser::parse(r#"{"a": 1.5, "b": {"c": true}, "d": [null, -2e3]}"#).unwrap();
    let Json::Obj(m) = v else { panic!("an object") };
    assert_eq!(m["a"], Json::Num(1.5));
    assert_eq!(m["d"], Json::Arr(vec![Json::Null, Json::Num(-2000.0)]));
    assert!(Parser::parse(r#"{"a": 1,}"#).is_err());
    assert!(Parser::parse(r#"{"a": 1} x"#).is_err());
    assert!(Parser::parse(r#"{"a": 1.2.3}"#).is_err());
}

#[test]
fn bench_sim_reports_every_figure() {
    let args =
        ["bench", "sim", "--json", "--messages", "20000", "--bulk-mib", "8", "--round-trips", "1000", "--iters", "100"];
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting umlx");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(240);
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for umlx") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`umlx {}` did not finish in 240 s; stderr: {}", args.join(" "), err_reader.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (reader.join().unwrap(), err_reader.join().unwrap());
    assert!(status.success(), "`umlx {}` failed ({status}):\nstdout: {stdout}\nstderr: {stderr}", args.join(" "));
    let lines: Vec<&str> = stdout.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one JSON line expected: {stdout}");
    let Json::Obj(m) = Parser::parse(lines[0]).unwrap_or_else(|e| panic!("{e}: {stdout}")) else {
        panic!("not an object: {stdout}")
    };
    let num = |k: &str| match m.get(k) {
        Some(Json::Num(v)) => *v,
        other => panic!("{k}: {other:?} in {stdout}"),
    };
    for k in [
        "inprocess_write64_msgs_per_s",
        "inprocess_write64k_gb_per_s",
        "rss_kib_after_warmup",
        "rss_kib_after_run",
        "raw_udp_rtt_p50_us",
        "raw_udp_half_rtt_us",
        "raw_udp_rtt_p99_us",
        "send_lat_p50_us",
        "write_lat_p50_us",
        "rc_pingpong_4k_us",
        "target_inprocess_write64_msgs_per_s",
        "target_inprocess_write64k_gb_per_s",
        "target_send_lat_p50_us",
        "target_write_lat_p50_us",
        "target_rc_pingpong_4k_us",
    ] {
        let v = num(k);
        assert!(v.is_finite() && v > 0.0, "{k} = {v} in {stdout}");
    }
    assert_eq!(m.get("inprocess_write_data_verified"), Some(&Json::Bool(true)), "{stdout}");
    assert_eq!(num("inprocess_write64_messages"), 20000.0);
    assert_eq!(num("inprocess_write64k_bytes"), (8u64 << 20) as f64);
    assert_eq!(num("rss_kib_growth"), num("rss_kib_after_run") - num("rss_kib_after_warmup"));
    assert!((num("raw_udp_half_rtt_us") - num("raw_udp_rtt_p50_us") / 2.0).abs() < 1e-3, "{stdout}");
    assert_eq!(num("target_rss_kib_growth"), 0.0);
    for k in ["ratio_to_target", "pass"] {
        assert!(matches!(m.get(k), Some(Json::Obj(o)) if !o.is_empty()), "{k} in {stdout}");
    }
    assert!(matches!(m.get("all_pass"), Some(Json::Bool(_))), "{stdout}");
}
