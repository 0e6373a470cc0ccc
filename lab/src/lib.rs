//! glassbox-lab
