//! The build script of the crates whose tests read the real ConnectX captures (`umlx-wire`'s
//! tests, `umlx-tools`' `wire decode` test): it finds them.
//!
//! They live in `shared/rocev2_vectors` beside the workspace (CI has it; a user's clone does
//! not), or wherever `UMLX_VECTORS` points. When they are there, the tests that read them are
//! compiled with `cfg(umlx_vectors)`; when not, those tests report as ignored with the reason.
//! `UMLX_REQUIRE_VECTORS=1` compiles them in regardless, so a missing directory fails them.

use std::path::PathBuf;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(umlx_vectors)");
    println!("cargo::rerun-if-env-changed=UMLX_VECTORS");
    println!("cargo::rerun-if-env-changed=UMLX_REQUIRE_VECTORS");
    let dir = match std::env::var_os("UMLX_VECTORS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
            .join("../../shared/rocev2_vectors"),
    };
    // A path that does not exist makes cargo run this script again on every build, so a
    // directory that appears later is found.
    println!("cargo::rerun-if-changed={}", dir.display());
    let required = std::env::var("UMLX_REQUIRE_VECTORS").is_ok_and(|v| v == "1");
    if dir.is_dir() || required {
        println!("cargo::rustc-cfg=umlx_vectors");
    }
    println!("cargo::rustc-env=UMLX_VECTORS_DIR={}", dir.display());
}
