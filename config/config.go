package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/queuebox/queuebox/redact"
)

// Load reads, expands, decodes and validates the configuration file at
// path, with ${VAR} taken from the process environment. A problem in the
// file is returned as Errors, each naming the file, line and key.
func Load(path string) (*Config, error) {
	return load(path, os.LookupEnv)
}

// MaxFileBytes is the largest configuration file Load and Parse read
// (1 MiB): a real one is a few KiB, and a larger one (a wrong path, a
// generated file gone wrong) is refused before it is parsed, which would
// take memory many times its size.
const MaxFileBytes = 1 << 20

func load(path string, lookupEnv func(string) (string, bool)) (*Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() && st.Size() > MaxFileBytes {
		return nil, inFile(tooLarge(st.Size()), path)
	}
	// Read one byte more than the limit: a file that is not a regular
	// file (a pipe) has no size to look at first.
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, inFile(tooLarge(-1), path)
	}
	cfg, err := Parse(data, lookupEnv)
	if err != nil {
		return nil, inFile(err, path)
	}
	return cfg, nil
}

// inFile names path in every problem of err, when it is Errors.
func inFile(err error, path string) error {
	var errs Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			e.File = path
		}
		return errs
	}
	return err
}

// Parse turns the YAML in data into a validated configuration: ${VAR} and
// ${VAR:-default} are expanded with lookupEnv (nil: nothing is set), the
// result is decoded strictly over the defaults, and the whole is
// validated. Every problem found is reported, as Errors sorted by position.
// Problems that do not stop the relay are kept in Warnings.
func Parse(data []byte, lookupEnv func(string) (string, bool)) (*Config, error) {
	if len(data) > MaxFileBytes {
		return nil, tooLarge(int64(len(data)))
	}
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	expanded, cols, envValues, errs := expandEnv(data, lookupEnv)
	if len(errs) > 0 {
		errs.sort()
		return nil, errs
	}
	cfg := Default()
	d := &decoder{seen: map[string]pos{}, anchors: map[string]ast.Node{}, cols: cols, envValues: envValues}
	if err := d.parse(expanded, cfg); err != nil {
		return nil, err
	}
	if len(d.errs.list) > 0 {
		d.errs.list.sort()
		return nil, d.errs.list
	}
	v := &validator{cfg: cfg, seen: d.seen}
	v.run()
	if len(v.errs.list) > 0 {
		v.errs.list.sort()
		return nil, v.errs.list
	}
	v.warns.list.sort()
	for _, w := range v.warns.list {
		cfg.warnings = append(cfg.warnings, w.Error())
	}
	return cfg, nil
}

// parse reads the YAML syntax tree and decodes it into cfg.
func (d *decoder) parse(data []byte, cfg *Config) (err error) {
	defer func() {
		// The YAML parser is third-party code; a crash on hostile input
		// must still be a configuration error, not a crash of the relay.
		if r := recover(); r != nil {
			err = Errors{{Msg: fmt.Sprintf("invalid YAML: parser failure: %v", r)}}
		}
	}()
	file, err := parser.ParseBytes(data, 0, parser.AllowDuplicateMapKey())
	if err != nil {
		var yerr yaml.Error
		if errors.As(err, &yerr) {
			at := d.tokenPos(yerr.GetToken())
			return Errors{{Line: at.line, Column: at.col, Msg: "invalid YAML: " + yerr.GetMessage()}}
		}
		return Errors{{Msg: "invalid YAML: " + err.Error()}}
	}
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if _, isComment := doc.Body.(*ast.CommentGroupNode); isComment {
			continue
		}
		if body != nil {
			at := d.at(doc.Body)
			return Errors{{Line: at.line, Column: at.col, Msg: "a configuration file holds one YAML document, found more"}}
		}
		body = doc.Body
	}
	if body == nil {
		return nil
	}
	d.collectAnchors(body, 0)
	d.decode(body, reflect.ValueOf(cfg).Elem(), "")
	return nil
}

// tooLarge is the error for a configuration of size bytes (-1: more than
// the limit, size unknown).
func tooLarge(size int64) error {
	what := "more than 1048576 bytes"
	if size >= 0 {
		what = fmt.Sprintf("%d bytes", size)
	}
	return Errors{{Msg: fmt.Sprintf("the file is %s, above the limit of %d bytes (1 MiB) for a configuration file; it is not read", what, MaxFileBytes)}}
}

// Default returns the configuration that an empty file means (before
// validation, which then asks for database.url and routes).
func Default() *Config {
	return &Config{
		Database: Database{
			Type:              "postgresql",
			OutboxTable:       "outbox",
			SynchronousCommit: "off",
		},
		Relay: Relay{
			BatchSize:       100,
			PollInterval:    Duration(100 * time.Millisecond),
			MaxPollInterval: Duration(time.Second),
			Lease:           Duration(30 * time.Second),
			MaxAttempts:     5,
			Backoff: Backoff{
				Base:   Duration(time.Second),
				Max:    Duration(60 * time.Second),
				Jitter: 0.25,
			},
			ShutdownTimeout: Duration(10 * time.Second),
			OnDead:          "release",
			ClaimMode:       "auto",
			ClaimTurns:      "table",
			CircuitBreaker: Breaker{
				Failures:   5,
				OpenFor:    Duration(5 * time.Second),
				MaxOpenFor: Duration(30 * time.Second),
			},
		},
		Server: Server{Listen: "127.0.0.1:9090", Readiness: ReadinessDatabase},
		Log:    Log{Format: "text", Level: "info"},
	}
}

