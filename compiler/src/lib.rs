//! tilec: a compiler for a small tile DSL.
