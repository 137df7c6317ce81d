// Package outbox holds the vocabulary shared by every part of queuebox: the
// Message a relay claims from the outbox table, the states a row moves
// through, and the error classification (Permanent, IsRetryable, RetryAfter)
// that destinations and dialects use to tell the engine what a failure means.
//
// It is a leaf package: it imports the standard library only, so that the
// engine, the dialects and the destinations can all depend on it.
package outbox
