//! `umlx wire decode FILE.pcap`: every RoCE frame decoded with the sim's own codec.

use std::path::PathBuf;

/// The subcommands of `umlx wire`.
#[derive(clap::Subcommand, Debug)]
pub enum WireCmd {
    /// Decode every RoCE frame of a pcap, verify its ICRC, print a summary
    Decode {
        /// The capture (pcap, Ethernet link type)
        #[arg(value_name = "FILE.pcap")]
        file: PathBuf,
    },
}

/// Runs `umlx wire <subcommand>`.
pub fn run(c: &WireCmd) -> Result<(), String> {
    match c {
        WireCmd::Decode { file } => {
            let path = file.display();
            let f = std::fs::File::open(file).map_err(|e| format!("{path}: {e}"))?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            umlx_wire::decode::decode_pcap(std::io::BufReader::new(f), &mut out).map_err(|e| format!("{path}: {e}"))?;
            Ok(())
        }
    }
}
