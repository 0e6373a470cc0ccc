//! [`RenderCache`]: rendered HTML kept between requests, so a page whose data has not changed
//! is sent again instead of drawn again (an experiment page draws several SVG charts).
//!
//! Each entry carries the [`Stamp`] it was rendered at: the index position of the last entry
//! about what the page shows, and the live hub's version of the run it draws. The caller
//! serves an entry only while both are what it would render now (`pages::experiment`).
//!
//! Memory is bounded: bodies and keys take at most `max_bytes` together ([`DEFAULT_MAX_BYTES`],
//! 64 MiB, in the server); storing past that evicts the least recently used entries first, and
//! a body larger than an eighth of the cap is not kept. This module knows nothing of HTML, SQL
//! or HTTP: it maps string keys to bytes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;

/// The server's cap on cached bodies and keys, in bytes.
pub const DEFAULT_MAX_BYTES: usize = 64 * 1024 * 1024;

/// What a rendering depended on that can change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The last entry about what the page shows (the catalog's `touched`) when it was drawn.
    pub indexed: u64,
    /// The live hub's version of the run drawn (`None`: the hub holds nothing of it).
    pub live: Option<u64>,
}

/// Rendered bodies by key, least recently used evicted first.
#[derive(Debug)]
pub struct RenderCache {
    max_bytes: usize,
    inner: Mutex<Lru>,
    hits: AtomicU64,
    misses: AtomicU64,
}

#[derive(Debug, Default)]
struct Lru {
    entries: HashMap<String, Slot>,
    /// Last use -> key; the first is the least recently used.
    order: BTreeMap<u64, String>,
    bytes: usize,
    clock: u64,
}

#[derive(Debug)]
struct Slot {
    body: Bytes,
    stamp: Stamp,
    used: u64,
}

impl Lru {
    fn touch(&mut self, key: &str) {
        self.clock += 1;
        let now = self.clock;
        if let Some(slot) = self.entries.get_mut(key) {
            self.order.remove(&slot.used);
            slot.used = now;
            self.order.insert(now, key.to_string());
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(slot) = self.entries.remove(key) {
            self.order.remove(&slot.used);
            self.bytes -= slot.body.len() + key.len();
        }
    }
}

impl RenderCache {
    /// An empty cache holding at most `max_bytes` of bodies and keys.
    pub fn new(max_bytes: usize) -> Self {
        RenderCache {
            max_bytes,
            inner: Mutex::new(Lru::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lru> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The body stored under `key` and its stamp; marks it recently used.
    pub fn get(&self, key: &str) -> Option<(Bytes, Stamp)> {
        let mut lru = self.lock();
        let found = lru.entries.get(key).map(|s| (s.body.clone(), s.stamp));
        if found.is_some() {
            lru.touch(key);
        }
        found
    }

    /// Stores `body` under `key` (replacing any entry), evicting the least recently used
    /// entries past the cap. A body over an eighth of the cap is not stored.
    pub fn put(&self, key: String, body: Bytes, stamp: Stamp) {
        let size = body.len() + key.len();
        let mut lru = self.lock();
        lru.remove(&key);
        if size > self.max_bytes / 8 {
            return;
        }
        while lru.bytes + size > self.max_bytes {
            let Some((_, oldest)) = lru.order.pop_first() else {
                break;
            };
            if let Some(slot) = lru.entries.remove(&oldest) {
                lru.bytes -= slot.body.len() + oldest.len();
            }
        }
        lru.clock += 1;
        let used = lru.clock;
        lru.order.insert(used, key.clone());
        lru.bytes += size;
        lru.entries.insert(key, Slot { body, stamp, used });
    }

    /// Counts a request answered from the cache (`hit`) or rendered.
    pub fn count(&self, hit: bool) {
        let c = if hit { &self.hits } else { &self.misses };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests answered from the cache and rendered, since the start.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }

    /// Entries held and their bytes (bodies and keys).
    pub fn size(&self) -> (usize, usize) {
        let lru = self.lock();
        (lru.entries.len(), lru.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Stamp = Stamp {
        indexed: 1,
        live: None,
    };

    fn body(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    #[test]
    fn least_recently_used_goes_first_and_the_cap_holds() {
        // Keys are one byte: entries of 100 bytes take 101.
        let c = RenderCache::new(1000);
        for k in ["a", "b", "c"] {
            c.put(k.into(), body(100), S);
        }
        assert!(c.get("a").is_some()); // b is now the least recently used
        for k in ["d", "e", "f", "g", "h", "i", "j"] {
            c.put(k.into(), body(100), S);
        }
        let (n, bytes) = c.size();
        assert_eq!((n, bytes), (9, 909));
        assert!(c.get("b").is_none(), "b was evicted first");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        // Replacing an entry does not count it twice.
        c.put("a".into(), body(50), S);
        assert_eq!(c.size(), (9, 859));
    }

    #[test]
    fn oversized_bodies_are_not_kept() {
        let c = RenderCache::new(800);
        c.put("big".into(), body(101), S);
        assert!(c.get("big").is_none());
        c.put("k".into(), body(10), S);
        assert_eq!(c.get("k").map(|e| e.1), Some(S));
    }
}
