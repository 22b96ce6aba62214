//! Counter stores. For now: the byte-exact cache-key format shared with the
//! original, which every store that keeps fixed windows uses.

pub mod key;
