//! The command processor: state checks, dispatch by opcode, and the HCA lifecycle commands
//! (ENABLE/DISABLE_HCA, ISSI, INIT/TEARDOWN_HCA, ACCESS_REG, SET_DRIVER_VERSION).

use super::{CmdFail, Hca, HcaState, syndrome as sy};
use umlx_hwdesc::enums::{
    AccessRegId, AccessRegOpMod, CmdOpcode, CmdStatus, EthLinkMode, ExtEthLinkMode, HealthSyndrome, PortStatus,
    PtysProto, SupportedIssi,
};
use umlx_hwdesc::ifc::*;

/// Result of a command handler: the output message (header included, status left 0).
pub(crate) type CmdResult = Result<Vec<u8>, CmdFail>;

/// A zeroed output message of `size` bytes.
pub(crate) fn out(size: usize) -> Vec<u8> {
    vec![0u8; size]
}

/// Checks the input is at least `size` bytes.
pub(crate) fn need_in(op: u16, input: &[u8], size: usize) -> Result<(), CmdFail> {
    if input.len() < size {
        return Err(CmdFail::new(CmdStatus::BAD_INP_LEN_ERR, op, sy::BAD_INPUT_LEN));
    }
    Ok(())
}

/// Shorthand for a BAD_PARAM_ERR.
pub(crate) fn bad_param(op: u16, reason: u16) -> CmdFail {
    CmdFail::new(CmdStatus::BAD_PARAM_ERR, op, reason)
}

/// What a command needs from the HCA lifecycle before it may run.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Needs {
    Nothing,
    Enabled,
    BootPages,
    Initialized,
}

fn needs(op: CmdOpcode) -> Needs {
    match op {
        CmdOpcode::ENABLE_HCA => Needs::Nothing,
        CmdOpcode::DISABLE_HCA
        | CmdOpcode::QUERY_ISSI
        | CmdOpcode::SET_ISSI
        | CmdOpcode::QUERY_PAGES
        | CmdOpcode::MANAGE_PAGES
        | CmdOpcode::TEARDOWN_HCA
        | CmdOpcode::NOP => Needs::Enabled,
        CmdOpcode::QUERY_HCA_CAP
        | CmdOpcode::SET_HCA_CAP
        | CmdOpcode::ACCESS_REG
        | CmdOpcode::INIT_HCA
        | CmdOpcode::SET_DRIVER_VERSION => Needs::BootPages,
        _ => Needs::Initialized,
    }
}

impl Hca {
    /// Executes one command message; returns the output message (status and syndrome filled).
    pub(crate) fn execute(&mut self, input: &[u8], outlen: usize) -> Vec<u8> {
        let opcode = mbox_in::opcode.get(input) as u16;
        self.stats.commands += 1;
        self.commands_since_reset += 1;
        let count = self.commands_since_reset;
        let result = self.execute_checked(opcode, input, count);
        let mut output = match result {
            // Queries end with the object's page list: the firmware writes as much of it as
            // the output buffer holds.
            Ok(mut o)
                if o.len() > outlen
                    && matches!(
                        CmdOpcode(opcode),
                        CmdOpcode::QUERY_QP | CmdOpcode::QUERY_CQ | CmdOpcode::QUERY_EQ | CmdOpcode::QUERY_SRQ
                    )
                    && outlen >= 16 =>
            {
                o.truncate(outlen);
                o
            }
            Ok(o) if o.len() > outlen => {
                let mut o = out(16);
                mbox_out::status.set(&mut o, CmdStatus::BAD_OUTP_LEN_ERR.0 as u64);
                mbox_out::syndrome.set(&mut o, sy::make(opcode, sy::BAD_OUTPUT_LEN) as u64);
                o
            }
            Ok(o) => o,
            Err(f) => {
                let mut o = out(16);
                mbox_out::status.set(&mut o, f.status.0 as u64);
                mbox_out::syndrome.set(&mut o, f.syndrome as u64);
                o
            }
        };
        if mbox_out::status.get(&output) != 0 {
            self.stats.command_errors += 1;
        }
        output.resize(output.len().max(16), 0);
        // Hostile: fatal error after N commands, periodic page churn.
        let h = self.cfg.hostile.clone();
        if h.fatal_after_commands == Some(count) {
            self.inject_fatal(HealthSyndrome::FW_ERR);
        }
        if h.page_churn > 0
            && h.page_churn_every > 0
            && count.is_multiple_of(h.page_churn_every)
            && self.state == HcaState::Initialized
        {
            self.pages.churn(h.page_churn);
            self.rebalance_pages();
        }
        output
    }

