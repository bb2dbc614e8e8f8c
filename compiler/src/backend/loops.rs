//! Control flow the code generator builds: counted loops, CTA-wide element loops, two- and
//! one-armed branches, thread-0 sections.

use inkwell::values::IntValue;
use inkwell::IntPredicate;

use super::emit::Codegen;
use super::BackendError;

impl<'ctx> Codegen<'ctx, '_> {
    /// A loop over `init, init±1, …` while inside `lo..hi` (signed), skipped when `lo >= hi`.
    pub fn counted_loop(
        &mut self,
        lo: IntValue<'ctx>,
        hi: IntValue<'ctx>,
        init: IntValue<'ctx>,
        reverse: bool,
        body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let pre = self.cur_block()?;
        let lp = self.ctx.append_basic_block(self.func, "loop");
        let exit = self.ctx.append_basic_block(self.func, "loop.exit");
        let nonempty = self.b.build_int_compare(IntPredicate::SLT, lo, hi, "nonempty")?;
        self.b.build_conditional_branch(nonempty, lp, exit)?;
        self.b.position_at_end(lp);
        let phi = self.b.build_phi(self.ctx.i32_type(), "iv")?;
        let x = phi.as_basic_value().into_int_value();
        body(self, x)?;
        let one = self.i32(1);
        let (next, cont) = if reverse {
            let n = self.b.build_int_sub(x, one, "iv.next")?;
            (n, self.b.build_int_compare(IntPredicate::SGE, n, lo, "cont")?)
        } else {
            let n = self.b.build_int_add(x, one, "iv.next")?;
            (n, self.b.build_int_compare(IntPredicate::SLT, n, hi, "cont")?)
        };
        let latch = self.cur_block()?;
        self.b.build_conditional_branch(cont, lp, exit)?;
        phi.add_incoming(&[(&init, pre), (&next, latch)]);
        self.b.position_at_end(exit);
        Ok(())
    }

    /// A CTA-wide loop over `0..n`: thread `t` runs `body(e)` for `e = t, t+threads, …`.
    /// Not unrolled: two copies of the body per iteration raised registers in most kernels
    /// (gemm 165 → 209, dqkwg's spills 156 → 204 B; ptxas 13.5, sm_90a) with no measurement to
    /// pay for them (docs/results.md, twenty-first session).
    pub fn cta_loop(&mut self, n: u32, body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), BackendError>) -> Result<(), BackendError> {
        self.strided_loop(self.tid, self.k.threads, n, body)
    }

    /// A loop `e = start; e < n; e += step` with a per-thread start (n and step constant).
    pub fn strided_loop(
        &mut self,
        start: IntValue<'ctx>,
        step: u32,
        n: u32,
        body: &mut dyn FnMut(&mut Self, IntValue<'ctx>) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let pre = self.cur_block()?;
        let lp = self.ctx.append_basic_block(self.func, "cta");
        let exit = self.ctx.append_basic_block(self.func, "cta.exit");
        let n_v = self.i32(n as i32);
        let any = self.b.build_int_compare(IntPredicate::ULT, start, n_v, "any")?;
        self.b.build_conditional_branch(any, lp, exit)?;
        self.b.position_at_end(lp);
        let phi = self.b.build_phi(self.ctx.i32_type(), "e")?;
        let e = phi.as_basic_value().into_int_value();
        body(self, e)?;
        let next = self.b.build_int_add(e, self.i32(step as i32), "e.next")?;
        let cont = self.b.build_int_compare(IntPredicate::ULT, next, n_v, "cont")?;
        let latch = self.cur_block()?;
        self.b.build_conditional_branch(cont, lp, exit)?;
        phi.add_incoming(&[(&start, pre), (&next, latch)]);
        self.b.position_at_end(exit);
        Ok(())
    }

    /// Row and column of element `e` of a row-major tile `cols` wide (the element loops' index).
    pub fn tile_coords(&self, e: IntValue<'ctx>, cols: u32) -> Result<(IntValue<'ctx>, IntValue<'ctx>), BackendError> {
        let r = self.b.build_int_unsigned_div(e, self.i32(cols as i32), "r")?;
        let c = self.b.build_int_unsigned_rem(e, self.i32(cols as i32), "c")?;
        Ok((r, c))
    }

    /// Runs `then` where `cond` holds and `otherwise` where it does not.
    pub fn if_else(
        &mut self,
        cond: IntValue<'ctx>,
        then: &mut dyn FnMut(&mut Self) -> Result<(), BackendError>,
        otherwise: &mut dyn FnMut(&mut Self) -> Result<(), BackendError>,
    ) -> Result<(), BackendError> {
        let t = self.ctx.append_basic_block(self.func, "then");
        let e = self.ctx.append_basic_block(self.func, "else");
        let join = self.ctx.append_basic_block(self.func, "join");
        self.b.build_conditional_branch(cond, t, e)?;
        self.b.position_at_end(t);
        then(self)?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(e);
        otherwise(self)?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        Ok(())
    }

    /// Runs `body` in thread 0 only (mbarrier set-up, TMA and tcgen05 issue, one-element stores).
    pub fn on_thread0(&mut self, body: &mut dyn FnMut(&mut Self) -> Result<(), BackendError>) -> Result<(), BackendError> {
        let t0 = self.b.build_int_compare(IntPredicate::EQ, self.tid, self.i32(0), "t0")?;
        self.if_then(t0, body)
    }

    /// Runs `body` only where `cond` holds (a one-armed `if`).
    pub fn if_then(&mut self, cond: IntValue<'ctx>, body: &mut dyn FnMut(&mut Self) -> Result<(), BackendError>) -> Result<(), BackendError> {
        let then = self.ctx.append_basic_block(self.func, "then");
        let join = self.ctx.append_basic_block(self.func, "join");
        self.b.build_conditional_branch(cond, then, join)?;
        self.b.position_at_end(then);
        body(self)?;
        self.b.build_unconditional_branch(join)?;
        self.b.position_at_end(join);
        Ok(())
    }

}
