//! The devices of `--device` (`cpu`, `cuda:0`, `cuda:0,cuda:1`, …) and who uses each: judging
//! thread j and build-ahead thread j both run their workers on device `j mod n`, so with
//! `--jobs` equal to the number of devices (the default) there is one judge per GPU.
//!
//! Per device, a lock: a unit judged in parallel, and a build, hold its read side; a unit that
//! ran out of device memory beside other workers is judged again holding the write side of
//! *its* device only — the units on other GPUs go on meanwhile (one lock for all devices made a
//! retry on `cuda:0` wait for, and stall, every GPU of the host).

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// The devices, their locks, and how many judging and build threads each one serves.
pub struct Devices {
    names: Vec<String>,
    locks: Vec<RwLock<()>>,
    /// Threads (judges + builds) per device.
    users: Vec<usize>,
}

/// Device index of thread `j` (judge or build) among `n` devices: `j mod n` (`n` ≥ 1).
pub fn of(j: usize, n: usize) -> usize {
    j % n.max(1)
}

impl Devices {
    /// `names` (non-empty) shared by `judges` judging threads and `builds` build threads,
    /// thread j of each kind on device [`of`]`(j, names.len())`.
    pub fn new(names: &[String], judges: usize, builds: usize) -> Devices {
        let n = names.len().max(1);
        let mut users = vec![0; n];
        for j in (0..judges).chain(0..builds) {
            users[of(j, n)] += 1;
        }
        Devices { names: names.to_vec(), locks: (0..n).map(|_| RwLock::new(())).collect(), users }
    }

    /// Device index of thread `j`.
    pub fn of(&self, j: usize) -> usize {
        of(j, self.names.len())
    }

    /// Name of device `d` (as given to the worker's `--device`).
    pub fn name(&self, d: usize) -> &str {
        &self.names[d]
    }

    /// Whether another thread may have work on device `d` at the same time (an out-of-memory
    /// answer there is then not final: the unit is judged again alone).
    pub fn contended(&self, d: usize) -> bool {
        self.users[d] > 1
    }

    /// Shared use of device `d` (a unit judged in parallel, a build); `None` if a thread
    /// panicked while holding it.
    pub fn shared(&self, d: usize) -> Option<RwLockReadGuard<'_, ()>> {
        self.locks[d].read().ok()
    }

    /// Device `d` alone: waits for every shared use of it to end, and holds off new ones.
    pub fn alone(&self, d: usize) -> Option<RwLockWriteGuard<'_, ()>> {
        self.locks[d].write().ok()
    }
}
