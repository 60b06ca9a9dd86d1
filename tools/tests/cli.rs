//! The small commands: `umlx layout` (generated from hwdesc) and `umlx wire decode` (the sim's
//! codec on real ConnectX captures).

#![forbid(unsafe_code)]

use std::process::{Command, Stdio};
use umlx_hwdesc::ifc::{create_qp_in, qpc};
use umlx_hwdesc::plain::cqe64;

fn umlx(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_umlx")).args(args).output().expect("running umlx");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a Python one-liner on `input` (Python's JSON parser is on every CI machine); its
/// output, or `None` if it failed (not valid JSON).
fn python(script: &str, input: &str) -> Option<String> {
    use std::io::Write;
    let mut py = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    py.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = py.wait_with_output().unwrap();
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

#[test]
fn layout_json_is_generated_from_the_declarations() {
    let (ok, json, err) = umlx(&["layout", "--json"]);
    assert!(ok, "{err}");
    assert!(json.starts_with("{\"ifc\": {") && json.contains("\"plain\": {"));
    // Figures taken from the declarations themselves.
    let qpc_entry = format!("\"qpc\": {{\"size_bits\": {}, \"fields\": {{", qpc::SIZE_BITS);
    assert!(json.contains(&qpc_entry), "qpc size");
    let f = format!("\"log_sq_size\": {{\"offset_bits\": {}, \"width_bits\": 4}}", qpc::log_sq_size.offset_bits);
    assert!(json.contains(&f), "qpc.log_sq_size");
    let nested =
        format!("\"qpc\": {{\"offset_bits\": {}, \"width_bits\": {}}}", create_qp_in::qpc.offset_bits, qpc::SIZE_BITS);
    assert!(json.contains(&nested), "create_qp_in.qpc is one field as wide as qpc");
    let plain = format!("\"cqe64\": {{\"size_bytes\": {}, \"fields\": {{", cqe64::SIZE);
    assert!(json.contains(&plain), "cqe64");
    assert!(json.contains("\"op_own\": {\"offset_bytes\": 63, \"size_bytes\": 1}"));
    assert!(!json.contains("r#"), "raw identifiers are printed by their real name");
    // Well-formed JSON: Python's parser must accept it.
    let counts = python("import json,sys; d=json.load(sys.stdin); print(len(d['ifc']), len(d['plain']))", &json)
        .expect("the layout dump is not valid JSON");
    let n: Vec<usize> = counts.split_whitespace().map(|x| x.parse().unwrap()).collect();
    assert_eq!(n, vec![umlx_hwdesc::registry::IFC.len(), umlx_hwdesc::registry::PLAIN.len()]);
}

#[test]
fn layout_table_of_one_struct() {
    let (ok, out, _) = umlx(&["layout", "qpc"]);
    assert!(ok);
    assert!(out.starts_with(&format!("qpc ({} bits", qpc::SIZE_BITS)));
    assert!(
        out.lines()
            .any(|l| l.trim_end().ends_with("log_sq_size")
                && l.contains(&format!("{:#x}", qpc::log_sq_size.offset_bits)))
    );
    let (ok, _, err) = umlx(&["layout", "no_such_struct"]);
    assert!(!ok && err.contains("no structure named `no_such_struct`"));
}

#[test]
#[cfg_attr(not(umlx_vectors), ignore = "needs ../shared/rocev2_vectors or UMLX_VECTORS=DIR")]
fn wire_decode_prints_every_frame_of_a_real_capture() {
    let pcap = concat!(env!("UMLX_VECTORS_DIR"), "/read2.pcap");
    let (ok, out, err) = umlx(&["wire", "decode", pcap]);
    assert!(ok, "{err}");
    assert!(out.contains("RC_RDMA_READ_REQUEST"), "{out}");
    assert!(out.contains("RC_RDMA_READ_RESPONSE_ONLY"));
    assert!(!out.contains("icrc=BAD"));
    let (ok, _, err) = umlx(&["wire", "decode", "/nonexistent.pcap"]);
    assert!(!ok && err.contains("/nonexistent.pcap"));
}

#[test]
fn bench_datapath_json_reports_every_kernel() {
    // Each kernel checks that every one of its operations succeeded (and, for polling, that
    // every CQE is a successful completion); a failure makes the command fail.
    let (ok, out, err) = umlx(&["bench", "datapath", "--json", "--no-instructions"]);
    assert!(ok, "{err}");
    let kernels = python(
        "import json,sys; d=json.load(sys.stdin); \
         print(' '.join(sorted(k for k, v in d.items() if v['ns'] > 0 and v['instructions'] is None)))",
        &out,
    );
    assert_eq!(
        kernels.as_deref(),
        Some(
            "poll_cq_batch1 poll_cq_batch16 poll_cq_empty poll_cq_empty_wire poll_cq_room16_one post_recv_1 \
             post_send_1 post_send_chain32 post_send_inline64"
        ),
        "{out}"
    );
    assert!(out.contains("\"poll_cq_batch16\": {\"ns\": "), "{out}");
    assert!(out.contains("\"rdma_core_instructions\": 308, \"target_instructions\": 100"), "{out}");
    assert!(out.contains("\"rdma_core_instructions\": 180, \"target_instructions\": 60"), "{out}");
    assert!(out.contains("\"rdma_core_instructions\": 83, \"target_instructions\": 25"), "{out}");
}

#[test]
fn bench_sim_json_reports_every_figure() {
    // Shortened with the hidden knobs. The command supervises its own child processes (each is
    // killed after 120 s) and fails on a stalled WRITE stream or a wrong last message, so a
    // success means the in-process data check passed. Speed is not asserted.
    let args =
        ["bench", "sim", "--json", "--messages", "20000", "--bulk-mib", "8", "--round-trips", "1000", "--iters", "100"];
    let (ok, out, err) = umlx(&args);
    assert!(ok, "`umlx {}` failed:\nstdout: {out}\nstderr: {err}", args.join(" "));
    let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one JSON line expected: {out}");
    // Strict: a key twice or a non-finite number is an error; every figure and target a
    // positive number; the derived figures consistent with the measured ones.
    let verdict = python(
        r#"
import json, math, sys
def pairs(kv):
    d = {}
    for k, v in kv:
        if k in d: sys.exit('key %r twice' % k)
        d[k] = v
    return d
def constant(c): sys.exit('non-finite number ' + c)
d = json.loads(sys.stdin.read(), object_pairs_hook=pairs, parse_constant=constant)
def num(k):
    v = d.get(k)
    if type(v) not in (int, float): sys.exit('%s: %r' % (k, v))
    return v
keys = ['inprocess_write64_msgs_per_s', 'inprocess_write64k_gb_per_s', 'rss_kib_after_warmup',
        'inprocess_write64_parallel_msgs_per_s',
        'rss_kib_after_run', 'rss_anon_kib_after_warmup', 'rss_anon_kib_after_run',
        'raw_udp_rtt_p50_us', 'raw_udp_half_rtt_us', 'raw_udp_rtt_p99_us',
        'send_lat_p50_us', 'write_lat_p50_us', 'rc_pingpong_4k_us', 'send_lat_p99_us', 'write_lat_p99_us',
        'send_bw64_msgs_per_s',
        'target_inprocess_write64_msgs_per_s', 'target_inprocess_write64k_gb_per_s',
        'target_send_lat_p50_us', 'target_write_lat_p50_us', 'target_rc_pingpong_4k_us']
checks = [
    ([k for k in keys if not (math.isfinite(num(k)) and num(k) > 0)] == [], 'a figure not positive'),
    (d.get('inprocess_write_data_verified') is True, 'inprocess_write_data_verified'),
    (num('inprocess_write64_messages') == 20000, 'inprocess_write64_messages'),
    (num('inprocess_write64k_bytes') == 8 << 20, 'inprocess_write64k_bytes'),
    (2 <= num('inprocess_write64_parallel_pairs') <= 4, 'inprocess_write64_parallel_pairs'),
    (num('inprocess_write64_parallel_messages')
     == num('inprocess_write64_parallel_pairs') * -(-20000 // num('inprocess_write64_parallel_pairs')),
     'inprocess_write64_parallel_messages'),
    ('inprocess_write64_parallel_msgs_per_s' not in d['ratio_to_target'], 'the parallel figure has no target'),
    (isinstance(d.get('rc_pingpong_4k_us_runs'), list) and len(d['rc_pingpong_4k_us_runs']) == 3
     and all(type(x) in (int, float) and x > 0 for x in d['rc_pingpong_4k_us_runs'])
     and sorted(d['rc_pingpong_4k_us_runs'])[1] == num('rc_pingpong_4k_us'), 'rc_pingpong_4k_us_runs, its median'),
    (num('rss_kib_growth') == num('rss_kib_after_run') - num('rss_kib_after_warmup'), 'rss_kib_growth'),
    (abs(num('raw_udp_half_rtt_us') - num('raw_udp_rtt_p50_us') / 2) < 1e-3, 'raw_udp_half_rtt_us'),
    (num('rss_anon_kib_growth') == num('rss_anon_kib_after_run') - num('rss_anon_kib_after_warmup'),
     'rss_anon_kib_growth'),
    (num('rss_anon_kib_after_run') <= num('rss_kib_after_run'), 'rss_anon_kib_after_run'),
    (num('target_rss_anon_kib_growth') == 0, 'target_rss_anon_kib_growth'),
    (all(isinstance(d.get(k), dict) and d[k] for k in ('ratio_to_target', 'pass')), 'ratio_to_target, pass'),
    (isinstance(d.get('all_pass'), bool), 'all_pass'),
    (isinstance(d.get('raw_udp_rtt_p50_us_runs'), list) and len(d['raw_udp_rtt_p50_us_runs']) == 3
     and all(type(x) in (int, float) and x > 0 for x in d['raw_udp_rtt_p50_us_runs'])
     and sorted(d['raw_udp_rtt_p50_us_runs'])[1] == num('raw_udp_rtt_p50_us'), 'raw_udp_rtt_p50_us_runs, its median'),
    # Each two-process figure's target from the raw round trip measured just before it.
    (all(abs(num('target_' + k) - f * d['raw_udp_rtt_p50_us_runs'][i]) < 1e-3
         for i, (k, f) in enumerate([('send_lat_p50_us', 0.75), ('write_lat_p50_us', 0.75), ('rc_pingpong_4k_us', 3)])),
     'the targets of send-lat, write-lat and rc-pingpong'),
    (d.get('two_process_cpus') is None or (isinstance(d['two_process_cpus'], list) and len(d['two_process_cpus']) == 2
     and d['two_process_cpus'][0] != d['two_process_cpus'][1]), 'two_process_cpus'),
    # The one-CPU rc-pingpong: measured where the pair is pinned, a reference (no target).
    ((num('rc_pingpong_4k_one_cpu_us') > 0 if d.get('two_process_cpus')
      else d.get('rc_pingpong_4k_one_cpu_us', 0) is None)
     and 'rc_pingpong_4k_one_cpu_us' not in d['ratio_to_target'], 'rc_pingpong_4k_one_cpu_us'),
    # The tails: references, each no lower than its median.
    (all(num(k + '_p99_us') >= num(k + '_p50_us') and k + '_p99_us' not in d['ratio_to_target']
         for k in ('send_lat', 'write_lat')), 'send_lat_p99_us, write_lat_p99_us'),
    # The two-process stream: a reference, no target.
    ('send_bw64_msgs_per_s' not in d['ratio_to_target'], 'send_bw64_msgs_per_s'),
    # The test's build is cargo's own, never the profile-guided one.
    (d.get('build') in ('release', 'debug'), 'build'),
]
print(' '.join(m for good, m in checks if not good) or 'ok')
"#,
        lines[0],
    );
    assert_eq!(verdict.as_deref(), Some("ok"), "{out}");
}

/// Every command path, with the word its usage line starts with after `umlx`.
const COMMANDS: &[&str] = &[
    "demo",
    "devinfo",
    "layout",
    "wire",
    "wire decode",
    "perf",
    "perf write-bw",
    "perf write-lat",
    "perf send-bw",
    "perf send-lat",
    "perf read-bw",
    "perf read-lat",
    "perf atomic-bw",
    "bench",
    "bench datapath",
    "bench sim",
    "bind",
    "unbind",
    "rc-pingpong",
    "ud-pingpong",
    "sim",
    "completions",
];

/// The exit code, stdout and stderr of `umlx ARGS`.
fn umlx_code(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_umlx")).args(args).output().expect("running umlx");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn the_top_level_help_lists_every_subcommand() {
    let (code, out, err) = umlx_code(&["--help"]);
    assert_eq!(code, Some(0), "{err}");
    let listed: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let top: Vec<&str> = COMMANDS.iter().filter(|c| !c.contains(' ')).copied().chain(["help"]).collect();
    assert_eq!(listed, top, "{out}");
    // One line each, with a description.
    for l in out.lines().skip_while(|l| !l.starts_with("Commands:")).skip(1).take_while(|l| l.starts_with("  ")) {
        assert!(l.split_whitespace().count() > 2, "{l}");
    }
    // `umlx help` and `umlx -h` say the same; `umlx` alone prints it as an error.
    assert_eq!(umlx_code(&["help"]).1, out);
    let (code, _, err) = umlx_code(&[]);
    assert_eq!(code, Some(2));
    assert!(err.contains("Usage: umlx <COMMAND>") && err.contains("rc-pingpong"), "{err}");
}

#[test]
fn every_subcommand_answers_help() {
    for c in COMMANDS {
        let words: Vec<&str> = c.split(' ').collect();
        for flag in ["-h", "--help"] {
            let mut args = words.clone();
            args.push(flag);
            let (code, out, err) = umlx_code(&args);
            assert_eq!(code, Some(0), "umlx {c} {flag}: {err}");
            assert!(out.contains(&format!("Usage: umlx {c}")), "umlx {c} {flag}: {out}");
            assert!(err.is_empty(), "umlx {c} {flag}: {err}");
        }
        let mut args = vec!["help"];
        args.extend(&words);
        let (code, out, _) = umlx_code(&args);
        assert!(code == Some(0) && out.contains(&format!("Usage: umlx {c}")), "umlx help {c}: {out}");
    }
    // The tools' own options appear in their help.
    let (_, out, _) = umlx_code(&["rc-pingpong", "--help"]);
    for o in ["-p, --port <port>", "-g, --gid-idx", "-m, --mtu", "-d, --ib-dev <DEV>", "--wire", "--timeout"] {
        assert!(out.contains(o), "{o}: {out}");
    }
    let (_, out, _) = umlx_code(&["perf", "send-lat", "--help"]);
    for o in ["-x, --gid-index <N>", "-s, --size", "--report_gbits", "--negotiate-bytes", "-V, --version"] {
        assert!(out.contains(o), "{o}: {out}");
    }
}

#[test]
fn unknown_options_and_missing_values_are_usage_errors() {
    for (args, want, usage) in [
        (&["rc-pingpong", "--frobnicate"][..], "unexpected argument '--frobnicate'", "rc-pingpong"),
        (&["ud-pingpong", "-m", "1024"][..], "unexpected argument '-m'", "ud-pingpong"),
        (&["perf", "write-bw", "-Z"][..], "unexpected argument '-Z'", "perf write-bw"),
        (&["wire", "decode", "a.pcap", "--json"][..], "unexpected argument '--json'", "wire decode"),
        (&["layout", "--xml"][..], "unexpected argument '--xml'", "layout"),
        (&["bench", "datapath", "--jsn"][..], "unexpected argument '--jsn'", "bench datapath"),
        (&["rc-pingpong", "-p"][..], "a value is required for '--port <port>'", "rc-pingpong"),
        (&["perf", "read-lat", "--iters"][..], "a value is required for '--iters <N>'", "perf read-lat"),
        (&["sim", "--wire"][..], "a value is required for '--wire <udp:LOCAL,PEER>'", "sim"),
        (&["devinfo", "-d"][..], "a value is required for '--ib-dev <DEV>'", "devinfo"),
        (&["wire", "decode"][..], "<FILE.pcap>", "wire decode"),
        (&["rc-pingpong", "-s", "ten"][..], "invalid value 'ten' for '--size <size>'", "rc-pingpong"),
        (&["perf", "write-bw", "-n", "3"][..], "3 must be between 5 and", "perf write-bw"),
        (&["nosuchcommand"][..], "unrecognized subcommand 'nosuchcommand'", ""),
    ] {
        let (code, out, err) = umlx_code(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
        let usage = format!("Usage: umlx {usage}");
        assert!(err.contains(usage.trim_end()), "{args:?}: no {usage:?} in {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn completions_name_the_subcommands() {
    let (code, out, err) = umlx_code(&["completions", "bash"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("rc-pingpong") && out.contains("write-bw") && out.contains("--gid-idx"), "{out}");
    let (code, _, err) = umlx_code(&["completions", "tcsh"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("invalid value 'tcsh'"), "{err}");
}
