//! A batch as the script sees it: items with equal keys sent once (with
//! every item's cost, in order, the first item's limit and permit applying),
//! limits validated and encoded, and the keys grouped by hash slot.

use std::collections::HashMap;

use floodgate::Apply;
use floodgate::algorithms::Penalty;
use floodgate_policy::Item;
use redis::Cmd;

use crate::UnsupportedLimit;
use crate::encode::{Params, block_micros};
use crate::keys::KeyLayout;
use crate::script::Script;

/// One distinct key of the batch.
pub(crate) struct Lead {
    /// The first item with this key.
    pub item: usize,
    /// The summed cost of the items with this key.
    pub cost: u64,
    /// The items with this key, in batch order (the first is `item`), and
    /// their costs.
    pub members: Vec<(usize, u64)>,
    pub params: Params,
    pub penalty: Penalty,
    /// Microseconds the key is blocked after a denial (0: never).
    pub block_us: u64,
    /// The first item's permit (concurrency limits).
    pub permit: floodgate_policy::Permit,
    pub key: Vec<u8>,
    pub slot: u16,
}

impl Lead {
    /// Whether deciding this key for a request another limit denied can
    /// change it: a penalty charges the denial, a block starts one.
    pub(crate) fn acts_when_rejected(&self) -> bool {
        self.penalty != Penalty::None || self.block_us > 0
    }
}

pub(crate) struct Plan {
    pub leads: Vec<Lead>,
    /// For each item, the index of its lead.
    pub lead_of: Vec<usize>,
}

/// The arguments every call of the decision script shares.
pub(crate) struct CallArgs<'a> {
    /// `now` in µs, or `""` for the server's clock.
    pub now: &'a str,
    /// `""` for absolute expiry, or the slack in ms for relative expiry.
    pub slack: &'a str,
    /// Concurrency lease in ms (0: none).
    pub lease: u64,
}

/// How the script decides a call (its `ARGV[1]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    /// Evaluate only, changing nothing (the first phase of a batch over
    /// several slots).
    Peek,
    /// [`Apply::Commit`].
    Commit,
    /// [`Apply::Force`].
    Force,
    /// [`Apply::Rejected`].
    Rejected,
    /// A dry run: decide as `Commit` would, write nothing.
    DryCommit,
    /// A dry run: decide as `Rejected` would, write nothing.
    DryRejected,
    /// [`Apply::Refund`]: give the costs back, in the same script as a
    /// charge (atomic, whatever the key's kind).
    Refund,
}

impl Call {
    /// The call deciding a batch decided with `apply` in one call
    /// ([`Apply::Check`] is a dry run).
    pub(crate) fn of(apply: Apply) -> Call {
        match apply {
            Apply::Check => Call::DryCommit,
            Apply::Commit => Call::Commit,
            Apply::Force => Call::Force,
            Apply::Rejected => Call::Rejected,
            Apply::Refund => Call::Refund,
        }
    }

    fn code(self) -> u8 {
        match self {
            Call::Peek => 0,
            Call::Commit => 1,
            Call::Force => 2,
            Call::Rejected => 3,
            Call::DryCommit => 5,
            Call::DryRejected => 6,
            Call::Refund => 7,
        }
    }
}

impl Plan {
    pub(crate) fn new(items: &[Item<'_>], layout: &KeyLayout) -> Result<Plan, UnsupportedLimit> {
        let mut leads: Vec<Lead> = Vec::with_capacity(items.len());
        let mut lead_of = Vec::with_capacity(items.len());
        // Large batches find duplicates by hashing, small ones by scanning.
        let mut seen: HashMap<&[u8], usize> = HashMap::new();
        let hashed = items.len() > 16;
        for (i, item) in items.iter().enumerate() {
            let dup = if hashed {
                seen.get(item.key).copied()
            } else {
                leads.iter().position(|l| items[l.item].key == item.key)
            };
            if let Some(j) = dup {
                leads[j].cost = leads[j].cost.saturating_add(item.cost);
                leads[j].members.push((i, item.cost));
                lead_of.push(j);
                continue;
            }
            let key = layout.key(item.group, item.key);
            if hashed {
                seen.insert(item.key, leads.len());
            }
            lead_of.push(leads.len());
            leads.push(Lead {
                item: i,
                cost: item.cost,
                members: vec![(i, item.cost)],
                params: Params::of(item.limit)?,
                penalty: item.limit.penalty_mode(),
                block_us: block_micros(item.limit)?,
                permit: item.permit,
                key: key.name,
                slot: key.slot,
            });
        }
        Ok(Plan { leads, lead_of })
    }

    /// The leads grouped by hash slot (one group unless `cluster`), each
    /// group in batch order.
    pub(crate) fn groups(&self, cluster: bool) -> Vec<Vec<usize>> {
        if !cluster {
            return vec![(0..self.leads.len()).collect()];
        }
        let mut order: Vec<usize> = (0..self.leads.len()).collect();
        order.sort_by_key(|&i| (self.leads[i].slot, i));
        let mut groups: Vec<Vec<usize>> = Vec::new();
        for i in order {
            match groups.last_mut() {
                Some(g) if self.leads[g[0]].slot == self.leads[i].slot => g.push(i),
                _ => groups.push(vec![i]),
            }
        }
        groups
    }

    /// The number of items of the batch.
    pub(crate) fn items(&self) -> usize {
        self.lead_of.len()
    }

    /// The items the script answers for `group`, in the order of its reply
    /// (each key's items in turn).
    pub(crate) fn answered<'a>(&'a self, group: &'a [usize]) -> impl Iterator<Item = usize> + 'a {
        group
            .iter()
            .flat_map(|&l| self.leads[l].members.iter().map(|&(i, _)| i))
    }

    /// The script call deciding `group` as `call` says.
    pub(crate) fn command(
        &self,
        script: &Script,
        group: &[usize],
        call: Call,
        args: &CallArgs,
    ) -> Cmd {
        let mut cmd = script.call(group.len());
        for &i in group {
            cmd.arg(&self.leads[i].key);
        }
        cmd.arg(call.code())
            .arg(args.now)
            .arg(args.slack)
            .arg(args.lease);
        for &i in group {
            let l = &self.leads[i];
            let costs = (l.members.len() > 1).then_some(l.members.as_slice());
            l.params
                .push_args(l.cost, costs, l.penalty, l.block_us, l.permit, &mut cmd);
        }
        cmd
    }
}
