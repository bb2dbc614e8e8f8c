//! `tilec run --interp --dump NAME`: every value a named binding takes in one chosen CTA,
//! written to the output file beside the `out` tensors (issue 13, item 3).
//!
//! A name is an immutable `let` binding ([`Kernel::bindings`]) or a variable (`let mut`,
//! `smem`/`tmem`/`reg` tiles: [`crate::ir::VarData::name`]). Each time the watched value is
//! computed, or the variable is written (`=`, `+=`, an MMA), in the chosen CTA, the value is
//! recorded; a binding inside a loop is recorded once per iteration, in execution order. The
//! records of `NAME` are stacked into the tensor `dump.NAME` of shape `[records, rows, cols]`
//! (a scalar is `1 x 1`), of the binding's element type (a predicate as i32 0/1), so a tile
//! read back with `tilec_io.read` equals the interpreter's value bit for bit. A name that is
//! never computed in that CTA gives `[0, rows, cols]`.

use std::collections::{BTreeMap, HashMap};

use tilec_abi::meta::DType;
use tilec_abi::tensor::HostTensor;

use super::bind::dtype_of;
use super::value::Val;
use super::InterpError;
use crate::ir::{Kernel, Type, Value, Var};

/// What to record: the names asked for and, per IR value or variable, which of them it is.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    names: Vec<(String, Type)>,
    values: HashMap<Value, Vec<usize>>,
    vars: HashMap<Var, Vec<usize>>,
    records: Vec<Vec<Val>>,
    /// Elements recorded so far, and the most that may be ([`super::Options::max_elements`]).
    total: u64,
    limit: u64,
    /// The first name whose records would have passed the limit.
    overflow: Option<String>,
}

impl Watch {
    /// Resolves `names` in `k`.
    ///
    /// # Errors
    /// [`InterpError::BadDump`] for a name that is neither a `let` binding nor a variable
    /// (with the closest name the kernel has), or that several bindings share.
    pub(crate) fn new(k: &Kernel, names: &[String], limit: u64) -> Result<Watch, InterpError> {
        let mut w = Watch { limit, ..Watch::default() };
        for name in names {
            let i = w.names.len();
            let mut types = vec![];
            for (n, v) in &k.bindings {
                if n == name {
                    w.values.entry(*v).or_default().push(i);
                    types.push(k.values[*v].ty);
                }
            }
            for (var, d) in k.vars.iter() {
                if &d.name == name {
                    w.vars.entry(var).or_default().push(i);
                    types.push(d.ty);
                }
            }
            let bad = |reason: String| InterpError::BadDump { kernel: k.name.clone(), name: name.clone(), reason };
            let Some(&ty) = types.first() else {
                let known = k.bindings.iter().map(|(n, _)| n.as_str()).chain(k.vars.values().map(|d| d.name.as_str())).filter(|n| !n.starts_with('%'));
                let closest = known.min_by_key(|c| (strsim::damerau_levenshtein(name, c), c.to_string()));
                let hint = closest.map(|c| format!(" (did you mean `{c}`?)")).unwrap_or_default();
                return Err(bad(format!("no `let` binding or variable has this name (parameters and loop indices are not dumped: bind them with `let`){hint}")));
            };
            // One name, one binding: records of two bindings (a `let` in a loop body and one
            // outside it) would be stacked together without telling them apart.
            if types.len() > 1 {
                return Err(bad(format!("{} bindings have this name (in different blocks): rename one to dump it", types.len())));
            }
            w.names.push((name.clone(), ty));
            w.records.push(vec![]);
        }
        Ok(w)
    }

    /// Whether nothing is watched (the interpreter skips the bookkeeping then).
    pub(crate) fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Records `val` if `value` is watched.
    pub(crate) fn value(&mut self, value: Value, val: &Val) {
        if let Some(ix) = self.values.get(&value).cloned() {
            for i in ix {
                self.record(i, val);
            }
        }
    }

    /// Records the new contents of `var` if it is watched.
    pub(crate) fn var(&mut self, var: Var, val: &Val) {
        if let Some(ix) = self.vars.get(&var).cloned() {
            for i in ix {
                self.record(i, val);
            }
        }
    }

    /// Keeps one record of name `i`, unless the records would pass the element limit (a dump
    /// inside a long loop): then recording stops and [`Watch::into_tensors`] reports it.
    fn record(&mut self, i: usize, val: &Val) {
        let n = val.data.len() as u64;
        if self.overflow.is_some() || self.total + n > self.limit {
            self.overflow.get_or_insert_with(|| self.names[i].0.clone());
            return;
        }
        self.total += n;
        self.records[i].push(val.clone());
    }

    /// The records as tensors named `dump.NAME`, each `[records, rows, cols]`.
    ///
    /// # Errors
    /// [`InterpError::TooLarge`] when the records passed the element limit;
    /// [`InterpError::Tensor`] if a tensor cannot be built.
    pub(crate) fn into_tensors(self) -> Result<BTreeMap<String, HostTensor>, InterpError> {
        if let Some(name) = self.overflow {
            return Err(InterpError::TooLarge { what: format!("the dump of `{name}` (with the other dumps)"), elements: u128::from(self.total) + 1, limit: self.limit });
        }
        let mut out = BTreeMap::new();
        for ((name, ty), recs) in self.names.into_iter().zip(self.records) {
            let (r, c) = ty.shape().map_or((1, 1), |(r, c)| (r as usize, c as usize));
            let dtype = dtype_of(ty.elem()).unwrap_or(DType::I32);
            let vals: Vec<f64> = recs.iter().flat_map(|v| v.data.iter().map(|s| s.to_f64())).collect();
            let key = format!("dump.{name}");
            let t = HostTensor::from_f64(dtype, vec![recs.len(), r, c], &vals).map_err(|source| InterpError::Tensor { name: key.clone(), source })?;
            out.insert(key, t);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use tilec_abi::meta::DType;
    use tilec_abi::tensor::HostTensor;

    use crate::interp::{run_kernel_with, InterpError, Options};

    #[test]
    fn a_dump_inside_a_long_loop_stops_at_the_element_limit() {
        let src = "kernel big(x: f32[64, 64], y: out f32[64, 64]) grid(1) threads(128) {
            let mut a = load x[:, :];
            for i in 0..1000 {
                let t = a * 1.0;
                a = t;
            }
            store y[:, :] = a;
        }";
        let c = crate::frontend::check_source(src, &crate::frontend::Options::default());
        assert!(c.ok(), "{:?}", c.diags);
        let k = &c.module.kernels[0];
        let inputs = BTreeMap::from([("x".to_string(), HostTensor::zeros(DType::F32, vec![64, 64]).unwrap())]);
        // 1,000 records of 4,096 elements against a limit of 100,000: recording stops at the
        // 25th record and the run reports it instead of growing without bound.
        let opts = Options { max_elements: 100_000, dump: vec!["t".into()], ..Options::default() };
        match run_kernel_with(k, &inputs, &opts) {
            Err(InterpError::TooLarge { what, limit, .. }) => assert!(what.contains("`t`") && limit == 100_000, "{what}"),
            other => panic!("expected the dump limit, got {other:?}"),
        }
        // Within the limit the same dump is all there.
        let opts = Options { dump: vec!["t".into()], ..Options::default() };
        let run = run_kernel_with(k, &inputs, &opts).unwrap();
        assert_eq!(run.dumps["dump.t"].shape, vec![1000, 64, 64]);
    }
}
