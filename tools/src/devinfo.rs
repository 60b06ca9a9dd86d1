//! `umlx devinfo [-v] [-d DEV]`: what `ibv_devinfo` prints, for every device (PCI functions
//! bound to vfio-pci with mlx5 IDs, and the software ConnectX), or for the one `-d` names.

use crate::common::fmt_mac;
use crate::device::{DeviceArg, DeviceOpts};
use std::result::Result;
use umlx_hwdesc::ifc::cmd_hca_cap;
use umlx_verbs::*;

fn print_ctx(name: &str, ctx: &Context, verbose: bool) -> Result<(), String> {
    let d = ctx.query_device().map_err(|e| e.to_string())?;
    let p = ctx.query_port(1).map_err(|e| e.to_string())?;
    let guid = d.node_guid.to_be_bytes();
    let g = |i: usize| u16::from_be_bytes([guid[2 * i], guid[2 * i + 1]]);
    println!("hca_id:\t{name}");
    println!("\ttransport:\t\t\tInfiniBand (0)");
    println!("\tfw_ver:\t\t\t\t{}", d.fw_ver);
    println!("\tnode_guid:\t\t\t{:04x}:{:04x}:{:04x}:{:04x}", g(0), g(1), g(2), g(3));
    println!("\tsys_image_guid:\t\t\t{:04x}:{:04x}:{:04x}:{:04x}", g(0), g(1), g(2), g(3));
    println!("\tvendor_id:\t\t\t{:#06x}", d.vendor_id);
    println!("\tvendor_part_id:\t\t\t{}", d.vendor_part_id);
    println!("\thw_ver:\t\t\t\t{:#x}", d.hw_ver);
    println!("\tphys_port_cnt:\t\t\t{}", d.phys_port_cnt);
    if verbose {
        println!("\tmax_mr_size:\t\t\t{:#x}", d.max_mr_size);
        println!("\tpage_size_cap:\t\t\t{:#x}", d.page_size_cap);
        println!("\tmax_qp:\t\t\t\t{}", d.max_qp);
        println!("\tmax_qp_wr:\t\t\t{}", d.max_qp_wr);
        println!("\tmax_sge:\t\t\t{}", d.max_sge);
        println!("\tmax_cq:\t\t\t\t{}", d.max_cq);
        println!("\tmax_cqe:\t\t\t{}", d.max_cqe);
        println!("\tmax_mr:\t\t\t\t{}", d.max_mr);
        println!("\tmax_pd:\t\t\t\t{}", d.max_pd);
        println!("\tmax_qp_rd_atom:\t\t\t{}", d.max_qp_rd_atom);
        println!("\tmax_qp_init_rd_atom:\t\t{}", d.max_qp_init_rd_atom);
        println!("\tmax_srq:\t\t\t{}", d.max_srq);
        println!("\tmax_srq_wr:\t\t\t{}", d.max_srq_wr);
        println!("\tmax_srq_sge:\t\t\t{}", d.max_srq_sge);
        println!("\tatomic_cap:\t\t\t{}", if d.atomic_cap == 1 { "ATOMIC_HCA (1)" } else { "ATOMIC_NONE (0)" });
        println!("\tlocal_ca_ack_delay:\t\t{}", d.local_ca_ack_delay);
        let caps = ctx.hca().caps();
        println!("\tcapabilities (QUERY_HCA_CAP, current):");
        for f in cmd_hca_cap::FIELDS
            .iter()
            .filter(|f| !matches!(f.kind, umlx_hwdesc::FieldKind::Reserved) && f.width_bits <= 64)
        {
            let v = f.get(&caps.general);
            if v != 0 {
                println!("\t\t{:<32} {v:#x}", f.name);
            }
        }
    }
    println!("\t\tport:\t1");
    println!("\t\t\tstate:\t\t\t{} ({})", p.state, p.state as u32);
    println!("\t\t\tmax_mtu:\t\t{} ({})", p.max_mtu, p.max_mtu as u32);
    println!("\t\t\tactive_mtu:\t\t{} ({})", p.active_mtu, p.active_mtu as u32);
    println!("\t\t\tsm_lid:\t\t\t0");
    println!("\t\t\tport_lid:\t\t{}", p.lid);
    println!("\t\t\tport_lmc:\t\t0x00");
    println!("\t\t\tlink_layer:\t\t{}", p.link_layer);
    println!("\t\t\tmac:\t\t\t{}", fmt_mac(ctx.mac()));
    if verbose {
        println!("\t\t\tmax_msg_sz:\t\t{:#x}", p.max_msg_sz);
        println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_tbl_len);
        println!("\t\t\tactive_width:\t\t{} ({})", width_name(p.active_width), p.active_width);
        println!("\t\t\tactive_speed:\t\t{} ({})", speed_name(p.active_speed), p.active_speed);
        println!("\t\t\tphys_state:\t\t{}", if p.phys_state == 5 { "LINK_UP (5)" } else { "DISABLED (3)" });
    }
    for (i, gid) in ctx.gids() {
        let kind = if gid.to_ip().is_ipv4() { "v2, IPv4" } else { "v2, IPv6" };
        println!("\t\t\tGID[{i:>3}]:\t\t{gid}, RoCE {kind} ({})", gid.to_ip());
    }
    println!();
    Ok(())
}

/// `ibv_devinfo`'s name of an `IBV_WIDTH_*` value.
fn width_name(w: u8) -> &'static str {
    match w {
        1 => "1X",
        2 => "4X",
        4 => "8X",
        8 => "12X",
        16 => "2X",
        _ => "invalid width",
    }
}

/// `ibv_devinfo`'s name of an `IBV_SPEED_*` value (the per-lane rate).
fn speed_name(s: u8) -> &'static str {
    match s {
        1 => "2.5 Gbps",
        2 => "5.0 Gbps",
        4 | 8 => "10.0 Gbps",
        16 => "14.0 Gbps",
        32 => "25.0 Gbps",
        64 => "50.0 Gbps",
        128 => "100.0 Gbps",
        _ => "invalid speed",
    }
}

/// The options of `umlx devinfo`.
#[derive(clap::Args, Debug)]
pub struct DevinfoArgs {
    /// Also the device's capabilities
    #[arg(short, long)]
    pub verbose: bool,
    /// The device (without -d: every device found, the sim included).
    #[command(flatten)]
    pub dev: DeviceOpts,
}

/// Runs `umlx devinfo`.
pub fn run(a: &DevinfoArgs) -> Result<(), String> {
    let verbose = a.verbose;
    let opts = &a.dev;
    let targets: Vec<DeviceArg> = if let Some(d) = &opts.device {
        vec![d.clone()]
    } else {
        devices()
            .into_iter()
            .map(|d| match d.kind {
                DeviceKind::Pci(p) => DeviceArg::Pci(p),
                DeviceKind::Sim => DeviceArg::Sim,
            })
            .collect()
    };
    let mut failed = Vec::new();
    for dev in targets {
        let ctx = match &dev {
            DeviceArg::Sim => Context::open_sim(umlx_sim::SimConfig::default()).map_err(|e| e.to_string()),
            DeviceArg::Pci(_) => crate::device::open(&DeviceOpts { device: Some(dev.clone()), ..opts.clone() }),
        };
        let name = match &dev {
            DeviceArg::Sim => "sim0".to_string(),
            DeviceArg::Pci(p) => format!("mlx5_{p}"),
        };
        match ctx {
            Ok(c) => print_ctx(&name, &c, verbose)?,
            Err(e) => failed.push(format!("{name}: {e}")),
        }
    }
    if failed.is_empty() { Ok(()) } else { Err(failed.join("\n")) }
}
