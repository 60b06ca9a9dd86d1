//! umlx-verbs (being written)
