//! What a configuration was read with besides its files — the flags and
//! the environment — kept so that a reload reads its new files exactly as
//! startup read the first ones.

use std::cell::RefCell;
use std::collections::HashMap;

use super::table::{Env, Flags};

/// The flags and the environment variables a startup read (each variable
/// it asked for, with its value then).
#[derive(Clone, Debug, Default)]
pub struct Given {
    /// The flags.
    pub flags: Flags,
    env: HashMap<String, Option<String>>,
}

impl Given {
    /// Runs `read` with `flags` and `env`, recording every variable it asks
    /// for.
    pub fn record<R>(
        flags: &Flags,
        env: &Env<'_>,
        read: impl FnOnce(&Flags, &Env<'_>) -> R,
    ) -> (R, Given) {
        let seen = RefCell::new(HashMap::new());
        let lookup = |name: &str| {
            let value = env.get(name);
            seen.borrow_mut().insert(name.to_owned(), value.clone());
            value
        };
        let out = read(flags, &Env::new(&lookup));
        let given = Given {
            flags: flags.clone(),
            env: seen.into_inner(),
        };
        (out, given)
    }

    /// Runs `read` with the recorded flags and environment (a variable
    /// not recorded reads as unset).
    pub fn replay<R>(&self, read: impl FnOnce(&Flags, &Env<'_>) -> R) -> R {
        let lookup = |name: &str| self.env.get(name).cloned().flatten();
        read(&self.flags, &Env::new(&lookup))
    }
}
