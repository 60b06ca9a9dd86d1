//! The sim's configuration: identity, limits, timing, and the hostile-device knobs.

use std::net::IpAddr;
use std::time::Duration;

/// A command the hostile device fails on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailCommand {
    /// Fail the Nth command executed after reset (1-based), counting every command.
    pub nth: u64,
    /// Fail only if the Nth command has this opcode (`None`: whatever it is).
    pub opcode: Option<u16>,
    /// The command status to return (PRM status byte).
    pub status: u8,
    /// The syndrome to return.
    pub syndrome: u32,
}

/// Hostile-device behaviour: seeded and off by default. A driver that is only correct against a
/// polite device is not correct.
#[derive(Clone, Debug, Default)]
pub struct Hostile {
    /// Seed for every random choice the hostile device makes.
    pub seed: u64,
    /// Fail one command with a chosen status and syndrome.
    pub fail_command: Option<FailCommand>,
    /// Complete every command this long after its doorbell instead of at once.
    pub command_delay: Option<Duration>,
    /// After INIT_HCA, ask for this many extra pages with a PAGE_REQUEST every
    /// `page_churn_every` commands, and ask for them back (negative request) the next time.
    pub page_churn: u32,
    /// Interval, in executed commands, of the page churn above (0: never).
    pub page_churn_every: u64,
    /// Inject a fatal health error after this many executed commands.
    pub fatal_after_commands: Option<u64>,
    /// After TEARDOWN_HCA, answer this many MANAGE_PAGES TAKE commands with no pages before
    /// returning any (a firmware still releasing its ICM; Linux `reclaim_pages` keeps asking).
    pub reclaim_empty_replies: u32,
}

/// Identity and limits of one software ConnectX.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Port MAC address.
    pub mac: [u8; 6],
    /// IP addresses of the port; each becomes a RoCEv2 GID candidate and is answered for in
    /// ARP / neighbour solicitation.
    pub ips: Vec<IpAddr>,
    /// Node GUID (derived from the MAC by default, EUI-64 style).
    pub node_guid: u64,
    /// Firmware version (major, minor, subminor).
    pub fw_version: (u16, u16, u16),
    /// PCI device ID (0x101d: ConnectX-6 Dx).
    pub device_id: u16,
    /// Number of MSI-X vectors.
    pub num_msix: u32,
    /// How long the `initializing` bit stays set after reset.
    pub init_delay: Duration,
    /// How long `initializing` is set again after the driver writes the command queue address
    /// (`cmdq_addr_l_sz`): the firmware takes the init-segment configuration meanwhile.
    pub cmdq_init_delay: Duration,
    /// The init segment's `cmd_q_init_to` (0x0FFC) register value (0: timeouts not reported).
    pub cmd_q_init_to: u32,
    /// The init segment's `cmd_exec_to` (0x0FF8) register value.
    pub cmd_exec_to: u32,
    /// Advertise `supported_atomic_req_8B_endianness_mode_1` in the current atomic caps.
    pub atomic_endianness_mode_1: bool,
    /// Pages the firmware asks for before INIT_HCA (boot stage).
    pub boot_pages: u32,
    /// Pages the firmware asks for before INIT_HCA (init stage).
    pub init_pages: u32,
    /// Ethernet MTU of the port (bytes of IP packet).
    pub eth_mtu: u32,
    /// The general caps' current `log_max_qp` after reset (at most the max cap's, 18): the
    /// device allows 2^this QPs until the driver raises it with SET_HCA_CAP.
    pub log_max_qp: u8,
    /// Hostile behaviour (off by default).
    pub hostile: Hostile,
}

impl SimConfig {
    /// A configuration for device number `index` (distinct MAC, GUID and IP per index).
    pub fn numbered(index: u8) -> SimConfig {
        let mac = [0x02, 0x00, 0x5e, 0x10, 0x00, index];
        SimConfig {
            mac,
            ips: vec![IpAddr::from([10, 77, 0, index.wrapping_add(1)])],
            node_guid: mac_to_guid(mac),
            fw_version: (22, 39, 1002),
            device_id: 0x101d,
            num_msix: 64,
            init_delay: Duration::from_millis(2),
            cmdq_init_delay: Duration::from_millis(2),
            // 2 s to take the queue, 60 s per command (unit 1 = seconds in bits 31:29).
            cmd_q_init_to: (1 << 29) | 2,
            cmd_exec_to: (1 << 29) | 60,
            atomic_endianness_mode_1: false,
            boot_pages: 32,
            init_pages: 256,
            eth_mtu: 1500,
            log_max_qp: 18,
            hostile: Hostile::default(),
        }
    }
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig::numbered(0)
    }
}

/// EUI-64 GUID from a MAC (insert ff:fe, flip the universal/local bit).
pub fn mac_to_guid(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]])
}
