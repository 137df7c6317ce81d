package config

import (
	"reflect"
	"time"
)

// Config is the whole queuebox configuration file.
type Config struct {
	Database     Database               `yaml:"database"`
	Relay        Relay                  `yaml:"relay"`
	Server       Server                 `yaml:"server"`
	Log          Log                    `yaml:"log"`
	Retention    Retention              `yaml:"retention"`
	Destinations map[string]Destination `yaml:"destinations"`
	Routes       []Route                `yaml:"routes"`
	Inbox        Inbox                  `yaml:"inbox"`

	warnings []string // set by Parse; see Warnings
}

// Database says where the outbox table is and how it is shaped.
type Database struct {
	Type        string            `yaml:"type"`        // postgresql | sqlserver
	URL         string            `yaml:"url"`         // a secret: never logged
	OutboxTable string            `yaml:"outboxTable"` // may be schema-qualified
	Columns     map[string]string `yaml:"columns"`     // logical -> existing column
	States      map[string]string `yaml:"states"`      // logical -> existing value
	MaxConns    int               `yaml:"maxConns"`    // pool size; 0 = derived from relay settings
	// SynchronousCommit is PostgreSQL's synchronous_commit for the relay's
	// own writes (claims, completions, retries; not the operator
	// commands): off by default, see docs/configuration.md.
	SynchronousCommit string `yaml:"synchronousCommit"`
}

// Relay tunes the delivery engine.
type Relay struct {
	BatchSize int `yaml:"batchSize"`
	// MaxInflight bounds the rows one relay holds claimed and not yet
	// settled; 0: 10 × batchSize.
	MaxInflight int `yaml:"maxInflight"`
	// Concurrency is the hard cap of rows in flight to each destination; 0:
	// maxInflight. Below it each destination's limit adapts.
	Concurrency int `yaml:"concurrency"`
	// InflightBatches is read as maxInflight = batchSize × inflightBatches
	// when maxInflight is not set (the key of an earlier engine).
	InflightBatches int      `yaml:"inflightBatches"`
	PollInterval    Duration `yaml:"pollInterval"`
	MaxPollInterval Duration `yaml:"maxPollInterval"` // idle polling backs off up to this
	Lease           Duration `yaml:"lease"`
	MaxAttempts     int      `yaml:"maxAttempts"`
	Backoff         Backoff  `yaml:"backoff"`
	ShutdownTimeout Duration `yaml:"shutdownTimeout"`
	ReapInterval    Duration `yaml:"reapInterval"` // how often expired leases are released
	OnDead          string   `yaml:"onDead"`       // release | hold
	// ClaimMode is how rows are claimed: lease (an UPDATE to processing
	// under a renewed lease), lock (FOR UPDATE SKIP LOCKED in a transaction
	// held while the batch is published, for tables without lease columns)
	// or auto (lease when the table can hold a lease). docs/adopting.md.
	ClaimMode string `yaml:"claimMode"`
	// ClaimTurns is who takes turns to claim: table (the claims of every
	// relay on the table, through an advisory lock; PostgreSQL lease mode)
	// or replica (only the claims of one relay). docs/configuration.md.
	ClaimTurns string `yaml:"claimTurns"`
	// LockTimeout bounds how long a lock-mode batch holds its rows locked
	// (its transaction); 0 means relay.lease.
	LockTimeout    Duration `yaml:"lockTimeout"`
	Notify         Notify   `yaml:"notify"` // wake on commit (PostgreSQL LISTEN/NOTIFY)
	CircuitBreaker Breaker  `yaml:"circuitBreaker"`
}

// Breaker configures the per-destination circuit breaker: after Failures
// consecutive connection-level publish failures the destination's rows
// wait (without spending attempts) for OpenFor, then one probe batch is let
// through; each failed probe doubles the wait up to MaxOpenFor.
type Breaker struct {
	Failures   int      `yaml:"failures"`
	OpenFor    Duration `yaml:"openFor"`
	MaxOpenFor Duration `yaml:"maxOpenFor"`
}

