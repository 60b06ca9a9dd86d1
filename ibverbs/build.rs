//! Symbol versions for libibverbs.so.1: reads exports.txt (version and symbol per line) and
//! writes the linker version script (the nodes, each inheriting the previous one as rdma-core's
//! do) and the `.symver` directives that give each function its version. Rust's own
//! (anonymous) version script for the cdylib would otherwise leave every symbol unversioned.
//! The soname and the version script are passed for the cdylib only.

use std::fmt::Write;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("OUT_DIR");
    let list = std::fs::read_to_string(format!("{dir}/exports.txt")).expect("exports.txt");
    println!("cargo:rerun-if-changed=exports.txt");

    let mut nodes: Vec<(String, Vec<String>)> = Vec::new();
    for line in list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (node, sym) = line.split_once(' ').unwrap_or_else(|| panic!("exports.txt: `{line}`: VERSION SYMBOL"));
        match nodes.iter_mut().find(|(n, _)| n == node) {
            Some((_, syms)) => syms.push(sym.trim().to_string()),
            None => nodes.push((node.to_string(), vec![sym.trim().to_string()])),
        }
    }

    // Each family (IBVERBS_, MLX5_, EFA_) is a chain, each node inheriting the family's
    // previous one as rdma-core's do; the private node stands alone.
    let mut script = String::new();
    let mut prev: Vec<(&str, &str)> = Vec::new();
    let mut first = true;
    for (node, syms) in &nodes {
        let family = &node[..node.rfind('_').unwrap_or(0)];
        let private = node.starts_with("IBVERBS_PRIVATE");
        let _ = writeln!(script, "{node} {{\n  global:");
        for s in syms {
            let _ = writeln!(script, "    {s};");
        }
        if first {
            let _ = writeln!(script, "  local: *;");
            first = false;
        }
        match prev.iter().find(|(f, _)| *f == family) {
            Some((_, p)) if !private => {
                let _ = writeln!(script, "}} {p};");
            }
            _ => script.push_str("};\n"),
        }
        if !private {
            prev.retain(|(f, _)| *f != family);
            prev.push((family, node));
        }
    }
    std::fs::write(format!("{out}/libibverbs.map"), script).expect("write libibverbs.map");

    let mut symver = String::from("std::arch::global_asm!(\n");
    for (node, syms) in &nodes {
        for s in syms {
            let _ = writeln!(symver, "    \".symver {s}, {s}@@{node}\",");
        }
    }
    symver.push_str(");\n");
    std::fs::write(format!("{out}/symver.rs"), symver).expect("write symver.rs");

    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={out}/libibverbs.map");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
}
