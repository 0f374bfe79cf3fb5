//! Every integration test of this crate, one module per file of `tests/`,
//! linked into one binary: one link instead of one per file, and a
//! fraction of the disk a clean test build needs.

mod image_support;
mod serve_support;

mod admin_hosts;
mod bench_overload;
mod config_check;
mod configmap_reload;
mod dashboard;
mod dashboards;
mod deploy;
mod envoy_metrics;
mod errors_once;
mod examples_start_clean;
mod gateway_hostile;
mod gateway_lifecycle;
mod gateway_metrics;
mod headers_parity;
mod healthcheck;
mod help;
mod hostile_listeners;
mod hostile_log_flood;
mod hostile_reloads;
mod hostile_store_flood;
mod image;
mod metric_docs;
mod metrics_listener;
mod other_commands_settings;
mod outage_counts;
mod process_metrics;
mod program_name;
mod redis_down_at_startup;
mod release_hostile;
mod replay;
mod request_counts;
mod serve_and_gateway;
mod serve_apis_agree;
mod serve_env;
mod serve_envoy_penalty;
mod serve_envoy_reference;
mod serve_grpc;
mod serve_grpc_checks;
mod serve_grpc_drain;
mod serve_grpc_field_zero;
mod serve_http;
mod serve_lifecycle;
mod serve_memory;
mod serve_negative_hits;
mod serve_rls_leases;
mod serve_rls_shaper_health;
mod serve_slow_readers;
mod service_settings_reload;
mod sync_fleet;
mod tracing_otlp;
mod xds;