// Default values that depend on other settings.
const (
	defaultReapInterval = 5 * time.Second
	defaultTimeout      = 10 * time.Second
	defaultKafkaKey     = "{{ key }}"
	defaultAMQPRouting  = "{{ topic }}"
	defaultExchangeType = "topic"
	redactedPlaceholder = redact.Mask
)

// applyDerivedDefaults fills defaults that depend on what the file set:
// relay.reapInterval (half the lease, at most 5s) and the per-type
// destination defaults, for keys the file does not name.
//
// A default that the file's own values would contradict follows them:
// relay.maxPollInterval is at least relay.pollInterval, relay.backoff.max at
// least relay.backoff.base, relay.circuitBreaker.maxOpenFor at least
// openFor (pollInterval: 2s alone used to fail on "relay.maxPollInterval
// must be at least 2s, got 1s", a key the file never wrote), and
// reapInterval is never 0.
func (v *validator) applyDerivedDefaults() {
	r := &v.cfg.Relay
	if r.MaxInflight == 0 && r.BatchSize > 0 {
		r.MaxInflight = 10 * r.BatchSize
		if r.InflightBatches > 0 {
			r.MaxInflight = r.BatchSize * r.InflightBatches
			v.warn("relay.inflightBatches", "is read as relay.maxInflight: %d (batchSize × inflightBatches): rows settle one by one now, and maxInflight bounds the rows in flight", r.MaxInflight)
		}
	}
	if _, set := v.seen["relay.reapInterval"]; !set {
		r.ReapInterval = Duration(max(min(defaultReapInterval, r.Lease.D()/2), time.Millisecond))
	}
	if !v.set("relay.maxPollInterval") {
		r.MaxPollInterval = max(r.MaxPollInterval, r.PollInterval)
	}
	if !v.set("relay.backoff.max") {
		r.Backoff.Max = max(r.Backoff.Max, r.Backoff.Base)
	}
	if !v.set("relay.circuitBreaker.maxOpenFor") {
		r.CircuitBreaker.MaxOpenFor = max(r.CircuitBreaker.MaxOpenFor, r.CircuitBreaker.OpenFor)
	}
	for name, dst := range v.cfg.Destinations {
		p := "destinations." + name + "."
		if _, set := v.seen[p+"timeout"]; !set {
			dst.Timeout = Duration(defaultTimeout)
		}
		switch dst.Type {
		case "kafka":
			if _, set := v.seen[p+"key"]; !set {
				dst.Key = defaultKafkaKey
			}
		case "amqp":
			if _, set := v.seen[p+"routingKey"]; !set {
				dst.RoutingKey = defaultAMQPRouting
			}
			if _, set := v.seen[p+"exchangeType"]; !set {
				dst.ExchangeType = defaultExchangeType
			}
		}
		v.cfg.Destinations[name] = dst
	}
}

// Warnings returns problems that do not stop the relay, such as a
// destination no route uses or a route that can never match, one per line
// in the form "line:col: path: message".
func (c *Config) Warnings() []string { return append([]string(nil), c.warnings...) }

// fromShorthand maps the values of subjectFrom, topicFrom and exchangeFrom
// to the template they stand for.
var fromShorthand = map[string]string{
	"aggregate_type": "{{ aggregateType }}",
	"topic":          "{{ topic }}",
	"key":            "{{ key }}",
}

var fromNames = []string{"aggregate_type", "topic", "key"}

// AddressTemplate returns the template of the destination's main address,
// with the *From shorthands resolved: the NATS subject, the HTTP URL, the
// Kafka topic or the AMQP exchange. The second address of Kafka (the record
// key) and AMQP (the routing key) is in Key and RoutingKey, defaulted by
// Parse.
func (d Destination) AddressTemplate() string {
	pick := func(tmpl, from string) string {
		if from != "" {
			return fromShorthand[from]
		}
		return tmpl
	}
	switch d.Type {
	case "nats":
		return pick(d.Subject, d.SubjectFrom)
	case "http":
		return d.URL
	case "kafka":
		return pick(d.Topic, d.TopicFrom)
	case "amqp":
		return pick(d.Exchange, d.ExchangeFrom)
	}
	return ""
}

