//! `tilec build --verify`'s report: per operator and per kernel with a contract, one row per
//! output and case — the error, the derived bound, the margin (bound / error) and a verdict —
//! and the exit status (1 on a violation, or when something could not be judged).
//! Operators: [`crate::verify`] (max|err| / max|ref| against `λ √R κu`); kernels:
//! [`crate::verify::kernel`] (kverify's comparison: the error and the bound at the element
//! nearest its bound).

use std::path::PathBuf;
use std::process::ExitCode;

/// `--verify`: judges every operator and kernel with a contract; prints one line per output and
/// case. `gpu`: `--verify=gpu`'s `tilec-run` (if found) and the folder holding the built plans.
pub(super) fn verify(checked: &crate::frontend::Checked, gpu: Option<(Option<PathBuf>, PathBuf)>) -> ExitCode {
    let mut violations = 0;
    let mut judged = 0;
    let mut unjudged = 0;
    // `--verify=gpu` without a GPU (or without tilec-run): said once, then the interpreter.
    let asked_gpu = gpu.is_some();
    let mut gpu = match gpu {
        Some((Some(bin), dir)) => Some((bin, dir)),
        Some((None, _)) => {
            eprintln!("note: --verify=gpu: no tilec-run beside tilec (cargo build --release -p tilec-runtime, or pass --tilec-run): judging on the interpreter instead");
            None
        }
        None => None,
    };
    let opts = crate::interp::Options::default();
    // On the interpreter every operator's run and its wide twin's are independent: all of them
    // run on every core first, and are printed in order below. (`--verify=gpu` judges one at
    // a time: one GPU.)
    let mut ahead = if gpu.is_none() { interpreter_verdicts(&checked.module, &opts) } else { vec![] }.into_iter();
    for op in &checked.module.operators {
        let Some(model) = op.contract else {
            eprintln!("verify: operator {} declares no contract: not judged", op.name);
            continue;
        };
        let (narrow, wide) = ahead.next().map_or((None, None), |(n, w)| (Some(n), Some(w)));
        let result = on_gpu(
            &mut gpu,
            &format!("{}.sm_90a.plan.json", op.name),
            |plan| format!("verify {} against kverify's fp64 oracle of {} (token-serial), on the GPU ({plan}):", op.name, model.name()),
            |run| crate::verify::verify_operator_on(&checked.module, op, run),
        );
        let result = match result {
            Some(r) => r,
            None => {
                println!("verify {} against kverify's fp64 oracle of {} (token-serial), on the interpreter ({} numerics):", op.name, model.name(), opts.target);
                narrow.unwrap_or_else(|| crate::verify::verify_operator(&checked.module, op, &opts))
            }
        };
        let w = if op.params.iter().any(|p| p.name == "cu_seqlens") { 44 } else { 28 };
        header(w, "max|err|/max|ref|");
        // One row per judgement; the (judged, violations) counts.
        let rows = |js: &mut dyn Iterator<Item = &crate::verify::Judgement>| {
            print_rows(w, js.map(|j| Row {
                // Varlen: the packed sequence judged on its own scale, where it is the nearest its bound.
                case: j.sequence.map_or_else(|| j.case.clone(), |i| format!("{} seq {i}", j.case)),
                output: &j.output,
                error: j.error,
                bound: j.bound,
                ok: j.ok(),
            }))
        };
        // R is per output (the same in every case): "dq 33, dk 50, …".
        let per_output = |js: &[crate::verify::Judgement]| {
            let mut per: Vec<(&str, usize)> = js.iter().map(|j| (j.output.as_str(), j.roundings)).collect();
            per.sort_unstable();
            per.dedup();
            per.iter().map(|(o, r)| format!("{o} {r}")).collect::<Vec<_>>().join(", ")
        };
        match result {
            Ok(v) => {
                let (n, bad) = rows(&mut v.judgements.iter().chain(&v.isolation));
                (judged, violations) = (judged + n, violations + bad);
                if let Some(j) = v.judgements.first() {
                    println!("  bound = {} √R κu: R = the rounding points whose results reach the output ({}); κu = the oracle's change when every input moves by one rounding of its dtype (at least u = 2^{})", crate::verify::LAMBDA, per_output(&v.judgements), j.unit.log2());
                }
                for n in &v.not_run {
                    println!("  not run: {n}");
                }
                // The mathematics alone: the same operator with nothing rounded to 16 bits.
                println!("  wide twin of {} (every bf16/f16 made f32), on the interpreter:", op.name);
                match wide.unwrap_or_else(|| crate::verify::verify_wide(&checked.module, op, &opts)) {
                    Ok(wv) => {
                        let (n, bad) = rows(&mut wv.judgements.iter());
                        (judged, violations) = (judged + n, violations + bad);
                        if let Some(j) = wv.judgements.first() {
                            println!("  bound = γ_R κ = R κu / (1 − R u): R = the f32 roundings whose results reach the output ({}); u = 2^{}", per_output(&wv.judgements), j.unit.log2());
                        }
                    }
                    Err(e) => {
                        eprintln!("error: verify: wide twin: {e}");
                        unjudged += 1;
                    }
                }
            }
            Err(e) => {
                // Not a violation, but nothing was judged: say so and go on with the others.
                eprintln!("error: verify: {e}");
                unjudged += 1;
            }
        }
    }
    for kernel in checked.module.kernels.iter().filter(|k| k.contract.is_some()) {
        let (n, bad, failed) = verify_kernel(kernel, &mut gpu);
        (judged, violations, unjudged) = (judged + n, violations + bad, unjudged + failed);
    }
    if judged == 0 && unjudged == 0 {
        eprintln!("verify: no operator or kernel declares a contract: nothing judged");
        return ExitCode::SUCCESS;
    }
    if unjudged > 0 {
        eprintln!("error: verify: {unjudged} operator(s) or kernel(s) could not be judged");
        return ExitCode::from(1);
    }
    if violations > 0 {
        eprintln!("error: verify: {violations} of {judged} output{} outside {}", plural(judged), if violations == 1 { "its bound" } else { "their bounds" });
        return ExitCode::from(1);
    }
    // Said again at the end: a `--verify=gpu` that fell back judged nothing on a GPU.
    let place = match (asked_gpu, gpu.is_some()) {
        (true, false) => " (on the interpreter: no GPU run was possible)",
        (true, true) => " (on the GPU)",
        _ => "",
    };
    let all = if judged == 1 { "within its bound" } else { "all within their bounds" };
    eprintln!("verify: {judged} output{} judged{place}, {all}", plural(judged));
    ExitCode::SUCCESS
}