// Notify turns on wake-on-commit (PostgreSQL only): the relay LISTENs on
// Channel and claims as soon as a NOTIFY arrives; polling stays as the
// safety net. With CreateTrigger the relay installs (idempotently, at
// start) a statement-level AFTER INSERT trigger on the outbox table that
// sends the NOTIFY; without it, the application sends NOTIFY itself (the
// producer package, or its own trigger). An empty Channel turns it off.
type Notify struct {
	Channel       string `yaml:"channel"`
	CreateTrigger bool   `yaml:"createTrigger"`
}

// Retention deletes old finished rows in batches; pending and processing
// rows are never deleted. A zero (absent) maxAge keeps that state's rows.
type Retention struct {
	Sent      RetentionRule `yaml:"sent"`
	Dead      RetentionRule `yaml:"dead"`
	Interval  Duration      `yaml:"interval"`  // between passes; 0 = 1m
	BatchSize int           `yaml:"batchSize"` // rows per delete statement; 0 = 1000
}

// RetentionRule is the retention of one state.
type RetentionRule struct {
	MaxAge Duration `yaml:"maxAge"` // rows last updated longer ago are deleted; 0 = keep
}

// Backoff is the retry schedule: base × 2^attempt, ± jitter, capped at Max.
type Backoff struct {
	Base   Duration `yaml:"base"`
	Max    Duration `yaml:"max"`
	Jitter float64  `yaml:"jitter"`
}

// Server is the management HTTP server (/metrics, /health/*).
type Server struct {
	Listen string `yaml:"listen"` // empty: no server
	// Pprof serves the Go runtime profiles (net/http/pprof) under
	// /debug/pprof/ on the management server.
	Pprof bool `yaml:"pprof"`
	// Readiness is what /health/ready answers 503 for: database (the
	// default: the database is unreachable; a destination's outage shows
	// in the body and the metrics only) or strict (also a destination that
	// is down or whose circuit is open).
	Readiness string `yaml:"readiness"`
}

// The values of server.readiness.
const (
	ReadinessDatabase = "database"
	ReadinessStrict   = "strict"
)

// Log configures log/slog output.
type Log struct {
	Format string `yaml:"format"` // text | json
	Level  string `yaml:"level"`  // debug | info | warn | error
}

// Destination is one named target. Type selects which of the other keys
// apply; keys of another type are rejected by validation.
type Destination struct {
	Type string `yaml:"type"` // nats | http | kafka | amqp

	// nats
	Servers        []string `yaml:"servers"`
	Subject        string   `yaml:"subject"`
	SubjectFrom    string   `yaml:"subjectFrom"`
	Stream         string   `yaml:"stream"`       // optional: create or check this stream
	StreamCreate   bool     `yaml:"createStream"` // create Stream covering Subjects if missing
	StreamSubjects []string `yaml:"streamSubjects"`
	CredsFile      string   `yaml:"credsFile"`
	Token          string   `yaml:"token"`
	MaxPending     int      `yaml:"maxPending"` // async publish window
	// SubjectTokens is single (each value rendered into the subject is
	// one token) or allow (a value may span tokens).
	SubjectTokens string `yaml:"subjectTokens"`

	// http (and amqp: url)
	URL         string            `yaml:"url"`
	Timeout     Duration          `yaml:"timeout"`
	Headers     map[string]string `yaml:"headers"`
	Auth        *Auth             `yaml:"auth"`
	Concurrency int               `yaml:"concurrency"` // 0: relay.concurrency
	// AllowedHosts are the hosts a url whose scheme or host is a template
	// may render (host, *.domain, host:port).
	AllowedHosts []string `yaml:"allowedHosts"`
	// Signing signs every request (Standard Webhooks).
	Signing *Signing `yaml:"signing"`

	// kafka
	Brokers   []string `yaml:"brokers"`
	Topic     string   `yaml:"topic"`
	TopicFrom string   `yaml:"topicFrom"`
	Key       string   `yaml:"key"`
	// SASL authenticates to the brokers (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
	SASL *SASL `yaml:"sasl"`
	// CreateTopics lets the brokers create a missing topic on first use.
	CreateTopics bool `yaml:"createTopics"`

	// amqp
	Exchange     string `yaml:"exchange"`
	ExchangeFrom string `yaml:"exchangeFrom"`
	ExchangeType string `yaml:"exchangeType"`
	RoutingKey   string `yaml:"routingKey"`
	// DeclareExchange declares each exchange (durable, exchangeType) before
	// publishing to it; off, the exchange must exist.
	DeclareExchange bool `yaml:"declareExchange"`
	// RoutingKeyTokens is single (each value rendered into the exchange or
	// routing key is one word) or allow (a value may span words).
	RoutingKeyTokens string `yaml:"routingKeyTokens"`

	// AllowHeaders, for every type, are row headers sent although the
	// destination's policy drops them (a broker control header).
	AllowHeaders []string `yaml:"allowHeaders"`

	// CloudEvents, for every type, sends each row as a CloudEvent.
	CloudEvents *CloudEvents `yaml:"cloudEvents"`

	// tls, for every type that supports it
	TLS *TLS `yaml:"tls"`
}

