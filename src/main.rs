//! glassbox CLI.
fn main() {}
