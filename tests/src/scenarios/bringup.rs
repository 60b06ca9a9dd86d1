//! Bring-up: what the devices say about themselves once the driver brought them up.

use crate::env::Env;
use crate::kit::{Outcome, Result};
use crate::{ensure, ensure_eq};
use umlx_driver::vfio::sysfs::mlx5_device_name;
use umlx_verbs::*;

/// `ibv_query_device`, `ibv_query_port`, `ibv_query_gid` and the device list on both endpoints:
/// a ConnectX identity, sane limits, an ACTIVE Ethernet port, the GID table as programmed (the
/// link-local GID at index 0, the endpoint's IP at its index), refusals for port 2.
pub fn bring_up_device_port_gid(env: &mut Env) -> Result<Outcome> {
    let listed = devices();
    for ep in [&env.a, &env.b] {
        let who = ep.label();
        let c = &ep.ctx;
        ensure!(!c.hca().trace().is_empty(), "{who}: empty bring-up trace");
        let d = c.query_device()?;
        ensure_eq!(d.vendor_id, 0x15b3, "{who}: PCI vendor");
        ensure!(
            mlx5_device_name(d.vendor_id as u16, d.vendor_part_id as u16).is_some(),
            "{who}: part ID {:#x} is not an mlx5 device",
            d.vendor_part_id
        );
        let fw: Vec<&str> = d.fw_ver.split('.').collect();
        ensure!(
            fw.len() == 3 && fw.iter().all(|p| p.parse::<u16>().is_ok()),
            "{who}: fw_ver {:?} is not major.minor.sub",
            d.fw_ver
        );
        ensure!(d.node_guid != 0 && d.sys_image_guid != 0, "{who}: zero GUID in {d:?}");
        ensure!(d.page_size_cap & 4096 != 0, "{who}: 4 KiB pages not in page_size_cap {:#x}", d.page_size_cap);
        ensure!(d.max_qp >= 64 && d.max_qp_wr >= 64, "{who}: max_qp {} max_qp_wr {}", d.max_qp, d.max_qp_wr);
        ensure!(d.max_sge >= 4, "{who}: max_sge {}", d.max_sge);
        ensure!(d.max_cq >= 64 && d.max_cqe >= 255, "{who}: max_cq {} max_cqe {}", d.max_cq, d.max_cqe);
        ensure!(d.max_mr >= 64 && d.max_pd >= 16, "{who}: max_mr {} max_pd {}", d.max_mr, d.max_pd);
        ensure!(d.max_srq >= 16 && d.max_srq_wr >= 63 && d.max_srq_sge >= 1, "{who}: SRQ limits in {d:?}");
        ensure!(d.max_qp_rd_atom >= 1 && d.max_qp_init_rd_atom >= 1, "{who}: READ/atomic depth in {d:?}");
        ensure!(d.phys_port_cnt >= 1, "{who}: {} ports", d.phys_port_cnt);
        ensure_eq!(d.atomic_cap, 1, "{who}: atomic_cap (IBV_ATOMIC_HCA)");

        let p = c.query_port(1)?;
        ensure_eq!(p.state, PortState::Active, "{who}: port state");
        ensure_eq!(p.phys_state, 5, "{who}: physical state (5 = LinkUp)");
        ensure_eq!(p.link_layer, "Ethernet", "{who}: link layer");
        ensure_eq!(p.lid, 0, "{who}: LID on RoCE");
        ensure!(p.active_mtu as u32 <= p.max_mtu as u32, "{who}: active MTU {} > max {}", p.active_mtu, p.max_mtu);
        ensure_eq!(p.active_mtu, c.active_mtu(), "{who}: active MTU vs Context::active_mtu");
        ensure!(p.pkey_tbl_len >= 1, "{who}: P_Key table length {}", p.pkey_tbl_len);
        ensure!(p.max_msg_sz >= 1 << 16, "{who}: max_msg_sz {}", p.max_msg_sz);
        for bad in [0u8, 2] {
            ensure!(
                matches!(c.query_port(bad), Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
                "{who}: query_port({bad}) must be EINVAL"
            );
            ensure!(
                matches!(c.query_gid(bad, 0), Err(ref e) if e.kind() == ErrorKind::InvalidArgument),
                "{who}: query_gid({bad}, 0) must be EINVAL"
            );
        }

        let gids = c.gids();
        ensure!(gids.len() >= 2, "{who}: GID table {gids:?}: expected the link-local GID and the IP");
        ensure!(p.gid_tbl_len as usize >= gids.len(), "{who}: gid_tbl_len {} < {} GIDs", p.gid_tbl_len, gids.len());
        let m = c.mac();
        let link_local = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]);
        ensure_eq!(gids[0], (0, link_local), "{who}: GID 0 is the link-local GID of the MAC");
        for (i, g) in &gids {
            ensure_eq!(c.query_gid(1, *i)?, *g, "{who}: query_gid(1, {i}) vs the programmed table");
        }
        ensure_eq!(c.query_gid(1, ep.sgid_index as u32)?, ep.gid, "{who}: GID of the endpoint's IP");
        ensure_eq!(ep.gid.to_ip(), ep.ip, "{who}: GID → IP");
        ensure!(
            listed.iter().any(|e| e.kind == ep.device),
            "{who}: the device list {listed:?} does not contain {:?}",
            ep.device
        );
        // Any async events so far must be port changes (no CQ, QP or device errors).
        for e in crate::kit::drain_async_events(c)? {
            ensure!(e.event_type != umlx_hwdesc::enums::EventType::INTERNAL_ERROR, "{who}: internal error event {e:?}");
        }
    }
    ensure!(env.a.ctx.mac() != env.b.ctx.mac(), "A and B have the same MAC");
    ensure!(env.a.gid != env.b.gid, "A and B have the same GID");
    Ok(Outcome::Passed)
}
