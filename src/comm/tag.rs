//! Message tags. The top byte names the space a message belongs to, which
//! decides who consumes it: a mailbox read by `Mesh::recv` (user space and
//! the collectives) or a service that answers it from a receiver thread
//! (feature requests). The low 56 bits are free for the space's own use.

pub const USER: u8 = 0;
pub const ALL_REDUCE: u8 = 1;
pub const BARRIER: u8 = 2;
pub const BROADCAST: u8 = 3;
pub const FEATURE_REQUEST: u8 = 4;
pub const FEATURE_REPLY: u8 = 5;
pub const ALL_TO_ALL: u8 = 6;
/// An all-to-all no counter holds, on either side (`Mesh::all_to_all_uncounted`).
pub const ALL_TO_ALL_UNCOUNTED: u8 = 7;

pub const LOW_BITS: u32 = 56;
const LOW_MASK: u64 = (1 << LOW_BITS) - 1;

pub const fn make(space: u8, low: u64) -> u64 {
    ((space as u64) << LOW_BITS) | (low & LOW_MASK)
}
pub const fn space(tag: u64) -> u8 {
    (tag >> LOW_BITS) as u8
}
pub const fn low(tag: u64) -> u64 {
    tag & LOW_MASK
}
/// Whether a message with `tag` is counted: decided by the tag alone, which
/// both ends see, so its sender and receiver agree however it is timed.
pub const fn counted(tag: u64) -> bool {
    space(tag) != ALL_TO_ALL_UNCOUNTED
}
