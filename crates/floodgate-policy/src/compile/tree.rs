//! The rule tree of a domain, matched with envoyproxy/ratelimit's semantics.
//!
//! A request descriptor's entries are walked level by level. At each level
//! the entry `(key, value)` selects, in this order: the node with exactly
//! that key and value; else the first wildcard node of that key (in file
//! order) whose pattern matches the value; else the key-only node (any
//! value, each value counted separately). A limit applies only if the node
//! reached by the *last* entry has one: a two-entry descriptor does not
//! match a one-level rule. Lookups hash borrowed strings: matching allocates
//! nothing.

use std::hash::BuildHasher;

use hashbrown::HashTable;
use smallvec::SmallVec;

use super::pattern::Pattern;
use super::rule::RuleId;

/// Index of a node.
pub type NodeId = u32;

/// Deepest descriptor matched (entries beyond are rejected by the engine).
pub const MAX_DEPTH: usize = 64;

/// One level of the tree: its nodes by how they match a value.
#[derive(Debug, Default)]
pub(crate) struct Level {
    /// Nodes of one key and value, by the hash of both.
    exact: HashTable<(Box<str>, Box<str>, NodeId)>,
    /// Nodes of a key and a wildcard value, in file order.
    wildcards: Vec<(Box<str>, Pattern, NodeId)>,
    /// Nodes of a key and any value, by the key's hash.
    defaults: HashTable<(Box<str>, NodeId)>,
}

impl Level {
    /// Adds node `id` for exactly `key`/`value`; `false` if an exact or
    /// wildcard node of the same key and text is already there.
    fn add_exact(&mut self, hasher: &impl BuildHasher, key: &str, v: &str, id: NodeId) -> bool {
        let h = hasher.hash_one((key, v));
        let dup = self
            .exact
            .find(h, |(k, val, _)| &**k == key && &**val == v)
            .is_some()
            || self
                .wildcards
                .iter()
                .any(|(k, p, _)| &**k == key && p.as_str() == v);
        if !dup {
            self.exact
                .insert_unique(h, (key.into(), v.into(), id), |(k, v, _)| {
                    hasher.hash_one((&**k, &**v))
                });
        }
        !dup
    }

    /// Adds node `id` for `key` with values matching `p`, after the
    /// wildcards before it; `false` if a node of the same key and text is
    /// already there.
    fn add_wildcard(
        &mut self,
        hasher: &impl BuildHasher,
        key: &str,
        p: Pattern,
        id: NodeId,
    ) -> bool {
        let h = hasher.hash_one((key, p.as_str()));
        let dup = self
            .exact
            .find(h, |(k, v, _)| &**k == key && **v == *p.as_str())
            .is_some()
            || self
                .wildcards
                .iter()
                .any(|(k, q, _)| &**k == key && q == &p);
        if !dup {
            self.wildcards.push((key.into(), p, id));
        }
        !dup
    }

    /// Adds node `id` for `key` with any value; `false` if there is one.
    fn add_default(&mut self, hasher: &impl BuildHasher, key: &str, id: NodeId) -> bool {
        let h = hasher.hash_one(key);
        if self.defaults.find(h, |(k, _)| &**k == key).is_some() {
            return false;
        }
        self.defaults
            .insert_unique(h, (key.into(), id), |(k, _)| hasher.hash_one(&**k));
        true
    }
}

/// A node of the tree.
#[derive(Debug)]
pub struct TreeNode {
    /// The rule applied when a descriptor ends here.
    pub rule: Option<RuleId>,
    /// The level of its children, once it has some.
    children: Option<u32>,
    /// For a wildcard node with `share_threshold`, the pattern: every
    /// matching value shares one counter.
    pub shared_pattern: Option<Box<str>>,
}

/// The nodes a descriptor walked through, one per entry.
pub type Path = SmallVec<[NodeId; 8]>;

/// A domain's rule tree.
#[derive(Debug)]
pub struct Tree {
    /// The levels: the root first, then one per node with children.
    levels: Vec<Level>,
    /// The nodes, by [`NodeId`].
    nodes: Vec<TreeNode>,
    /// Hashes keys and values (fixed: lookups hash borrowed strings).
    hasher: foldhash::fast::FixedState,
}

impl Default for Tree {
    fn default() -> Self {
        Tree {
            levels: vec![Level::default()],
            nodes: Vec::new(),
            hasher: foldhash::fast::FixedState::with_seed(0x5eed),
        }
    }
}

/// How a configured node matches values.
pub(crate) enum NodeValue<'a> {
    Exact(&'a str),
    Wildcard(Pattern),
    Any,
}

impl Tree {
    /// The root level.
    pub(crate) const ROOT: u32 = 0;

