// Package relay is the delivery engine: it claims ready rows from the
// outbox table, routes each row to its destination, publishes, and settles
// every row — sent, retried with backoff, or dead — as soon as its own
// destination has answered.
//
// The story of a row:
//
//  1. Claim (claimer.go). One claimer claims up to BatchSize ready rows
//     under a fresh lease token while the in-flight budget (MaxInflight
//     rows claimed and not yet settled) has room. Ready means pending, due,
//     and the head of its key (see package dialect): a key's next row
//     cannot be claimed while its head is in flight, which keeps per-key
//     order at any number of replicas. A claim reads a bounded window of
//     the table; when rows that cannot be claimed now fill it (a key held
//     by a relay that died, waiting out a backoff, held dead, or out long
//     at a slow receiver), the next window skips those keys (sweep.go), so
//     that one key's trouble does not hold the keys behind it.
//  2. Route. Each row's topic is matched against the routes (first match
//     wins). A row no route matches, or one the dialect could not decode,
//     is dead at once with the reason.
//  3. Publish (lane.go). Each destination has a lane: a queue, a circuit
//     breaker, and a limit on rows in flight that adapts to the
//     destination's latency and errors (limiter.go), below the configured
//     concurrency. No destination holds more than three quarters of the
//     budget while others are configured. A destination that is down
//     (outbox.Unavailable) opens its circuit; one that is full
//     (outbox.NoRoom) pauses; their rows wait without spending attempts.
//  4. Settle (settler.go, settle.go). A row goes to the settler when its own
//     answer comes (destination.Streamer); a claim's outcomes are written
//     together once all its rows have answered, or after a few
//     milliseconds for those whose siblings are still out. Failed rows are
//     retried (attempt+1, due after base × 2^attempt with jitter, capped,
//     or the receiver's Retry-After) or, once attempt+1 reaches the row's
//     max_attempts or the failure is permanent, dead. Every write is fenced
//     by token and unexpired lease; rows it no longer owns are counted as
//     lost claims, never retried.
//
// While any row of a claim is out, its lease is renewed every Lease/3
// (lease.go); a claim whose lease cannot be kept stops publishing before it
// expires. A reaper returns rows whose lease expired (a crashed relay's) to
// pending. On shutdown the claimer stops, the rows in flight finish within
// ShutdownTimeout, and what is left is released without spending an
// attempt. In lock mode (dialect.BatchCommitter) a claim's rows are written,
// and its transaction committed, once all of them have an outcome.
package relay
