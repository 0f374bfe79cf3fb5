//! Compiling a [`PolicySpec`] into a [`PolicySet`]: rule trees with hashed
//! levels, core limits built once, fingerprints.

mod envoy_stats;
mod lists;
mod pattern;
mod rule;
mod stable_hash;
mod tree;

use std::sync::Arc;

use hashbrown::HashMap;

use crate::error::{ConfigError, ConfigErrors, Errors};
use crate::spec::{
    Dialect, DomainSpec, LimitSpec, NodeSpec, Penalty, PolicySpec, Reported, Settings,
};

pub use lists::{List, in_network};
pub use pattern::Pattern;
pub use rule::{Action, Rule, RuleId, RuleLimit, RuleMetrics};
pub use stable_hash::StableHasher;
pub use tree::{MAX_DEPTH, NodeId, Path, Tree, TreeNode};

use tree::NodeValue;

/// Most rules a configuration may define.
pub const MAX_RULES: usize = 1_000_000;

/// A domain, compiled.
#[derive(Debug)]
pub struct Domain {
    /// Its name.
    pub name: Arc<str>,
    /// Its rule tree.
    pub tree: Tree,
    /// Entries never limited.
    pub allow: List,
    /// Entries always denied.
    pub deny: List,
    /// The file format it came from.
    pub dialect: Dialect,
}

/// A validated, compiled configuration: what the engine evaluates against.
/// Immutable; a reload builds a new one and swaps it in atomically.
#[derive(Debug)]
pub struct PolicySet {
    /// Global settings.
    pub settings: Settings,
    /// The domains, by name.
    domains: HashMap<Box<str>, Domain>,
    /// Every domain's rules, by [`RuleId`].
    rules: Vec<Rule>,
    /// Unique to this policy in the process: plans made for another are
    /// told apart.
    generation: u64,
}

/// The generation of the next policy compiled in this process.
static GENERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A generation no policy of this process has had.
fn next_generation() -> u64 {
    GENERATIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl PolicySet {
    /// Compiles `spec`, reporting every problem found.
    pub fn compile(spec: &PolicySpec) -> Result<PolicySet, ConfigErrors> {
        let mut errors = Errors::default();
        let mut set = PolicySet {
            settings: spec.settings.clone(),
            domains: HashMap::new(),
            rules: Vec::new(),
            generation: next_generation(),
        };
        for d in &spec.domains {
            let domain = compile_domain(d, &spec.settings, &mut set.rules, &mut errors);
            set.domains.insert(d.name.as_str().into(), domain);
        }
        // Held as long as the policy runs: no spare capacity.
        set.rules.shrink_to_fit();
        for d in set.domains.values_mut() {
            d.tree.shrink_to_fit();
        }
        set.domains.shrink_to_fit();
        if set.rules.len() > MAX_RULES {
            errors.push(ConfigError::new(
                Default::default(),
                format!("too many rules: {} (at most {MAX_RULES})", set.rules.len()),
            ));
        }
        errors.finish(set)
    }

    /// An empty configuration (every request is admitted).
    pub fn empty() -> PolicySet {
        PolicySet {
            settings: Settings::default(),
            domains: HashMap::new(),
            rules: Vec::new(),
            generation: next_generation(),
        }
    }

    /// Which compilation this is: distinct for every policy compiled in
    /// this process, so that a decision can be matched with the policy it
    /// was made under (its rule ids index that policy's rules only).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A domain by name.
    #[inline]
    pub fn domain(&self, name: &str) -> Option<&Domain> {
        self.domains.get(name)
    }

    /// The domains.
    pub fn domains(&self) -> impl Iterator<Item = &Domain> {
        self.domains.values()
    }

    /// A rule by id.
    #[inline]
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id as usize]
    }

    /// Every rule.
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }
}

/// Compiles one domain: its rule tree (its rules added to `rules`) and
/// its allow and deny lists; errors go to `errors`.
fn compile_domain(
    d: &DomainSpec,
    settings: &Settings,
    rules: &mut Vec<Rule>,
    errors: &mut Errors,
) -> Domain {
    let name: Arc<str> = d.name.as_str().into();
    let mut tree = Tree::default();
    let mut ctx = Ctx {
        domain: &name,
        dialect: d.dialect,
        settings,
        rules,
        errors,
    };
    let prefix = format!("{}.", d.name);
    ctx.level(
        &mut tree,
        Tree::ROOT,
        &d.descriptors,
        &prefix,
        &mut StableHasher::default(),
    );
    Domain {
        name,
        tree,
        allow: List::new(&d.allow),
        deny: List::new(&d.deny),
        dialect: d.dialect,
    }
}

/// What compiling a domain's tree needs at every level.
struct Ctx<'a> {
    /// The domain's name.
    domain: &'a Arc<str>,
    /// The format its file is in.
    dialect: Dialect,
    /// The policy's settings.
    settings: &'a Settings,
    /// The policy's rules, each rule compiled added.
    rules: &'a mut Vec<Rule>,
    /// Where errors go.
    errors: &'a mut Errors,
}

