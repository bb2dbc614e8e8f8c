//! External-process candidates: any program that speaks the line-delimited JSON protocol of
//! `docs/candidate-protocol.md`, with tensors exchanged as safetensors files.
//!
//! One subprocess per candidate, started lazily and reused across calls (state persists, as it
//! would in a loaded PyTorch module, which is how caching tricks are caught). Each call has a
//! time limit: on expiry the worker and every process it started are killed and the call reports
//! a timeout; the next call starts a fresh process. Containment (the subreaper shim that kills
//! every descendant, including those that called `setsid()`, when the worker ends for any
//! reason; bounded reads; `RLIMIT_AS`) is [`super::process`]. A process that dies is reported
//! with its signal or exit code and the tail of its stderr.

pub(crate) use super::process::{confine, signal_name, tail};
use super::process::{Worker, MAX_LINE};
use super::safetensors_io;
use super::{Candidate, CandidateError, CandidateOutput, Layout};
use crate::error_model::Precision;
use crate::references::{op_by_id, Dims};
use crate::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

/// Protocol name and version the worker must announce.
pub const PROTOCOL: &str = "kverify-candidate/1";

/// A candidate manifest (`*.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Display name.
    pub name: String,
    /// Operator class id.
    pub op: String,
    /// Declared precision.
    pub precision: Precision,
    /// Program and arguments; run with the manifest's folder as working directory.
    pub command: Vec<String>,
    /// Whether the candidate implements backward.
    #[serde(default)]
    pub backward: bool,
    /// Where the kernel computes: `cpu` (the default) or `cuda` / `cuda:N`. Answers still come
    /// back on the host; a GPU candidate gets CMP-03's probe past 2^31 flat elements.
    #[serde(default = "cpu")]
    pub device: String,
    /// Extra environment variables.
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Folder the command runs in (set by [`Manifest::load`] to the manifest's folder).
    #[serde(skip)]
    pub dir: PathBuf,
}

/// Errors loading a manifest.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Unreadable.
    #[error("cannot read manifest {path}: {source}")]
    Io {
        /// Path.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// Invalid JSON or fields.
    #[error("invalid manifest {path}: {source}")]
    Parse {
        /// Path.
        path: String,
        /// Cause.
        source: serde_json::Error,
    },
    /// Semantic problem.
    #[error("invalid manifest {path}: {msg}")]
    Invalid {
        /// Path.
        path: String,
        /// What is wrong.
        msg: String,
    },
}

impl Manifest {
    /// Read a manifest; relative paths in `command` are resolved by running in its folder.
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| ManifestError::Io { path: p.clone(), source })?;
        let mut m: Manifest = serde_json::from_str(&text).map_err(|source| ManifestError::Parse { path: p.clone(), source })?;
        if m.command.is_empty() {
            return Err(ManifestError::Invalid { path: p, msg: "empty command".into() });
        }
        if op_by_id(&m.op).is_none() {
            return Err(ManifestError::Invalid { path: p, msg: format!("unknown op `{}`{}", m.op, crate::references::op_hint(&m.op)) });
        }
        let device_ok = m.device == "cpu" || m.device == "cuda" || m.device.strip_prefix("cuda:").is_some_and(|n| n.parse::<u32>().is_ok());
        if !device_ok {
            return Err(ManifestError::Invalid { path: p, msg: format!("device `{}`: expected cpu, cuda or cuda:N", m.device) });
        }
        m.dir = path.parent().map(|d| if d.as_os_str().is_empty() { Path::new(".") } else { d }).unwrap_or(Path::new(".")).to_path_buf();
        Ok(m)
    }
}

/// One request line.
#[derive(Debug, Serialize)]
struct Request<'a> {
    id: u64,
    pass: &'a str,
    op: &'a str,
    dims: std::collections::BTreeMap<String, usize>,
    inputs: String,
    n_inputs: usize,
    grads: Option<String>,
    n_grads: usize,
    output: String,
    /// Per-input layout request (CMP-03's layout probes); absent for dense inputs.
    #[serde(skip_serializing_if = "Option::is_none")]
    layouts: Option<&'a [Layout]>,
}

/// One output description in a response.
#[derive(Debug, Deserialize)]
struct OutDesc {
    name: String,
    #[serde(default = "cpu")]
    device: String,
}

fn cpu() -> String {
    "cpu".into()
}

