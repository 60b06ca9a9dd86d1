//! `umlx`: the umlx command line.
//!
//! One clap parser: [`Cli`] and its [`Cmd`] enum, each subcommand's options a `#[derive(Args)]`
//! struct in its module, the device options ([`device::DeviceOpts`]) flattened where a tool
//! opens a device. `umlx help`, `umlx CMD --help` and `-h` print the usage; an unknown option or
//! a missing value is an error naming it, with the usage line, and exit status 2; a failed run
//! exits 1.

#![forbid(unsafe_code)]

mod bench;
mod bind;
mod cli;
mod common;
mod demo;
mod device;
mod devinfo;
mod layout;
mod perf;
mod pingpong;
mod sim;
mod simbench;
mod wire;

use clap::{CommandFactory, Parser, Subcommand};

use std::process::ExitCode;

/// The command line.
#[derive(Parser, Debug)]
#[command(
    name = "umlx",
    version,
    about = "umlx: a user-mode driver for ConnectX (mlx5) adapters, with an embedded software ConnectX",
    arg_required_else_help = true
)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The subcommands.
#[derive(Subcommand, Debug)]
pub enum Cmd {
    /// Two software ConnectX adapters: RC/UD ping-pong, bandwidth and latency sweep
    Demo(demo::DemoArgs),
    /// Devices, firmware, port state, MTU, GID table (like ibv_devinfo)
    Devinfo(devinfo::DevinfoArgs),
    /// The mlx5 layouts declared in hwdesc (all, or one struct as a table)
    Layout(layout::LayoutArgs),
    /// RoCEv2 captures: `wire decode FILE.pcap`
    #[command(subcommand)]
    Wire(wire::WireCmd),
    /// perftest's ib_{write,send,read}_{bw,lat} and ib_atomic_bw
    #[command(subcommand, args_override_self = true)]
    Perf(perf::PerfCmd),
    /// Benchmarks: `bench datapath` (the data path's cost per operation), `bench sim` (the software ConnectX)
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Move a ConnectX function to vfio-pci, checking IOMMU, group, huge pages, memlock
    Bind(bind::BindArgs),
    /// Give a function back to its kernel driver (mlx5_core)
    Unbind(bind::UnbindArgs),
    /// ibv_rc_pingpong: RC SEND ping-pong with its options and TCP exchange
    #[command(name = "rc-pingpong", infer_long_args = true, args_override_self = true)]
    RcPingpong(pingpong::RcArgs),
    /// ibv_ud_pingpong: UD SEND ping-pong with its options and TCP exchange
    #[command(name = "ud-pingpong", infer_long_args = true, args_override_self = true)]
    UdPingpong(pingpong::UdArgs),
    /// A software ConnectX on a UDP wire (a peer for a VM or a process)
    Sim(sim::SimArgs),
    /// A shell completion script on stdout (bash, zsh, fish, elvish, powershell)
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

fn run(cmd: Cmd) -> Result<(), String> {
    match cmd {
        Cmd::Demo(a) => demo::run(&a),
        Cmd::Devinfo(a) => devinfo::run(&a),
        Cmd::Layout(a) => layout::run(&a),
        Cmd::Wire(c) => wire::run(&c),
        Cmd::Perf(c) => perf::run(&c),
        Cmd::Bench(c) => bench::run(&c),
        Cmd::Bind(a) => bind::run(&a),
        Cmd::Unbind(a) => bind::run_unbind(&a),
        Cmd::RcPingpong(a) => pingpong::run_rc(&a),
        Cmd::UdPingpong(a) => pingpong::run_ud(&a),
        Cmd::Sim(a) => sim::run(&a),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "umlx", &mut std::io::stdout());
            Ok(())
        }
    }
}

/// Parses a command line (`argv[0]` first) as `umlx` does: clap's parser, and the usage line of
/// the subcommand added to the errors clap reports without it (a missing or invalid value).
pub fn parse_from<I, T>(argv: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let argv: Vec<std::ffi::OsString> = argv.into_iter().map(Into::into).collect();
    Cli::try_parse_from(&argv).map_err(|mut e| {
        use clap::error::{ContextKind, ContextValue, ErrorKind};
        let help = matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion);
        if !help && e.get(ContextKind::Usage).is_none() {
            let mut cmd = Cli::command();
            cmd.build();
            let mut at = &mut cmd;
            for a in argv.iter().skip(1) {
                match at.find_subcommand(a).map(|c| c.get_name().to_string()) {
                    Some(name) => at = at.find_subcommand_mut(name).expect("the subcommand just found"),
                    None if a.to_str().is_some_and(|s| s.starts_with('-')) => {}
                    None => break,
                }
            }
            e.insert(ContextKind::Usage, ContextValue::StyledStr(at.render_usage()));
        }
        e
    })
}

fn main() -> ExitCode {
    let cli = parse_from(std::env::args_os()).unwrap_or_else(|e| e.exit());
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("umlx: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        // clap's own checks: no two options with one name, every short option unique, ...
        Cli::command().debug_assert();
    }
}
