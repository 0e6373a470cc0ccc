//! The dashboard's own section of a server's configuration (`[web]`): where it listens, its
//! public URL and the listener's limits, every bad value named with its key.
//!
//! Not here: reading the file (the binary) or the other sections (the lab's and the bot's).

use std::net::SocketAddr;
use std::time::Duration;

use crate::listener::ServerLimits;

/// The `[web]` section.
#[derive(Debug, Default, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebConfig {
    /// Listen address.
    pub bind: Option<SocketAddr>,
    /// The public base URL (links in comments, proof URLs).
    pub public_url: Option<String>,
    /// Seconds a request's head may take to arrive [default 10].
    pub header_read_timeout_seconds: Option<f64>,
    /// Seconds a request's whole body may take to arrive [default 30].
    pub body_read_timeout_seconds: Option<f64>,
    /// Connections served at once; more wait to be accepted [default 1024].
    pub max_connections: Option<usize>,
    /// Seconds requests in flight get to finish at shutdown [default 3].
    pub shutdown_grace_seconds: Option<f64>,
}

impl WebConfig {
    /// The listener's limits: the defaults of [`ServerLimits`] where the section names none;
    /// every bad value named with its key.
    pub fn server_limits(&self) -> Result<ServerLimits, Vec<String>> {
        let mut limits = ServerLimits::default();
        let mut problems = Vec::new();
        let mut seconds = |key: &str, v: Option<f64>, max: f64, out: &mut Duration| {
            let Some(v) = v else { return };
            if v.is_finite() && v > 0.0 && v <= max {
                *out = Duration::from_secs_f64(v);
            } else {
                problems.push(format!(
                    "web.{key} = {v}: expected a number of seconds above 0 and at most {max}"
                ));
            }
        };
        seconds(
            "header_read_timeout_seconds",
            self.header_read_timeout_seconds,
            3600.0,
            &mut limits.header_read_timeout,
        );
        seconds(
            "body_read_timeout_seconds",
            self.body_read_timeout_seconds,
            3600.0,
            &mut limits.body_read_timeout,
        );
        seconds(
            "shutdown_grace_seconds",
            self.shutdown_grace_seconds,
            600.0,
            &mut limits.shutdown_grace,
        );
        match self.max_connections {
            None => {}
            Some(n) if (1..=1_000_000).contains(&n) => limits.max_connections = n,
            Some(n) => problems.push(format!(
                "web.max_connections = {n}: expected 1 to 1000000 connections"
            )),
        }
        if problems.is_empty() {
            Ok(limits)
        } else {
            Err(problems)
        }
    }
}

impl WebConfig {
    /// The `[web]` table of a configuration file, checked: every problem named with its key.
    pub fn from_section(section: toml::Value) -> Result<WebConfig, Vec<String>> {
        let web: WebConfig = section
            .try_into()
            .map_err(|e: toml::de::Error| vec![format!("web: {}", e.message().trim())])?;
        web.server_limits()?;
        Ok(web)
    }
}
