//! umlx-sim (being written)