    /// Adds a node for `key`/`value` to `level`; `None` if an equal node is
    /// already there.
    pub(crate) fn add(
        &mut self,
        level: u32,
        key: &str,
        value: NodeValue<'_>,
        rule: Option<RuleId>,
        share: bool,
    ) -> Option<NodeId> {
        let id = self.nodes.len() as NodeId;
        let hasher = &self.hasher;
        let lvl = &mut self.levels[level as usize];
        let mut shared_pattern = None;
        let added = match value {
            NodeValue::Exact(v) => lvl.add_exact(hasher, key, v, id),
            NodeValue::Wildcard(p) => {
                if share {
                    shared_pattern = Some(p.as_str().into());
                }
                lvl.add_wildcard(hasher, key, p, id)
            }
            NodeValue::Any => lvl.add_default(hasher, key, id),
        };
        if !added {
            return None;
        }
        self.nodes.push(TreeNode {
            rule,
            children: None,
            shared_pattern,
        });
        Some(id)
    }

    /// Gives back spare capacity, once every node is added.
    pub(crate) fn shrink_to_fit(&mut self) {
        let hasher = &self.hasher;
        for l in &mut self.levels {
            l.exact
                .shrink_to_fit(|(k, v, _)| hasher.hash_one((&**k, &**v)));
            l.wildcards.shrink_to_fit();
            l.defaults.shrink_to_fit(|(k, _)| hasher.hash_one(&**k));
        }
        self.levels.shrink_to_fit();
        self.nodes.shrink_to_fit();
    }

    /// The level under `node`, created on first use.
    pub(crate) fn children_of(&mut self, node: NodeId) -> u32 {
        if let Some(l) = self.nodes[node as usize].children {
            return l;
        }
        let l = self.levels.len() as u32;
        self.levels.push(Level::default());
        self.nodes[node as usize].children = Some(l);
        l
    }

    /// A node.
    pub fn node(&self, id: NodeId) -> &TreeNode {
        &self.nodes[id as usize]
    }

    /// The node one entry selects at `level`: the exact node, else the
    /// first matching wildcard, else the key-only node.
    fn step(&self, level: u32, key: &str, value: &str) -> Option<NodeId> {
        let lvl = &self.levels[level as usize];
        let h = self.hasher.hash_one((key, value));
        if let Some((_, _, id)) = lvl.exact.find(h, |(k, v, _)| &**k == key && &**v == value) {
            return Some(*id);
        }
        // A value spelled as a pattern is that pattern's, before any other
        // pattern matches it (envoyproxy/ratelimit looks patterns up by
        // their text first too).
        if value.contains('*')
            && let Some((_, _, id)) = lvl
                .wildcards
                .iter()
                .find(|(k, p, _)| &**k == key && p.as_str() == value)
        {
            return Some(*id);
        }
        if let Some((_, _, id)) = lvl
            .wildcards
            .iter()
            .find(|(k, p, _)| &**k == key && p.matches(value))
        {
            return Some(*id);
        }
        let h = self.hasher.hash_one(key);
        lvl.defaults
            .find(h, |(k, _)| &**k == key)
            .map(|(_, id)| *id)
    }

    /// The rule every descriptor with entry keys `keys` selects, whatever
    /// its values: at each level only the key-only node of that key exists
    /// (no exact value, no wildcard). `None` when the values decide (or no
    /// rule applies). Values then never shape the counter key either: a
    /// key-only node shares no pattern.
    pub fn rule_for_any_values(&self, keys: &[&str]) -> Option<RuleId> {
        let last = keys.len().checked_sub(1)?;
        let mut level = Self::ROOT;
        for (i, key) in keys.iter().enumerate() {
            let lvl = &self.levels[level as usize];
            if lvl.exact.iter().any(|(k, _, _)| &**k == *key)
                || lvl.wildcards.iter().any(|(k, _, _)| &**k == *key)
            {
                return None;
            }
            let h = self.hasher.hash_one(*key);
            let (_, id) = lvl.defaults.find(h, |(k, _)| &**k == *key)?;
            let node = &self.nodes[*id as usize];
            if i == last {
                return node.rule;
            }
            level = node.children?;
        }
        None
    }

    /// The rule a descriptor's entries select, and the nodes walked (one per
    /// entry, when the rule applies).
    pub fn lookup<'e>(
        &self,
        entries: impl ExactSizeIterator<Item = (&'e str, &'e str)>,
        path: &mut Path,
    ) -> Option<RuleId> {
        path.clear();
        let last = entries.len().checked_sub(1)?;
        let mut level = Self::ROOT;
        for (i, (key, value)) in entries.enumerate() {
            let id = self.step(level, key, value)?;
            path.push(id);
            let node = &self.nodes[id as usize];
            if i == last {
                return node.rule;
            }
            level = node.children?;
        }
        None
    }
}