impl Ctx<'_> {
    /// Adds `nodes` (at `path`, the key prefix of their rules' paths) to
    /// `level` of `tree`, then their children below them.
    fn level(
        &mut self,
        tree: &mut Tree,
        level: u32,
        nodes: &[NodeSpec],
        parent: &str,
        path_hash: &mut StableHasher,
    ) {
        for n in nodes {
            let composite = match &n.value {
                Some(v) => format!("{}_{}", n.key, v),
                None => n.key.clone(),
            };
            let path = format!("{parent}{composite}");
            let mut hash = path_hash.clone();
            hash.field(n.key.as_bytes())
                .field(n.value.as_deref().unwrap_or("").as_bytes());
            let rule = n
                .rate_limit
                .as_ref()
                .and_then(|rl| self.rule(n, rl, &path, &hash));
            let value = match n.value.as_deref() {
                None => NodeValue::Any,
                Some(v) => match Pattern::new(v) {
                    Some(p) => NodeValue::Wildcard(p),
                    None => NodeValue::Exact(v),
                },
            };
            let Some(id) = tree.add(level, &n.key, value, rule, n.share_threshold) else {
                self.errors.push(ConfigError::new(
                    n.at.clone(),
                    format!("duplicate descriptor composite key '{path}'"),
                ));
                continue;
            };
            if !n.children.is_empty() {
                let child = tree.children_of(id);
                self.level(tree, child, &n.children, &format!("{path}."), &mut hash);
            }
        }
    }

    /// Compiles the rule of node `n` (at `path`, whose hash `path_hash`
    /// is) into the policy's rules; `None` (its errors recorded) when none
    /// of its limits could be built.
    fn rule(
        &mut self,
        n: &NodeSpec,
        rl: &crate::spec::RateLimitSpec,
        path: &str,
        path_hash: &StableHasher,
    ) -> Option<RuleId> {
        let mut fingerprint = path_hash.clone();
        fingerprint.field(self.domain.as_bytes());
        let action = if rl.unlimited {
            Action::Unlimited
        } else if let [LimitSpec::Block { window }] = rl.limits.as_slice() {
            Action::Block {
                window: *window,
                reported: rl.reported,
            }
        } else {
            Action::Limit(self.limits(rl, &mut fingerprint)?)
        };
        let fingerprint = fingerprint.finish();
        let mut action = action;
        if let Action::Limit(limits) = &mut action {
            for (i, l) in limits.iter_mut().enumerate() {
                l.zone = crate::zones::zone_of(&l.limit, fingerprint, i);
            }
        }
        let id = self.rules.len() as RuleId;
        self.rules.push(Rule {
            id,
            domain: self.domain.clone(),
            path: path.into(),
            name: rl.name.as_deref().map(Into::into),
            replaces: rl.replaces.iter().map(|s| s.as_str().into()).collect(),
            action,
            shadow: n.shadow_mode,
            quota: n.quota_mode,
            enabled: n.enabled,
            cost: n.cost,
            on_failure: rl.on_failure,
            sync: rl.sync,
            holder: rl.holder,
            fingerprint,
            metrics: Default::default(),
            envoy_stats: Default::default(),
        });
        Some(id)
    }

    /// The limits of `rl`, each charged for denials as the rule says (else
    /// as [`Penalty::default_for`] it) and added to the rule's
    /// `fingerprint`; `None` (the errors recorded) when none could be
    /// built.
    fn limits(
        &mut self,
        rl: &crate::spec::RateLimitSpec,
        fingerprint: &mut StableHasher,
    ) -> Option<Box<[RuleLimit]>> {
        let mut limits = Vec::with_capacity(rl.limits.len());
        for spec in &rl.limits {
            let penalty = rl
                .penalty
                .unwrap_or_else(|| Penalty::default_for(self.dialect, spec, self.settings));
            fingerprint.field(format!("{spec:?}/{penalty:?}/{:?}", rl.block_for).as_bytes());
            if let Some(lease) = rl.lease {
                // Leased units are another state: never shared with a
                // counter of the same rule without a lease.
                fingerprint.field(format!("lease {lease:?} holder {}", rl.holder).as_bytes());
            }
            match rule::build_limit(spec, penalty, rl.block_for, rl.lease) {
                Ok(Some(limit)) => limits.push(RuleLimit {
                    limit,
                    reported: reported_of(spec, rl.reported),
                    zone: None,
                }),
                Ok(None) => self.errors.push(ConfigError::new(
                    rl.at.clone(),
                    "a rule with several limits cannot include a zero limit (use requests_per_unit: 0 alone to block)",
                )),
                Err(e) => self.errors.push(ConfigError::new(rl.at.clone(), e.to_string())),
            }
        }
        (!limits.is_empty()).then(|| limits.into_boxed_slice())
    }
}

/// What to report for one limit of a rule (see [`Reported::of`]); a limit
/// that has no period (a shaper, a concurrency limit) keeps the rule's.
fn reported_of(spec: &LimitSpec, rule: Reported) -> Reported {
    match spec {
        LimitSpec::FixedWindow { limit, window }
        | LimitSpec::SlidingLog { limit, window }
        | LimitSpec::SlidingWindow { limit, window, .. } => Reported::of(*limit, *window, *limit),
        LimitSpec::Gcra {
            count,
            period,
            burst,
        } => Reported::of(*count, *period, *burst),
        LimitSpec::Shaper { .. } | LimitSpec::Concurrency { .. } | LimitSpec::Block { .. } => rule,
    }
}

/// Compile errors as one list (for callers that only need a message).
pub fn describe(errors: &ConfigErrors) -> String {
    errors.to_string()
}
