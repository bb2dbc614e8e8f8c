//! `tilec build --verify=gpu`: the operator is run as built — its sm_90a plan and kernels — by
//! `tilec-run` on a GPU, one process per case, and judged exactly as on the interpreter
//! ([`super::verify_operator_on`]); a kernel with a contract likewise from its
//! `<kernel>.sm_90a.meta.json` ([`super::kernel::verify_kernel_on`]).
//!
//! `tilec-run` is the runtime's binary (it links the CUDA driver; tilec does not): the one given
//! with `--tilec-run`, else the `tilec-run` beside the running `tilec`. It exits with status 4
//! when there is no GPU that can run the artifact ([`NO_GPU`]), which the runner reports as
//! [`VerifyError::NoGpu`] so that the caller can judge on the interpreter instead and say so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tilec_abi::tensor::HostTensor;

use super::VerifyError;

/// `tilec-run`'s exit status when no GPU can run the artifact (no driver, no device, another
/// architecture).
pub const NO_GPU: i32 = 4;

/// The `tilec-run` to use: `given`, else the one beside the running executable.
pub fn tilec_run_path(given: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = given {
        return Some(p.to_path_buf());
    }
    let exe = std::env::current_exe().ok()?;
    let sibling = exe.parent()?.join(format!("tilec-run{}", std::env::consts::EXE_SUFFIX));
    sibling.is_file().then_some(sibling)
}

/// A runner for [`super::verify_operator_on`] (or [`super::kernel::verify_kernel_on`]) that runs
/// `plan` (an operator's plan.json or a kernel's meta.json) with `tilec-run` (inputs and outputs
/// through safetensors files in `work`).
pub fn runner<'a>(tilec_run: &'a Path, plan: &'a Path, work: &'a Path) -> impl FnMut(BTreeMap<String, HostTensor>) -> Result<BTreeMap<String, HostTensor>, VerifyError> + 'a {
    let mut n = 0;
    move |inputs| {
        n += 1;
        run_plan(tilec_run, plan, inputs, work, &format!("case{n}")).map_err(|f| match f {
            Failure::NoGpu(e) => VerifyError::NoGpu(e),
            Failure::Other(e) => VerifyError::Run(format!("tilec-run on {}: {e}", plan.display())),
        })
    }
}

enum Failure {
    NoGpu(String),
    Other(String),
}

fn run_plan(bin: &Path, plan: &Path, inputs: BTreeMap<String, HostTensor>, work: &Path, tag: &str) -> Result<BTreeMap<String, HostTensor>, Failure> {
    let other = |e: String| Failure::Other(e);
    std::fs::create_dir_all(work).map_err(|e| other(format!("{}: {e}", work.display())))?;
    let (inp, out) = (work.join(format!("{tag}.in.safetensors")), work.join(format!("{tag}.out.safetensors")));
    tilec_abi::st::write(&inp, &inputs).map_err(|e| other(e.to_string()))?;
    let o = Command::new(bin).arg(plan).arg("--inputs").arg(&inp).arg("--out").arg(&out).output().map_err(|e| other(format!("cannot run {}: {e}", bin.display())))?;
    // tilec-run's last line says why (earlier ones are context); an empty stderr is said so.
    let stderr = String::from_utf8_lossy(&o.stderr).trim().lines().last().unwrap_or("").trim().to_string();
    let said = if stderr.is_empty() { "tilec-run printed nothing".to_string() } else { stderr };
    match o.status.code() {
        Some(0) => tilec_abi::st::read(&out).map_err(|e| other(e.to_string())),
        Some(NO_GPU) => Err(Failure::NoGpu(said)),
        Some(code) => Err(other(format!("exit {code}: {said}"))),
        None => Err(other(format!("killed by a signal: {said}"))),
    }
}
