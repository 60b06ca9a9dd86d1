//! The small commands: `umlx layout` (generated from hwdesc) and `umlx wire decode` (the sim's
//! codec on real ConnectX captures).

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
fn wire_decode_prints_every_frame_of_a_real_capture() {
    let pcap = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/rocev2_vectors/read2.pcap");
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
            "poll_cq_batch1 poll_cq_batch16 poll_cq_empty poll_cq_room16_one post_recv_1 post_send_1 post_send_chain32"
        ),
        "{out}"
    );
    assert!(out.contains("\"poll_cq_batch16\": {\"ns\": "), "{out}");
    assert!(out.contains("\"rdma_core_instructions\": 308, \"target_instructions\": 100"), "{out}");
    assert!(out.contains("\"rdma_core_instructions\": 180, \"target_instructions\": 60"), "{out}");
    assert!(out.contains("\"rdma_core_instructions\": 83, \"target_instructions\": 25"), "{out}");
}