// Secrets returns every secret literal in the configuration (passwords in
// URLs, tokens, HTTP credentials, OAuth2 client secrets, webhook signing
// secrets and sensitive header values), for
// redact.String to remove from log lines and last_error.
func (c *Config) Secrets() []string {
	var out []string
	add := func(s string) {
		if s != "" {
			out = append(out, s)
		}
	}
	add(urlPassword(c.Database.URL))
	for _, kv := range strings.Fields(c.Database.URL) {
		if k, val, ok := strings.Cut(kv, "="); ok && strings.EqualFold(k, "password") {
			add(strings.Trim(val, "'"))
		}
	}
	for _, name := range sortedKeys(c.Destinations) {
		d := c.Destinations[name]
		add(urlPassword(d.URL))
		for _, s := range d.Servers {
			add(urlPassword(s))
		}
		add(d.Token)
		if d.SASL != nil {
			add(d.SASL.Password)
		}
		if d.Auth != nil {
			add(d.Auth.Bearer)
			add(d.Auth.Password)
			if d.Auth.OAuth2 != nil {
				add(d.Auth.OAuth2.ClientSecret)
			}
		}
		if d.Signing != nil {
			for _, sec := range d.Signing.Secrets {
				add(sec)
				if key := strings.TrimPrefix(sec, "whsec_"); key != sec {
					add(key)
				}
			}
		}
		for h, val := range d.Headers {
			if sensitiveHeader(h) {
				add(val)
			}
		}
	}
	for _, s := range c.Inbox.secrets() {
		add(s)
	}
	return out
}

// urlPassword returns the password in the userinfo of a URL-like string.
func urlPassword(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return ""
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return ""
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok {
		return ""
	}
	return pw
}

func sensitiveHeader(name string) bool {
	n := strings.ToLower(name)
	for _, s := range []string{"auth", "token", "key", "secret", "cookie", "password", "signature"} {
		if strings.Contains(n, s) {
			return true
		}
	}
	return false
}

// Redacted returns a deep copy of c with every secret replaced by
// "xxxxx": URL passwords, tokens, HTTP credentials and sensitive header
// values. It is what String prints and what may be logged.
func (c *Config) Redacted() *Config {
	out := *c
	secrets := c.Secrets()
	out.warnings = nil
	out.Database.URL = redact.String(c.Database.URL, secrets...)
	out.Database.Columns = cloneMap(c.Database.Columns)
	out.Database.States = cloneMap(c.Database.States)
	out.Routes = append([]Route(nil), c.Routes...)
	out.Inbox = c.Inbox.redacted(secrets)
	if c.Destinations != nil {
		out.Destinations = make(map[string]Destination, len(c.Destinations))
	}
	for name, d := range c.Destinations {
		d.URL = redact.String(d.URL, secrets...)
		d.Servers = append([]string(nil), d.Servers...)
		for i, s := range d.Servers {
			d.Servers[i] = redact.String(s, secrets...)
		}
		d.Brokers = append([]string(nil), d.Brokers...)
		d.AllowHeaders = append([]string(nil), d.AllowHeaders...)
		d.AllowedHosts = append([]string(nil), d.AllowedHosts...)
		d.StreamSubjects = append([]string(nil), d.StreamSubjects...)
		if d.Token != "" {
			d.Token = redactedPlaceholder
		}
		if d.SASL != nil {
			sa := *d.SASL
			if sa.Password != "" {
				sa.Password = redactedPlaceholder
			}
			d.SASL = &sa
		}
		if d.Auth != nil {
			a := *d.Auth
			if a.Bearer != "" {
				a.Bearer = redactedPlaceholder
			}
			if a.Password != "" {
				a.Password = redactedPlaceholder
			}
			if a.OAuth2 != nil {
				o := *a.OAuth2
				if o.ClientSecret != "" {
					o.ClientSecret = redactedPlaceholder
				}
				o.Scopes = append([]string(nil), o.Scopes...)
				o.EndpointParams = cloneMap(o.EndpointParams)
				a.OAuth2 = &o
			}
			d.Auth = &a
		}
		if d.Signing != nil {
			sg := *d.Signing
			sg.Secrets = make([]string, len(d.Signing.Secrets))
			for i := range sg.Secrets {
				sg.Secrets[i] = redactedPlaceholder
			}
			d.Signing = &sg
		}
		if d.CloudEvents != nil {
			ce := *d.CloudEvents
			d.CloudEvents = &ce
		}
		if d.Headers != nil {
			h := make(map[string]string, len(d.Headers))
			for k, val := range d.Headers {
				if sensitiveHeader(k) {
					val = redactedPlaceholder
				}
				h[k] = redact.String(val, secrets...)
			}
			d.Headers = h
		}
		if d.TLS != nil {
			t := *d.TLS
			d.TLS = &t
		}
		out.Destinations[name] = d
	}
	return &out
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// String returns the effective configuration as YAML, with secrets
// redacted.
func (c *Config) String() string {
	b, err := yaml.MarshalWithOptions(c.Redacted(), yaml.Indent(2), yaml.IndentSequence(true))
	if err != nil {
		return fmt.Sprintf("<config: %v>", err)
	}
	return string(b)
}
