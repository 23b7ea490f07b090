//! Comparing resourceVersions of one object. Kubernetes documented them as
//! opaque for years; since 1.35 they may be compared as integers
//! (KEP-5504, client-go's `CompareResourceVersion`), which every API server
//! backed by etcd has always allowed.
//! A watch re-listed from a lagging watch cache (or an API server behind
//! its peers) can show an object older than one already seen: comparing
//! tells such a step back from a change.

/// Whether `new` is older than `seen`. Versions that are not both integers
/// (another storage, or none) are never judged older.
pub fn is_older(new: &str, seen: &str) -> bool {
    matches!(
        (new.parse::<u64>(), seen.parse::<u64>()),
        (Ok(new), Ok(seen)) if new < seen
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_compare_and_anything_else_is_never_older() {
        assert!(is_older("9", "12"));
        assert!(!is_older("12", "12"));
        assert!(!is_older("13", "12"));
        assert!(!is_older("abc", "12"));
        assert!(!is_older("9", ""));
    }
}
