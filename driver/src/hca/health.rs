//! The device's health: the checks of the health buffer, the health counter and the NIC
//! interface state that move the device to its error state (Linux `health.c`), and that state.

use super::*;

/// The health counter must move at least once in this window.
pub const HEALTH_WINDOW: Duration = Duration::from_secs(3);

pub(super) struct Health {
    pub(super) last_counter: u32,
    pub(super) last_change: Instant,
}

impl<B: Backend> Hca<B> {
    /// Checks the health buffer and counter; a fatal error moves the device to its error state.
    pub fn check_health(&self) -> Result<()> {
        if let Some(r) = self.fatal.lock().unwrap_or_else(|e| e.into_inner()).clone() {
            return Err(Error::DeviceFatal { device: self.name().into(), reason: r });
        }
        let fw_ver = self.backend.read32(iseg::HEALTH_FW_VER);
        let rfr = self.backend.read32(iseg::HEALTH_RFR) >> iseg::RFR_BIT & 1 == 1;
        // `synd` is one byte inside a big-endian dword.
        let synd = HealthSyndrome((self.backend.read32(iseg::HEALTH_SYND_DWORD) >> iseg::HEALTH_SYND_SHIFT) as u8);
        let nic_if = NicInterface(
            ((self.backend.read32(iseg::CMDQ_ADDR_L_SZ) >> iseg::NIC_IFC_SHIFT) & iseg::NIC_IFC_MASK) as u8,
        );
        let counter = self.backend.read32(iseg::HEALTH_COUNTER) & iseg::HEALTH_COUNTER_MASK;
        let tearing_down = self.torn_down.load(Ordering::Acquire);
        let reason = if fw_ver == 0xffff_ffff {
            Some("PCI function not responding (health buffer reads all ones)".to_string())
        } else if synd.0 != 0 && rfr {
            // Linux `sensor_fw_synd_rfr`: fatal when the recovery-flow bit is set with a syndrome.
            Some(format!("health syndrome {synd:?} with recovery flow required (RFR)"))
        } else if (nic_if == NicInterface::DISABLED || nic_if == NicInterface::SW_RESET) && !tearing_down {
            // Linux `mlx5_health_check_fatal_sensors` / `mlx5_get_nic_state`.
            Some(format!("NIC interface state {nic_if:?} (the device no longer serves this function)"))
        } else {
            if synd.0 != 0 {
                // A syndrome without RFR is reported, not fatal (Linux `poll_health` logs it
                // and queues the health report).
                let mut r = self.health_report.lock().unwrap_or_else(|e| e.into_inner());
                let msg = format!("health syndrome {synd:?} without recovery flow required: reported, not fatal");
                if r.as_deref() != Some(msg.as_str()) {
                    *r = Some(msg);
                }
            }
            let mut h = self.health.lock().unwrap_or_else(|e| e.into_inner());
            if counter != h.last_counter {
                h.last_counter = counter;
                h.last_change = Instant::now();
                None
            } else if h.last_change.elapsed() > HEALTH_WINDOW {
                Some(format!("health counter stuck at {counter:#x} for {:?}", h.last_change.elapsed()))
            } else {
                None
            }
        };
        if let Some(r) = reason {
            let first = {
                let mut f = self.fatal.lock().unwrap_or_else(|e| e.into_inner());
                let first = f.is_none();
                f.get_or_insert_with(|| r.clone());
                first
            };
            self.fatal_flag.store(true, Ordering::Release);
            if first {
                // Linux's health poll tells the RDMA stack, which delivers
                // IBV_EVENT_DEVICE_FATAL to every context: the event a program waits for.
                self.push_event(AsyncEvent {
                    event_type: EventType::INTERNAL_ERROR,
                    sub_type: 0,
                    object: 0,
                    syndrome: synd.0,
                });
            }
            return Err(Error::DeviceFatal { device: self.name().into(), reason: r });
        }
        Ok(())
    }

    /// The last non-fatal health report: a health syndrome the firmware raised without the
    /// recovery-flow-required bit (Linux reports these through devlink health and goes on).
    pub fn health_report(&self) -> Option<String> {
        self.health_report.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether the device is in its fatal error state, as one atomic load (for the data path).
    #[inline]
    pub fn fatal_flag(&self) -> bool {
        self.fatal_flag.load(Ordering::Relaxed)
    }

    /// The flag behind [`Hca::fatal_flag`], for queues that check it without reaching the HCA.
    pub fn fatal_handle(&self) -> Arc<AtomicBool> {
        self.fatal_flag.clone()
    }

    /// Whether the device is in its fatal error state.
    pub fn is_fatal(&self) -> bool {
        self.fatal.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }
}
