//! External-process candidates (see `docs/candidate-protocol.md`). Filled in below.
