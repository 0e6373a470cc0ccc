//! [`SpecCache`]: specs flattened to dotted paths (`model.moe.n_experts` → `"8"`), by the hash
//! of their blob, so that a page comparing or plotting fifty runs does not read and parse fifty
//! spec files on every request (the experiments list draws a search result's parallel
//! coordinates, and every search asks for them).
//!
//! A blob is content-addressed: the text behind a hash never changes, so an entry is never
//! stale. Bounded by entries ([`DEFAULT_MAX_SPECS`]), least recently used evicted first
//! (`hashlink`'s `LruCache`); a spec that could not be read is not kept (its blob may arrive
//! later). This module knows nothing of HTTP or of where blobs live.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// How many flattened specs the server keeps (a spec is some tens of short strings).
pub const DEFAULT_MAX_SPECS: usize = 4096;

/// A spec as dotted path → scalar text.
pub type FlatSpec = Arc<BTreeMap<String, String>>;

/// Flattened specs by blob hash.
#[derive(Debug)]
pub struct SpecCache {
    inner: Mutex<hashlink::LruCache<String, FlatSpec>>,
}

impl SpecCache {
    /// An empty cache of at most `max` specs.
    pub fn new(max: usize) -> Self {
        SpecCache {
            inner: Mutex::new(hashlink::LruCache::new(max.max(1))),
        }
    }

    /// The spec of blob `hash`, if kept.
    pub fn get(&self, hash: &str) -> Option<FlatSpec> {
        self.lock().get(hash).cloned()
    }

    /// Keeps the spec of blob `hash`.
    pub fn put(&self, hash: &str, spec: FlatSpec) {
        self.lock().insert(hash.to_string(), spec);
    }

    /// How many specs are kept.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, hashlink::LruCache<String, FlatSpec>> {
        // A panic while holding the lock cannot leave the map half-updated in a way that
        // matters (each call is one map operation).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: &str) -> FlatSpec {
        Arc::new(BTreeMap::from([("a".to_string(), v.to_string())]))
    }

    #[test]
    fn keeps_at_most_max_and_evicts_the_least_recently_used() {
        let c = SpecCache::new(2);
        c.put("h1", spec("1"));
        c.put("h2", spec("2"));
        assert_eq!(c.get("h1").unwrap()["a"], "1"); // h1 is now the most recent
        c.put("h3", spec("3"));
        assert_eq!(c.len(), 2);
        assert!(c.get("h2").is_none(), "the least recently used went");
        assert_eq!(c.get("h1").unwrap()["a"], "1");
        assert_eq!(c.get("h3").unwrap()["a"], "3");
    }
}
