//! `tilec inputs FILE [--kernel NAME | --operator NAME] --size NAME=VALUE... [--seed N] [--std X]
//! [--scalar NAME=VALUE]... --out IN.safetensors`: writes random inputs for one kernel or
//! operator, named after its parameters, with their exact dtypes (bf16/f16 rounded to nearest
//! even) and shapes, ready for `tilec run --interp` and `tilec-run`.
//!
//! Tensors get independent normal values N(0, std²) from the project's seeded generator
//! ([`tilec_abi::rng::NormalRng`], the one kverify draws from too), so the same seed gives the
//! same file; i32 tensors are zeros unless `--values NAME=v0,v1,…` gives their contents (row
//! major, every element: index tables such as cu_seqlens and gdn.tile's chunk table `ct`).
//! Scalars are rank-0 tensors: `--scalar`
//! sets them (default 1.0; an i32 scalar named like a size gets that size). Outputs are not
//! written. Inputs with structure (decays ≤ 0, normalised keys) need a script of their own:
//! this command only saves typing out names, dtypes and shapes.
//!
//! Exit codes: 0 written; 1 the file does not compile; 2 bad arguments, a missing size or an
//! I/O error.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use tilec_abi::expr::ExprError;
use tilec_abi::rng::NormalRng;
use tilec_abi::st::TensorMap;
use tilec_abi::tensor::HostTensor;

use super::run::parse_size;
use crate::frontend::{check_source, Options};
use crate::interp::bind::dtype_of;
use crate::ir::{Elem, ParamKind};

/// Arguments of `tilec inputs`.
#[derive(Args, Debug)]
pub struct InputsArgs {
    /// The .tile file.
    pub file: PathBuf,
    /// Size parameters (`--const K=64`).
    #[command(flatten)]
    pub consts: super::ConstArgs,
    /// Kernel to make inputs for (needed when the file has several).
    #[arg(long, conflicts_with = "operator")]
    pub kernel: Option<String>,
    /// A multi-kernel operator of the file to make inputs for instead.
    #[arg(long)]
    pub operator: Option<String>,
    /// A symbolic size, e.g. `--size T=100` (repeatable; every size of an input is needed).
    #[arg(long = "size", value_name = "NAME=VALUE", value_parser = parse_size)]
    pub sizes: Vec<(String, i64)>,
    /// A scalar parameter's value, e.g. `--scalar scale=0.125` (repeatable).
    #[arg(long = "scalar", value_name = "NAME=VALUE", value_parser = parse_scalar)]
    pub scalars: Vec<(String, f64)>,
    /// A tensor's contents, row major, every element: `--values cu=0,15,100` (repeatable).
    #[arg(long = "values", value_name = "NAME=V0,V1,...", value_parser = parse_values)]
    pub values: Vec<(String, Vec<f64>)>,
    /// Seed of the generator.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Standard deviation of the normal values.
    #[arg(long, default_value_t = 1.0)]
    pub std: f64,
    /// Where to write the safetensors file.
    #[arg(long)]
    pub out: PathBuf,
}

fn parse_values(s: &str) -> Result<(String, Vec<f64>), String> {
    let (name, list) = s.split_once('=').ok_or_else(|| format!("expected NAME=V0,V1,..., got `{s}`"))?;
    let vals = list.split(',').map(|v| v.trim().parse::<f64>().map_err(|_| format!("`{v}` in `{s}` is not a number"))).collect::<Result<Vec<_>, _>>()?;
    Ok((name.trim().to_string(), vals))
}

fn parse_scalar(s: &str) -> Result<(String, f64), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("`{s}` is not NAME=VALUE"))?;
    let v: f64 = value.trim().parse().map_err(|e| format!("scalar `{name}`: {e}"))?;
    Ok((name.trim().to_string(), v))
}

/// Largest number of elements written per tensor (the interpreter is for small shapes).
const MAX_ELEMENTS: i64 = 1 << 28;

