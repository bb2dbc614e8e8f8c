//! Synchronisation every target has: CTA barriers, warp re-convergence and the proxy fence before
//! the tensor core reads shared memory. The tcgen05 fences and the MMA completion mbarrier are in
//! [`super::sm100::sync`].

use std::collections::HashMap;

use inkwell::basic_block::BasicBlock;
use inkwell::values::{FunctionValue, InstructionOpcode as Op, InstructionValue};

use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// `bar.sync 0` over the whole CTA — unless the instruction just emitted in this block is
    /// one: two barriers with nothing between them order nothing more than one (an MMA's
    /// closing barrier, the barrier pass's and a refill's often meet).
    ///
    /// After a warp-specialised loop's role split, `bar.sync 1, n` over the `n` consumer
    /// threads instead: the producer warpgroup has left.
    pub fn bar_sync(&self) -> Result<(), BackendError> {
        if let Some(n) = self.ws_consumers {
            self.call("llvm.nvvm.barrier.cta.sync.aligned.count", None, &[self.i32(1).into(), self.i32(n as i32).into()])?;
            return Ok(());
        }
        const NAME: &str = BAR_SYNC;
        let last = self.b.get_insert_block().and_then(|bb| bb.get_last_instruction());
        let repeated = last.is_some_and(|i| {
            i.get_opcode() == inkwell::values::InstructionOpcode::Call
                && i.get_operand(i.get_num_operands().saturating_sub(1)).and_then(|o| o.value()).is_some_and(|f| f.is_pointer_value() && f.into_pointer_value().get_name().to_str() == Ok(NAME))
        });
        if !repeated {
            self.call(NAME, None, &[self.i32(0).into()])?;
        }
        Ok(())
    }

    /// `bar.warp.sync 0xffffffff`: re-converge the warp before `.sync.aligned` tcgen05 ops.
    pub fn warp_sync(&self) -> Result<(), BackendError> {
        self.call("llvm.nvvm.bar.warp.sync", None, &[self.i32(-1).into()])?;
        Ok(())
    }

    /// `fence.proxy.async.shared::cta`: generic-proxy shared-memory writes become visible to
    /// the async proxy (tcgen05 or wgmma reading operands through descriptors).
    pub fn fence_proxy_async(&self) -> Result<(), BackendError> {
        self.call("llvm.nvvm.fence.proxy.async.shared_cta", None, &[])?;
        Ok(())
    }
}

/// The intrinsic `bar_sync` emits.
pub const BAR_SYNC: &str = "llvm.nvvm.barrier.cta.sync.aligned.all";

/// Deletes every CTA barrier from which every path reaches another barrier with nothing
/// between them that touches memory other threads see. Runs on the optimised module, where the
/// emitters' barriers meet (an MMA's closing barrier, the barrier pass's, a pipeline wait's, a
/// refill's) — often in different basic blocks, around a stage's mbarrier wait. Returns how
/// many it deleted.
///
/// Why deleting the *earlier* one is exact: a barrier orders every thread's memory accesses
/// before it against every access after it. Between it and the next barrier on any path no
/// thread accesses shared or global memory, so that barrier orders the same accesses. What may
/// stand between them ([`transparent`]): arithmetic, control flow, functions LLVM knows touch
/// no memory, `fence.proxy.async` (a per-thread fence on the thread's earlier writes that must
/// precede the barrier the tensor core's issuer waits at — the later one, which stays), and
/// waits for what is already in flight (an mbarrier phase, the thread's own `cp.async`
/// groups), whose completion nothing after the earlier barrier produces. Barriers sit in
/// CTA-uniform control flow (`.aligned`), so every thread deletes the same ones; a path that
/// only some threads take (an elected thread's TMA issue) is a path like any other.
pub fn drop_repeated_barriers(module: &inkwell::module::Module<'_>) -> usize {
    let mut dead = vec![];
    let mut f = module.get_first_function();
    while let Some(func) = f {
        dead.extend(repeated_barriers(module, func));
        f = func.get_next_function();
    }
    for i in &dead {
        i.erase_from_basic_block();
    }
    dead.len()
}

