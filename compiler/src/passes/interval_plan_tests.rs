//! Table and property tests of the interval planner.

use proptest::prelude::*;

use super::interval_plan::{plan, Request};
use super::liveness::Interval;

fn req(size: u32, start: u32, end: u32) -> Request {
    Request { size, align: 16, live: Interval { start, end } }
}

#[test]
fn table_disjoint_ranges_share_offset_zero() {
    let p = plan(&[req(512, 0, 5), req(32, 6, 9), req(256, 9, 12)]);
    assert_eq!(p.offsets, vec![0, 0, 32]);
    assert_eq!(p.extent, 288.max(512));
    assert_eq!(p.peak_demand, 512);
}

#[test]
fn table_co_live_buffers_stack_in_declaration_order() {
    let p = plan(&[req(64, 0, 10), req(64, 2, 8), req(128, 3, 4)]);
    assert_eq!(p.offsets, vec![0, 64, 128]);
    assert_eq!(p.extent, 256);
    assert_eq!(p.peak_demand, 256);
    assert_eq!(p.peak_point, 3);
}

#[test]
fn table_hole_is_reused_after_a_buffer_dies() {
    // b dies at 4; c starts at 5 and takes b's columns, below a's.
    let p = plan(&[req(64, 0, 10), req(64, 1, 4), req(64, 5, 9)]);
    assert_eq!(p.offsets, vec![0, 64, 64]);
    assert_eq!(p.extent, 128);
}

#[test]
fn table_alignment_rounds_offsets_up() {
    // Start order would give [0, 16] (extent 32); largest-first gives [16, 0] (extent 24) and wins.
    let p = plan(&[Request { size: 8, align: 16, live: Interval { start: 0, end: 3 } }, req(16, 0, 3)]);
    assert_eq!(p.offsets, vec![16, 0]);
    assert_eq!(p.extent, 24);
    let q = plan(&[req(16, 0, 3), Request { size: 8, align: 16, live: Interval { start: 0, end: 3 } }, req(16, 0, 3)]);
    assert_eq!(q.offsets, vec![0, 32, 16], "offsets of later buffers are rounded up to 16");
}

#[test]
fn table_904_sum_is_the_peak() {
    let p = plan(&[req(512, 0, 10), req(32, 3, 9)]);
    assert_eq!(p.peak_demand, 544);
    assert_eq!(p.peak_point, 3);
}

#[test]
fn empty_plan() {
    let p = plan(&[]);
    assert_eq!((p.extent, p.peak_demand), (0, 0));
}

fn arb_reqs() -> impl Strategy<Value = Vec<Request>> {
    prop::collection::vec((1u32..=16, 0u32..40, 0u32..20), 0..24).prop_map(|v| {
        v.into_iter().map(|(s, start, len)| req(s * 16, start, start + len)).collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn co_live_buffers_never_overlap(reqs in arb_reqs()) {
        let p = plan(&reqs);
        for i in 0..reqs.len() {
            prop_assert_eq!(p.offsets[i] % reqs[i].align, 0);
            prop_assert!(p.offsets[i] + reqs[i].size <= p.extent);
            for j in 0..i {
                if reqs[i].live.overlaps(reqs[j].live) {
                    let (a0, a1) = (p.offsets[i], p.offsets[i] + reqs[i].size);
                    let (b0, b1) = (p.offsets[j], p.offsets[j] + reqs[j].size);
                    prop_assert!(a1 <= b0 || b1 <= a0, "buffers {} and {} overlap", i, j);
                }
            }
        }
        prop_assert!(p.extent >= p.peak_demand);
    }
}