/// One response line.
#[derive(Debug, Deserialize)]
struct Response {
    id: u64,
    ok: bool,
    #[serde(default)]
    outputs: Vec<OutDesc>,
    #[serde(default)]
    mutated_inputs: Vec<usize>,
    #[serde(default)]
    aliases: Vec<(usize, usize)>,
    #[serde(default)]
    refused: Option<String>,
    #[serde(default)]
    error: Option<String>,
    /// The layouts the worker applied (an echo of the request's).
    #[serde(default)]
    layouts: Option<Vec<Layout>>,
}

/// An external-process candidate.
pub struct ExternalCandidate {
    /// Its manifest.
    pub manifest: Manifest,
    /// Time limit per call (and for start-up).
    pub time_limit: Duration,
    /// Address-space limit of a CPU worker's process, MiB (0: none); a worker declaring a
    /// `cuda` device runs without one ([`ExternalCandidate::address_space_limit_mb`]).
    pub mem_limit_mb: u64,
    proc_: Mutex<Option<Worker>>,
    next_id: Mutex<u64>,
    dir: Option<tempfile::TempDir>,
}

fn parse_device(s: &str) -> Device {
    if s == "cpu" {
        Device::Cpu
    } else {
        Device::Cuda(s.rsplit(':').next().and_then(|n| n.parse().ok()).unwrap_or(0))
    }
}

impl ExternalCandidate {
    /// A candidate from its manifest, with limits.
    pub fn new(manifest: Manifest, time_limit: Duration, mem_limit_mb: u64) -> ExternalCandidate {
        ExternalCandidate {
            manifest,
            time_limit,
            mem_limit_mb,
            proc_: Mutex::new(None),
            next_id: Mutex::new(1),
            dir: tempfile::Builder::new().prefix("kverify-ext-").tempdir().ok(),
        }
    }

    /// The address-space cap its worker runs under, MiB (0: none): `mem_limit_mb` for a CPU
    /// worker, none for one whose manifest declares a `cuda` device. As for `tilec-run`
    /// ([`super::tilec::TilecCandidate::address_space_limit_mb`]), the CUDA driver reserves tens
    /// of GiB of virtual address space, so an `RLIMIT_AS` cap makes context creation fail. The
    /// rest of the containment (own process group, subreaper shim, time limit, tree kill,
    /// bounded reads, `RLIMIT_CORE` = 0) stays.
    pub fn address_space_limit_mb(&self) -> u64 {
        match parse_device(&self.manifest.device) {
            Device::Cpu => self.mem_limit_mb,
            Device::Cuda(_) => 0,
        }
    }

    fn spawn(&self) -> Result<Worker, CandidateError> {
        let m = &self.manifest;
        let mut cmd = Command::new(&m.command[0]);
        cmd.args(&m.command[1..]).current_dir(&m.dir).envs(&m.env);
        Worker::spawn(cmd, PROTOCOL, self.time_limit, self.address_space_limit_mb(), MAX_LINE).map_err(|e| match e {
            CandidateError::Io(msg) => CandidateError::Io(format!("{msg} (`{}`)", m.command.join(" "))),
            e => e,
        })
    }

