//! `umlx`: the umlx command line.
//!
//! Subcommands: `layout` (the hardware-contract layouts, generated from hwdesc), `wire decode`
//! (RoCEv2 pcap decoder, the sim's own codec).

mod bench;
mod bind;
mod common;
mod demo;
mod device;
mod devinfo;
mod layout;
mod perf;
mod pingpong;
mod sim;
mod vfio_selftest;
mod wire;

use std::process::ExitCode;

const USAGE: &str = "\
usage: umlx <command> [options]

commands:
  demo [--quick]               two software ConnectX adapters: RC/UD ping-pong, bandwidth and latency sweep
  devinfo [-v] [-d DEV]        devices, firmware, port state, MTU, GID table (like ibv_devinfo)
  layout [--json] [STRUCT]     print the mlx5 layouts declared in hwdesc (all, or one struct as a table)
  wire decode FILE.pcap        decode every RoCE frame of a pcap and verify its ICRC
  perf TEST [opts] [SERVER]    perftest's ib_{write,send,read}_{bw,lat} and ib_atomic_bw (TEST: write-bw, send-lat, ...)
  bench datapath [--json]      data-path cost per operation (ns, and instructions with valgrind)
  bind PCI [--force] [-n]      move a ConnectX function to vfio-pci, checking IOMMU, group, huge pages, memlock
  unbind PCI [-n]              give a function back to its kernel driver (mlx5_core)
  rc-pingpong [opts] [HOST]    ibv_rc_pingpong: RC SEND ping-pong with its options and TCP exchange (-g 1 on RoCE)
  ud-pingpong [opts] [HOST]    ibv_ud_pingpong: UD SEND ping-pong with its options and TCP exchange (-g 1 on RoCE)
  sim --wire udp:LOCAL,PEER    run a software ConnectX on a UDP wire (a peer for a VM or a process)
  vfio-selftest PCI [--device edu|e1000e|auto] [--rebind]
                               the VFIO backend against vfio-pci + IOMMU with QEMU's edu/e1000e (in a VM)
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
        "bind" => bind::run(rest),
        "unbind" => bind::run_unbind(rest),
        "demo" => demo::run(rest),
        "devinfo" => devinfo::run(rest),
        "perf" => perf::run(rest),
        "vfio-selftest" => vfio_selftest::run(rest),
        "rc-pingpong" => pingpong::run_rc(rest),
        "ud-pingpong" => pingpong::run_ud(rest),
        "sim" => sim::run(rest),
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
