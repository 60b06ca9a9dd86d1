//! `umlx wire decode FILE.pcap`: every RoCE frame decoded with the sim's own codec.

/// Runs `umlx wire <subcommand>`.
pub fn run(args: &[String]) -> Result<(), String> {
    match args.first().map(String::as_str) {
        Some("decode") => {
            let path = args.get(1).ok_or("usage: umlx wire decode FILE.pcap")?;
            let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
            let stdout = std::io::stdout();
            let mut out = stdout.lock();
            umlx_sim::wire::decode::decode_pcap(std::io::BufReader::new(file), &mut out)
                .map_err(|e| format!("{path}: {e}"))?;
            Ok(())
        }
        _ => Err("usage: umlx wire decode FILE.pcap".into()),
    }
}
