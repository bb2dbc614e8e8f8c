//! A small dense fp64 array type for the references.
//!
//! `Mat` is a row-major 2-D matrix (the per-sequence, per-head working unit: `[T, K]`, `[K, V]`,
//! `[C, C]` ...). `Tensor` is a row-major N-D array used only at the boundary, for fla's
//! `[B, T, H, K]`-style layouts. Everything is `f64`: these types exist so that the oracle never
//! holds a lower-precision value.

/// Row-major fp64 matrix, `rows x cols`.
#[derive(Clone, Debug, PartialEq)]
pub struct Mat {
    /// Row count (T of a `[T, K]` input, K of a `[K, V]` state).
    pub rows: usize,
    /// Column count (K of a `[T, K]` input, V of a `[K, V]` state).
    pub cols: usize,
    /// `rows · cols` elements, row-major: element `(i, j)` is `data[i * cols + j]`.
    pub data: Vec<f64>,
}

impl Mat {
    /// All-zero `rows x cols` matrix.
    pub fn zeros(rows: usize, cols: usize) -> Self {
        Mat { rows, cols, data: vec![0.0; rows * cols] }
    }

    /// Matrix filled with one value.
    pub fn filled(rows: usize, cols: usize, value: f64) -> Self {
        Mat { rows, cols, data: vec![value; rows * cols] }
    }

    /// `n x n` identity.
    pub fn eye(n: usize) -> Self {
        let mut m = Mat::zeros(n, n);
        for i in 0..n {
            m[(i, i)] = 1.0;
        }
        m
    }

    /// Wraps a row-major buffer. Panics if `data.len() != rows * cols` (internal use only).
    pub fn from_vec(rows: usize, cols: usize, data: Vec<f64>) -> Self {
        assert_eq!(data.len(), rows * cols, "Mat::from_vec: buffer length does not match shape");
        Mat { rows, cols, data }
    }