/// The callee's name of a call instruction.
fn callee(i: &InstructionValue<'_>) -> Option<String> {
    if i.get_opcode() != Op::Call {
        return None;
    }
    let f = i.get_operand(i.get_num_operands().checked_sub(1)?)?.value()?;
    f.is_pointer_value().then(|| f.into_pointer_value().get_name().to_string_lossy().into_owned())
}

fn is_barrier(i: &InstructionValue<'_>) -> bool {
    callee(i).as_deref() == Some(BAR_SYNC)
}

/// Whether `i` may stand between two barriers without making the first one order something.
fn transparent(module: &inkwell::module::Module<'_>, i: &InstructionValue<'_>) -> bool {
    match i.get_opcode() {
        Op::Call => callee(i).is_some_and(|n| {
            const WAITS: [&str; 3] = ["llvm.nvvm.fence.proxy.async.shared_cta", "llvm.nvvm.mbarrier.try.wait.", "llvm.nvvm.cp.async.wait."];
            WAITS.iter().any(|w| n.starts_with(w)) || module.get_function(&n).is_some_and(|f| {
                // LLVM's `memory(none)`: the function reads and writes no memory.
                let memory = inkwell::attributes::Attribute::get_named_enum_kind_id("memory");
                f.get_enum_attribute(inkwell::attributes::AttributeLoc::Function, memory).is_some_and(|a| a.get_enum_value() == 0)
            })
        }),
        Op::Load | Op::Store | Op::AtomicRMW | Op::AtomicCmpXchg | Op::Fence | Op::VAArg | Op::Invoke | Op::CallBr | Op::Return | Op::Unreachable => false,
        _ => true,
    }
}

