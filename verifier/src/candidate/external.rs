//! External-process candidates: any program that speaks the line-delimited JSON protocol of
//! `docs/candidate-protocol.md`, with tensors exchanged as safetensors files.
//!
//! One subprocess per candidate, started lazily and reused across calls (state persists, as it
//! would in a loaded PyTorch module, which is how caching tricks are caught). Each call has a
//! time limit: on expiry the process group is killed and the call reports a timeout; the next
//! call starts a fresh process. The address space is capped with `setrlimit(RLIMIT_AS)` in the
//! child before `exec`. A process that dies is reported with its signal or exit code and the
//! tail of its stderr.

use super::safetensors_io;
use super::{Candidate, CandidateError, CandidateOutput};
use crate::error_model::Precision;
use crate::references::{op_by_id, Dims};
use crate::tensor::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
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
            return Err(ManifestError::Invalid { path: p, msg: format!("unknown op `{}`", m.op) });
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
}

struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

/// An external-process candidate.
pub struct ExternalCandidate {
    /// Its manifest.
    pub manifest: Manifest,
    /// Time limit per call (and for start-up).
    pub time_limit: Duration,
    /// Address-space limit of the process, MiB (0: none).
    pub mem_limit_mb: u64,
    proc_: Mutex<Option<Proc>>,
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

/// Set up `cmd` as every candidate process is run: single-threaded BLAS, stdout and stderr
/// piped, its own process group (so a timeout can kill the whole group) and, when
/// `mem_limit_mb` > 0, `RLIMIT_AS` capped in the child before `exec`. Shared by the
/// persistent external workers and the one-shot tilec executors (`super::tilec`).
pub(crate) fn confine(cmd: &mut Command, mem_limit_mb: u64) {
    cmd.env("OMP_NUM_THREADS", "1").env("OPENBLAS_NUM_THREADS", "1").stdout(Stdio::piped()).stderr(Stdio::piped());
    let mem = mem_limit_mb.saturating_mul(1024 * 1024);
    // SAFETY: only async-signal-safe calls (setpgid, setrlimit) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::setpgid(0, 0);
            if mem > 0 {
                let lim = libc::rlimit { rlim_cur: mem as libc::rlim_t, rlim_max: mem as libc::rlim_t };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
}

/// Name of a fatal signal, for crash reports.
pub(crate) fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGKILL => "SIGKILL",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// The last `lines` lines of `s`, joined with ` | ` (stderr tails in reports).
pub(crate) fn tail(s: &str, lines: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(lines)..].join(" | ")
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

    fn spawn(&self) -> Result<Proc, CandidateError> {
        let m = &self.manifest;
        let mut cmd = Command::new(&m.command[0]);
        cmd.args(&m.command[1..]).current_dir(&m.dir).envs(&m.env).stdin(Stdio::piped());
        confine(&mut cmd, self.mem_limit_mb);
        let mut child = cmd.spawn().map_err(|e| CandidateError::Io(format!("cannot start `{}`: {e}", m.command.join(" "))))?;
        let stdin = child.stdin.take().ok_or_else(|| CandidateError::Io("no stdin".into()))?;
        let stdout = child.stdout.take().ok_or_else(|| CandidateError::Io("no stdout".into()))?;
        let mut stderr_pipe = child.stderr.take().ok_or_else(|| CandidateError::Io("no stderr".into()))?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let se = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = se.lock() {
                    s.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if s.len() > 16384 {
                        let cut = s.len() - 8192;
                        let cut = (cut..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(cut);
                        s.drain(..cut);
                    }
                }
            }
        });
        let mut p = Proc { child, stdin, lines: rx, stderr };
        // The worker announces itself first.
        match p.lines.recv_timeout(self.time_limit) {
            Ok(l) => {
                let v: serde_json::Value = serde_json::from_str(&l).map_err(|e| CandidateError::Protocol(format!("bad hello `{l}`: {e}")))?;
                if v.get("protocol").and_then(|x| x.as_str()) != Some(PROTOCOL) {
                    Self::kill(&mut p);
                    return Err(CandidateError::Protocol(format!("expected hello with protocol {PROTOCOL}, got `{l}`")));
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                Self::kill(&mut p);
                return Err(CandidateError::TimedOut { limit_s: self.time_limit.as_secs_f64() });
            }
            Err(RecvTimeoutError::Disconnected) => return Err(self.death(&mut p)),
        }
        Ok(p)
    }

    fn kill(p: &mut Proc) {
        let pid = p.child.id() as i32;
        // SAFETY: signalling the process group we created for this child.
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
        let _ = p.child.kill();
        let _ = p.child.wait();
    }

    /// Wait for a process whose stdout closed and describe how it died.
    fn death(&self, p: &mut Proc) -> CandidateError {
        let status = p.child.wait();
        std::thread::sleep(Duration::from_millis(20));
        let err = p.stderr.lock().map(|s| tail(&s, 3)).unwrap_or_default();
        match status {
            Ok(st) => {
                if let Some(sig) = st.signal() {
                    CandidateError::Crashed(format!("killed by signal {sig} ({}){}", signal_name(sig), if err.is_empty() { String::new() } else { format!(": {err}") }))
                } else {
                    CandidateError::Exited { code: st.code().unwrap_or(-1), stderr_tail: err }
                }
            }
            Err(e) => CandidateError::Io(e.to_string()),
        }
    }

    fn call(&self, pass: &str, dims: &Dims, inputs: &[Tensor], grads: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
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
        };
        let line = serde_json::to_string(&req).map_err(|e| CandidateError::Io(e.to_string()))? + "\n";
        let mut guard = self.proc_.lock().map_err(|_| CandidateError::Io("poisoned".into()))?;
        if guard.is_none() {
            *guard = Some(self.spawn()?);
        }
        let p = guard.as_mut().ok_or_else(|| CandidateError::Io("no process".into()))?;
        if p.stdin.write_all(line.as_bytes()).and_then(|_| p.stdin.flush()).is_err() {
            let e = self.death(p);
            *guard = None;
            return Err(e);
        }
        let resp_line = loop {
            match p.lines.recv_timeout(self.time_limit) {
                Ok(l) if l.trim().is_empty() => continue,
                Ok(l) => break l,
                Err(RecvTimeoutError::Timeout) => {
                    Self::kill(p);
                    *guard = None;
                    return Err(CandidateError::TimedOut { limit_s: self.time_limit.as_secs_f64() });
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let e = self.death(p);
                    *guard = None;
                    return Err(e);
                }
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
        Ok(CandidateOutput { outputs, reported_mutations: resp.mutated_inputs, reported_aliases: resp.aliases })
    }
}

impl Drop for ExternalCandidate {
    fn drop(&mut self) {
        if let Ok(mut g) = self.proc_.lock() {
            if let Some(p) = g.as_mut() {
                Self::kill(p);
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
        self.call("forward", dims, inputs, &[])
    }
    fn backward(&self, dims: &Dims, inputs: &mut [Tensor], grads: &[Tensor]) -> Result<CandidateOutput, CandidateError> {
        if !self.manifest.backward {
            return Err(CandidateError::NoBackward);
        }
        self.call("backward", dims, inputs, grads)
    }
    fn restart(&self) -> Result<bool, CandidateError> {
        let mut g = self.proc_.lock().map_err(|_| CandidateError::Io("poisoned".into()))?;
        if let Some(p) = g.as_mut() {
            Self::kill(p);
        }
        *g = Some(self.spawn()?);
        Ok(true)
    }
}
