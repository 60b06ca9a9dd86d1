//! umlx-driver (being written)
