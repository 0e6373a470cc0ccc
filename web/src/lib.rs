//! glassbox-web: the public dashboard, JSON API, live metrics and the log's static read API
//! (issue 8), served by `glassbox serve`.
//!
//! Not built yet: this crate holds no code so far, and nothing depends on it. It will know the
//! lab (and through it the ledger) but never write to either; its only write route will be the
//! signed GitHub webhook, mounted from `glassbox-github-bot`.
