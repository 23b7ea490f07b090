//! What a watch's re-list says was deleted while the watch was away: the
//! items known before that the new list did not show. One of these per
//! watched kind (CronJobs and Jobs per scope, the ring's Leases).

use std::collections::HashSet;
use std::hash::Hash;

#[derive(Debug)]
pub struct Relist<K> {
    /// During a list: the items it has shown so far.
    seen: Option<HashSet<K>>,
}

impl<K> Default for Relist<K> {
    fn default() -> Self {
        Self { seen: None }
    }
}

impl<K: Hash + Eq + Clone> Relist<K> {
    /// A list begins.
    pub fn begin(&mut self) {
        self.seen = Some(HashSet::new());
    }

    /// The list showed `item`.
    pub fn saw(&mut self, item: &K) {
        if let Some(seen) = self.seen.as_mut() {
            seen.insert(item.clone());
        }
    }

    /// The list is complete: the `known` items it did not show.
    pub fn finish<'a>(&mut self, known: impl IntoIterator<Item = &'a K>) -> Vec<K>
    where
        K: 'a,
    {
        let seen = self.seen.take().unwrap_or_default();
        known
            .into_iter()
            .filter(|item| !seen.contains(*item))
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_list_did_not_show_is_gone() {
        let mut relist = Relist::default();
        relist.begin();
        relist.saw(&"a".to_string());
        relist.saw(&"c".to_string());
        let known = ["a".to_string(), "b".to_string(), "c".to_string()];
        assert_eq!(relist.finish(&known), ["b"]);
        // A list that ends without having begun showed nothing.
        assert_eq!(relist.finish(&known).len(), 3);
    }
}
