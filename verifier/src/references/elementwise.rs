//! Elementwise operator classes y[R,N] = f(x[R,N]): clamp (to [-1, 1]), relu, exp, exp2, log,
//! logsigmoid, sigmoid, tanh, gelu (tanh form), silu, softplus. NaN propagates through every
//! one (clamp and relu included, as in PyTorch).
//!
//! Each is evaluated the way a careful kernel does it: sigmoid as 1/(1 + e^-x) for x >= 0 and
//! e^x/(1 + e^x) below (no overflow of e^-x), logsigmoid as min(x, 0) - log1p(e^-|x|), softplus
//! as max(x, 0) + log1p(e^-|x|).
//!
//! Profiles (forward; a transcendental function evaluated within 4 ulp, i.e. 8u relative, as
//! the libm and NumPy implementations are; constants rounded up):
//! * clamp, relu: exact (scale 0, depth 1).
//! * exp, exp2, log, tanh: scale |y|, depth 8.
//! * sigmoid: e (8u), 1 + e (u), the quotient (u): scale |y|, depth 10.
//! * logsigmoid, softplus: l = log1p(e) carries 16u l (e's 8u passes through log1p with a factor
//!   e/((1 + e) log1p(e)) <= 1), the sum with min/max(x, 0) one more: scale |y| (>= l), depth 18.
//! * silu: z times the sigmoid: scale |y|, depth 12.
//! * gelu: 0.5 z (1 + t) with t = tanh(k (z + a z^3)); 1 + t cancels for z << 0, so the error is
//!   absolute in |z|: u (1 + |t|) from the sum, 8u |t| from tanh, and t's inner argument error
//!   (<= 3u |w| sech^2 w <= 1.4u): scale 6 |z| + |y|, depth 12.
//!
//! Backward dx = g f'(x) (each checked against central finite differences in
//! `tests/backward_gradcheck.rs`): clamp g on [-1, 1] (PyTorch's inclusive mask), relu g for
//! x > 0, exp g y, exp2 g y ln 2, log g / x, sigmoid g s (1 - s), logsigmoid g s(-x), tanh
//! g (1 - y^2), gelu and silu as in `linear_bwd::act_deriv`, softplus g s(x). Profiles: exact
//! for clamp and relu; |dx| with depth 9 (exp), 10 (exp2), 2 (log), 11 (logsigmoid, softplus:
//! a sigmoid and a product); sigmoid |g| s (1 - s) cancels where s rounds to 1: the absolute
//! error of 1 - s is <= 10u s + u (1 - s), so scale |g| s, depth 14; tanh likewise scale
//! |g| (|1 - y^2| + 2 y^2), depth 12; gelu and silu |g| T(z) with gemm_bias_act's T (depth 12).

use super::linear::Act;
use super::linear_bwd::act_deriv;
use super::{c, Backward, DimKind, DimSpec, Dims, InputSpec, Op};
use crate::error_model::ErrorProfile;
use num_traits::Float;
use std::sync::Arc;

/// One elementwise function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ew {
    /// min(max(x, -1), 1).
    Clamp,
    /// max(x, 0).
    Relu,
    /// e^x.
    Exp,
    /// 2^x.
    Exp2,
    /// ln x (NaN below 0, -inf at 0).
    Log,
    /// ln sigmoid(x).
    LogSigmoid,
    /// 1 / (1 + e^-x).
    Sigmoid,
    /// tanh x.
    Tanh,
    /// GELU, tanh form.
    Gelu,
    /// x sigmoid(x).
    Silu,
    /// ln(1 + e^x).
    Softplus,
}

/// Every elementwise class, in registry order.
pub const ALL: [Ew; 11] = [Ew::Clamp, Ew::Relu, Ew::Exp, Ew::Exp2, Ew::Log, Ew::LogSigmoid, Ew::Sigmoid, Ew::Tanh, Ew::Gelu, Ew::Silu, Ew::Softplus];

