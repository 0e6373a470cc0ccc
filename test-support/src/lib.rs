//! What glassbox's tests share: the PostgreSQL server `cargo xtask test` provides
//! (`GLASSBOX_TEST_POSTGRES_URL`) and an empty schema of each test's own on it, so tests run in
//! parallel without seeing each other's tables. A test that needs PostgreSQL fails, never
//! skips, without the server, and says how to get one.
//!
//! [`lab`] holds the pieces of the small labs tests build by appending ledger entries.
//!
//! Not here: providing the server (`xtask`) or any test's own fixtures.

pub mod lab;

/// How to get a server, for the message when there is none.
const NO_SERVER: &str = "GLASSBOX_TEST_POSTGRES_URL is not set: run the tests with `cargo xtask test`, which provides a PostgreSQL server (`cargo xtask env` prints the variables for running one test by hand)";

/// The test server's URL.
///
/// # Panics
/// When `GLASSBOX_TEST_POSTGRES_URL` is not set, saying how to get a server.
pub fn postgres_url() -> String {
    std::env::var("GLASSBOX_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .expect(NO_SERVER)
}

/// An empty schema of one test's own on the test server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSchema {
    /// A URL whose connections use the schema (`search_path`) and carry its name as their
    /// `application_name`.
    pub url: String,
    /// The schema's name: `<suite>_<test>_<process id>`.
    pub name: String,
}

/// A fresh schema for test `test` of suite `suite` (a schema of that name left by an earlier run
/// is dropped first).
///
/// # Panics
/// When there is no server, or it refuses the schema.
pub async fn postgres_schema(suite: &str, test: &str) -> PgSchema {
    let base = postgres_url();
    let name = format!("{suite}_{test}_{}", std::process::id());
    sqlx::any::install_default_drivers();
    let admin = sqlx::AnyPool::connect(&base)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL at {base} is required: {e}"));
    for ddl in [
        format!("DROP SCHEMA IF EXISTS {name} CASCADE"),
        format!("CREATE SCHEMA {name}"),
    ] {
        sqlx::query(&ddl)
            .execute(&admin)
            .await
            .unwrap_or_else(|e| panic!("{ddl} on {base}: {e}"));
    }
    admin.close().await;
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}options=-c%20search_path%3D{name}&application_name={name}");
    PgSchema { url, name }
}

/// [`postgres_schema`] from a test without an async runtime.
pub fn postgres_schema_blocking(suite: &str, test: &str) -> PgSchema {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime for the schema's set-up")
        .block_on(postgres_schema(suite, test))
}

impl PgSchema {
    /// Drops the schema and everything in it.
    pub async fn drop_schema(self) {
        let admin = sqlx::AnyPool::connect(&postgres_url())
            .await
            .expect("the test server");
        sqlx::query(&format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name))
            .execute(&admin)
            .await
            .expect("DROP SCHEMA");
        admin.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_schema_is_empty_and_its_own() {
        let a = postgres_schema("support", "a").await;
        let b = postgres_schema("support", "b").await;
        assert_ne!(a.name, b.name);
        let pool = sqlx::AnyPool::connect(&a.url).await.unwrap();
        sqlx::query("CREATE TABLE t (x BIGINT)")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let other = sqlx::AnyPool::connect(&b.url).await.unwrap();
        let seen = sqlx::query("SELECT x FROM t").fetch_all(&other).await;
        assert!(seen.is_err(), "schema b sees schema a's table");
        other.close().await;
        a.drop_schema().await;
        b.drop_schema().await;
    }
}