    fn execute_checked(&mut self, opcode: u16, input: &[u8], count: u64) -> Result<Vec<u8>, CmdFail> {
        need_in(opcode, input, mbox_in::SIZE_BYTES)?;
        if let Some(f) = self.cfg.hostile.fail_command
            && f.nth == count
            && f.opcode.is_none_or(|o| o == opcode)
        {
            return Err(CmdFail { status: CmdStatus(f.status), syndrome: f.syndrome });
        }
        let op = CmdOpcode(opcode);
        let op_mod = mbox_in::op_mod.get(input) as u16;
        let need = needs(op);
        if need >= Needs::Enabled && self.state == HcaState::Disabled {
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, opcode, sy::HCA_NOT_ENABLED));
        }
        if need >= Needs::BootPages && !self.pages.boot_satisfied() {
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, opcode, sy::MISSING_BOOT_PAGES));
        }
        if need >= Needs::Initialized && self.state != HcaState::Initialized {
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, opcode, sy::HCA_NOT_INITIALIZED));
        }
        match op {
            CmdOpcode::ENABLE_HCA => self.cmd_enable_hca(input),
            CmdOpcode::DISABLE_HCA => self.cmd_disable_hca(input),
            CmdOpcode::QUERY_ISSI => self.cmd_query_issi(),
            CmdOpcode::SET_ISSI => self.cmd_set_issi(input),
            CmdOpcode::QUERY_PAGES => self.cmd_query_pages(input, op_mod),
            CmdOpcode::MANAGE_PAGES => self.cmd_manage_pages(input, op_mod),
            CmdOpcode::QUERY_HCA_CAP => self.cmd_query_hca_cap(input, op_mod),
            CmdOpcode::SET_HCA_CAP => self.cmd_set_hca_cap(input, op_mod),
            CmdOpcode::INIT_HCA => self.cmd_init_hca(input),
            CmdOpcode::TEARDOWN_HCA => self.cmd_teardown_hca(input),
            CmdOpcode::ACCESS_REG => self.cmd_access_reg(input, op_mod),
            CmdOpcode::SET_DRIVER_VERSION => self.cmd_set_driver_version(input),
            CmdOpcode::NOP => Ok(out(16)),
            _ => self.execute_object_cmd(op, op_mod, input),
        }
    }

    fn cmd_enable_hca(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::ENABLE_HCA.0;
        need_in(op, input, enable_hca_in::SIZE_BYTES)?;
        if enable_hca_in::function_id.get(input) != 0 || enable_hca_in::embedded_cpu_function.get(input) != 0 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if self.state != HcaState::Disabled {
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, op, sy::ALREADY_DONE));
        }
        self.state = HcaState::Enabled;
        self.pages.enable();
        Ok(out(enable_hca_out::SIZE_BYTES))
    }

    fn cmd_disable_hca(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::DISABLE_HCA.0;
        need_in(op, input, disable_hca_in::SIZE_BYTES)?;
        if self.state == HcaState::Initialized {
            // The HCA must be torn down first.
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, op, sy::BAD_STATE));
        }
        self.state = HcaState::Disabled;
        self.issi = 0;
        Ok(out(disable_hca_out::SIZE_BYTES))
    }

    fn cmd_query_issi(&mut self) -> CmdResult {
        let mut o = out(query_issi_out::SIZE_BYTES);
        query_issi_out::current_issi.set(&mut o, self.issi as u64);
        // ISSI 0 and 1 supported.
        query_issi_out::supported_issi_dw0.set(&mut o, (SupportedIssi::ISSI_0 | SupportedIssi::ISSI_1).bits() as u64);
        Ok(o)
    }

    fn cmd_set_issi(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::SET_ISSI.0;
        need_in(op, input, set_issi_in::SIZE_BYTES)?;
        let issi = set_issi_in::current_issi.get(input) as u16;
        if issi > 1 {
            return Err(bad_param(op, sy::BAD_ISSI));
        }
        self.issi = issi;
        Ok(out(set_issi_out::SIZE_BYTES))
    }

    fn cmd_init_hca(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::INIT_HCA.0;
        // `sw_owner_id` (Linux) is optional: rdma-core's `init_hca_in`, which mlx5_vfio sends,
        // ends before it.
        need_in(op, input, init_hca_in::sw_owner_id.offset_bytes())?;
        if self.state != HcaState::Enabled {
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, op, sy::ALREADY_DONE));
        }
        if !self.pages.init_satisfied() {
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, op, sy::MISSING_INIT_PAGES));
        }
        self.state = HcaState::Initialized;
        self.pages.initialized = true;
        if !self.caps.link_down_by_init() {
            self.set_link(true);
        }
        Ok(out(init_hca_out::SIZE_BYTES))
    }

    fn cmd_teardown_hca(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::TEARDOWN_HCA.0;
        need_in(op, input, teardown_hca_in::SIZE_BYTES)?;
        let profile = teardown_hca_in::profile.get(input);
        if profile > 2 {
            return Err(bad_param(op, sy::BAD_FIELD_VALUE));
        }
        if self.state != HcaState::Initialized {
            return Err(CmdFail::new(CmdStatus::BAD_SYS_STATE_ERR, op, sy::HCA_NOT_INITIALIZED));
        }
        // Every object goes away with the HCA; the firmware's page demand drops to zero.
        self.objects = Default::default();
        self.set_link(false);
        self.state = HcaState::TornDown;
        self.pages.torn_down();
        self.reclaim_empty_left = self.cfg.hostile.reclaim_empty_replies;
        let mut o = out(teardown_hca_out::SIZE_BYTES);
        // Profile 2 (prepare fast teardown) reports state 0: ready; the driver then writes
        // nic_interface = DISABLED.
        teardown_hca_out::state.set(&mut o, 0);
        Ok(o)
    }

    fn cmd_access_reg(&mut self, input: &[u8], op_mod: u16) -> CmdResult {
        let op = CmdOpcode::ACCESS_REG.0;
        need_in(op, input, access_register_in::SIZE_BYTES)?;
        let write = match AccessRegOpMod(op_mod) {
            AccessRegOpMod::WRITE => true,
            AccessRegOpMod::READ => false,
            _ => return Err(bad_param(op, sy::BAD_OP_MOD)),
        };
        let reg = AccessRegId(access_register_in::register_id.get(input) as u16);
        let data = &input[access_register_in::SIZE_BYTES..];
        let mut o = out(access_register_out::SIZE_BYTES);
        match reg {
            AccessRegId::HOST_ENDIANNESS => {
                if write {
                    need_in(op, input, access_register_in::SIZE_BYTES + 16)?;
                    self.host_endianness = data[0];
                }
                let mut reg = [0u8; 16];
                reg[0] = self.host_endianness;
                o.extend_from_slice(&reg);
            }
            AccessRegId::PAOS => {
                let mut reg = [0u8; paos_reg::SIZE_BYTES];
                if write {
                    need_in(op, input, access_register_in::SIZE_BYTES + paos_reg::SIZE_BYTES)?;
                    match PortStatus(paos_reg::admin_status.get(data) as u8) {
                        PortStatus::UP => self.set_link(true),
                        PortStatus::DOWN => self.set_link(false),
                        _ => {}
                    }
                }
                let status = |up: bool| if up { PortStatus::UP.0 } else { PortStatus::DOWN.0 };
                paos_reg::local_port.set(&mut reg, 1);
                paos_reg::admin_status.set(&mut reg, u64::from(status(self.vport.is_admin_up())));
                paos_reg::oper_status.set(&mut reg, u64::from(status(self.vport.is_up())));
                o.extend_from_slice(&reg);
            }
            AccessRegId::PTYS => {
                // The port is a 100GBASE-CR4 link (legacy and extended link-mode sets alike):
                // capable of and allowed that mode, operating in it while the link is up.
                // Writes (admin changes) are not supported.
                if write {
                    return Err(bad_param(op, sy::BAD_REGISTER));
                }
                need_in(op, input, access_register_in::SIZE_BYTES + ptys_reg::SIZE_BYTES)?;
                let mut reg = [0u8; ptys_reg::SIZE_BYTES];
                let port = ptys_reg::local_port.get(data);
                if port != 1 || ptys_reg::proto_mask.get(data) != PtysProto::EN.0 as u64 {
                    return Err(bad_param(op, sy::BAD_REGISTER));
                }
                let legacy = 1u64 << EthLinkMode::BASE_100G_CR4.0;
                let ext = 1u64 << ExtEthLinkMode::CAUI_4_100G_CR4_KR4.0;
                let up = self.vport.is_up();
                ptys_reg::local_port.set(&mut reg, port);
                ptys_reg::proto_mask.set(&mut reg, PtysProto::EN.0 as u64);
                for (f, v) in [
                    (ptys_reg::eth_proto_capability, legacy),
                    (ptys_reg::eth_proto_admin, legacy),
                    (ptys_reg::eth_proto_oper, if up { legacy } else { 0 }),
                    (ptys_reg::ext_eth_proto_capability, ext),
                    (ptys_reg::ext_eth_proto_admin, ext),
                    (ptys_reg::ext_eth_proto_oper, if up { ext } else { 0 }),
                ] {
                    f.set(&mut reg, v);
                }
                o.extend_from_slice(&reg);
            }
            _ => return Err(bad_param(op, sy::BAD_REGISTER)),
        }
        Ok(o)
    }

    fn cmd_set_driver_version(&mut self, input: &[u8]) -> CmdResult {
        let op = CmdOpcode::SET_DRIVER_VERSION.0;
        need_in(op, input, set_driver_version_in::SIZE_BYTES)?;
        let v = set_driver_version_in::driver_version.bytes(input).unwrap_or(&[]);
        let end = v.iter().position(|&b| b == 0).unwrap_or(v.len());
        self.driver_version = v[..end].to_vec();
        Ok(out(set_driver_version_out::SIZE_BYTES))
    }
}
