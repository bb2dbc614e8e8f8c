//! The transpose of a 4 × 4 block of 32-bit words across the four lanes of a quad (lanes
//! `4g .. 4g + 3` of a warp), which turns a wgmma accumulator's fragment order into rows of
//! contiguous columns for 16-byte vector stores (issue 9, item 3: "epilogues round in registers
//! and store with vector stores").
//!
//! In the m64nNk16 D fragment ([`super::wgmma::fragment_coords`]) lane `q` of a quad holds, for
//! each 8-column group `j` of a row, the pair of columns `8j + 2q, 8j + 2q + 1`: a warp's 2-element
//! store covers 8 rows × 8 columns, 16 bytes of each row at bf16. After the transpose over four
//! consecutive groups `j = 4b .. 4b + 3`, lane `q` holds all four pairs of group `4b + q` — eight
//! consecutive columns of its row — and one warp store covers 8 rows × 32 columns.
//!
//! The transpose is two butterfly stages (lane masks 1 and 2). At the stage of mask `m`, a value
//! at (lane `L`, word `W`) whose bits `L & m` and `W & m` differ moves to (lane `L ^ m`, word
//! `W ^ m`): each stage swaps one bit of the lane index with the same bit of the word index, and
//! after both stages word `j` of lane `q` is the old word `q` of lane `j`. Each lane sends the
//! words it is about to overwrite, so a stage costs one `shfl.sync.bfly` per pair of words (two
//! per stage, four in all) and three selects each.
//!
//! Written once over [`QuadOps`]: simulated on four lanes in the tests below, emitted as PTX
//! shuffles by `backend::sm90::frag_store`.

/// The lane operations of a quad transpose: on LLVM values for one lane (the code generator),
/// or on all four lanes at once (the simulation in the tests).
pub trait QuadOps {
    /// A 32-bit word.
    type V: Copy;
    /// A predicate.
    type B: Copy;
    /// The error of an emitting implementation.
    type E;
    /// Whether bit `m` (1 or 2) of the lane's index in its quad is set.
    fn lane_bit(&mut self, m: u32) -> Result<Self::B, Self::E>;
    /// `if b { x } else { y }`.
    fn select(&mut self, b: Self::B, x: Self::V, y: Self::V) -> Result<Self::V, Self::E>;
    /// The value `x` of lane `lane ^ m` (`shfl.sync.bfly`, every lane of the warp taking part).
    fn shfl_xor(&mut self, x: Self::V, m: u32) -> Result<Self::V, Self::E>;
}

/// Transposes `w` across the quad: afterwards word `j` of lane `q` is what word `q` of lane `j`
/// was before. Every lane of the warp must execute it (the shuffles name the whole warp).
pub fn quad_transpose<Q: QuadOps>(q: &mut Q, w: &mut [Q::V; 4]) -> Result<(), Q::E> {
    for m in [1u32, 2] {
        let bit = q.lane_bit(m)?;
        for j0 in (0..4usize).filter(|j| *j as u32 & m == 0) {
            let j1 = j0 | m as usize;
            // A lane with the bit set replaces word j0 (whose bit differs from its own) with the
            // partner's word j1, and so gives its own j0 away; a lane without it trades j1.
            let send = q.select(bit, w[j0], w[j1])?;
            let recv = q.shfl_xor(send, m)?;
            w[j0] = q.select(bit, recv, w[j0])?;
            w[j1] = q.select(bit, w[j1], recv)?;
        }
    }
    Ok(())
}

/// Fragment pairs of one 32-column block: two row halves × four 8-column groups.
pub const BLOCK_PAIRS: usize = 8;

/// Where pair `k` of a block lies, the pairs in register order (registers `2k`, `2k + 1` after
/// the block's first, as [`super::wgmma::fragment_coords`] numbers them `4j + 2h`): its row
/// half `h` and 8-column group `j`.
pub fn block_pair(k: usize) -> (usize, usize) {
    (k % 2, k / 2)
}

/// The pair that places row half `h`'s segment: group 0 of that half, whose row is the
/// segment's and whose column [`segment_column`] starts from.
pub fn segment_anchor(h: usize) -> usize {
    (0..BLOCK_PAIRS).find(|&k| block_pair(k) == (h, 0)).unwrap_or(h)
}

/// Whether a fragment-order store of a wgmma unit `piece_n` columns wide writes 16-byte row
/// segments (the quad trades its pairs first): the unit is made of whole 32-column blocks, the
/// tile's columns run along the tensor's last dimension (`columns_last`), its elements are 2
/// bytes, and the kernel declares no register budget (`ctas_per_sm`: the traded words and flags
/// are live at once — K#1 at 3 CTAs per SM, 168 registers, spilled 20 B with them).
///
/// 2-byte elements only: there a quad's pair store writes 16 bytes of a row (half a sector) and
/// the trade halves the sectors touched — K#1's bf16 dU 13–28 % faster on the H100. At 4 bytes
/// a pair store already writes a whole 32-byte sector per row; the trade (192 shuffles per
/// thread in gemm's epilogue) measured gemm 4–6 % and K#1's f32 dU 3–4 % slower (H100, same
/// call, docs/results.md, twenty-fourth session).
/// The code generator (`backend::sm90::frag_store`) and `--emit ir` ask this one rule.
pub fn row_segments_apply(piece_n: u32, columns_last: bool, elem_bytes: u32, register_budget: bool) -> bool {
    piece_n.is_multiple_of(32) && columns_last && elem_bytes == 2 && !register_budget
}