/// Sigmoid without overflow: 1/(1 + e^-x) for x >= 0, e^x/(1 + e^x) below (NaN stays NaN).
pub fn sigmoid<T: Float>(x: T) -> T {
    if x >= T::zero() {
        T::one() / (T::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (T::one() + e)
    }
}

fn nan_or<T: Float>(x: T, v: T) -> T {
    if x.is_nan() {
        x
    } else {
        v
    }
}

impl Ew {
    /// Class id.
    pub fn id(self) -> &'static str {
        match self {
            Ew::Clamp => "clamp",
            Ew::Relu => "relu",
            Ew::Exp => "exp",
            Ew::Exp2 => "exp2",
            Ew::Log => "log",
            Ew::LogSigmoid => "logsigmoid",
            Ew::Sigmoid => "sigmoid",
            Ew::Tanh => "tanh",
            Ew::Gelu => "gelu",
            Ew::Silu => "silu",
            Ew::Softplus => "softplus",
        }
    }

    /// f(x).
    pub fn f<T: Float>(self, x: T) -> T {
        let zero = T::zero();
        match self {
            Ew::Clamp => nan_or(x, x.max(-T::one()).min(T::one())),
            Ew::Relu => nan_or(x, x.max(zero)),
            Ew::Exp => x.exp(),
            Ew::Exp2 => x.exp2(),
            Ew::Log => x.ln(),
            Ew::LogSigmoid => nan_or(x, x.min(zero)) - (-x.abs()).exp().ln_1p(),
            Ew::Sigmoid => sigmoid(x),
            Ew::Tanh => x.tanh(),
            Ew::Gelu => {
                let inner = c::<T>(0.7978845608028654) * (x + c::<T>(0.044715) * x * x * x);
                c::<T>(0.5) * x * (T::one() + inner.tanh())
            }
            Ew::Silu => x * sigmoid(x),
            Ew::Softplus => nan_or(x, x.max(zero)) + (-x.abs()).exp().ln_1p(),
        }
    }

    /// f'(x).
    pub fn df<T: Float>(self, x: T) -> T {
        let (zero, one) = (T::zero(), T::one());
        match self {
            Ew::Clamp => nan_or(x, if x >= -one && x <= one { one } else { zero }),
            Ew::Relu => nan_or(x, if x > zero { one } else { zero }),
            Ew::Exp => x.exp(),
            Ew::Exp2 => x.exp2() * c::<T>(std::f64::consts::LN_2),
            Ew::Log => one / x,
            Ew::LogSigmoid => sigmoid(-x),
            Ew::Sigmoid => {
                let s = sigmoid(x);
                s * (one - s)
            }
            Ew::Tanh => {
                let y = x.tanh();
                one - y * y
            }
            Ew::Gelu => act_deriv(Act::Gelu, x),
            Ew::Silu => act_deriv(Act::Silu, x),
            Ew::Softplus => sigmoid(x),
        }
    }

    fn fwd_profile(self, x: f64, y: f64) -> (f64, usize) {
        match self {
            Ew::Clamp | Ew::Relu => (0.0, 1),
            Ew::Exp | Ew::Exp2 | Ew::Log | Ew::Tanh => (y.abs(), 8),
            Ew::Sigmoid => (y.abs(), 10),
            Ew::LogSigmoid | Ew::Softplus => (y.abs(), 18),
            Ew::Silu => (y.abs(), 12),
            Ew::Gelu => (6.0 * x.abs() + y.abs(), 12),
        }
    }

    fn bwd_profile(self, x: f64, g: f64, dx: f64) -> (f64, usize) {
        let t = |z: f64| 2.0 + 2.0 * z.abs() * (1.0 + 0.14 * z * z);
        match self {
            Ew::Clamp | Ew::Relu => (0.0, 1),
            Ew::Exp => (dx.abs(), 9),
            Ew::Exp2 => (dx.abs(), 10),
            Ew::Log => (dx.abs(), 2),
            Ew::LogSigmoid | Ew::Softplus => (dx.abs(), 11),
            Ew::Sigmoid => (g.abs() * sigmoid(x), 14),
            Ew::Tanh => {
                let y = x.tanh();
                (g.abs() * ((1.0 - y * y).abs() + 2.0 * y * y), 12)
            }
            Ew::Gelu => (g.abs() * t(x), 12),
            Ew::Silu => (g.abs() * (2.0 + 2.0 * x.abs()), 12),
        }
    }
}

fn profile_of(v: &[f64], w: &[f64], u: &[f64], pick: impl Fn(f64, f64, f64) -> (f64, usize)) -> Vec<ErrorProfile> {
    let mut depth = 1;
    let scale = (0..v.len())
        .map(|i| {
            let (s, d) = pick(v[i], w.get(i).copied().unwrap_or(0.0), u[i]);
            depth = depth.max(d);
            s
        })
        .collect();
    vec![ErrorProfile { depth, scale }]
}

/// The operator class of `ew` over x[R,N] (R a batch extent, N a free one).
pub fn op(ew: Ew) -> Op {
    Op {
        input_rule: None,
        wide_outputs: &[],
        id: ew.id(),
        summary: "y[R,N] = f(x[R,N]) elementwise",
        dims: vec![
            DimSpec { name: "R", native: 64, min: 1, max: 65536, kind: DimKind::Batch },
            DimSpec { name: "N", native: 256, min: 1, max: 16384, kind: DimKind::Free },
        ],
        constraint: |_: &Dims| Ok(()),
        inputs: vec![InputSpec { name: "x", shape: |d| vec![d.get("R"), d.get("N")], reduction_axis: None, data: true }],
        outputs: vec![|d| vec![d.get("R"), d.get("N")]],
        k64: Arc::new(move |_, x| vec![x[0].iter().map(|&v| ew.f(v)).collect()]),
        k32: Arc::new(move |_, x| vec![x[0].iter().map(|&v| ew.f(v)).collect()]),
        profile: Arc::new(move |_, x, outs| profile_of(x[0], &[], &outs[0], |xv, _, y| ew.fwd_profile(xv, y))),
        backward: Some(Backward {
            k64: Arc::new(move |_, x, g| vec![x[0].iter().zip(g[0]).map(|(&v, &gv)| gv * ew.df(v)).collect()]),
            k32: Arc::new(move |_, x, g| vec![x[0].iter().zip(g[0]).map(|(&v, &gv)| gv * ew.df(v)).collect()]),
            profile: Arc::new(move |_, x, g, outs| profile_of(x[0], g[0], &outs[0], |xv, gv, dx| ew.bwd_profile(xv, gv, dx))),
        }),
    }
}

/// Every elementwise class.
pub fn all() -> Vec<Op> {
    ALL.iter().map(|&e| op(e)).collect()
}
