//! Subcommands of the `tilec` binary, one file each.
#![allow(clippy::print_stdout, clippy::print_stderr)] // the subcommands talk to the user

pub mod check;
pub mod build;
pub mod verify;
pub mod run;
pub mod inputs;

use clap::{Args, ValueEnum};

use crate::ir::Kernel;
use crate::target::Target;

/// `--const NAME=VALUE`: this build's values of size parameters (`const K = 128 in {64, 128};`),
/// shared by every subcommand that reads a `.tile` file (the shapes depend on them).
#[derive(Args, Debug, Clone, Default)]
pub struct ConstArgs {
    /// Set a size parameter, e.g. `--const K=64` or `--const K=64,V=256` (repeatable): every
    /// file of the import graph that declares it uses the value, which must be one of its
    /// declared sizes (E0207).
    #[arg(long = "const", value_name = "NAME=VALUE", value_parser = run::parse_size, value_delimiter = ',')]
    pub consts: Vec<(String, i64)>,
}

impl ConstArgs {
    /// The values as front-end options take them.
    ///
    /// # Errors
    /// A name given twice with different values (the last one would silently win).
    pub fn values(&self) -> Result<std::collections::BTreeMap<String, i64>, String> {
        let mut out = std::collections::BTreeMap::new();
        for (n, v) in &self.consts {
            if let Some(prev) = out.insert(n.clone(), *v) {
                if prev != *v {
                    return Err(format!("`--const {n}` is given twice, as {prev} and {v}: a build has one value per size parameter (build twice, into two folders, for two sizes)"));
                }
            }
        }
        Ok(out)
    }

    /// [`ConstArgs::values`], or `None` after printing the error (the caller exits 2: a usage
    /// error).
    pub fn values_or_report(&self) -> Option<std::collections::BTreeMap<String, i64>> {
        self.values().map_err(|e| eprintln!("error: {e}")).ok()
    }
}

/// `--target` values.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum TargetArg {
    /// Blackwell (tcgen05, tensor memory).
    #[value(name = "sm_100a")]
    Sm100a,
    /// Hopper (wgmma, TMA; runs on the H200).
    #[value(name = "sm_90a")]
    Sm90a,
    /// Both.
    All,
}

impl TargetArg {
    /// The targets this value selects, in build order.
    pub fn targets(self) -> Vec<Target> {
        match self {
            TargetArg::Sm100a => vec![Target::Sm100a],
            TargetArg::Sm90a => vec![Target::Sm90a],
            TargetArg::All => Target::ALL.to_vec(),
        }
    }
}

/// The kernel named `wanted`, or the only kernel when none is named; otherwise prints why not
/// (with the kernels the file has) and returns `None`.
pub(crate) fn select_kernel<'k>(kernels: &'k [Kernel], wanted: Option<&str>, file: &str) -> Option<&'k Kernel> {
    let found = match (wanted, kernels) {
        (Some(k), _) => kernels.iter().find(|x| x.name == k),
        (None, [only]) => Some(only),
        (None, _) => None,
    };
    if found.is_none() {
        let names: Vec<&str> = kernels.iter().map(|k| k.name.as_str()).collect();
        match wanted {
            Some(k) => eprintln!("error: no kernel `{k}` in {file} (it has: {})", names.join(", ")),
            None => eprintln!("error: {file} has {} kernels ({}); choose one with --kernel", names.len(), names.join(", ")),
        }
    }
    found
}