/// Stack of a verification thread: the interpreter and the oracle recurse little, but a
/// kernel's nested blocks are evaluated recursively; 64 MiB of reserved address space costs
/// nothing until touched.
const VERIFY_STACK_BYTES: usize = 64 << 20;

type Verdicts = (Result<crate::verify::Verdict, crate::verify::VerifyError>, Result<crate::verify::Verdict, crate::verify::VerifyError>);

/// Every operator with a contract judged on the interpreter, and its wide twin, on all cores
/// ([`crate::parallel`], the longest first by the tile-IR length of the kernels it launches), in
/// the module's order. A job no thread ran is run here.
fn interpreter_verdicts(module: &crate::ir::Module, opts: &crate::interp::Options) -> Vec<Verdicts> {
    let ops: Vec<&crate::ir::Operator> = module.operators.iter().filter(|o| o.contract.is_some()).collect();
    let jobs: Vec<(&crate::ir::Operator, bool)> = ops.iter().flat_map(|&op| [(op, false), (op, true)]).collect();
    let cost = |&(op, _): &(&crate::ir::Operator, bool)| op.launches.iter().filter_map(|l| module.kernels.iter().find(|k| k.name == l.kernel)).map(|k| k.insts.len()).sum::<usize>();
    let run = |&(op, wide): &(&crate::ir::Operator, bool)| if wide { crate::verify::verify_wide(module, op, opts) } else { crate::verify::verify_operator(module, op, opts) };
    let mut done = crate::parallel::map_longest_first(&jobs, cost, VERIFY_STACK_BYTES, run).into_iter().zip(&jobs).map(|(r, job)| r.unwrap_or_else(|| run(job)));
    ops.iter().filter_map(|_| Some((done.next()?, done.next()?))).collect()
}

