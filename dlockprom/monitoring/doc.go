// Package monitoring holds what a Prometheus user sets up beside dlockprom's
// metrics, and the test that keeps them true to the metrics:
//
//   - alerts.yml: example alert rules (locks lost, renewal errors, wait
//     timeouts, a spike of locks held, long holds, waiters piling up, and
//     the fleet listing's own health), to load with rule_files in
//     prometheus.yml;
//   - dashboard.json: a Grafana dashboard of the fleet (FleetCollector)
//     and of the clients' events (Collector), to import in Grafana; it asks
//     for a Prometheus data source and a job.
//
// The test parses the rules as Prometheus loads a rule file (rulefmt, with
// the PromQL parser) and every query of the dashboard with the PromQL
// parser, then checks that each metric they name, and each label they
// match on, is one that dlockprom's collectors export after some activity
// against a real redis-server.
//
// It is a module of its own so that github.com/prometheus/prometheus, which
// the test needs to parse rules, is not a dependency of dlockprom's users.
// It is not published: copy the two files from the repository.
package monitoring