// Auth is HTTP authentication: a bearer token, basic credentials or the
// OAuth2 client credentials grant.
type Auth struct {
	Bearer   string  `yaml:"bearer"`
	Username string  `yaml:"username"`
	Password string  `yaml:"password"`
	OAuth2   *OAuth2 `yaml:"oauth2"`
}

// OAuth2 is the client credentials grant: the token endpoint, the
// client's credentials, and what the token request asks for.
type OAuth2 struct {
	TokenURL       string            `yaml:"tokenURL"`
	ClientID       string            `yaml:"clientID"`
	ClientSecret   string            `yaml:"clientSecret"` // a secret: never logged
	Scopes         []string          `yaml:"scopes"`
	EndpointParams map[string]string `yaml:"endpointParams"` // extra form values (audience, resource)
}

// Signing is Standard Webhooks signing: one v1 signature per secret, and a
// v1a (ed25519) signature when privateKeyFile is set.
type Signing struct {
	Secrets        []string `yaml:"secrets"` // whsec_<base64>; secrets, never logged
	PrivateKeyFile string   `yaml:"privateKeyFile"`
}

// CloudEvents sends rows as CloudEvents 1.0 in the destination protocol's
// binding: binary (attributes in headers, body the payload) or structured
// (the JSON event as the body). Source and Type are templates.
type CloudEvents struct {
	Mode   string `yaml:"mode"`   // binary (default) | structured
	Source string `yaml:"source"` // default /queuebox/<destination name>
	Type   string `yaml:"type"`   // default {{ topic }}
}

// SASL is Kafka SASL authentication.
type SASL struct {
	Mechanism string `yaml:"mechanism"` // PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512
	Username  string `yaml:"username"`
	Password  string `yaml:"password"`
}

// TLS configures a client TLS connection.
type TLS struct {
	CAFile             string `yaml:"caFile"`
	CertFile           string `yaml:"certFile"`
	KeyFile            string `yaml:"keyFile"`
	InsecureSkipVerify bool   `yaml:"insecureSkipVerify"`
}

// Route sends rows whose topic matches TopicPattern (and, when set, for
// which the When expression is true) to Destination, the body replaced by
// the result of Transform when set. OnError says what a runtime error of
// either expression does: retry, skip (try the next route) or dead (the
// default). docs/routing.md describes the expressions.
type Route struct {
	TopicPattern string `yaml:"topicPattern"`
	Destination  string `yaml:"destination"`
	When         string `yaml:"when,omitempty"`      // boolean expr-lang expression; empty: always
	Transform    string `yaml:"transform,omitempty"` // expr-lang expression; the delivered body is its JSON
	OnError      string `yaml:"onError,omitempty"`   // retry | skip | dead; empty: dead
}

// Duration is a time.Duration written as a Go duration string ("250ms").
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

var destinationStructType = reflect.TypeOf(Destination{})