/// `--verify=gpu`'s attempt at one operator or kernel: when `gpu` holds tilec-run and the output
/// folder, prints `header(artifact path)` and runs `judge` with a runner over `artifact` (a file
/// in that folder) in a scratch folder of its own. `None` when there is no such attempt or no GPU
/// can run it — said in a note, and `gpu` cleared so that the rest are judged on the
/// interpreter too.
fn on_gpu<T>(
    gpu: &mut Option<(PathBuf, PathBuf)>,
    artifact: &str,
    header: impl FnOnce(&std::path::Display<'_>) -> String,
    judge: impl FnOnce(&mut crate::verify::Runner<'_>) -> Result<T, crate::verify::VerifyError>,
) -> Option<Result<T, crate::verify::VerifyError>> {
    let (bin, dir) = gpu.as_ref()?;
    let path = dir.join(artifact);
    println!("{}", header(&path.display()));
    let work = std::env::temp_dir().join(format!("tilec-verify-gpu-{}-{artifact}", std::process::id()));
    let result = match judge(&mut crate::verify::gpu::runner(bin, &path, &work)) {
        Err(crate::verify::VerifyError::NoGpu(why)) => {
            eprintln!("note: --verify=gpu: no GPU can run {} ({why}): judging on the interpreter instead", path.display());
            None
        }
        r => Some(r),
    };
    std::fs::remove_dir_all(&work).ok();
    if result.is_none() {
        *gpu = None;
    }
    result
}

/// One row of the report.
struct Row<'a> {
    case: String,
    output: &'a str,
    error: f64,
    bound: f64,
    ok: bool,
}

/// `s` after a count other than one.
fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// The column heads, `error` naming the measured figure; `w`: the case column's width.
fn header(w: usize, error: &str) {
    println!("  {:<w$} {:<7} {:>17} {:>9} {:>8}  verdict", "case", "output", error, "bound", "margin");
}

/// Prints `rows` (case column `w` wide); returns (rows, violations).
fn print_rows<'a>(w: usize, rows: impl Iterator<Item = Row<'a>>) -> (usize, usize) {
    let (mut n, mut bad) = (0, 0);
    for r in rows {
        n += 1;
        bad += usize::from(!r.ok);
        let verdict = if r.ok { "ok" } else { "VIOLATION" };
        let margin = margin_text(r.bound, r.error);
        println!("  {:<w$} {:<7} {:>17.3e} {:>9.2e} {margin:>8}  {verdict}", r.case, r.output, r.error, r.bound);
    }
    (n, bad)
}

/// The margin column: bound / error.
fn margin_text(bound: f64, error: f64) -> String {
    match bound / error {
        // A bound of 0 (isolation) asks for equal bits: no margin to give.
        _ if bound == 0.0 => "bitwise".to_string(),
        // A violation's margin below 0.1 keeps its digits (1.2e-5×, not 0.0×), and one of 10⁴
        // or more says its size only (1.5e13×, not 14739719872134.2×).
        m if m.is_finite() && !(0.1..1e4).contains(&m) => format!("{m:.1e}×"),
        m => format!("{m:.1}×"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn margin_text_is_short_at_every_size() {
        assert_eq!(super::margin_text(1.47397198721342e13, 1.0), "1.5e13×");
        assert_eq!(super::margin_text(105.43, 1.0), "105.4×");
        assert_eq!(super::margin_text(1.2e-5, 1.0), "1.2e-5×");
        assert_eq!(super::margin_text(1.0, 0.0), "inf×");
        assert_eq!(super::margin_text(0.0, 1.0), "bitwise");
    }
}

/// Judges one kernel with a contract — its built sm_90a artifact on the GPU when `gpu` holds
/// `--verify=gpu`'s tilec-run and output folder (set to `None` when no GPU can run it: then,
/// and without `--verify=gpu`, on the interpreter) — and prints its rows; returns (rows,
/// violations, 1 when it could not be judged).
fn verify_kernel(kernel: &crate::ir::Kernel, gpu: &mut Option<(PathBuf, PathBuf)>) -> (usize, usize, usize) {
    let opts = crate::interp::Options::default();
    let class = kernel.contract.as_ref().map_or("", |c| c.class.as_str());
    let summary = kverify::references::op_by_id(class).map(|o| o.summary).unwrap_or_default();
    let result = on_gpu(
        gpu,
        &format!("{}.sm_90a.meta.json", kernel.name),
        |meta| format!("verify kernel {} against kverify's fp64 reference of {class} ({summary}), on the GPU ({meta}):", kernel.name),
        |run| crate::verify::kernel::verify_kernel_on(kernel, run),
    );
    let result = result.unwrap_or_else(|| {
        println!("verify kernel {} against kverify's fp64 reference of {class} ({summary}), on the interpreter ({} numerics):", kernel.name, opts.target);
        crate::verify::kernel::verify_kernel(kernel, &opts)
    });
    let v = match result {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: verify: {e}");
            return (0, 0, 1);
        }
    };
    let w = v.judgements.iter().map(|j| j.case.len()).max().unwrap_or(0).max(28);
    header(w, "|err|");
    let (n, bad) = print_rows(w, v.judgements.iter().map(|j| Row { case: j.case.clone(), output: &j.output, error: j.report.worst_err, bound: j.report.worst_bound, ok: j.ok() }));
    if let Some(j) = v.judgements.first() {
        let p = &j.precision;
        let mut depths: Vec<usize> = v.judgements.iter().map(|j| j.depth).collect();
        depths.dedup();
        let depths = depths.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ");
        println!(
            "  |err| and bound at the element nearest its bound; bound = γ(n, u_acc)·scale + u_out·|ref| + n·η (kverify's error model, deterministic, as CMP-01): n = the reference's depth ({depths}), scale its condition-weighted magnitude; declared precision {} in, {} accumulate, {} out",
            p.input.name(),
            p.accumulator.name(),
            p.output.name()
        );
    }
    for n in &v.not_run {
        println!("  not run: {n}");
    }
    (n, bad, 0)
}
