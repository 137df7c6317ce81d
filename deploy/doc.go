// Package deploy holds no code. Its directory holds what runs queuebox
// elsewhere (helm/, prometheus/, grafana/, systemd/, image/) and its tests
// check those files against the binary:
//
//   - every PromQL expression of the alerts and the dashboard parses and
//     names only metrics queuebox exposes (make test);
//   - the rendered Helm chart probes the port of the config's server.listen
//     and passes only real flags (make test-chart, which renders it);
//   - the container image runs read-only as a non-root user against
//     PostgreSQL and a webhook (make test-image, which builds it).
//
// docs/deploying.md tells how to use them.
package deploy
