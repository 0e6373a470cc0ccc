//! glassbox-runner
