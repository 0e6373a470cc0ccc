//! glassbox-schemas' integration tests (validation and hashing, data-driven), in one test binary.

mod entries;
mod hashing;
mod validation;
