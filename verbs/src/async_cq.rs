//! Completions as futures and as a stream, on tokio (the `tokio` feature): [`AsyncCq`] waits
//! on its completion channel's file descriptor with tokio's reactor, so `cq.next().await`
//! yields the next work completion without a thread blocked in `ibv_get_cq_event`.
//!
//! The data path stays as it is: the stream polls the CQ (no lock, no allocation) and only
//! when it is empty arms it and waits for the channel's event.

use crate::cq::{CompChannel, Cq};
use crate::types::Wc;
use crate::{Context, Error, ErrorKind, Result};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;
use umlx_driver::event::AsyncEventFd;

/// Completions per CQ poll.
const BATCH: usize = 16;

/// A CQ on its own completion channel, whose completions are awaited:
/// [`AsyncCq::next`], or the [`futures_core::Stream`] of `Result<Wc>`.
///
/// ```
/// # fn main() -> Result<(), umlx_verbs::Error> {
/// use umlx_verbs::*;
/// let rt = tokio::runtime::Builder::new_current_thread().enable_io().build().unwrap();
/// rt.block_on(async {
///     let ctx = Context::open_sim(Default::default())?;
///     let pd = ctx.alloc_pd()?;
///     let mut acq = ctx.create_async_cq(64)?;
///     let mr = pd.alloc_mr(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
///     let mut qp = pd.create_qp(QpType::Rc, acq.cq()).build()?;
///     let (_, gid) = ctx.default_gid().expect("an IPv4 GID");
///     qp.connect(&RcPeer { qp_num: qp.qp_num(), psn: 0, gid }, &ConnectParams::default())?;
///     let remote = Remote { addr: mr.addr() + 2048, rkey: mr.rkey() };
///     let write = SendOp::Write { data: Payload::Sges(&[mr.sge(0, 8)]), remote, imm: None };
///     qp.post_send(&[SendWr::new(42, write).signaled()])?;
///     let wc = acq.next().await?;
///     assert_eq!((wc.wr_id, wc.status), (42, WcStatus::Success));
///     Ok(())
/// })
/// # }
/// ```
pub struct AsyncCq {
    /// The channel's eventfd on tokio's reactor.
    fd: AsyncEventFd,
    cq: Cq,
    channel: Arc<CompChannel>,
    /// Completions polled but not yet returned: `buf[head..len]`.
    buf: [Wc; BATCH],
    head: usize,
    len: usize,
    /// The CQ is armed and no event has been taken since.
    armed: bool,
}

impl std::fmt::Debug for AsyncCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCq").field("cq", &self.cq).field("buffered", &(self.len - self.head)).finish()
    }
}

impl Context {
    /// A CQ of at least `cqe` entries on a completion channel of its own, whose completions
    /// are awaited on the current tokio runtime (which must have its IO driver enabled).
    pub fn create_async_cq(&self, cqe: u32) -> Result<AsyncCq> {
        let channel = self.create_comp_channel()?;
        let cq = self.create_cq(cqe, Some(&channel))?;
        let raw = channel.fd().ok_or_else(|| {
            Error::new(
                ErrorKind::NotSupported,
                format!("{}: the completion channel has no file descriptor", self.name()),
            )
        })?;
        let fd = AsyncEventFd::new(&*raw).map_err(|e| {
            Error::new(
                ErrorKind::Os,
                format!("registering the completion channel's fd with tokio (inside a runtime with IO enabled?): {e}"),
            )
        })?;
        Ok(AsyncCq { fd, cq, channel, buf: [Wc::default(); BATCH], head: 0, len: 0, armed: false })
    }
}

impl AsyncCq {
    /// The CQ: to create QPs on it, or to poll it directly.
    pub fn cq(&mut self) -> &mut Cq {
        &mut self.cq
    }

    /// The next work completion, waiting for one if the CQ is empty.
    pub async fn next(&mut self) -> Result<Wc> {
        std::future::poll_fn(|cx| self.poll_next_wc(cx)).await
    }

    /// Polls for the next work completion: from the buffer, then the CQ; when it is empty,
    /// arms it, polls once more (a completion may have landed before the arm) and waits for
    /// the channel's fd.
    pub fn poll_next_wc(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Result<Wc>> {
        loop {
            if self.head < self.len {
                self.head += 1;
                return Poll::Ready(Ok(self.buf[self.head - 1]));
            }
            let n = self.cq.poll(&mut self.buf);
            if n > 0 {
                (self.head, self.len) = (0, n);
                continue;
            }
            if !self.armed {
                self.cq.req_notify(false)?;
                self.armed = true;
                continue;
            }
            match self.fd.poll_readable(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => {
                    return Poll::Ready(Err(Error::new(
                        ErrorKind::Os,
                        format!("waiting on the completion channel: {e}"),
                    )));
                }
            }
            // Take the channel's events (this drains its eventfd) and acknowledge ours.
            while let Some(ev) = self.channel.get_cq_event(Duration::ZERO)? {
                if ev.is_for(&self.cq) {
                    self.cq.ack_events(1);
                    self.armed = false;
                }
            }
        }
    }
}

impl futures_core::Stream for AsyncCq {
    type Item = Result<Wc>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Option<Result<Wc>>> {
        self.get_mut().poll_next_wc(cx).map(Some)
    }
}
