//! umlx-tests (being written)
