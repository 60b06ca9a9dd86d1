//! Protection domains, memory regions, completion channels, CQs, QPs and address handles: the
//! control path of the C ABI over `umlx-verbs`.

use super::events::Kind;
use super::qp_ex::{WrBuilder, fill_ops};
use super::*;
use libc::{EAGAIN, EBUSY};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use umlx_verbs::{Ah, CompChannel, Cq, ExternalBuffer, Mr, Pd, Qp, QpType, Srq};

/// A zeroed pthread mutex and condition variable (their static initialisers on Linux).
fn sync_pair() -> (libc::pthread_mutex_t, libc::pthread_cond_t) {
    (libc::PTHREAD_MUTEX_INITIALIZER, libc::PTHREAD_COND_INITIALIZER)
}

/// Reads an object behind a handle after checking its tag.
///
/// # Safety
///
/// `p` is NULL or a handle of the kind `T` is, from this library, not yet destroyed (or a
/// stale one, whose tag was cleared).
unsafe fn object<'a, T: Tagged>(p: *mut T::C) -> Option<&'a T> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the handle is the first field of a live T (repr(C), UnsafeCell transparent).
    let o = unsafe { &*p.cast::<T>() };
    (o.tag() == T::TAG).then_some(o)
}

/// An object whose first field is its C handle, with a tag after it.
pub(crate) trait Tagged {
    /// The C structure.
    type C;
    /// The live tag.
    const TAG: u64;
    /// The tag now.
    fn tag(&self) -> u64;
    /// Marks the object dead (a stale handle is then refused).
    fn clear_tag(&self);
    /// The C handle, for reading and writing its fields (not for freeing).
    fn handle(&self) -> *mut Self::C;
}

macro_rules! tagged {
    ($t:ty, $c:ty, $tag:expr) => {
        impl Tagged for $t {
            type C = $c;
            const TAG: u64 = $tag;
            fn tag(&self) -> u64 {
                self.tag.load(Ordering::Relaxed)
            }
            fn clear_tag(&self) {
                self.tag.store(tag::DEAD, Ordering::Relaxed)
            }
            fn handle(&self) -> *mut $c {
                self.ibv.get().cast()
            }
        }
    };
}

/// Moves an object to the heap for C: the handle is its first field, with the provenance of
/// the whole allocation (taken from the raw pointer, no reference in between).
fn leak<T: Tagged>(o: T) -> *mut T::C {
    Box::into_raw(Box::new(o)).cast::<T::C>()
}

/// Frees the object behind a handle from [`leak`], after clearing its tag.
///
/// # Safety
///
/// `handle` is a live handle of a `T` that no one uses any more.
unsafe fn destroy<T: Tagged>(handle: *mut T::C) {
    let o = handle.cast::<T>();
    // SAFETY: see the function's contract: `o` is the allocation `leak` made.
    unsafe {
        (*o).clear_tag();
        drop(Box::from_raw(o));
    }
}

/// The C handle types whose `context` and `handle` fields name an object for events.
trait Named {
    fn context_and_number(&self) -> (*mut ibv_context, u32);
}
impl Named for ibv_cq {
    fn context_and_number(&self) -> (*mut ibv_context, u32) {
        (self.context, self.handle)
    }
}
impl Named for ibv_qp {
    fn context_and_number(&self) -> (*mut ibv_context, u32) {
        (self.context, self.handle)
    }
}
impl Named for ibv_srq {
    fn context_and_number(&self) -> (*mut ibv_context, u32) {
        (self.context, self.handle)
    }
}

/// Records a new object's handle with its context, for the events that name it.
fn remember<T: Named>(h: *mut T, kind: Kind) {
    // SAFETY: `h` is a new handle this library made, its fields set.
    let (ctx, num) = unsafe { (*h).context_and_number() };
    // SAFETY: the object's context is open (objects are created on an open context).
    if let Some(u) = unsafe { ucontext(ctx) } {
        u.handles.insert(kind, num, h);
    }
}

/// Forgets an object about to be destroyed.
fn forget<T: Named>(h: *mut T, kind: Kind) {
    // SAFETY: `h` is a live handle of this library.
    let (ctx, num) = unsafe { (*h).context_and_number() };
    // SAFETY: the object's context is still open (the ibverbs contract: objects go first).
    if let Some(u) = unsafe { ucontext(ctx) } {
        u.handles.remove(kind, num);
    }
}

mod cq;
mod pd_mr;
mod qp;
mod srq_ah;

pub use cq::*;
pub use pd_mr::*;
pub use qp::*;
pub use srq_ah::*;
