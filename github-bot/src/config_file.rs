//! The bot's section of a server's configuration file (`[github]`), read into a checked
//! [`BotConfig`]: its secrets resolved from the environment or from files, since secrets never
//! live in the file itself.
//!
//! Not here: the configuration's shape ([`crate::config`]), which reads no files and no
//! environment.

use crate::config::BotConfig;

/// The `[github]` table of a configuration file as a checked [`BotConfig`], its secrets
/// resolved; every problem named with its key.
pub fn from_section(section: toml::Value) -> Result<BotConfig, Vec<String>> {
    let resolved = resolve_secrets(section)?;
    let config: BotConfig = resolved
        .try_into()
        .map_err(|e: toml::de::Error| vec![format!("github: {}", e.message().trim())])?;
    config.validate().map_err(|e| vec![e.to_string()])?;
    Ok(config)
}

/// Secrets never live in the config file: `webhook_secrets_env = ["VAR", ...]` /
/// `webhook_secrets_file = "PATH"` (one per line) and, under `[github.auth]`, `token_env`,
/// `private_key_file` are read here into the fields the bot expects. An empty secret is an
/// error in every form (an unset or empty variable, a file with no secret in it, `""` inline:
/// that one is refused by `BotConfig::validate`), since HMAC accepts an empty key.
fn resolve_secrets(mut gh: toml::Value) -> Result<toml::Value, Vec<String>> {
    let mut problems = Vec::new();
    let Some(t) = gh.as_table_mut() else {
        return Err(vec!["github: must be a table ([github])".into()]);
    };
    let env_secret = |key: &str, name: &str, problems: &mut Vec<String>| match std::env::var(name) {
        Ok(s) if !s.trim().is_empty() => Some(s),
        Ok(_) => {
            problems.push(format!(
                "github.{key}: environment variable {name} is empty; set it to the secret"
            ));
            None
        }
        Err(_) => {
            problems.push(format!(
                "github.{key}: environment variable {name} is not set"
            ));
            None
        }
    };
    let mut secrets: Vec<String> = Vec::new();
    if let Some(v) = t.remove("webhook_secrets_env") {
        match v.as_array() {
            Some(names) => {
                for n in names {
                    match n.as_str() {
                        Some(name) => secrets.extend(env_secret(
                            "webhook_secrets_env",
                            name,
                            &mut problems,
                        )),
                        None => problems.push(format!(
                            "github.webhook_secrets_env: {n} is not a variable name; expected [\"VAR\", ...]"
                        )),
                    }
                }
            }
            None => problems.push(format!(
                "github.webhook_secrets_env = {v}: expected a list of variable names, [\"VAR\", ...]"
            )),
        }
    }
    if let Some(v) = t.remove("webhook_secrets_file") {
        let path = v.as_str().unwrap_or_default().to_string();
        match std::fs::read_to_string(&path) {
            Ok(s) => {
                let found: Vec<String> = s
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(String::from)
                    .collect();
                if found.is_empty() {
                    problems.push(format!(
                        "github.webhook_secrets_file = {path:?}: holds no secret (one per line; blank lines are skipped)"
                    ));
                }
                secrets.extend(found);
            }
            Err(e) => problems.push(format!("github.webhook_secrets_file = {path:?}: {e}")),
        }
    }
    if !secrets.is_empty() {
        let list = t
            .entry("webhook_secrets")
            .or_insert_with(|| toml::Value::Array(Vec::new()));
        if let Some(a) = list.as_array_mut() {
            a.extend(secrets.into_iter().map(toml::Value::String));
        }
    }
    if let Some(auth) = t.get_mut("auth").and_then(|a| a.as_table_mut()) {
        if let Some(v) = auth.remove("token_env") {
            let name = v.as_str().unwrap_or_default().to_string();
            if let Some(s) = env_secret("auth.token_env", &name, &mut problems) {
                auth.insert("token".into(), toml::Value::String(s));
            }
        }
        if let Some(v) = auth.remove("private_key_file") {
            let path = v.as_str().unwrap_or_default().to_string();
            match std::fs::read_to_string(&path) {
                Ok(s) if s.trim().is_empty() => problems.push(format!(
                    "github.auth.private_key_file = {path:?}: the file is empty; expected the App's PEM key"
                )),
                Ok(s) => {
                    auth.insert("private_key_pem".into(), toml::Value::String(s));
                }
                Err(e) => problems.push(format!("github.auth.private_key_file = {path:?}: {e}")),
            }
        }
    }
    if problems.is_empty() {
        Ok(gh)
    } else {
        Err(problems)
    }
}
