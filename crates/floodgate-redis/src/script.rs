//! Server-side scripts, called with `EVALSHA`. Redis's script cache is
//! volatile (restarts, failovers, `SCRIPT FLUSH`, a new cluster node), so a
//! `NOSCRIPT` reply is answered by sending the same call as `EVAL`, which
//! loads the script into that node's cache and runs it, atomically and in
//! one more round trip. `EVAL` goes to the same node as `EVALSHA` would (the
//! first key's slot), which `SCRIPT LOAD` cannot guarantee on a cluster.

use redis::{Cmd, ErrorKind, RedisResult, ServerErrorKind, Value, cmd};
use sha1_smol::Sha1;
use tracing::Instrument;

use crate::pool::Pool;
use crate::stats::RedisStats;

/// The files every script deciding limits shares after its items are read:
/// the exact arithmetic, the algorithms, and their dispatch.
macro_rules! algorithms {
    () => {
        concat!(
            include_str!("lua/arith.lua"),
            "\n",
            include_str!("lua/gcra.lua"),
            "\n",
            include_str!("lua/fixed_window.lua"),
            "\n",
            include_str!("lua/sliding_window.lua"),
            "\n",
            include_str!("lua/sliding_log.lua"),
            "\n",
            include_str!("lua/shaper.lua"),
            "\n",
            include_str!("lua/permits.lua"),
            "\n",
            include_str!("lua/concurrency.lua"),
            "\n",
            include_str!("lua/dispatch.lua"),
        )
    };
}

/// The decision script after its first line, assembled from one file per
/// concept (see `lua/prelude.lua`).
macro_rules! decide_body {
    () => {
        concat!(
            include_str!("lua/prelude.lua"),
            "\n",
            include_str!("lua/helpers.lua"),
            "\n",
            include_str!("lua/read_item.lua"),
            "\n",
            include_str!("lua/items.lua"),
            "\n",
            algorithms!(),
            "\n",
            include_str!("lua/main.lua"),
        )
    };
}

/// The decision script. Declaring no flags, it is refused whole (`OOM`)
/// by a server whose memory is full.
pub(crate) const DECIDE: &str = concat!("#!lua\n", decide_body!());

/// The decision script for dry runs when the server's memory is full: it
/// writes nothing (`no-writes`, which Redis enforces), so a full server
/// runs it (`allow-oom`) and the states it holds still decide.
pub(crate) const DECIDE_READ_ONLY: &str =
    concat!("#!lua flags=no-writes,allow-oom\n", decide_body!());

/// The lease script (see `lua/lease.lua`).
pub(crate) const LEASE: &str = concat!(
    include_str!("lua/lease.lua"),
    "\n",
    include_str!("lua/helpers.lua"),
    "\n",
    include_str!("lua/read_item.lua"),
    "\n",
    include_str!("lua/lease_items.lua"),
    "\n",
    algorithms!(),
    "\n",
    include_str!("lua/state_edit.lua"),
    "\n",
    include_str!("lua/lease_main.lua"),
);
/// The sync script (see `lua/sync.lua`).
pub(crate) const SYNC: &str = concat!(
    include_str!("lua/sync.lua"),
    "\n",
    include_str!("lua/helpers.lua"),
    "\n",
    include_str!("lua/read_item.lua"),
    "\n",
    include_str!("lua/sync_items.lua"),
    "\n",
    algorithms!(),
    "\n",
    include_str!("lua/state_edit.lua"),
    "\n",
    include_str!("lua/sync_main.lua"),
);
/// The release script (concurrency permits), assembled from its header, the
/// permits' state shared with the decision script, and its body.
pub(crate) const RELEASE: &str = concat!(
    include_str!("lua/release.lua"),
    "\n",
    include_str!("lua/permits.lua"),
    "\n",
    include_str!("lua/release_main.lua"),
);

/// A script and its SHA-1.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    code: &'static str,
    sha: String,
}

impl Script {
    pub(crate) fn new(code: &'static str) -> Self {
        Script {
            code,
            sha: Sha1::from(code).digest().to_string(),
        }
    }

    /// The script's SHA-1 (what `EVALSHA` names it by).
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    /// The script's source.
    pub(crate) fn code(&self) -> &'static str {
        self.code
    }

    /// Starts a call: `EVALSHA <sha> <numkeys>`; keys and arguments follow.
    pub(crate) fn call(&self, numkeys: usize) -> Cmd {
        let mut c = cmd("EVALSHA");
        c.arg(&self.sha).arg(numkeys);
        c
    }

    /// Runs `call` (built by [`Script::call`]); on `NOSCRIPT`, runs it again
    /// as `EVAL` with the script's source. In a client span of the target
    /// `floodgate::trace`, which Floodgate's runtime exports as OpenTelemetry
    /// when tracing is on (and which is never made otherwise).
    pub(crate) async fn run(
        &self,
        pool: &Pool,
        call: &Cmd,
        stats: &RedisStats,
    ) -> RedisResult<Value> {
        let span = tracing::info_span!(
            target: "floodgate::trace",
            "redis EVALSHA",
            otel.kind = "client",
            db.system.name = "redis",
            db.operation.name = "EVALSHA",
        );
        self.attempt(pool, call, stats).instrument(span).await
    }

    /// [`run`](Self::run), outside its span.
    async fn attempt(&self, pool: &Pool, call: &Cmd, stats: &RedisStats) -> RedisResult<Value> {
        stats.calls.inc();
        match pool.query(call).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                stats.script_loads.inc();
                let mut eval = cmd("EVAL");
                eval.arg(self.code);
                for arg in call.args_iter().skip(2) {
                    if let redis::Arg::Simple(bytes) = arg {
                        eval.arg(bytes);
                    }
                }
                pool.query(&eval).await
            }
            other => other,
        }
    }
}