    fn call(&self, pass: &str, dims: &Dims, inputs: &[Tensor], grads: &[Tensor], layouts: Option<&[Layout]>) -> Result<CandidateOutput, CandidateError> {
        let dir = self.dir.as_ref().ok_or_else(|| CandidateError::Io("no temporary directory".into()))?.path().to_path_buf();
        let id = {
            let mut n = self.next_id.lock().map_err(|_| CandidateError::Io("poisoned".into()))?;
            *n += 1;
            *n
        };
        let in_path = dir.join(format!("in-{id}.safetensors"));
        let g_path = dir.join(format!("grad-{id}.safetensors"));
        let out_path = dir.join(format!("out-{id}.safetensors"));
        let named: Vec<(String, &Tensor)> = inputs.iter().enumerate().map(|(i, t)| (format!("in{i}"), t)).collect();
        safetensors_io::write(&in_path, &named).map_err(|e| CandidateError::Io(e.to_string()))?;
        if !grads.is_empty() {
            let gn: Vec<(String, &Tensor)> = grads.iter().enumerate().map(|(i, t)| (format!("grad{i}"), t)).collect();
            safetensors_io::write(&g_path, &gn).map_err(|e| CandidateError::Io(e.to_string()))?;
        }
        let req = Request {
            id,
            pass,
            op: &self.manifest.op,
            dims: dims.0.iter().cloned().collect(),
            inputs: in_path.display().to_string(),
            n_inputs: inputs.len(),
            grads: if grads.is_empty() { None } else { Some(g_path.display().to_string()) },
            n_grads: grads.len(),
            output: out_path.display().to_string(),
            layouts,
        };
        let line = serde_json::to_string(&req).map_err(|e| CandidateError::Io(e.to_string()))?;
        let mut guard = self.proc_.lock().map_err(|_| CandidateError::Io("poisoned".into()))?;
        if guard.is_none() {
            *guard = Some(self.spawn()?);
        }
        let p = guard.as_mut().ok_or_else(|| CandidateError::Io("no process".into()))?;
        let limit = super::call_time_limit(self.time_limit, inputs.iter().chain(grads));
        let resp_line = match p.request(&line, limit) {
            Ok(l) => l,
            Err(e) => {
                // The worker is dead or was killed with its whole tree (timeout, over-long line).
                *guard = None;
                return Err(e);
            }
        };
        drop(guard);
        let _ = std::fs::remove_file(&in_path);
        let _ = std::fs::remove_file(&g_path);
        let resp: Response = serde_json::from_str(&resp_line).map_err(|e| CandidateError::Protocol(format!("bad response `{resp_line}`: {e}")))?;
        if resp.id != id {
            return Err(CandidateError::Protocol(format!("response id {} for request {id}", resp.id)));
        }
        if !resp.ok {
            if let Some(r) = resp.refused {
                return Err(CandidateError::Refused(r));
            }
            return Err(CandidateError::Crashed(format!("exception: {}", resp.error.unwrap_or_default())));
        }
        let mut tensors = safetensors_io::read(&out_path).map_err(|e| CandidateError::Protocol(e.to_string()))?;
        let _ = std::fs::remove_file(&out_path);
        let mut outputs = Vec::new();
        for o in &resp.outputs {
            let mut t = tensors.remove(&o.name).ok_or_else(|| CandidateError::Protocol(format!("output `{}` missing from file", o.name)))?;
            t.device = parse_device(&o.device);
            outputs.push(t);
        }
        let layouts_applied = layouts.is_some() && resp.layouts.as_deref() == layouts;
        Ok(CandidateOutput { outputs, reported_mutations: resp.mutated_inputs, reported_aliases: resp.aliases, layouts_applied })
    }
}

impl Drop for ExternalCandidate {
    fn drop(&mut self) {
        if let Ok(mut g) = self.proc_.lock() {
            if let Some(p) = g.as_mut() {
                p.kill();
            }
        }
    }
}

impl Candidate for ExternalCandidate {
    fn name(&self) -> String {
        self.manifest.name.clone()
    }
    fn op_id(&self) -> String {
        self.manifest.op.clone()
    }
    fn precision(&self) -> Precision {
        self.manifest.precision
    }
    fn kind(&self) -> &'static str {
        "external"
    }
    fn has_backward(&self) -> bool {
        self.manifest.backward
    }
    fn forward(&self, dims: &Dims, inputs: &mut [Tensor]) -> Result<CandidateOutput, CandidateError> {
        self.call("forward", dims, inputs, &[], None)
    }
    fn backward(&self, dims: &Dims, inputs: &mut [Tensor], grads: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
        if !self.manifest.backward {
            return Err(CandidateError::NoBackward);
        }
        self.call("backward", dims, inputs, grads, None)
    }
    fn supports_layouts(&self) -> bool {
        true
    }
    fn compute_device(&self) -> Device {
        parse_device(&self.manifest.device)
    }
    fn memory_limit_mb(&self) -> u64 {
        self.address_space_limit_mb()
    }
    fn forward_layout(&self, dims: &Dims, inputs: &mut [Tensor], layouts: &[Layout]) -> Result<CandidateOutput, CandidateError> {
        self.call("forward", dims, inputs, &[], Some(layouts))
    }
    fn restart(&self) -> Result<bool, CandidateError> {
        let mut g = self.proc_.lock().map_err(|_| CandidateError::Io("poisoned".into()))?;
        if let Some(p) = g.as_mut() {
            p.kill();
        }
        *g = None;
        *g = Some(self.spawn()?);
        Ok(true)
    }
}
