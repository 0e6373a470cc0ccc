//! glassbox-schemas' integration tests (validation and hashing, data-driven), in one test binary.

mod hashing;
mod validation;
