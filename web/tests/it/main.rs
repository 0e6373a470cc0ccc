//! glassbox-web's integration tests (routes through `app` with `oneshot`, the real browser), in
//! one test binary.

mod fixture;

mod annotations;
mod boards;
mod browser;
mod charts;
mod data_browser;
mod evals;
mod live_samples;
mod observatory;
mod routes;
mod search;
