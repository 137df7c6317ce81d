// Package relay is the delivery engine: it claims batches of ready rows from
// the outbox table, routes each row to its destination, publishes, and
// settles every row — sent, retried with backoff, or dead — in one fenced
// statement per outcome.
//
// The story of one batch:
//
//  1. Claim. A worker asks the dialect for up to BatchSize ready rows (or a
//     share of that while whole batches find fewer ready rows; claim.go)
//     under a fresh lease token. Ready means pending, due, and the head of its key
//     (see package dialect), so a batch never holds two rows of one key and
//     a key's next row cannot be claimed while its head is in flight. This is
//     what keeps per-key order at any number of workers and replicas.
//  2. Route. Each row's topic is matched against the routes (first match
//     wins). A row no route matches, or one the dialect could not decode, is
//     dead at once with the reason.
//  3. Publish. Rows are grouped by destination and each group is published
//     as one batch, destinations in parallel. While the publish runs, the
//     lease is renewed every Lease/3.
//  4. Settle. Accepted rows are completed together; failed rows are retried
//     (attempt+1, due after base × 2^attempt with jitter, capped, or the
//     receiver's Retry-After) or, once attempt+1 reaches the row's
//     max_attempts or the failure is permanent, dead. Every write is fenced
//     by token and unexpired lease; rows it no longer owns are counted as
//     lost claims, never retried: another relay owns them now, and the
//     duplicate it may publish carries the same id.
//
// InflightBatches workers run this loop side by side, so the next claim
// overlaps the current publish. A reaper returns rows whose lease expired
// (a crashed relay's) to pending. On shutdown, workers stop claiming, finish
// the batches in flight within ShutdownTimeout, and release what they could
// not finish without spending an attempt.
package relay
