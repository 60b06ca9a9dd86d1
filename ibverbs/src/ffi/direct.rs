//! The provider direct-verbs entry points that perftest and UCX link besides libibverbs
//! (`libmlx5.so.1`'s `mlx5dv_*` and `libefa.so.1`'s `efadv_*`): this library also answers for
//! those two sonames (`run-compat.sh` links both names to it), so that such programs load
//! without rdma-core's providers, whose `IBVERBS_PRIVATE` imports only rdma-core's libibverbs
//! has. umlx's devices offer no direct verbs: `mlx5dv_is_supported` is false, and every other
//! entry point answers as rdma-core's do for a device of another provider — NULL with errno
//! EOPNOTSUPP, or EOPNOTSUPP returned. The programs call them only for features they are asked
//! for explicitly (DC, AES-XTS, SRD, DevX).

use super::*;

/// Entry points that return a pointer: NULL, errno EOPNOTSUPP.
macro_rules! no_object {
    ($($name:ident($($arg:ty),*);)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: NULL, errno EOPNOTSUPP (no direct verbs on umlx).")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($(_: $arg),*) -> *mut c_void {
            fail(unsupported(stringify!($name), "provider direct verbs"))
        }
    )*};
}

/// Entry points that return an error number: EOPNOTSUPP.
macro_rules! no_op {
    ($($name:ident($($arg:ty),*) -> $ret:ty;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: EOPNOTSUPP (no direct verbs on umlx).")]
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($(_: $arg),*) -> $ret {
            unsupported(stringify!($name), "provider direct verbs") as $ret
        }
    )*};
}

no_object! {
    mlx5dv_open_device(*mut ibv_device, *mut c_void);
    mlx5dv_create_cq(*mut ibv_context, *mut c_void, *mut c_void);
    mlx5dv_create_qp(*mut ibv_context, *mut c_void, *mut c_void);
    mlx5dv_qp_ex_from_ibv_qp_ex(*mut ibv_qp_ex);
    mlx5dv_create_mkey(*mut c_void);
    mlx5dv_dek_create(*mut ibv_context, *mut c_void);
    mlx5dv_devx_obj_create(*mut ibv_context, *const c_void, size_t, *mut c_void, size_t);
    mlx5dv_devx_umem_reg(*mut ibv_context, *mut c_void, size_t, u32);
    mlx5dv_devx_alloc_uar(*mut ibv_context, u32);
    mlx5dv_devx_create_event_channel(*mut ibv_context, c_int);
    efadv_create_qp_ex(*mut ibv_context, *mut c_void, *mut c_void, u32);
}

no_op! {
    mlx5dv_init_obj(*mut c_void, u64) -> c_int;
    mlx5dv_destroy_mkey(*mut c_void) -> c_int;
    mlx5dv_crypto_login(*mut ibv_context, *mut c_void) -> c_int;
    mlx5dv_dek_destroy(*mut c_void) -> c_int;
    mlx5dv_devx_general_cmd(*mut ibv_context, *const c_void, size_t, *mut c_void, size_t) -> c_int;
    mlx5dv_devx_obj_destroy(*mut c_void) -> c_int;
    mlx5dv_devx_obj_query(*mut c_void, *const c_void, size_t, *mut c_void, size_t) -> c_int;
    mlx5dv_devx_obj_modify(*mut c_void, *const c_void, size_t, *mut c_void, size_t) -> c_int;
    mlx5dv_devx_umem_dereg(*mut c_void) -> c_int;
    mlx5dv_devx_qp_query(*mut ibv_qp, *const c_void, size_t, *mut c_void, size_t) -> c_int;
    mlx5dv_devx_qp_modify(*mut ibv_qp, *const c_void, size_t, *mut c_void, size_t) -> c_int;
    mlx5dv_devx_subscribe_devx_event(*mut c_void, *mut c_void, u16, *mut u16, u64) -> c_int;
    efadv_query_device(*mut ibv_context, *mut c_void, u32) -> c_int;
}

/// `mlx5dv_devx_get_event`: -1, errno EOPNOTSUPP.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlx5dv_devx_get_event(_channel: *mut c_void, _data: *mut c_void, _len: size_t) -> isize {
    set_errno(unsupported("mlx5dv_devx_get_event", "provider direct verbs"));
    -1
}

/// `mlx5dv_devx_free_uar`: there are none to free.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlx5dv_devx_free_uar(_uar: *mut c_void) {}

/// `mlx5dv_devx_destroy_event_channel`: there are none to destroy.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlx5dv_devx_destroy_event_channel(_channel: *mut c_void) {}

/// `mlx5dv_is_supported`: false — umlx's devices are not driven by rdma-core's mlx5 provider
/// and offer no direct verbs (UCX then uses its generic `rc_verbs` and `ud_verbs` transports).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlx5dv_is_supported(_device: *mut ibv_device) -> bool {
    false
}
