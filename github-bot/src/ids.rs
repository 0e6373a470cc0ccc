//! Newtypes for the GitHub identifiers the bot handles, so that an issue number can never be
//! passed where a comment id is expected.
//!
//! These are plain values with `Display`; they do not talk to GitHub and do not validate that
//! the thing they name exists.

use std::fmt;

use serde::{Deserialize, Serialize};

macro_rules! number_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

number_id!(
    /// An issue's number within its repository (`#12`).
    IssueNumber
);
number_id!(
    /// A comment's id (repository-wide, as in `/issues/comments/{id}`).
    CommentId
);
number_id!(
    /// A GitHub App installation's id: `installation.id` in the webhooks delivered to an App.
    InstallationId
);

/// A GitHub login. Compared case-insensitively, as GitHub does.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Login(pub String);

impl Login {
    /// Wraps a login.
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }

    /// The login as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl PartialEq for Login {
    fn eq(&self, other: &Self) -> bool {
        self.0.eq_ignore_ascii_case(&other.0)
    }
}

impl Eq for Login {}

impl std::hash::Hash for Login {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_ascii_lowercase().hash(state);
    }
}

impl fmt::Display for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The value of the `X-GitHub-Delivery` header: GitHub's id for one delivery attempt of one
/// event. Redeliveries keep the id, which is what makes de-duplication possible.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct DeliveryId(pub String);

impl From<&str> for DeliveryId {
    fn from(s: &str) -> Self {
        Self(s.to_string())
    }
}

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A repository, `owner/name`. In configuration and JSON it is the string `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct RepoName {
    /// The owning user or organisation.
    pub owner: String,
    /// The repository's name.
    pub name: String,
}

impl RepoName {
    /// Splits `owner/name`; `None` when there is not exactly one slash or a part is empty.
    pub fn parse(full: &str) -> Option<Self> {
        let (owner, name) = full.split_once('/')?;
        if owner.is_empty() || name.is_empty() || name.contains('/') {
            return None;
        }
        Some(Self {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }
}

impl RepoName {
    /// Whether `other` names the same repository (GitHub compares names case-insensitively).
    pub fn same_as(&self, other: &RepoName) -> bool {
        self.owner.eq_ignore_ascii_case(&other.owner) && self.name.eq_ignore_ascii_case(&other.name)
    }
}

impl TryFrom<String> for RepoName {
    type Error = String;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s).ok_or_else(|| {
            format!("{s:?} is not a repository; expected \"owner/name\" (one slash, no empty part)")
        })
    }
}

impl From<RepoName> for String {
    fn from(r: RepoName) -> Self {
        r.to_string()
    }
}

impl fmt::Display for RepoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// One issue: the repository and the number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct IssueKey {
    /// Its repository.
    pub repo: RepoName,
    /// Its number.
    pub number: IssueNumber,
}

impl fmt::Display for IssueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}#{}", self.repo, self.number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_compare_case_insensitively() {
        assert_eq!(Login::new("Octocat"), Login::new("octocat"));
        assert_ne!(Login::new("octocat"), Login::new("octodog"));
    }

    #[test]
    fn repo_names_parse_strictly() {
        let r = RepoName::parse("glassbox-lab/glassbox").unwrap();
        assert_eq!(r.to_string(), "glassbox-lab/glassbox");
        assert!(RepoName::parse("noslash").is_none());
        assert!(RepoName::parse("a/b/c").is_none());
        assert!(RepoName::parse("/b").is_none());
        assert!(
            RepoName::parse("Glassbox-Lab/GlassBox")
                .unwrap()
                .same_as(&r)
        );
        let from_toml: Vec<RepoName> =
            serde_json::from_str(r#"["glassbox-lab/glassbox"]"#).unwrap();
        assert_eq!(from_toml, vec![r]);
        let err = serde_json::from_str::<RepoName>(r#""noslash""#).unwrap_err();
        assert!(
            err.to_string().contains("\"noslash\" is not a repository"),
            "{err}"
        );
    }
}
