//! glassbox-ledger
