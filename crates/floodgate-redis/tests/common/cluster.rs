//! A six-node Redis Cluster.

use std::process::Command;
use std::time::{Duration, Instant};

use super::server::Server;

/// A Redis Cluster: three primaries, each with one replica.
pub(crate) struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        let nodes: Vec<Server> = (0..6)
            .map(|_| {
                Server::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    "--cluster-config-file",
                    "nodes.conf",
                ])
            })
            .collect();
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())));
        args.extend(["--cluster-replicas", "1", "--cluster-yes"].map(String::from));
        let out = Command::new("redis-cli")
            .args(&args)
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_ok(Duration::from_secs(20));
        cluster
    }

    pub(crate) fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// Waits until every node reports `cluster_state:ok`, every replica's
    /// link to its primary is up, and every slot is served.
    pub(crate) fn wait_ok(&self, within: Duration) {
        let end = Instant::now() + within;
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let info = n.cli(&["cluster", "info"]);
                let repl = n.cli(&["info", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && (repl.contains("role:master") || repl.contains("master_link_status:up"))
            });
            if ok {
                return;
            }
            assert!(Instant::now() < end, "cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The node serving `slot` as primary, and its replica if it has one,
    /// as seen by a live node (`None` while nobody serves the slot).
    pub(crate) fn owners(&self, slot: u16) -> Option<(usize, Option<usize>)> {
        let live = self.nodes.iter().find(|n| n.child.is_some())?;
        let nodes = live.cli(&["cluster", "nodes"]);
        let port_of = |addr: &str| -> Option<u16> {
            addr.split('@').next()?.rsplit(':').next()?.parse().ok()
        };
        let idx = |p: u16| self.nodes.iter().position(|n| n.port() == p);
        let lines: Vec<Vec<&str>> = nodes
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        let owner = lines.iter().find(|f| {
            f.len() > 8
                && f[2].contains("master")
                && !f[2].contains("fail")
                && f[8..].iter().any(|range| {
                    let (a, b) = range.split_once('-').unwrap_or((range, range));
                    matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
                })
        })?;
        let primary = idx(port_of(owner[1])?)?;
        let replica = lines
            .iter()
            .find(|f| f.len() > 3 && f[2].contains("slave") && f[3] == owner[0])
            .and_then(|f| port_of(f[1]))
            .and_then(idx);
        Some((primary, replica))
    }

    /// A synchronous cluster connection for inspecting keys.
    pub(crate) fn conn(&self) -> redis::cluster::ClusterConnection {
        redis::cluster::ClusterClient::new(self.urls())
            .and_then(|c| c.get_connection())
            .expect("connect to test cluster")
    }
}
