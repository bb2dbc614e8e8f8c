//! A pure placement planner for buffers with live ranges (used for TMEM columns and for
//! shared-memory bytes).
//!
//! Strategy: linear scan in order of live-range start (ties: request order, i.e. declaration
//! order), first fit — each buffer gets the lowest aligned offset that does not overlap any
//! already-placed buffer whose live range intersects its own. Buffers with disjoint live ranges
//! may therefore share space. Deterministic: the output depends only on the request list.
//!
//! Invariants of the result (checked by property tests): co-live buffers never overlap; every
//! offset is a multiple of its alignment; `extent` = max(offset + size).
//!
//! The peak *demand* (largest sum of sizes live at one point) is a lower bound on any placement;
//! first fit can exceed it through fragmentation. [`plan`] also tries largest-first order and
//! keeps the better of the two.

use super::liveness::Interval;

/// One buffer to place.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Size in units (TMEM columns, or bytes).
    pub size: u32,
    /// Alignment of the offset in the same units (≥ 1).
    pub align: u32,
    /// Live range.
    pub live: Interval,
}

/// A placement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Offset of each request, in request order.
    pub offsets: Vec<u32>,
    /// max(offset + size) over all requests (0 when empty).
    pub extent: u32,
    /// The largest sum of sizes live at one program point.
    pub peak_demand: u32,
    /// A program point where `peak_demand` is reached.
    pub peak_point: u32,
}

/// Places all requests (see the module documentation).
pub fn plan(reqs: &[Request]) -> Placement {
    let by_start = order(reqs, |a, b| reqs[a].live.start.cmp(&reqs[b].live.start));
    let first = first_fit(reqs, &by_start);
    let by_size = order(reqs, |a, b| reqs[b].size.cmp(&reqs[a].size).then(reqs[a].live.start.cmp(&reqs[b].live.start)));
    let second = first_fit(reqs, &by_size);
    let offsets = if extent(reqs, &second) < extent(reqs, &first) { second } else { first };
    let (peak_demand, peak_point) = peak(reqs);
    Placement { extent: extent(reqs, &offsets), offsets, peak_demand, peak_point }
}

/// Indices of `reqs` sorted stably by `cmp` (ties keep request order).
fn order(reqs: &[Request], cmp: impl Fn(usize, usize) -> std::cmp::Ordering) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..reqs.len()).collect();
    idx.sort_by(|&a, &b| cmp(a, b).then(a.cmp(&b)));
    idx
}

fn first_fit(reqs: &[Request], order: &[usize]) -> Vec<u32> {
    let mut offsets = vec![0u32; reqs.len()];
    let mut placed: Vec<usize> = Vec::with_capacity(reqs.len());
    for &i in order {
        let r = reqs[i];
        let align = r.align.max(1);
        // Occupied ranges of co-live, already placed buffers, sorted by offset.
        let mut busy: Vec<(u32, u32)> = placed
            .iter()
            .filter(|&&j| reqs[j].live.overlaps(r.live))
            .map(|&j| (offsets[j], offsets[j].saturating_add(reqs[j].size)))
            .collect();
        busy.sort_unstable();
        let mut off = 0u32;
        for (s, e) in busy {
            if off.saturating_add(r.size) <= s {
                break;
            }
            if e > off {
                off = e.div_ceil(align).saturating_mul(align);
            }
        }
        offsets[i] = off;
        placed.push(i);
    }
    offsets
}

fn extent(reqs: &[Request], offsets: &[u32]) -> u32 {
    reqs.iter().zip(offsets).map(|(r, o)| o.saturating_add(r.size)).max().unwrap_or(0)
}

/// The largest total size live at one point, and the first point reaching it. Only interval
/// starts need checking: the live set changes upward only there.
fn peak(reqs: &[Request]) -> (u32, u32) {
    let mut best = (0u32, 0u32);
    let mut starts: Vec<u32> = reqs.iter().map(|r| r.live.start).collect();
    starts.sort_unstable();
    starts.dedup();
    for p in starts {
        let sum: u32 = reqs.iter().filter(|r| r.live.contains(p)).fold(0u32, |s, r| s.saturating_add(r.size));
        if sum > best.0 {
            best = (sum, p);
        }
    }
    best
}
