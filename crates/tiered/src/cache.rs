//! A byte-bounded LRU cache (remote chunks, remote indexes).
//!
//! Entries carry a weight (their size in bytes); inserting evicts least-recently-used
//! entries until the total is within the limit. An entry bigger than the whole limit is
//! not cached at all.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

#[derive(Debug)]
struct Entry<V> {
    value: V,
    weight_bytes: u64,
    tick: u64,
}

#[derive(Debug)]
pub struct Lru<K, V> {
    capacity_bytes: u64,
    used_bytes: u64,
    tick: u64,
    map: HashMap<K, Entry<V>>,
    order: BTreeMap<u64, K>,
}

impl<K: Hash + Eq + Clone, V: Clone> Lru<K, V> {
    pub fn new(capacity_bytes: u64) -> Self {
        Lru {
            capacity_bytes,
            used_bytes: 0,
            tick: 0,
            map: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    pub fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.map.get_mut(key)?;
        self.order.remove(&e.tick);
        e.tick = tick;
        self.order.insert(tick, key.clone());
        Some(e.value.clone())
    }

    pub fn contains(&self, key: &K) -> bool {
        self.map.contains_key(key)
    }

    pub fn insert(&mut self, key: K, value: V, weight_bytes: u64) {
        self.remove(&key);
        if weight_bytes > self.capacity_bytes {
            return;
        }
        while self.used_bytes + weight_bytes > self.capacity_bytes {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            if let Some(e) = self.map.remove(&oldest) {
                self.used_bytes -= e.weight_bytes;
            }
        }
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.map.insert(
            key,
            Entry {
                value,
                weight_bytes,
                tick: self.tick,
            },
        );
        self.used_bytes += weight_bytes;
    }

    pub fn remove(&mut self, key: &K) -> Option<V> {
        let e = self.map.remove(key)?;
        self.order.remove(&e.tick);
        self.used_bytes -= e.weight_bytes;
        Some(e.value)
    }

    /// Drop every entry whose key matches (e.g. all chunks of a deleted segment).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        let drop: Vec<K> = self.map.keys().filter(|k| !keep(k)).cloned().collect();
        for k in drop {
            self.remove(&k);
        }
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_within_budget() {
        let mut c: Lru<u32, u32> = Lru::new(100);
        c.insert(1, 1, 40);
        c.insert(2, 2, 40);
        assert_eq!(c.get(&1), Some(1)); // 2 is now the oldest
        c.insert(3, 3, 40);
        assert!(c.contains(&1) && c.contains(&3) && !c.contains(&2));
        assert_eq!(c.used_bytes(), 80);
        c.insert(4, 4, 1_000); // larger than the cache: not cached, nothing evicted
        assert!(!c.contains(&4));
        assert_eq!(c.len(), 2);
        c.insert(1, 10, 10); // replace
        assert_eq!(c.used_bytes(), 50);
        c.retain(|k| *k != 3);
        assert_eq!(c.len(), 1);
        assert_eq!(c.used_bytes(), 10);
    }

    proptest::proptest! {
        #[test]
        fn never_exceeds_capacity(ops in proptest::collection::vec((0u8..20, 0u64..60, proptest::prelude::any::<bool>()), 0..300)) {
            let mut c: Lru<u8, u8> = Lru::new(100);
            for (k, w, get) in ops {
                if get { let _ = c.get(&k); } else { c.insert(k, k, w); }
                proptest::prop_assert!(c.used_bytes() <= 100);
                proptest::prop_assert_eq!(c.map.len(), c.order.len());
            }
        }
    }
}