/// The column of lane `q`'s row segment: its block's first pair sits at column `c_first`
/// (the block's start + 2q), its segment at the block's start + 8q.
pub fn segment_column<A: super::IndexArith>(a: &A, c_first: A::V, q: A::V) -> Result<A::V, A::E> {
    a.add(c_first, a.mul(q, a.c(6))?)
}

/// Where element `i` (0..8) of a lane's row segment lies after the transpose: its word (the
/// pair `i / 2`, in column order) and the bit shift of its low bit (a 2-byte element is the low
/// or high half of its pair's word).
pub fn segment_element(i: usize) -> (usize, u32) {
    (i / 2, 16 * (i % 2) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// All four lanes of a quad in lockstep: a value is one word per lane.
    struct Quad;

    impl QuadOps for Quad {
        type V = [u32; 4];
        type B = [bool; 4];
        type E = std::convert::Infallible;
        fn lane_bit(&mut self, m: u32) -> Result<[bool; 4], Self::E> {
            Ok(std::array::from_fn(|l| l as u32 & m != 0))
        }
        fn select(&mut self, b: [bool; 4], x: [u32; 4], y: [u32; 4]) -> Result<[u32; 4], Self::E> {
            Ok(std::array::from_fn(|l| if b[l] { x[l] } else { y[l] }))
        }
        fn shfl_xor(&mut self, x: [u32; 4], m: u32) -> Result<[u32; 4], Self::E> {
            Ok(std::array::from_fn(|l| x[l ^ m as usize]))
        }
    }

    /// Word `j` of lane `l` as the simulation holds it (`w[j][l]`), starting from `10 l + j`.
    fn transposed() -> [[u32; 4]; 4] {
        let mut w: [[u32; 4]; 4] = std::array::from_fn(|j| std::array::from_fn(|l| 10 * l as u32 + j as u32));
        let Ok(()) = quad_transpose(&mut Quad, &mut w);
        w
    }

    #[test]
    fn word_j_of_lane_q_is_word_q_of_lane_j() {
        let w = transposed();
        for q in 0..4u32 {
            for j in 0..4u32 {
                assert_eq!(w[j as usize][q as usize], 10 * j + q, "lane {q} word {j}");
            }
        }
    }

    #[test]
    fn a_lane_ends_with_one_column_group_in_column_order() {
        // Fragment pairs: lane q's word j is group j's columns 8j + 2q, +1. After the transpose,
        // lane q's words are group q's columns 8q + 0, 2, 4, 6: one 16-byte row segment at bf16.
        let col = |lane: u32, word: u32| 8 * word + 2 * lane;
        let w = transposed();
        for q in 0..4 {
            let cols: Vec<u32> = (0..4).map(|j| col(w[j][q] / 10, w[j][q] % 10)).collect();
            assert_eq!(cols, vec![8 * q as u32, 8 * q as u32 + 2, 8 * q as u32 + 4, 8 * q as u32 + 6], "lane {q}");
        }
    }

    /// A warpgroup's store of one 64 x 32 wgmma unit of 2-byte elements, modelled as the code
    /// generator emits it (`backend::sm90::frag_store`): pairs from `fragment_coords` in register
    /// order, placed by `block_pair`, packed into words, traded per quad, split by
    /// `segment_element` and written at `segment_column` from the `segment_anchor` pair. Every
    /// element must land at its own (row, column), once.
    #[test]
    fn a_unit_of_2_byte_elements_lands_in_place() {
        use crate::layout::wgmma::fragment_coords;
        use crate::layout::Eval;
        let value = |r: u32, c: u32| 32 * r + c; // < 2^16: fits a 2-byte element
        let mut tile = vec![vec![None::<u32>; 32]; 64];
        for warp_quad in 0..32 {
            // Lane l of this quad is thread 4·warp_quad + l of the warpgroup.
            let tid = |l: usize| 4 * warp_quad + l as u32;
            // words[h][j][lane] before the transpose and each pair's (row, column), the block's
            // pairs taken in register order as the code generator takes them.
            let mut words = [[[0u32; 4]; 4]; 2];
            let mut at = [[(0u32, 0u32); 4]; BLOCK_PAIRS];
            for l in 0..4 {
                for k in 0..BLOCK_PAIRS {
                    let (h, j) = block_pair(k);
                    let e = 2 * k as u32;
                    let (r, c) = crate::layout::eval(fragment_coords(&Eval, tid(l), e));
                    let (r1, c1) = crate::layout::eval(fragment_coords(&Eval, tid(l), e + 1));
                    assert_eq!((r1, c1), (r, c + 1));
                    at[k][l] = (r, c);
                    words[h][j][l] = value(r, c) | (value(r, c1) << 16);
                }
            }
            for (h, w) in words.iter_mut().enumerate() {
                let Ok(()) = quad_transpose(&mut Quad, w);
                for l in 0..4 {
                    let (r, c_first) = at[segment_anchor(h)][l];
                    let c0 = crate::layout::eval(segment_column(&Eval, c_first, l as u32));
                    for i in 0..8 {
                        let (wi, shift) = segment_element(i);
                        let cell = &mut tile[r as usize][c0 as usize + i];
                        assert!(cell.is_none(), "({r}, {}) written twice", c0 as usize + i);
                        *cell = Some((w[wi][l] >> shift) & 0xffff);
                    }
                }
            }
        }
        for (r, row) in tile.iter().enumerate() {
            for (c, x) in row.iter().enumerate() {
                assert_eq!(*x, Some(value(r as u32, c as u32)), "element ({r}, {c})");
            }
        }
    }
}
