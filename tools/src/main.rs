//! `umlx`: the umlx command line.
//!
//! Subcommands: `layout` (the hardware-contract layouts, generated from hwdesc), `wire decode`
//! (RoCEv2 pcap decoder, the sim's own codec).

mod bench;
mod common;
mod demo;
mod device;
mod devinfo;
mod layout;
mod wire;

use std::process::ExitCode;

const USAGE: &str = "\
usage: umlx <command> [options]

commands:
  demo [--quick]               two software ConnectX adapters: RC/UD ping-pong, bandwidth and latency sweep
  devinfo [-v] [-d DEV]        devices, firmware, port state, MTU, GID table (like ibv_devinfo)
  layout [--json] [STRUCT]     print the mlx5 layouts declared in hwdesc (all, or one struct as a table)
  wire decode FILE.pcap        decode every RoCE frame of a pcap and verify its ICRC
  bench datapath [--json]      data-path cost per operation (ns, and instructions with valgrind)
  help                         this text
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let result = match cmd {
        "layout" => layout::run(rest),
        "wire" => wire::run(rest),
        "bench" => bench::run(rest),
        "demo" => demo::run(rest),
        "devinfo" => devinfo::run(rest),
        "help" | "-h" | "--help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("umlx: {e}");
            ExitCode::FAILURE
        }
    }
}