/// Runs `tilec inputs`.
pub fn run(a: &InputsArgs) -> ExitCode {
    let src = match std::fs::read(&a.file) {
        Ok(b) => String::from_utf8_lossy(&b).into_owned(),
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", a.file.display());
            return ExitCode::from(2);
        }
    };
    let Some(size_values) = a.consts.values_or_report() else { return ExitCode::from(2) };
    let checked = check_source(&src, &Options { size_values, ..Options::default() }.for_file(&a.file));
    let name = a.file.display().to_string();
    if !checked.ok() {
        eprint!("{}", checked.diags.render(&name, &src, std::io::stderr().is_terminal()));
        eprintln!("error: {name} does not compile");
        return ExitCode::from(1);
    }
    // What inputs are made for: a kernel's or an operator's parameters and sizes.
    let (what, params, size_names, size_text): (String, Vec<&crate::ir::ParamData>, Vec<String>, Box<dyn Fn(&crate::ir::SizeExpr) -> String>) = match &a.operator {
        Some(op_name) => {
            let Some(op) = checked.module.operators.iter().find(|o| &o.name == op_name) else {
                let known: Vec<&str> = checked.module.operators.iter().map(|o| o.name.as_str()).collect();
                eprintln!("error: {name} has no operator `{op_name}` (its operators: {})", if known.is_empty() { "none".into() } else { known.join(", ") });
                return ExitCode::from(2);
            };
            (format!("operator `{}`", op.name), op.params.iter().collect(), op.sizes.values().cloned().collect(), Box::new(move |e| op.size_text(e)))
        }
        None => {
            let Some(k) = super::select_kernel(&checked.module.kernels, a.kernel.as_deref(), &name) else {
                return ExitCode::from(2);
            };
            (format!("kernel `{}`", k.name), k.params.values().collect(), k.sizes.values().cloned().collect(), Box::new(move |e| k.size_text(e)))
        }
    };
    let eval_size = |d: &crate::ir::SizeExpr, env: &BTreeMap<String, i64>| tilec_abi::expr::SizeExpr::parse(&size_text(d))?.eval(env);
    let mut sizes: BTreeMap<String, i64> = a.sizes.iter().cloned().collect();
    // A one-dimensional table given with `--values` over a bare size (`cu_seqlens: i32[NP]`)
    // gives that size its length (a `--size` for it must agree; checked below when written).
    for (n, v) in &a.values {
        if let Some(crate::ir::ParamKind::Tensor { shape, .. }) = params.iter().find(|p| &p.name == n).map(|p| &p.kind) {
            if let [d] = shape.as_slice() {
                let text = size_text(d);
                if size_names.contains(&text) {
                    sizes.entry(text).or_insert(v.len() as i64);
                }
            }
        }
    }
    if let Some(unknown) = sizes.keys().find(|s| !size_names.contains(s)) {
        eprintln!("error: {what} has no size `{unknown}` (its sizes: {})", size_names.join(", "));
        if checked.size_params.iter().any(|p| &p.name == unknown) {
            eprintln!("  help: `{unknown}` is a size parameter, fixed when the file is built: give `--const {unknown}=<n>`");
        }
        return ExitCode::from(2);
    }
    let scalars: BTreeMap<String, f64> = a.scalars.iter().cloned().collect();
    let scalar_names: Vec<&str> = params.iter().filter(|p| matches!(p.kind, ParamKind::Scalar(_))).map(|p| p.name.as_str()).collect();
    if let Some(unknown) = scalars.keys().find(|s| !scalar_names.contains(&s.as_str())) {
        eprintln!("error: {what} has no scalar parameter `{unknown}` (its scalars: {})", if scalar_names.is_empty() { "none".to_string() } else { scalar_names.join(", ") });
        return ExitCode::from(2);
    }
    let given: BTreeMap<String, Vec<f64>> = a.values.iter().cloned().collect();
    let tensor_names: Vec<&str> = params.iter().filter(|p| matches!(p.kind, ParamKind::Tensor { output: false, .. })).map(|p| p.name.as_str()).collect();
    if let Some(unknown) = given.keys().find(|s| !tensor_names.contains(&s.as_str())) {
        eprintln!("error: {what} has no input tensor `{unknown}` (its input tensors: {})", tensor_names.join(", "));
        return ExitCode::from(2);
    }
    let mut rng = NormalRng::new(a.seed);
    let mut out = TensorMap::new();
    let mut missing: Vec<String> = vec![];
    for p in params {
        let (elem, shape) = match &p.kind {
            ParamKind::Tensor { output: true, .. } => continue,
            ParamKind::Tensor { elem, shape, .. } => (*elem, Some(shape)),
            ParamKind::Scalar(e) => (*e, None),
        };
        let Some(dtype) = dtype_of(elem) else { continue };
        let tensor = match shape {
            None => {
                let v = scalars.get(&p.name).copied().or_else(|| if elem == Elem::I32 { sizes.get(&p.name).map(|&s| s as f64) } else { None }).unwrap_or(1.0);
                HostTensor::from_f64(dtype, vec![], &[v])
            }
            Some(shape) => {
                let mut dims = vec![];
                for d in shape {
                    match eval_size(d, &sizes) {
                        Ok(v) if v >= 0 => dims.push(v),
                        Ok(v) => {
                            eprintln!("error: `{}` dimension `{}` evaluates to {v}, a negative extent", p.name, size_text(d));
                            return ExitCode::from(2);
                        }
                        // Collected, so that one message can name every size still needed.
                        Err(ExprError::UnknownSymbol { .. }) => {
                            let text = size_text(d);
                            let used = tilec_abi::expr::SizeExpr::parse(&text).map(|e| e.symbols()).unwrap_or_default();
                            for s in size_names.iter().filter(|s| used.contains(*s) && !sizes.contains_key(*s)) {
                                if !missing.contains(s) {
                                    missing.push(s.clone());
                                }
                            }
                        }
                        Err(e) => {
                            eprintln!("error: `{}`: {e}", p.name);
                            return ExitCode::from(2);
                        }
                    }
                }
                if dims.len() != shape.len() {
                    continue;
                }
                let n = dims.iter().try_fold(1i64, |acc, &d| acc.checked_mul(d)).filter(|&n| n <= MAX_ELEMENTS);
                let Some(n) = n else {
                    eprintln!("error: `{}` would have {:?} elements, more than {MAX_ELEMENTS}", p.name, dims);
                    return ExitCode::from(2);
                };
                let values: Vec<f64> = match given.get(&p.name) {
                    Some(v) if v.len() as i64 == n => v.clone(),
                    Some(v) => {
                        eprintln!("error: --values gives `{}` {} values, but its shape {:?} has {n} elements", p.name, v.len(), dims);
                        return ExitCode::from(2);
                    }
                    None => (0..n).map(|_| if elem == Elem::I32 { 0.0 } else { a.std * rng.normal() }).collect(),
                };
                HostTensor::from_f64(dtype, dims.iter().map(|&d| d as usize).collect(), &values)
            }
        };
        match tensor {
            Ok(t) => {
                out.insert(p.name.clone(), t);
            }
            Err(e) => {
                eprintln!("error: `{}`: {e}", p.name);
                return ExitCode::from(2);
            }
        }
    }
    if !missing.is_empty() {
        let flags: Vec<String> = missing.iter().map(|s| format!("--size {s}=<n>")).collect();
        eprintln!("error: {what} needs the sizes {}: give {}", missing.join(", "), flags.join(" "));
        return ExitCode::from(2);
    }
    if let Err(e) = tilec_abi::st::write(&a.out, &out) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    for (n, t) in &out {
        eprintln!("  {n:<8} {:?} {:?}", t.dtype, t.shape);
    }
    eprintln!("wrote {} inputs of {what} to {}", out.len(), a.out.display());
    ExitCode::SUCCESS
}
