//! Byte-layout structures of BAR0 and the data path (placeholder being written).
crate::plain! {
    /// Data (pointer) segment of a send or receive WQE (`mlx5_wqe_data_seg`).
    struct wqe_data_seg[16] {
        /// Length in bytes.
        byte_count @ 0x00: crate::U32,
        /// Local key.
        lkey @ 0x04: crate::U32,
        /// Address.
        addr @ 0x08: crate::U64,
    }
}
