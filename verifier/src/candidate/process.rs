//! Containment of candidate processes: one implementation shared by the external-protocol
//! workers ([`super::external`]), the one-shot tilec executors ([`super::tilec`]) and the
//! KernelBench audit workers ([`crate::audit`]).
//!
//! # The process tree
//! [`confine`] makes the process that `Command::spawn` creates a small **shim** that is not the
//! candidate: in `pre_exec` the shim makes itself a *child subreaper*
//! (`prctl(PR_SET_CHILD_SUBREAPER)`), forks, and only the fork (the worker) returns to `exec`
//! the candidate program. Because the shim is a subreaper, every descendant of the worker that
//! loses its parent — a double-forked daemon, a child that called `setsid()` to leave the
//! process group, the children of a worker that crashed — is re-parented to the shim, never to
//! init. The shim then watches (async-signal-safe calls only: `sigtimedwait`, `waitpid`,
//! `kill`, `read` of `/proc/thread-self/children`):
//! * when the worker exits or dies on its own, or when kverify asks with `SIGTERM`
//!   ([`kill_tree`]), or when kverify itself has gone (the shim's parent changed), it kills the
//!   worker's process group and then, round by round, every child it has (each round's victims'
//!   children are re-parented to the shim and killed in the next round) until none is left, then
//!   exits with the worker's own status (the same exit code, or the same signal re-raised), so a
//!   crash is still reported as `killed by signal N`.
//! * The worker has `PR_SET_PDEATHSIG = SIGKILL`: if the shim is killed, the worker dies too.
//!
//! Limits: `RLIMIT_AS` (the address space) when a memory limit is given, `RLIMIT_CORE` = 0.
//!
//! # Reading from a worker
//! [`spawn_line_reader`] reads stdout in chunks and hands over whole lines through a bounded
//! channel: a line longer than its limit ends the stream with [`ReadEvent::TooLong`] (the caller
//! kills the worker) instead of growing kverify's memory, and at most [`LINE_QUEUE`] lines are
//! buffered (a chatty worker blocks on its own pipe). Stderr keeps only its last 8-16 KiB.

use super::CandidateError;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use wait_timeout::ChildExt;

/// Lines buffered between the reader thread and the caller.
pub const LINE_QUEUE: usize = 64;

/// Default longest protocol line, bytes.
pub const MAX_LINE: usize = 1 << 20;

/// Set up `cmd` as every candidate process is run: single-threaded BLAS, stdout and stderr
/// piped, the subreaper shim described in the module documentation (the worker in its own
/// process group, every descendant killed when it ends), `RLIMIT_CORE` = 0 and, when
/// `mem_limit_mb` > 0, `RLIMIT_AS` capped before `exec`. Stop such a process with [`kill_tree`].
pub(crate) fn confine(cmd: &mut Command, mem_limit_mb: u64) {
    cmd.env("OMP_NUM_THREADS", "1").env("OPENBLAS_NUM_THREADS", "1").stdout(Stdio::piped()).stderr(Stdio::piped());
    let mem = mem_limit_mb.saturating_mul(1024 * 1024);
    // SAFETY: the closure runs between fork and exec and uses only async-signal-safe calls
    // (setpgid, setrlimit, prctl, sigprocmask, fork, and in the shim the calls listed in
    // `shim_main`); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            libc::setpgid(0, 0);
            let core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &core);
            if mem > 0 {
                let lim = libc::rlimit { rlim_cur: mem as libc::rlim_t, rlim_max: mem as libc::rlim_t };
                if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            fork_shim()
        });
    }
}

/// In the child of `spawn`: become the subreaper shim and fork the worker. Returns `Ok` only in
/// the worker (which then execs); the shim never returns.
unsafe fn fork_shim() -> std::io::Result<()> {
    let parent = libc::getppid();
    if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut set: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGCHLD] {
        libc::sigaddset(&mut set, s);
    }
    libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
    let shim = libc::getpid();
    let w = libc::fork();
    if w < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if w == 0 {
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong);
        if libc::getppid() != shim {
            libc::_exit(127);
        }
        libc::setpgid(0, 0);
        // The worker is no subreaper: its orphans go up to the shim.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong);
        return Ok(());
    }
    shim_main(w, parent, &set)
}

