// Package faults is queuebox's fault suite: the built binary against real
// PostgreSQL and NATS JetStream (and an in-process HTTP receiver) while
// replicas are killed, brokers restart, database connections are cut and
// receivers misbehave. Every scenario ends with Check, which reads what
// the receivers got and the table's final state and asserts the promise:
// nothing lost, nothing out of order within a key, duplicates only with
// the same id.
//
// The scenarios run only with QUEUEBOX_FAULTS=1 (make test-faults); longer
// soaks also need QUEUEBOX_SOAK=1. The checker, the TCP proxy and the
// hostile-input tests run in every `make test`. docs/reliability.md holds
// the figures.
package faults