    /// Row `i` as a slice.
    #[inline]
    pub fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Row `i` as a mutable slice.
    #[inline]
    pub fn row_mut(&mut self, i: usize) -> &mut [f64] {
        &mut self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Rows `start..end` copied into a new matrix.
    pub fn rows_range(&self, start: usize, end: usize) -> Mat {
        Mat::from_vec(end - start, self.cols, self.data[start * self.cols..end * self.cols].to_vec())
    }

    /// Writes `src` into rows `start..start + src.rows`.
    pub fn set_rows(&mut self, start: usize, src: &Mat) {
        assert_eq!(src.cols, self.cols);
        self.data[start * self.cols..(start + src.rows) * self.cols].copy_from_slice(&src.data);
    }

    /// Transpose.
    pub fn t(&self) -> Mat {
        let mut out = Mat::zeros(self.cols, self.rows);
        for i in 0..self.rows {
            for j in 0..self.cols {
                out[(j, i)] = self[(i, j)];
            }
        }
        out
    }

    /// `self · b` (`[m,k]·[k,n]`).
    pub fn matmul(&self, b: &Mat) -> Mat {
        assert_eq!(self.cols, b.rows, "matmul: inner dimensions differ");
        let mut out = Mat::zeros(self.rows, b.cols);
        for i in 0..self.rows {
            let orow = &mut out.data[i * b.cols..(i + 1) * b.cols];
            for (p, &a) in self.row(i).iter().enumerate() {
                if a == 0.0 {
                    continue;
                }
                axpy(orow, a, b.row(p));
            }
        }
        out
    }

    /// `selfᵀ · b` (`[k,m]ᵀ·[k,n]`), without forming the transpose.
    pub fn tmatmul(&self, b: &Mat) -> Mat {
        assert_eq!(self.rows, b.rows, "tmatmul: inner dimensions differ");
        let mut out = Mat::zeros(self.cols, b.cols);
        for p in 0..self.rows {
            let brow = b.row(p);
            for (i, &a) in self.row(p).iter().enumerate() {
                if a == 0.0 {
                    continue;
                }
                axpy(&mut out.data[i * b.cols..(i + 1) * b.cols], a, brow);
            }
        }
        out
    }

    /// `self · bᵀ` (`[m,k]·[n,k]ᵀ`).
    pub fn matmul_t(&self, b: &Mat) -> Mat {
        assert_eq!(self.cols, b.cols, "matmul_t: inner dimensions differ");
        let mut out = Mat::zeros(self.rows, b.rows);
        for i in 0..self.rows {
            let a = self.row(i);
            for j in 0..b.rows {
                out[(i, j)] = dot(a, b.row(j));
            }
        }
        out
    }

    /// Elementwise product.
    pub fn hadamard(&self, b: &Mat) -> Mat {
        assert_eq!((self.rows, self.cols), (b.rows, b.cols), "hadamard: shapes differ");
        Mat::from_vec(self.rows, self.cols, self.data.iter().zip(&b.data).map(|(x, y)| x * y).collect())
    }

    /// `self += b`.
    pub fn add_assign(&mut self, b: &Mat) {
        assert_eq!((self.rows, self.cols), (b.rows, b.cols), "add_assign: shapes differ");
        for (x, y) in self.data.iter_mut().zip(&b.data) {
            *x += y;
        }
    }

    /// `self -= b`.
    pub fn sub_assign(&mut self, b: &Mat) {
        assert_eq!((self.rows, self.cols), (b.rows, b.cols), "sub_assign: shapes differ");
        for (x, y) in self.data.iter_mut().zip(&b.data) {
            *x -= y;
        }
    }

    /// Every element multiplied by `s`.
    pub fn scaled(&self, s: f64) -> Mat {
        Mat::from_vec(self.rows, self.cols, self.data.iter().map(|x| x * s).collect())
    }

    /// Sum of each row (`[rows]`).
    pub fn row_sums(&self) -> Vec<f64> {
        (0..self.rows).map(|i| self.row(i).iter().sum()).collect()
    }

    /// Largest absolute element (0 for an empty matrix).
    pub fn max_abs(&self) -> f64 {
        self.data.iter().fold(0.0, |m, x| m.max(x.abs()))
    }
}

impl std::ops::Index<(usize, usize)> for Mat {
    type Output = f64;
    #[inline]
    fn index(&self, (i, j): (usize, usize)) -> &f64 {
        &self.data[i * self.cols + j]
    }
}

impl std::ops::IndexMut<(usize, usize)> for Mat {
    #[inline]
    fn index_mut(&mut self, (i, j): (usize, usize)) -> &mut f64 {
        &mut self.data[i * self.cols + j]
    }
}

/// `y += a·x`.
#[inline]
pub fn axpy(y: &mut [f64], a: f64, x: &[f64]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

/// `y += a ⊙ x` (elementwise product accumulated).
#[inline]
pub fn axpy_mul(y: &mut [f64], a: &[f64], x: &[f64]) {
    for ((yi, ai), xi) in y.iter_mut().zip(a).zip(x) {
        *yi += ai * xi;
    }
}

/// Dot product.
#[inline]
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Row-major N-D fp64 array (fla layouts such as `[B, T, H, K]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// Dimensions, outermost first (e.g. `[B, T, H, K]`).
    pub shape: Vec<usize>,
    /// `shape.iter().product()` elements, row-major (last dimension contiguous).
    pub data: Vec<f64>,
}

impl Tensor {
    /// All-zero tensor of the given shape.
    pub fn zeros(shape: &[usize]) -> Self {
        Tensor { shape: shape.to_vec(), data: vec![0.0; shape.iter().product()] }
    }

    /// Wraps a buffer; `None` if the length does not match the shape.
    pub fn new(shape: &[usize], data: Vec<f64>) -> Option<Self> {
        (data.len() == shape.iter().product::<usize>()).then(|| Tensor { shape: shape.to_vec(), data })
    }

    /// For a `[B, T, H, X]` tensor: rows `t0..t1` of batch `b`, head `h` as a `[t1-t0, X]` matrix.
    pub fn bthx_slice(&self, b: usize, h: usize, t0: usize, t1: usize) -> Mat {
        let (t_len, heads, x) = (self.shape[1], self.shape[2], self.shape[3]);
        let mut m = Mat::zeros(t1 - t0, x);
        for t in t0..t1 {
            let off = ((b * t_len + t) * heads + h) * x;
            m.row_mut(t - t0).copy_from_slice(&self.data[off..off + x]);
        }
        m
    }

    /// Inverse of [`Tensor::bthx_slice`]: writes a `[t1-t0, X]` matrix back.
    pub fn set_bthx_slice(&mut self, b: usize, h: usize, t0: usize, m: &Mat) {
        let (t_len, heads, x) = (self.shape[1], self.shape[2], self.shape[3]);
        for r in 0..m.rows {
            let off = ((b * t_len + t0 + r) * heads + h) * x;
            self.data[off..off + x].copy_from_slice(m.row(r));
        }
    }

    /// As [`Tensor::set_bthx_slice`], but adds the matrix in (GVA: the value heads of one group
    /// sum into their key head's dq and dk).
    pub fn add_bthx_slice(&mut self, b: usize, h: usize, t0: usize, m: &Mat) {
        let (t_len, heads, x) = (self.shape[1], self.shape[2], self.shape[3]);
        for r in 0..m.rows {
            let off = ((b * t_len + t0 + r) * heads + h) * x;
            self.data[off..off + x].iter_mut().zip(m.row(r)).for_each(|(d, s)| *d += s);
        }
    }

    /// For a `[B, T, H]` tensor (scalar per token and head): rows `t0..t1` as a `[t1-t0, 1]` matrix.
    pub fn bth_slice(&self, b: usize, h: usize, t0: usize, t1: usize) -> Mat {
        let (t_len, heads) = (self.shape[1], self.shape[2]);
        Mat::from_vec(t1 - t0, 1, (t0..t1).map(|t| self.data[(b * t_len + t) * heads + h]).collect())
    }

    /// Inverse of [`Tensor::bth_slice`].
    pub fn set_bth_slice(&mut self, b: usize, h: usize, t0: usize, m: &Mat) {
        let (t_len, heads) = (self.shape[1], self.shape[2]);
        for r in 0..m.rows {
            self.data[(b * t_len + t0 + r) * heads + h] = m.data[r];
        }
    }

    /// For a `[N, H, K, V]` state tensor: the `[K, V]` matrix of sequence `n`, head `h`.
    pub fn state(&self, n: usize, h: usize) -> Mat {
        let (heads, k, v) = (self.shape[1], self.shape[2], self.shape[3]);
        let off = (n * heads + h) * k * v;
        Mat::from_vec(k, v, self.data[off..off + k * v].to_vec())
    }

    /// Inverse of [`Tensor::state`].
    pub fn set_state(&mut self, n: usize, h: usize, m: &Mat) {
        let (heads, k, v) = (self.shape[1], self.shape[2], self.shape[3]);
        let off = (n * heads + h) * k * v;
        self.data[off..off + k * v].copy_from_slice(&m.data);
    }
}