/// The barriers of `func` that [`drop_repeated_barriers`] deletes.
fn repeated_barriers<'ctx>(module: &inkwell::module::Module<'ctx>, func: FunctionValue<'ctx>) -> Vec<InstructionValue<'ctx>> {
    let blocks = func.get_basic_blocks();
    let index: HashMap<BasicBlock<'ctx>, usize> = blocks.iter().enumerate().map(|(k, &b)| (b, k)).collect();
    let successors = |bb: &BasicBlock<'ctx>| -> Vec<usize> {
        let Some(term) = bb.get_terminator() else { return vec![] };
        (0..term.get_num_operands()).filter_map(|k| term.get_operand(k).and_then(|o| o.block())).filter_map(|s| index.get(&s).copied()).collect()
    };
    // How a block starts: a barrier before anything opaque (Some(true)), something opaque
    // first (Some(false)), or only transparent instructions (None: it depends on where it goes).
    let head: Vec<Option<bool>> = blocks.iter().map(|bb| bb.get_instructions().find(|i| is_barrier(i) || !transparent(module, i)).map(|i| is_barrier(&i))).collect();
    let succ: Vec<Vec<usize>> = blocks.iter().map(successors).collect();
    // reaches[b]: every path from b's start meets a barrier before anything opaque. The greatest
    // fixed point: a wait loop (a block that branches to itself) reaches what its exit reaches.
    let mut reaches: Vec<bool> = head.iter().map(|h| h.unwrap_or(true)).collect();
    loop {
        let mut changed = false;
        for b in 0..blocks.len() {
            if head[b].is_none() && reaches[b] {
                let r = !succ[b].is_empty() && succ[b].iter().all(|&s| reaches[s]);
                if !r {
                    reaches[b] = false;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    let mut dead = vec![];
    for (b, bb) in blocks.iter().enumerate() {
        let mut open: Option<InstructionValue<'ctx>> = None;
        for i in bb.get_instructions() {
            if is_barrier(&i) {
                if let Some(prev) = open.replace(i) {
                    dead.push(prev);
                }
            } else if !transparent(module, &i) {
                open = None;
            }
        }
        // A barrier with only transparent instructions after it in its block.
        if let Some(last) = open {
            if !succ[b].is_empty() && succ[b].iter().all(|&s| reaches[s]) {
                dead.push(last);
            }
        }
    }
    dead
}

#[cfg(test)]
mod tests {
    use inkwell::context::Context;
    use inkwell::memory_buffer::MemoryBuffer;

    /// The barriers left in each function of `ir` after [`super::drop_repeated_barriers`], by
    /// the label of the block holding them, in order.
    fn survivors(ir: &str) -> Vec<(String, Vec<String>)> {
        let ctx = Context::create();
        let buf = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), "t");
        let m = ctx.create_module_from_ir(buf).expect("test IR parses");
        super::drop_repeated_barriers(&m);
        m.verify().expect("still valid");
        let mut out = vec![];
        let mut f = m.get_first_function();
        while let Some(func) = f {
            if func.count_basic_blocks() > 0 {
                let mut bars = vec![];
                for bb in func.get_basic_blocks() {
                    let n = bb.get_instructions().filter(super::is_barrier).count();
                    bars.extend(std::iter::repeat_n(bb.get_name().to_string_lossy().into_owned(), n));
                }
                out.push((func.get_name().to_string_lossy().into_owned(), bars));
            }
            f = func.get_next_function();
        }
        out
    }

    const DECLS: &str = "
declare void @llvm.nvvm.barrier.cta.sync.aligned.all(i32)
declare void @llvm.nvvm.fence.proxy.async.shared_cta()
declare i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3), i32)
declare double @llvm.fma.f64(double, double, double)
declare void @llvm.nvvm.wgmma.fence.sync.aligned()
";

    #[test]
    fn a_barrier_is_dropped_only_when_every_path_meets_another_first() {
        let ir = format!(
            "{DECLS}
define void @fence_between(ptr addrspace(3) %p) {{
entry:
  store i32 1, ptr addrspace(3) %p
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  %x = call double @llvm.fma.f64(double 1.0, double 2.0, double 3.0)
  call void @llvm.nvvm.fence.proxy.async.shared_cta()
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  call void @llvm.nvvm.wgmma.fence.sync.aligned()
  ret void
}}
define void @store_between(ptr addrspace(3) %p) {{
entry:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  store i32 1, ptr addrspace(3) %p
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  ret void
}}
define void @wait_then_barrier(ptr addrspace(3) %m, i1 %tma) {{
entry:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br i1 %tma, label %wait, label %copied
wait:
  %done = call i1 @llvm.nvvm.mbarrier.try.wait.parity.scope.cta.space.cta(ptr addrspace(3) %m, i32 0)
  br i1 %done, label %join, label %wait
copied:
  call void @llvm.nvvm.fence.proxy.async.shared_cta()
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br label %join
join:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  ret void
}}
define void @one_path_stores(ptr addrspace(3) %p, i1 %c) {{
entry:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  br i1 %c, label %a, label %b
a:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  ret void
b:
  store i32 1, ptr addrspace(3) %p
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  ret void
}}
define void @last_before_return() {{
entry:
  call void @llvm.nvvm.barrier.cta.sync.aligned.all(i32 0)
  ret void
}}
"
        );
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            survivors(&ir),
            vec![
                // Only a fence and arithmetic between: the first goes, the one after the fence stays.
                ("fence_between".to_string(), s(&["entry"])),
                // A shared-memory store between: both stay.
                ("store_between".to_string(), s(&["entry", "entry"])),
                // A wait loop or a fenced barrier on every path: the first goes; the copied
                // path's barrier has the join's after it, so it goes too.
                ("wait_then_barrier".to_string(), s(&["join"])),
                // One path stores before its barrier: the first stays.
                ("one_path_stores".to_string(), s(&["entry", "a", "b"])),
                ("last_before_return".to_string(), s(&["entry"])),
            ]
        );
    }
}
