//! The scenarios, each `fn(&mut Env) -> Result<Outcome>` for any backend `B`.
//!
//! [`for_each_scenario!`](crate::for_each_scenario) lists them (the test entry points are
//! generated from it, so the sim and the hardware run the same list); [`all`] gives them as
//! values.

pub mod bringup;
pub mod errors;
pub mod objects;
pub mod rc;
pub mod traffic;
pub mod ud;

pub use bringup::*;
pub use errors::*;
pub use objects::*;
pub use rc::*;
pub use traffic::*;
pub use ud::*;

use crate::env::Env;
use crate::kit::{Outcome, Result};

/// A scenario: its name and its function.
pub type Scenario = (&'static str, fn(&mut Env) -> Result<Outcome>);

/// Calls the macro `$m` with the name of every scenario (a comma-separated list of the
/// functions of [`crate::scenarios`]), in a fixed order.
#[macro_export]
macro_rules! for_each_scenario {
    ($m:ident) => {
        $m! {
            bring_up_device_port_gid,
            pd_and_mr_registration,
            mr_variants_carry_traffic,
            cq_poll_batches_and_producer_counter,
            cq_polls_of_one_and_of_sixteen_across_ring_wraps,
            cq_resize_keeps_waiting_completions_and_takes_new_ones,
            completion_channel_events,
            completion_channel_solicited_only,
            completion_channels_are_reusable,
            rc_qp_state_machine_and_query,
            ud_qp_state_machine_and_query,
            address_handles,
            srq_shared_by_two_qps,
            srq_limit_event,
            srq_limit_out_of_range_refused,
            rc_send_recv,
            rc_send_with_immediate,
            rc_send_gather_scatter_sge_lists,
            rc_recv_sge_list_with_empty_entry,
            rc_recv_scatter_list_of_eight,
            rc_send_inline,
            rc_zero_length_operations,
            rc_rdma_write_multi_packet_psn_wrap,
            rc_rdma_write_with_immediate,
            rc_rdma_write_inline,
            rc_rdma_read_into_scattered_buffers,
            rc_atomic_fetch_and_add,
            rc_atomic_compare_and_swap,
            rc_unsignaled_and_sq_sig_all,
            rc_chains_and_ring_wrap,
            rc_many_qps_share_a_cq,
            rc_every_opcode_in_one_run,
            rc_loopback_qp_reset_and_reconnected_to_itself,
            rc_lossy_fabric_delivers_every_message_once_in_order,
            ud_send_recv_grh_and_source,
            ud_immediate_inline_and_gather,
            ud_wrong_qkey_or_qpn_dropped,
            err_bad_lkey,
            err_bad_rkey,
            err_access_violation,
            err_receive_too_small,
            err_rnr_retry_exhausted,
            err_transport_retry_exhausted,
            err_flush_after_error,
            err_qp_state_transitions,
            err_post_in_wrong_state,
            err_queue_full,
            err_too_many_sges,
            err_inline_too_large,
            err_invalid_requests,
        }
    };
}

macro_rules! scenario_list {
    ($($name:ident),* $(,)?) => {
        /// Every scenario, in the order of [`for_each_scenario!`](crate::for_each_scenario).
        pub fn all() -> Vec<Scenario> {
            vec![$((stringify!($name), $name as fn(&mut Env) -> Result<Outcome>)),*]
        }
    };
}

crate::for_each_scenario!(scenario_list);
