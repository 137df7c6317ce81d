// Package outbox holds the vocabulary shared by every part of queuebox: the
// Message a relay claims from the outbox table, the states a row moves
// through, and the error classification (Permanent, IsRetryable, RetryAfter)
// that destinations and dialects use to tell the engine what a failure means.
//
// A failed delivery falls in one of four classes, and each destination
// maps its client's errors onto them:
//
//   - Permanent: this row can never be published as it is (an encoding
//     limit, an invalid header or subject). Dead at its first attempt.
//   - Unavailable: the destination is down (connection refused or lost, a
//     timeout, a 502/503/504). The row waits without spending an attempt;
//     the destination's circuit opens when it keeps failing.
//   - NoRoom: the destination is up but full (stream limits, a broker
//     alarm, a quota, an HTTP 429). The row waits without spending an
//     attempt and the destination pauses until room returns.
//   - anything else: the row itself failed. An attempt is spent, the row
//     is retried with backoff, and dead at its max_attempts.
//
// It is a leaf package: it imports the standard library only, so that the
// engine, the dialects and the destinations can all depend on it.
package outbox
