//! glassbox-lab's integration tests (the queue, and the flow from proposal to ledger), in one
//! test binary.

mod debugging;
mod evals;
mod flow;
mod live;
mod queue;
mod research;
mod sequencing;
mod trained;
