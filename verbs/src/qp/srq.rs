//! Shared receive queues (`ibv_create_srq`, `ibv_post_srq_recv`, `ibv_modify_srq`).

use super::*;

/// A shared receive queue (`struct ibv_srq`).
pub struct Srq {
    pub(super) ctx: Context,
    pub(super) srq: Arc<DrvSrq<Dev>>,
    pub(super) rq: RecvQueue,
}

impl std::fmt::Debug for Srq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Srq").field("srqn", &self.srq.srqn()).finish()
    }
}

impl Srq {
    /// `ibv_post_srq_recv`.
    #[inline]
    pub fn post_recv(&mut self, wrs: &[RecvWr<'_>]) -> Result<()> {
        post_recv_chain(&mut self.rq, wrs)
    }

    /// `ibv_modify_srq` with IBV_SRQ_LIMIT: raise the limit event when fewer than `limit` WQEs
    /// remain.
    pub fn arm(&self, limit: u32) -> Result<()> {
        let size = 1u32 << self.srq.log_size;
        if limit >= size {
            return Err(Error::invalid(format!("SRQ limit {limit} must be below its size {size}")));
        }
        Ok(self.srq.arm(limit)?)
    }

    /// SRQ number.
    pub fn srqn(&self) -> u32 {
        self.srq.srqn()
    }

    /// Receive work requests the SRQ holds at once (`ibv_srq_attr.max_wr`; one slot of its
    /// power-of-two ring stays free).
    pub fn max_wr(&self) -> u32 {
        (1u32 << self.srq.log_size) - 1
    }

    /// Scatter entries per receive work request (`ibv_srq_attr.max_sge`).
    pub fn max_sge(&self) -> u32 {
        umlx_driver::wqsize::device_max_srq_sge(1 << self.srq.stride_shift)
    }

    /// The context.
    pub fn context(&self) -> &Context {
        &self.ctx
    }
}

impl Drop for Srq {
    fn drop(&mut self) {
        // Its rings leave the pollers' table (freed once no poll can be reading them), unless
        // QPs still take receives from it: they keep the device's SRQ alive, and its
        // completions must still find their wr_ids (the rings then stay until the context
        // drops, as `ibv_destroy_srq` would have refused with EBUSY).
        if Arc::strong_count(&self.srq) == 1 {
            self.ctx.shared.qps.remove_srq(self.srq.srqn());
        }
    }
}
