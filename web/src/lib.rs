//! glassbox-web
