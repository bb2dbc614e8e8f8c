//! Fragments of `mma.sync.aligned.m16n8k16` with 16-bit A/B and f32 C/D (PTX ISA 8.8, §9.7.14.5.8
//! "Matrix Fragments for mma.m16n8k16 with floating point type"; H200-checked in blackwell.md
//! §6.2).
//!
//! Lane `l` of the warp has `groupID = l >> 2` and `threadID_in_group = l % 4`; with
//! `t2 = 2·threadID_in_group` every fragment element sits at a constant offset from
//! `(groupID, t2)`:
//! * A (16 × 16, row-major, four `.b32` registers of two elements): register `r`, half `h` at
//!   row `groupID + A_REGS[r].0`, column `t2 + A_REGS[r].1 + h`;
//! * B (16 × 8, "col", two registers): register `r`, half `h` at row (K) `t2 + B_REGS[r] + h`,
//!   column `groupID`;
//! * C/D (16 × 8, four f32 registers): register `r` at row `groupID + C_REGS[r].0`, column
//!   `t2 + C_REGS[r].1`.

use super::IndexArith;

/// Per A register: (row offset, column offset) from `(groupID, t2)`.
pub const A_REGS: [(u32, u32); 4] = [(0, 0), (8, 0), (0, 8), (8, 8)];
/// Per B register: K offset from `t2`.
pub const B_REGS: [u32; 2] = [0, 8];
/// Per C/D register: (row offset, column offset) from `(groupID, t2)`.
pub const C_REGS: [(u32, u32); 4] = [(0, 0), (0, 1), (8, 0), (8, 1)];

/// `(groupID, 2·threadID_in_group)` of lane `lane` (0..32).
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn lane_coords<A: IndexArith>(a: &A, lane: A::V) -> Result<(A::V, A::V), A::E> {
    let g = a.shr(lane, 2)?;
    let t = a.and(lane, 3)?;
    Ok((g, a.shl(t, 1)?))
}

/// `base + off`, emitting nothing for `off == 0`.
///
/// # Errors
/// Only those of the emitting [`IndexArith`].
pub fn offset<A: IndexArith>(a: &A, base: A::V, off: u32) -> Result<A::V, A::E> {
    if off == 0 {
        Ok(base)
    } else {
        a.add(base, a.c(off))
    }
}

/// (row, column) of half `half` of A register `reg` in lane `lane`.
pub fn a_elem(lane: u32, reg: usize, half: u32) -> (u32, u32) {
    let (g, t2) = super::eval(lane_coords(&super::Eval, lane));
    (g + A_REGS[reg].0, t2 + A_REGS[reg].1 + half)
}

/// (row = K, column = N) of half `half` of B register `reg` in lane `lane`.
pub fn b_elem(lane: u32, reg: usize, half: u32) -> (u32, u32) {
    let (g, t2) = super::eval(lane_coords(&super::Eval, lane));
    (t2 + B_REGS[reg] + half, g)
}

/// (row, column) of C/D register `reg` in lane `lane`.
pub fn c_elem(lane: u32, reg: usize) -> (u32, u32) {
    let (g, t2) = super::eval(lane_coords(&super::Eval, lane));
    (g + C_REGS[reg].0, t2 + C_REGS[reg].1)
}

#[cfg(test)]
mod tests {
    use super::*;

    // The PTX ISA states the maps per element index `i` of the fragment (a0..a7, b0..b3, c0..c3),
    // two 16-bit elements per .b32 register (i = 2·reg + half). Written out independently here.
    fn isa_a(lane: u32, i: u32) -> (u32, u32) {
        let (gid, tig) = (lane >> 2, lane % 4);
        let row = if i < 2 || (4..6).contains(&i) { gid } else { gid + 8 };
        let col = if i < 4 { tig * 2 + (i & 1) } else { tig * 2 + (i & 1) + 8 };
        (row, col)
    }
    fn isa_b(lane: u32, i: u32) -> (u32, u32) {
        let (gid, tig) = (lane >> 2, lane % 4);
        let row = if i < 2 { tig * 2 + (i & 1) } else { tig * 2 + (i & 1) + 8 };
        (row, gid)
    }
    fn isa_c(lane: u32, i: u32) -> (u32, u32) {
        let (gid, tig) = (lane >> 2, lane % 4);
        let row = if i < 2 { gid } else { gid + 8 };
        (row, tig * 2 + (i & 1))
    }

    #[test]
    fn fragments_match_the_ptx_isa_tables() {
        for lane in 0..32 {
            for reg in 0..4 {
                for half in 0..2 {
                    assert_eq!(a_elem(lane, reg, half), isa_a(lane, 2 * reg as u32 + half), "A lane {lane} reg {reg} half {half}");
                }
                assert_eq!(c_elem(lane, reg), isa_c(lane, reg as u32), "C lane {lane} reg {reg}");
            }
            for reg in 0..2 {
                for half in 0..2 {
                    assert_eq!(b_elem(lane, reg, half), isa_b(lane, 2 * reg as u32 + half), "B lane {lane} reg {reg} half {half}");
                }
            }
        }
    }

    #[test]
    fn every_element_is_held_exactly_once() {
        let mut a = [[0u8; 16]; 16];
        let mut b = [[0u8; 8]; 16];
        let mut c = [[0u8; 8]; 16];
        for lane in 0..32 {
            for reg in 0..4 {
                for half in 0..2 {
                    let (r, k) = a_elem(lane, reg, half);
                    a[r as usize][k as usize] += 1;
                }
                let (r, n) = c_elem(lane, reg);
                c[r as usize][n as usize] += 1;
            }
            for reg in 0..2 {
                for half in 0..2 {
                    let (k, n) = b_elem(lane, reg, half);
                    b[k as usize][n as usize] += 1;
                }
            }
        }
        assert!(a.iter().flatten().all(|&x| x == 1));
        assert!(b.iter().flatten().all(|&x| x == 1));
        assert!(c.iter().flatten().all(|&x| x == 1));
    }
}
