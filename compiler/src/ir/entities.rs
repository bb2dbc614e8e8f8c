//! Entity references of the tile IR: `u32` newtypes from `cranelift_entity`.
//!
//! The prefix given to `entity_impl!` is the spelling the IR printer uses, so the `Display` of an
//! id equals its text form (`v3`, `i7`, `blk1`, `var2`, `p0`); a symbolic size ([`SizeVar`])
//! prints as its name, which the kernel holds.

use cranelift_entity::entity_impl;

/// An SSA value: a scalar or an immutable register tile.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Value(u32);
entity_impl!(Value, "v");

/// An instruction.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Inst(u32);
entity_impl!(Inst, "i");

/// A structured block: an ordered list of instructions (kernel body or loop body).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Block(u32);
entity_impl!(Block, "blk");

/// A mutable tile slot in one memory space (registers, shared memory or tensor memory).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Var(u32);
entity_impl!(Var, "var");

/// A kernel parameter (global tensor or scalar).
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Param(u32);
entity_impl!(Param, "p");

/// A symbolic size of a kernel (`M`, `T`, …): an extent bound at launch from the arguments'
/// shapes. Its name is `Kernel::sizes[s]`; the launch passes one `i32` per size, in entity order.
#[derive(Copy, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SizeVar(u32);
entity_impl!(SizeVar, "size");