/// The shim's life: wait for the worker's end or a stop request, kill every descendant, exit
/// as the worker did. Async-signal-safe calls only, no allocation.
unsafe fn shim_main(w: libc::pid_t, parent: libc::pid_t, set: &libc::sigset_t) -> ! {
    // Let go of every inherited descriptor: the pipes (so their ends close with the worker's
    // tree) and spawn's exec-status pipe (so `spawn` returns once the worker has exec'd).
    let mut lim: libc::rlimit = std::mem::zeroed();
    let maxfd = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 { (lim.rlim_cur as i64).clamp(256, 65536) as i32 } else { 4096 };
    for fd in 0..maxfd {
        libc::close(fd);
    }
    let mut status: Option<libc::c_int> = None;
    let ts = libc::timespec { tv_sec: 0, tv_nsec: 50_000_000 };
    loop {
        let sig = libc::sigtimedwait(set, std::ptr::null_mut(), &ts);
        reap(w, &mut status);
        if status.is_some() || (sig > 0 && sig != libc::SIGCHLD) || libc::getppid() != parent {
            break;
        }
    }
    kill_descendants(w, &mut status);
    match status {
        Some(st) if libc::WIFEXITED(st) => libc::_exit(libc::WEXITSTATUS(st)),
        Some(st) if libc::WIFSIGNALED(st) => {
            // Die of the same signal. Unblock only that one: a pending SIGCHLD must not reach
            // whatever handler the shim inherited from kverify.
            let sig = libc::WTERMSIG(st);
            let mut one: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut one);
            libc::sigaddset(&mut one, sig);
            libc::signal(sig, libc::SIG_DFL);
            libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig)
        }
        _ => libc::_exit(125),
    }
}

/// Reap every finished child without blocking; remember the worker's status.
unsafe fn reap(w: libc::pid_t, status: &mut Option<libc::c_int>) -> bool {
    loop {
        let mut st: libc::c_int = 0;
        let r = libc::waitpid(-1, &mut st, libc::WNOHANG);
        if r == w {
            *status = Some(st);
        }
        if r == 0 {
            return true; // children remain
        }
        if r < 0 {
            return false; // ECHILD: none left
        }
    }
}

/// Kill the worker's group, then every child of the shim, round by round, until none is left
/// (or ~10 s have passed).
unsafe fn kill_descendants(w: libc::pid_t, status: &mut Option<libc::c_int>) {
    libc::kill(-w, libc::SIGKILL);
    libc::kill(w, libc::SIGKILL);
    let pause = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
    let mut buf = [0u8; 4096];
    for _ in 0..10_000 {
        let fd = libc::open(c"/proc/thread-self/children".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd >= 0 {
            let n = libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len());
            libc::close(fd);
            let mut pid: i64 = 0;
            let mut have = false;
            for &b in buf.iter().take(n.max(0) as usize) {
                if b.is_ascii_digit() {
                    pid = pid * 10 + (b - b'0') as i64;
                    have = true;
                } else {
                    if have && pid > 1 {
                        libc::kill(pid as libc::pid_t, libc::SIGKILL);
                    }
                    pid = 0;
                    have = false;
                }
            }
            if have && pid > 1 {
                libc::kill(pid as libc::pid_t, libc::SIGKILL);
            }
        }
        if !reap(w, status) {
            return;
        }
        libc::nanosleep(&pause, std::ptr::null_mut());
    }
}

