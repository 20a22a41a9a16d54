//! The create-only review resources of authorization.k8s.io and authentication.k8s.io: their
//! names, for routing and discovery. Each group's module answers its own, told apart by `K`.

/// A review's names and scope.
#[derive(Debug)]
pub struct ReviewNames {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind_name: &'static str,
    pub namespaced: bool,
}

/// One review resource; `kind` says to its module which review it is.
#[derive(Debug)]
pub struct Review<K: 'static> {
    pub names: ReviewNames,
    pub kind: K,
}

impl<K> std::ops::Deref for Review<K> {
    type Target = ReviewNames;

    fn deref(&self) -> &ReviewNames {
        &self.names
    }
}

/// `reviews` (one group version's) when `group`/`version` is theirs, else none.
pub fn of<K>(reviews: &'static [Review<K>], group: &str, version: &str) -> &'static [Review<K>] {
    match reviews.first() {
        Some(r) if r.group == group && r.version == version => reviews,
        _ => &[],
    }
}
