//! glassbox-ledger's integration tests, one module per concern, in one test binary (CI links one
//! executable per crate).

mod fixture;

mod bucket;
mod crash;
mod index_db;
mod interop;
mod log_writer;
mod precedence;
mod proofs;
mod publish_git;
mod s3_moto;
mod store;
mod witness;
