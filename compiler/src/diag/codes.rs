//! Stable diagnostic codes. Codes are never reused; `docs/language.md` lists them.

/// A stable diagnostic code.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// E0001: a character that starts no token.
    LexInvalidToken,
    /// E0002: an integer or float literal out of range.
    LexBadNumber,
    /// E0101: a token the grammar does not expect here.
    ParseUnexpected,
    /// E0102: the file ends inside a construct.
    ParseEof,
    /// E0103: expressions or loops nested deeper than the front end's limit.
    TooDeep,
    /// E0201: a name that is not defined.
    UndefinedName,
    /// E0202: a name defined twice in one scope.
    DuplicateName,
    /// E0203: wrong kind of name (e.g. a tensor used as a value).
    WrongKind,
    /// E0204: assignment to an immutable binding.
    AssignImmutable,
    /// E0205: a constant expression that cannot be evaluated (division by zero, overflow, symbol).
    BadConst,
    /// E0206: an `import` that cannot be followed (unreadable, a cycle, a clash, or the imported
    /// file does not compile).
    BadImport,
    /// E0207: a size parameter set (`--const`) to a value outside its `in {...}` set, `--const` on a
    /// constant that has no set, or a malformed set.
    UnsupportedSize,
    /// E0301: element types do not match.
    TypeMismatch,
    /// E0302: tile shapes do not match or cannot broadcast.
    ShapeMismatch,
    /// E0303: wrong number or kind of arguments to a builtin.
    BadArguments,
    /// E0304: wrong number of indices for a tensor, or a bad index.
    BadIndex,
    /// E0305: an operation not allowed in this memory space.
    BadSpace,
    /// E0306: an unknown builtin function.
    UnknownFunction,
    /// E0307: a tile dimension that is not a positive compile-time constant.
    BadTileShape,
    /// E0308: an `out` parameter the kernel never stores to.
    OutNeverStored,
    /// E0309: an operator's dataflow is wrong: a buffer read before a launch writes it, an input
    /// written, an output never written.
    OperatorDataflow,
    /// E0401: an MMA shape that is illegal for the target.
    IllegalMmaShape,
    /// E0402: TMEM over budget (co-live buffers need more than 512 columns).
    TmemOverBudget,
    /// E0403: a TMEM buffer shape that cannot be placed (lanes other than 64/128, ...).
    BadTmemBuffer,
    /// E0404: a kernel-level resource limit (threads per CTA, grid rank, ...).
    BadLaunch,
    /// E0405: shared memory over budget (the planned buffers exceed the target's bytes per CTA).
    SmemOverBudget,
    /// E0406: registers over budget: a declared residency (`ctas_per_sm`) leaves fewer
    /// registers per thread than a register accumulator holds.
    RegistersOverBudget,
    /// E0601: the interpreter stopped at a statement (division by zero, read before write,
    /// the time limit, ...).
    InterpRuntime,
    /// E0900: an internal compiler error (lowering produced IR the validator rejects).
    Internal,
    /// W0501: a TMEM buffer written but never read.
    TmemWriteOnly,
    /// W0502: a loaded tile that is never used.
    UnusedLoad,
    /// W0504: a `let` binding that is never used (W0503 was retired and is not reused).
    UnusedLet,
    /// W0505: a declared residency (`ctas_per_sm`) leaves a loop's copies unpipelined that the
    /// kernel would pipeline without it.
    ResidencyDropsRing,
}

impl Code {
    /// The code as printed (`E0402`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::LexInvalidToken => "E0001",
            Code::LexBadNumber => "E0002",
            Code::ParseUnexpected => "E0101",
            Code::ParseEof => "E0102",
            Code::TooDeep => "E0103",
            Code::UndefinedName => "E0201",
            Code::DuplicateName => "E0202",
            Code::WrongKind => "E0203",
            Code::AssignImmutable => "E0204",
            Code::BadConst => "E0205",
            Code::BadImport => "E0206",
            Code::UnsupportedSize => "E0207",
            Code::TypeMismatch => "E0301",
            Code::ShapeMismatch => "E0302",
            Code::BadArguments => "E0303",
            Code::BadIndex => "E0304",
            Code::BadSpace => "E0305",
            Code::UnknownFunction => "E0306",
            Code::BadTileShape => "E0307",
            Code::OutNeverStored => "E0308",
            Code::OperatorDataflow => "E0309",
            Code::IllegalMmaShape => "E0401",
            Code::TmemOverBudget => "E0402",
            Code::BadTmemBuffer => "E0403",
            Code::BadLaunch => "E0404",
            Code::SmemOverBudget => "E0405",
            Code::RegistersOverBudget => "E0406",
            Code::InterpRuntime => "E0601",
            Code::Internal => "E0900",
            Code::TmemWriteOnly => "W0501",
            Code::UnusedLoad => "W0502",
            Code::UnusedLet => "W0504",
            Code::ResidencyDropsRing => "W0505",
        }
    }
}