/// Stop a process started under [`confine`] and everything it started: `SIGTERM` to the shim
/// (which kills the tree and exits), `SIGKILL` to the shim and the groups if it has not exited
/// within 5 s; then reap it.
pub(crate) fn kill_tree(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let pid = child.id() as i32;
    // SAFETY: signalling our own child, the shim.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
    if let Ok(Some(_)) = child.wait_timeout(Duration::from_secs(5)) {
        return;
    }
    // SAFETY: the shim's own process group (created by `confine`).
    unsafe {
        libc::kill(-pid, libc::SIGKILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// What the stdout reader hands over.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadEvent {
    /// One line, without its newline (lossy UTF-8).
    Line(String),
    /// A line grew past the limit (bytes read so far); nothing more is read.
    TooLong(usize),
}

/// Read `stdout` into lines of at most `max_line` bytes on a thread, through a channel of
/// [`LINE_QUEUE`] lines. The channel closes at end of file (or after a [`ReadEvent::TooLong`]).
pub fn spawn_line_reader(mut stdout: ChildStdout, max_line: usize) -> Receiver<ReadEvent> {
    let (tx, rx) = mpsc::sync_channel(LINE_QUEUE);
    std::thread::spawn(move || {
        let mut cur: Vec<u8> = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = match stdout.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let mut rest = &buf[..n];
            while let Some(pos) = rest.iter().position(|&b| b == b'\n') {
                cur.extend_from_slice(&rest[..pos]);
                rest = &rest[pos + 1..];
                if cur.len() > max_line {
                    let _ = tx.send(ReadEvent::TooLong(cur.len()));
                    return;
                }
                let line = String::from_utf8_lossy(&cur).trim_end_matches('\r').to_string();
                cur.clear();
                if tx.send(ReadEvent::Line(line)).is_err() {
                    return;
                }
            }
            cur.extend_from_slice(rest);
            if cur.len() > max_line {
                let _ = tx.send(ReadEvent::TooLong(cur.len()));
                return;
            }
        }
    });
    rx
}

/// Keep the last 8-16 KiB of `stderr` on a thread.
pub fn spawn_stderr_tail(mut stderr: ChildStderr) -> Arc<Mutex<String>> {
    let tail = Arc::new(Mutex::new(String::new()));
    let se = Arc::clone(&tail);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf) {
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
    tail
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

/// A long-lived worker speaking a line-delimited JSON protocol under [`confine`]: it announces
/// itself with a JSON hello naming its protocol, then answers one line per request.
pub struct Worker {
    child: Child,
    stdin: std::process::ChildStdin,
    lines: Receiver<ReadEvent>,
    stderr: Arc<Mutex<String>>,
    /// The hello line, parsed.
    pub hello: serde_json::Value,
    max_line: usize,
}

impl Worker {
    /// Start `cmd` (stdin piped, [`confine`]d) and wait up to `limit` for a JSON hello whose
    /// `protocol` is `protocol`. Any failure kills the whole tree before returning.
    pub fn spawn(mut cmd: Command, protocol: &str, limit: Duration, mem_limit_mb: u64, max_line: usize) -> Result<Worker, CandidateError> {
        confine(&mut cmd, mem_limit_mb);
        cmd.stdin(Stdio::piped());
        let prog = cmd.get_program().to_string_lossy().into_owned();
        let mut child = cmd.spawn().map_err(|e| CandidateError::Io(format!("cannot start `{prog}`: {e}")))?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take()) else {
            kill_tree(&mut child);
            return Err(CandidateError::Io("no pipes".into()));
        };
        let mut w = Worker { child, stdin, lines: spawn_line_reader(stdout, max_line), stderr: spawn_stderr_tail(stderr), hello: serde_json::Value::Null, max_line };
        let l = w.next_line(limit)?;
        let hello: serde_json::Value = match serde_json::from_str(&l) {
            Ok(v) => v,
            Err(e) => {
                w.kill();
                return Err(CandidateError::Protocol(format!("bad hello `{}`: {e}", clip(&l))));
            }
        };
        if hello.get("protocol").and_then(|x| x.as_str()) != Some(protocol) {
            w.kill();
            return Err(CandidateError::Protocol(format!("expected hello with protocol {protocol}, got `{}`", clip(&l))));
        }
        w.hello = hello;
        Ok(w)
    }

    /// The worker's (the shim's) process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Next non-empty line within `limit`. On timeout, an over-long line or death the tree is
    /// killed and the error says which.
    pub fn next_line(&mut self, limit: Duration) -> Result<String, CandidateError> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(ReadEvent::Line(l)) if l.trim().is_empty() => continue,
                Ok(ReadEvent::Line(l)) => return Ok(l),
                Ok(ReadEvent::TooLong(n)) => {
                    self.kill();
                    return Err(CandidateError::Protocol(format!("output line longer than {} bytes (read {n} without a newline); worker killed", self.max_line)));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    self.kill();
                    return Err(CandidateError::TimedOut { limit_s: limit.as_secs_f64() });
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(self.death()),
            }
        }
    }

    /// Send one line (a newline is added) and wait up to `limit` for the answer line.
    pub fn request(&mut self, line: &str, limit: Duration) -> Result<String, CandidateError> {
        use std::io::Write;
        let mut msg = line.to_string();
        msg.push('\n');
        if self.stdin.write_all(msg.as_bytes()).and_then(|_| self.stdin.flush()).is_err() {
            return Err(self.death());
        }
        self.next_line(limit)
    }

    /// Kill the whole tree ([`kill_tree`]).
    pub fn kill(&mut self) {
        kill_tree(&mut self.child);
    }

    /// Describe how a worker whose stdout closed died (waits for the shim, at most 10 s).
    pub fn death(&mut self) -> CandidateError {
        let status = match self.child.wait_timeout(Duration::from_secs(10)) {
            Ok(Some(st)) => st,
            _ => {
                self.kill();
                return CandidateError::Crashed("closed its output and did not exit; killed".into());
            }
        };
        std::thread::sleep(Duration::from_millis(20));
        let err = self.stderr.lock().map(|s| tail(&s, 3)).unwrap_or_default();
        if let Some(sig) = status.signal() {
            CandidateError::Crashed(format!("killed by signal {sig} ({}){}", signal_name(sig), if err.is_empty() { String::new() } else { format!(": {err}") }))
        } else {
            CandidateError::Exited { code: status.code().unwrap_or(-1), stderr_tail: err }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn clip(s: &str) -> String {
    if s.len() <= 200 {
        return s.to_string();
    }
    let mut cut = 200;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}... ({} bytes)", &s[..cut], s.len())
}
