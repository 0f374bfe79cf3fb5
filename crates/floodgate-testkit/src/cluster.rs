//! A six-node Redis Cluster (three primaries with a replica each), stopped
//! on drop.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::Redis;

/// A running Redis Cluster.
pub struct RedisCluster {
    nodes: Vec<Redis>,
}

impl RedisCluster {
    /// Starts six nodes and makes them a cluster (panics if it does not
    /// become ready within 20 s).
    pub fn start() -> RedisCluster {
        let nodes: Vec<Redis> = (0..6)
            .map(|_| {
                Redis::start_with(&[
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
        args.extend(nodes.iter().map(Redis::addr));
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
        let cluster = RedisCluster { nodes };
        let end = Instant::now() + Duration::from_secs(20);
        while !cluster.ready() {
            assert!(Instant::now() < end, "the cluster did not become ready");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// Every node's `host:port`, comma-separated (a cluster URL).
    pub fn url(&self) -> String {
        self.nodes
            .iter()
            .map(Redis::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    fn ready(&self) -> bool {
        self.nodes.iter().all(|n| {
            let info = Command::new("redis-cli")
                .args(["-p", &n.port().to_string(), "cluster", "info"])
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
        })
    }
}
