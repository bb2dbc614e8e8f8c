//! A cursor for appending instructions to a [`Kernel`], used by lowering, passes and tests.
//!
//! The builder does no type checking beyond computing result types; the front end checks
//! user programs and [`super::validate`] checks the IR.

use super::*;

/// Appends instructions at the end of a block (or inserts them at a position of it), giving
/// them a span.
pub struct Builder<'k> {
    /// The kernel being built.
    pub kernel: &'k mut Kernel,
    block: Block,
    span: Span,
    /// Where the next instruction goes in `block`; `None`: at its end.
    at: Option<usize>,
}

impl<'k> Builder<'k> {
    /// A builder appending to the kernel's top-level block.
    pub fn new(kernel: &'k mut Kernel) -> Builder<'k> {
        let block = kernel.body;
        Builder { kernel, block, span: Span::default(), at: None }
    }
    /// The block instructions are appended to.
    pub fn block(&self) -> Block {
        self.block
    }
    /// Appends to `block` from now on.
    pub fn switch_to(&mut self, block: Block) {
        self.block = block;
        self.at = None;
    }
    /// Inserts into `block` before its instruction at `pos` from now on, each instruction after
    /// the one inserted before it (passes that add code in the middle of a block).
    pub fn insert_at(&mut self, block: Block, pos: usize) {
        self.block = block;
        self.at = Some(pos);
    }
    /// Gives the following instructions `span`.
    pub fn set_span(&mut self, span: Span) {
        self.span = span;
    }
    /// Appends an instruction; `ty` is its result type, if it has a result.
    pub fn push(&mut self, op: Op, ty: Option<Type>) -> (Inst, Option<Value>) {
        let inst = self.kernel.insts.push(InstData { op, result: None });
        let result = ty.map(|ty| self.kernel.values.push(ValueData { ty, def: ValueDef::Result(inst) }));
        self.kernel.insts[inst].result = result;
        self.kernel.inst_spans[inst] = self.span;
        match &mut self.at {
            Some(pos) => {
                self.kernel.blocks[self.block].insts.insert(*pos, inst);
                *pos += 1;
            }
            None => self.kernel.blocks[self.block].insts.push(inst),
        }
        (inst, result)
    }
    /// Appends an instruction with a result and returns the result.
    pub fn value(&mut self, op: Op, ty: Type) -> Value {
        let (_, v) = self.push(op, Some(ty));
        v.unwrap_or_else(|| unreachable!("push with a type always makes a result"))
    }
    /// Appends an instruction without a result.
    pub fn effect(&mut self, op: Op) -> Inst {
        self.push(op, None).0
    }
    /// An i32 constant.
    pub fn iconst(&mut self, c: i64) -> Value {
        self.value(Op::ConstInt(c), Type::Scalar(Elem::I32))
    }
    /// An f32 constant.
    pub fn fconst(&mut self, c: f64) -> Value {
        self.value(Op::ConstFloat(c), Type::Scalar(Elem::F32))
    }
    /// Declares a variable.
    pub fn var(&mut self, name: &str, space: Space, ty: Type, span: Span) -> Var {
        self.kernel.vars.push(VarData { name: name.to_string(), space, ty, span })
    }
    /// Appends a `for` loop and returns `(loop inst, induction value, body block)`. The caller
    /// fills the body with [`Builder::switch_to`] and switches back afterwards.
    pub fn for_loop(&mut self, lo: Value, hi: Value, reverse: bool) -> (Inst, Value, Block) {
        let body = self.kernel.blocks.push(BlockData::default());
        let (inst, _) = self.push(Op::For { lo, hi, reverse, body }, None);
        let iv = self.kernel.values.push(ValueData { ty: Type::Scalar(Elem::I32), def: ValueDef::LoopIndex(inst) });
        self.kernel.insts[inst].result = Some(iv);
        (inst, iv, body)
    }
}
