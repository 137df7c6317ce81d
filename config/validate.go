package config

import (
	"encoding/base64"
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"strings"

	"github.com/queuebox/queuebox/address"
	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/redact"
	"github.com/queuebox/queuebox/router"
	"github.com/queuebox/queuebox/suggest"
)

// validator checks a decoded configuration. seen holds the position of
// every key the file wrote, so that messages point at the line and so that
// "absent" and "zero" can be told apart.
type validator struct {
	cfg   *Config
	seen  map[string]pos
	errs  problems
	warns problems
}

// where returns the position of path, or of its nearest written parent.
func (v *validator) where(path string) pos {
	for p := path; p != ""; {
		if at, ok := v.seen[p]; ok {
			return at
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return pos{}
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs.add(v.where(path), path, format, args...)
}

func (v *validator) warn(path, format string, args ...any) {
	v.warns.add(v.where(path), path, format, args...)
}

func (v *validator) set(path string) bool {
	_, ok := v.seen[path]
	return ok
}

func (v *validator) run() {
	v.applyDerivedDefaults()
	v.database()
	v.relay()
	v.retention()
	v.server()
	v.log()
	v.destinations()
	v.routes()
	v.inbox()
}

// oneOf checks that val is one of allowed, suggesting the near miss.
func (v *validator) oneOf(path, val string, allowed ...string) bool {
	if slices.Contains(allowed, val) {
		return true
	}
	if val == "" {
		v.fail(path, "required: one of %s", strings.Join(allowed, ", "))
		return false
	}
	msg := fmt.Sprintf("must be one of %s, got %q", strings.Join(allowed, ", "), val)
	if c, ok := suggest.Closest(val, allowed); ok {
		msg = fmt.Sprintf("must be one of %s, got %q (did you mean %q?)", strings.Join(allowed, ", "), val, c)
	}
	v.fail(path, "%s", msg)
	return false
}

var (
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	tableName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)
	// logicalColumns are dialect.LogicalColumns() (config_test checks it).
	logicalColumns = dialect.LogicalColumns()
	columnAliases  = map[string]string{"aggregate_type": "aggregateType", "max_attempts": "maxAttempts", "scheduled_at": "scheduledAt",
		"created_at": "createdAt", "updated_at": "updatedAt", "claimed_at": "claimedAt", "lease_expires_at": "leaseExpiresAt",
		"claim_token": "claimToken", "last_error": "lastError", "sent_at": "sentAt", "held_at": "heldAt"}
	logicalStates   = []string{"pending", "processing", "sent", "dead"}
	destinationType = []string{"nats", "http", "kafka", "amqp"}
)

// defaultMapping names the bundled table's columns, which an unmapped
// logical column keeps (sentAt is absent unless mapped).
var defaultMapping = dialect.DefaultMapping()

// sharedColumns fails a mapping that puts two logical columns on one
// physical column, explicitly or through a default name: the relay would
// write one's values over the other's. The one exception is a monotonic id
// serving as the sequence too (sequence: id).
func (v *validator) sharedColumns(columns map[string]string) {
	owner := map[string]string{}
	for _, k := range logicalColumns {
		phys, explicit := columns[k]
		if !explicit {
			phys, _ = defaultMapping.Column(k)
		}
		if phys == "" || !identifier.MatchString(phys) {
			continue
		}
		lower := strings.ToLower(phys)
		other, dup := owner[lower]
		if !dup {
			owner[lower] = k
			continue
		}
		if (other == "id" && k == "sequence") || (other == "sequence" && k == "id") {
			continue
		}
		at, by := k, other
		if !explicit {
			at, by = other, k
		}
		how := ""
		if _, ok := columns[by]; !ok && dialect.Required(by) {
			how = fmt.Sprintf(" by default (map %s to its own column)", by)
		} else if !ok {
			how = fmt.Sprintf(" by default (map %s to its own column, or declare it absent with %s: \"\")", by, by)
		}
		v.fail("database.columns."+at, "maps to column %q, which %s also maps to%s", phys, by, how)
	}
}

func (v *validator) database() {
	db := &v.cfg.Database
	v.oneOf("database.type", db.Type, "postgresql", "sqlserver")
	if strings.TrimSpace(db.URL) == "" {
		v.fail("database.url", "required (the connection URL, usually ${DATABASE_URL})")
	}
	// PostgreSQL cuts longer names to 63 bytes (NAMEDATALEN - 1), so the
	// relay would look for a table or column of another name; SQL Server
	// takes 128 characters.
	identMax, dbName := 63, "PostgreSQL"
	if db.Type == "sqlserver" {
		identMax, dbName = 128, "SQL Server"
	}
	if !tableName.MatchString(db.OutboxTable) {
		v.fail("database.outboxTable", "must be a table name, optionally schema-qualified (schema.table), of letters, digits and _, got %q", db.OutboxTable)
	} else {
		for _, part := range strings.Split(db.OutboxTable, ".") {
			if len(part) > identMax {
				v.fail("database.outboxTable", "%q is %d characters long; %s names are at most %d", part, len(part), dbName, identMax)
			}
		}
	}
	if db.MaxConns < 0 {
		v.fail("database.maxConns", "must be 0 (derived) or positive, got %d", db.MaxConns)
	}
	if n := v.cfg.Relay.Notify; db.Type == "sqlserver" && (n.Channel != "" || n.CreateTrigger) {
		// run refused it at start while check passed: say it here, for both.
		v.fail("relay.notify", "wake on commit needs database.type postgresql (LISTEN/NOTIFY); SQL Server polls: remove relay.notify")
	}
	if n := v.cfg.Relay.Notify; n.CreateTrigger && n.Channel == "" {
		v.fail("relay.notify.createTrigger", "needs relay.notify.channel (the channel the trigger notifies)")
	}
	for _, k := range sortedKeys(db.Columns) {
		// snake_case spellings (aggregate_type) are accepted for the
		// camelCase logical names the dialects use.
		camel, alias := columnAliases[k]
		if !alias {
			continue
		}
		if _, both := db.Columns[camel]; both {
			v.fail("database.columns."+k, "names the same logical column as %s; keep one", camel)
			continue
		}
		db.Columns[camel] = db.Columns[k]
		delete(db.Columns, k)
		// Messages name the logical column and point at the line that
		// spelled it.
		if at, ok := v.seen["database.columns."+k]; ok {
			v.seen["database.columns."+camel] = at
		}
	}
	for _, k := range sortedKeys(db.Columns) {
		p := "database.columns." + k
		if !slices.Contains(logicalColumns, k) {
			v.fail(p, "unknown column%s (known: %s)", suggest.DidYouMean(k, logicalColumns), strings.Join(logicalColumns, ", "))
			continue
		}
		switch {
		case db.Columns[k] == "" && dialect.Required(k):
			v.fail(p, "the relay cannot work without its %s column; map it to an existing column", k)
		case db.Columns[k] == "":
			// Declared absent (null, ~ or ""): see docs/adopting.md.
		case !identifier.MatchString(db.Columns[k]):
			v.fail(p, "must be a column name of letters, digits and _, got %q", db.Columns[k])
		case len(db.Columns[k]) > identMax:
			v.fail(p, "%q is %d characters long; %s names are at most %d", db.Columns[k], len(db.Columns[k]), dbName, identMax)
		}
	}
	v.sharedColumns(db.Columns)
	values := map[string]string{}
	for _, k := range sortedKeys(db.States) {
		p := "database.states." + k
		if !slices.Contains(logicalStates, k) {
			v.fail(p, "unknown state%s (known: %s)", suggest.DidYouMean(k, logicalStates), strings.Join(logicalStates, ", "))
			continue
		}
		val := db.States[k]
		if val == "" && k == "processing" {
			continue // declared absent: lock mode (docs/adopting.md)
		}
		if val == "" {
			v.fail(p, "must not be empty")
			continue
		}
		if other, dup := values[val]; dup {
			v.fail(p, "value %q is also used by state %s", val, other)
		}
		values[val] = k
	}
}

func (v *validator) positive(path string, n int) {
	if n <= 0 {
		v.fail(path, "must be positive, got %d", n)
	}
}

func (v *validator) notNegative(path string, n int) {
	if n < 0 {
		v.fail(path, "must be 0 or positive, got %d", n)
	}
}

func (v *validator) positiveDuration(path string, d Duration) {
	if d <= 0 {
		v.fail(path, "must be a positive duration, got %s", d)
	}
}

func (v *validator) relay() {
	r := &v.cfg.Relay
	v.positive("relay.batchSize", r.BatchSize)
	v.notNegative("relay.maxInflight", r.MaxInflight)
	v.notNegative("relay.concurrency", r.Concurrency)
	v.notNegative("relay.inflightBatches", r.InflightBatches)
	if r.MaxInflight > 0 && r.BatchSize > 0 && r.MaxInflight < r.BatchSize {
		v.fail("relay.maxInflight", "must be at least relay.batchSize (%d), got %d", r.BatchSize, r.MaxInflight)
	}
	v.positive("relay.maxAttempts", r.MaxAttempts)
	v.positiveDuration("relay.pollInterval", r.PollInterval)
	if r.MaxPollInterval < r.PollInterval {
		v.fail("relay.maxPollInterval", "must be at least relay.pollInterval (%s), got %s", r.PollInterval, r.MaxPollInterval)
	}
	v.positiveDuration("relay.lease", r.Lease)
	v.positiveDuration("relay.shutdownTimeout", r.ShutdownTimeout)
	v.positiveDuration("relay.reapInterval", r.ReapInterval)
	v.positiveDuration("relay.backoff.base", r.Backoff.Base)
	v.positiveDuration("relay.backoff.max", r.Backoff.Max)
	if r.Backoff.Base > 0 && r.Backoff.Max > 0 && r.Backoff.Max < r.Backoff.Base {
		v.fail("relay.backoff.max", "must be at least relay.backoff.base (%s), got %s", r.Backoff.Base, r.Backoff.Max)
	}
	if j := r.Backoff.Jitter; !(j >= 0 && j <= 1) || math.IsNaN(j) {
		v.fail("relay.backoff.jitter", "must be between 0 and 1, got %v", j)
	}
	v.oneOf("database.synchronousCommit", v.cfg.Database.SynchronousCommit, "off", "local", "remote_write", "on", "remote_apply")
	v.oneOf("relay.onDead", r.OnDead, "release", "hold")
	v.oneOf("relay.claimMode", r.ClaimMode, "auto", "lease", "lock", "buckets")
	v.oneOf("relay.claimTurns", r.ClaimTurns, "table", "replica")
	if r.LockTimeout < 0 {
		v.fail("relay.lockTimeout", "must be 0 (relay.lease) or positive, got %v", r.LockTimeout.D())
	}
	v.positive("relay.circuitBreaker.failures", r.CircuitBreaker.Failures)
	v.positiveDuration("relay.circuitBreaker.openFor", r.CircuitBreaker.OpenFor)
	v.positiveDuration("relay.circuitBreaker.maxOpenFor", r.CircuitBreaker.MaxOpenFor)
	if r.CircuitBreaker.MaxOpenFor < r.CircuitBreaker.OpenFor {
		v.fail("relay.circuitBreaker.maxOpenFor", "must be at least relay.circuitBreaker.openFor (%s), got %s", r.CircuitBreaker.OpenFor, r.CircuitBreaker.MaxOpenFor)
	}
	if r.Lease > 0 && r.PollInterval >= r.Lease {
		v.warn("relay.pollInterval", "%s is not shorter than relay.lease (%s)", r.PollInterval, r.Lease)
	}
}

func (v *validator) retention() {
	rt := &v.cfg.Retention
	for _, c := range []struct {
		path string
		d    Duration
	}{{"retention.sent.maxAge", rt.Sent.MaxAge}, {"retention.dead.maxAge", rt.Dead.MaxAge}, {"retention.interval", rt.Interval}} {
		if c.d < 0 {
			v.fail(c.path, "must be 0 (the default) or positive, got %v", c.d.D())
		}
	}
	if rt.BatchSize < 0 {
		v.fail("retention.batchSize", "must be 0 (the default, 1000) or positive, got %d", rt.BatchSize)
	}
}

func (v *validator) server() {
	if l := v.cfg.Server.Listen; l != "" {
		if _, _, err := net.SplitHostPort(l); err != nil {
			v.fail("server.listen", "must be host:port (or empty for no server), got %q", l)
		}
	}
	v.oneOf("server.readiness", v.cfg.Server.Readiness, ReadinessDatabase, ReadinessStrict)
}

func (v *validator) log() {
	v.oneOf("log.format", v.cfg.Log.Format, "text", "json")
	v.oneOf("log.level", v.cfg.Log.Level, "debug", "info", "warn", "error")
}

// Keys every destination may have, and keys of each type.
var (
	commonKeys = []string{"type", "concurrency", "timeout", "tls", "allowHeaders", "cloudEvents"}
	typeKeys   = map[string][]string{
		"nats":  {"servers", "subject", "subjectFrom", "subjectTokens", "stream", "createStream", "streamSubjects", "credsFile", "token", "maxPending"},
		"http":  {"url", "allowedHosts", "headers", "auth", "signing"},
		"kafka": {"brokers", "topic", "topicFrom", "key", "sasl", "createTopics"},
		"amqp":  {"url", "exchange", "exchangeFrom", "exchangeType", "routingKey", "routingKeyTokens", "declareExchange"},
	}
	// identityHeaders carry a message's identity on some protocol; a row
	// header can never set one.
	identityHeaders = []string{"Nats-Msg-Id", "X-Message-Id", "Idempotency-Key", "message_id"}
	// ownHeaders are the headers each type of destination sets itself.
	ownHeaders = map[string][]string{
		"nats":  {"X-Topic", "X-Attempt", "X-Message-Key"},
		"http":  {"X-Topic", "X-Attempt", "X-Message-Key", "X-Message-Key-Encoding", "X-Topic-Encoding", "Content-Type"},
		"kafka": {"X-Topic", "X-Attempt"},
		"amqp":  {"x-topic", "x-attempt", "x-message-key"},
	}
	reservedHeaders = []string{"X-Message-Id", "Idempotency-Key", "X-Topic", "X-Attempt", "X-Message-Key", "Content-Type"}
	headerName      = regexp.MustCompile("^[!#$%&'*+\\-.^_`|~0-9A-Za-z]+$")
	allowHeaderName = regexp.MustCompile(`^[!-9;-~]{1,255}$`)
	allowedHost     = regexp.MustCompile(`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$`)
)

func article(typ string) string {
	if typ == "http" || typ == "amqp" {
		return "an"
	}
	return "a"
}

func (v *validator) destinations() {
	if len(v.cfg.Destinations) == 0 {
		v.fail("destinations", "at least one destination is required")
		return
	}
	_, allKeys := yamlFields(destinationStructType)
	for _, name := range sortedKeys(v.cfg.Destinations) {
		d := v.cfg.Destinations[name]
		p := "destinations." + name
		if name == "" {
			v.fail(p, "a destination needs a name")
		}
		if !v.oneOf(p+".type", d.Type, destinationType...) {
			continue
		}
		allowed := append(append([]string(nil), commonKeys...), typeKeys[d.Type]...)
		for _, k := range allKeys {
			if v.set(p+"."+k) && !slices.Contains(allowed, k) {
				v.fail(p+"."+k, "not a key of %s %s destination%s (its keys: %s)", article(d.Type), d.Type,
					suggest.DidYouMean(k, typeKeys[d.Type]), strings.Join(allowed, ", "))
			}
		}
		if d.Concurrency < 0 {
			v.fail(p+".concurrency", "must be 0 (relay.concurrency) or positive, got %d", d.Concurrency)
		}
		v.positiveDuration(p+".timeout", d.Timeout)
		if d.TLS != nil && (d.TLS.CertFile == "") != (d.TLS.KeyFile == "") {
			v.fail(p+".tls", "certFile and keyFile go together")
		}
		v.allowHeaders(p, d)
		v.cloudEvents(p, name, d.CloudEvents)
		switch d.Type {
		case "nats":
			v.list(p+".servers", d.Servers, "nats://127.0.0.1:4222")
			v.address(p, "subject", d.Subject, "subjectFrom", d.SubjectFrom)
			v.tokens(p+".subjectTokens", d.SubjectTokens)
			if d.MaxPending < 0 {
				v.fail(p+".maxPending", "must be 0 (default) or positive, got %d", d.MaxPending)
			}
			if (d.StreamCreate || len(d.StreamSubjects) > 0) && d.Stream == "" {
				v.fail(p+".stream", "required with createStream or streamSubjects")
			}
		case "http":
			v.template(p+".url", d.URL, true)
			if d.URL != "" && !hasScheme(d.URL, "http", "https") && !strings.HasPrefix(d.URL, "{{") {
				v.fail(p+".url", "must be an http:// or https:// URL")
			}
			v.allowedHosts(p, d)
			v.headers(p, d.Headers)
			v.auth(p, d.Auth)
			v.signing(p+".signing", d.Signing)
		case "kafka":
			v.list(p+".brokers", d.Brokers, "127.0.0.1:9092")
			for i, b := range d.Brokers {
				if _, _, err := net.SplitHostPort(b); b != "" && err != nil {
					v.fail(fmt.Sprintf("%s.brokers[%d]", p, i), "must be host:port, got %q", b)
				}
			}
			v.address(p, "topic", d.Topic, "topicFrom", d.TopicFrom)
			v.template(p+".key", d.Key, false)
			if d.SASL != nil {
				v.oneOf(p+".sasl.mechanism", d.SASL.Mechanism, "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
				if d.SASL.Username == "" {
					v.fail(p+".sasl.username", "required")
				}
			}
		case "amqp":
			if d.URL == "" {
				v.fail(p+".url", "required")
			} else if !hasScheme(d.URL, "amqp", "amqps") {
				v.fail(p+".url", "must be an amqp:// or amqps:// URL")
			}
			v.address(p, "exchange", d.Exchange, "exchangeFrom", d.ExchangeFrom)
			v.oneOf(p+".exchangeType", d.ExchangeType, "direct", "fanout", "topic", "headers")
			v.template(p+".routingKey", d.RoutingKey, false)
			v.tokens(p+".routingKeyTokens", d.RoutingKeyTokens)
		}
	}
}

// auth checks an http destination's auth: one of bearer,
// username/password and oauth2.
func (v *validator) auth(p string, a *Auth) {
	if a == nil {
		return
	}
	if a.Bearer != "" && (a.Username != "" || a.Password != "") {
		v.fail(p+".auth", "set bearer or username/password, not both")
	}
	if a.Password != "" && a.Username == "" {
		v.fail(p+".auth.username", "required with auth.password")
	}
	o := a.OAuth2
	if o == nil {
		return
	}
	if a.Bearer != "" || a.Username != "" || a.Password != "" {
		v.fail(p+".auth.oauth2", "set oauth2 or bearer or username/password, not two of them")
	}
	if o.TokenURL == "" {
		v.fail(p+".auth.oauth2.tokenURL", "required: the token endpoint, https://login.example.com/oauth2/token")
	} else if !hasScheme(o.TokenURL, "http", "https") {
		v.fail(p+".auth.oauth2.tokenURL", "must be an http:// or https:// URL, got %q", redact.String(o.TokenURL, v.cfg.Secrets()...))
	}
	if o.ClientID == "" {
		v.fail(p+".auth.oauth2.clientID", "required: the client the token endpoint knows the relay as")
	}
	for _, k := range sortedKeys(o.EndpointParams) {
		if k == "" || slices.Contains([]string{"grant_type", "client_id", "client_secret", "scope"}, k) {
			v.fail(p+".auth.oauth2.endpointParams", "%q is set by the grant itself (use clientID, clientSecret and scopes)", k)
		}
	}
}

// minSigningKey is the shortest signing key Standard Webhooks recommends.
const minSigningKey = 24

// signing checks Standard Webhooks signing: whsec_ secrets (base64), or a
// private key file.
func (v *validator) signing(p string, s *Signing) {
	if s == nil {
		return
	}
	if len(s.Secrets) == 0 && s.PrivateKeyFile == "" {
		v.fail(p, "set secrets: [whsec_...] (or privateKeyFile for v1a signatures)")
	}
	for i, sec := range s.Secrets {
		path := fmt.Sprintf("%s.secrets[%d]", p, i)
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(sec, "whsec_"))
		switch {
		case err != nil || !strings.HasPrefix(sec, "whsec_"):
			v.fail(path, "not whsec_ followed by base64 (make one with: echo whsec_$(openssl rand -base64 32))")
		case len(key) == 0:
			v.fail(path, "empty secret")
		case len(key) < minSigningKey:
			v.warn(path, "a %d-byte key; Standard Webhooks recommends %d to 64 bytes (echo whsec_$(openssl rand -base64 32))", len(key), minSigningKey)
		}
	}
}

// cloudEvents checks a destination's cloudEvents and fills in its
// defaults: mode binary, source /queuebox/<name>, type {{ topic }}.
func (v *validator) cloudEvents(p, name string, ce *CloudEvents) {
	if ce == nil {
		return
	}
	p += ".cloudEvents"
	if ce.Mode == "" {
		ce.Mode = "binary"
	}
	v.oneOf(p+".mode", ce.Mode, "binary", "structured")
	if ce.Source == "" {
		ce.Source = "/queuebox/" + name
	}
	if ce.Type == "" {
		ce.Type = "{{ topic }}"
	}
	v.template(p+".source", ce.Source, true)
	v.template(p+".type", ce.Type, true)
}

// tokens checks subjectTokens and routingKeyTokens: single (the default)
// or allow.
func (v *validator) tokens(path, val string) {
	if v.set(path) {
		v.oneOf(path, val, "single", "allow")
	}
}

// allowedHosts checks an http destination's url against allowedHosts: a
// url whose scheme or host is a template needs them, and each is a host
// name, *.domain, or either with :port.
func (v *validator) allowedHosts(p string, d Destination) {
	tmpl, err := address.ParseTemplate(d.URL)
	if err != nil {
		return // reported by template
	}
	templated := slices.ContainsFunc(tmpl.URLParts(), func(part address.URLPart) bool {
		return part == address.URLScheme || part == address.URLAuthority
	})
	switch {
	case templated && len(d.AllowedHosts) == 0:
		v.fail(p+".url", "the scheme or host is rendered from the row: set allowedHosts to the hosts it may send to, or write the host literally")
	case !templated && v.set(p+".allowedHosts"):
		v.warn(p+".allowedHosts", "has no effect: the url's host is literal")
	}
	for i, h := range d.AllowedHosts {
		if !allowedHost.MatchString(h) {
			v.fail(fmt.Sprintf("%s.allowedHosts[%d]", p, i), "%q is not a host name: write hooks.example.com, *.example.com or host:port", h)
		}
	}
}

// allowHeaders checks a destination's allowHeaders: header names that
// are neither an identity header nor one the destination sets itself (a
// row can never replace those, whatever the list says).
func (v *validator) allowHeaders(p string, d Destination) {
	for i, h := range d.AllowHeaders {
		path := fmt.Sprintf("%s.allowHeaders[%d]", p, i)
		switch {
		case !allowHeaderName.MatchString(h):
			v.fail(path, "%q is not a header name (printable ASCII, no spaces or colons)", h)
		case slices.ContainsFunc(identityHeaders, func(id string) bool { return strings.EqualFold(h, id) }):
			v.fail(path, "%s carries the message's identity: a row header can never set it", h)
		case d.Type == "nats" && strings.Contains(strings.ToLower(h), "msg-id"):
			v.fail(path, "%s names Msg-Id, which NATS servers before 2.10 may read as the message's identity: a row header can never set it", h)
		case slices.ContainsFunc(ownHeaders[d.Type], func(own string) bool { return strings.EqualFold(h, own) }):
			v.fail(path, "%s is set by queuebox itself: a row header can never replace it", h)
		case d.Type == "http" && strings.EqualFold(h, "Authorization") && d.Auth != nil:
			v.fail(path, "Authorization is set by queuebox itself from auth: a row header can never replace it")
		}
	}
}

func hasScheme(u string, schemes ...string) bool {
	for _, s := range schemes {
		if len(u) > len(s)+3 && strings.EqualFold(u[:len(s)+3], s+"://") {
			return true
		}
	}
	return false
}

func (v *validator) list(path string, items []string, example string) {
	if len(items) == 0 {
		v.fail(path, "required: a list such as [%s]", example)
	}
	for i, s := range items {
		if strings.TrimSpace(s) == "" {
			v.fail(fmt.Sprintf("%s[%d]", path, i), "must not be empty")
		}
	}
}

// address checks a template key and its *From shorthand: exactly one set,
// the shorthand one of aggregate_type|topic|key, the template valid.
func (v *validator) address(p, key, tmpl, fromKey, from string) {
	tmplSet, fromSet := v.set(p+"."+key), v.set(p+"."+fromKey)
	switch {
	case tmplSet && fromSet:
		v.fail(p+"."+fromKey, "cannot be used together with %s (set one of them)", key)
	case fromSet:
		if _, ok := fromShorthand[from]; !ok {
			msg := fmt.Sprintf("must be one of %s, got %q", strings.Join(fromNames, ", "), from)
			v.fail(p+"."+fromKey, "%s%s", msg, suggest.DidYouMean(from, fromNames))
		}
	case tmplSet:
		v.template(p+"."+key, tmpl, true)
	default:
		v.fail(p+"."+key, "required (or %s: aggregate_type|topic|key)", fromKey)
	}
}

// template checks that s parses as an address template.
func (v *validator) template(path, s string, required bool) {
	if s == "" {
		if required {
			v.fail(path, "required")
		}
		return
	}
	if _, err := address.ParseTemplate(s); err != nil {
		v.fail(path, "%v", err)
	}
}

func (v *validator) headers(p string, h map[string]string) {
	for _, k := range sortedKeys(h) {
		path := p + ".headers." + k
		if !headerName.MatchString(k) {
			v.fail(path, "not a valid HTTP header name")
			continue
		}
		for _, r := range reservedHeaders {
			if strings.EqualFold(k, r) {
				v.fail(path, "reserved: queuebox sets %s itself", r)
			}
		}
		if strings.ContainsAny(h[k], "\r\n") {
			v.fail(path, "a header value cannot hold a line break")
		}
	}
}

func (v *validator) routes() {
	routes := v.cfg.Routes
	if len(routes) == 0 {
		v.fail("routes", "at least one route is required (for example topicPattern: \"**\" to a destination)")
	}
	names := sortedKeys(v.cfg.Destinations)
	used := map[string]bool{}
	var patterns []address.Pattern
	var patternIdx []int
	for i, r := range routes {
		p := fmt.Sprintf("routes[%d]", i)
		if r.TopicPattern == "" {
			v.fail(p+".topicPattern", "required")
		} else if pat, err := address.ParsePattern(r.TopicPattern); err != nil {
			v.fail(p+".topicPattern", "%v", err)
		} else {
			for j, earlier := range patterns {
				if earlier.Covers(pat) {
					v.warn(p, "never matches: routes[%d] (%q) takes every topic of %q first", patternIdx[j], earlier.String(), pat.String())
					break
				}
			}
			// A route that can decline a matching topic (a when:, or a
			// transform: whose errors skip) hides nothing after it.
			if !v.routeExpressions(p, r) {
				patterns = append(patterns, pat)
				patternIdx = append(patternIdx, i)
			}
		}
		switch _, ok := v.cfg.Destinations[r.Destination]; {
		case r.Destination == "":
			v.fail(p+".destination", "required")
		case !ok:
			v.fail(p+".destination", "no destination %q%s", r.Destination, suggest.DidYouMean(r.Destination, names))
		default:
			used[r.Destination] = true
		}
	}
	for _, name := range names {
		if !used[name] && len(routes) > 0 {
			v.warn("destinations."+name, "not used by any route")
		}
	}
}

// routeExpressions checks a route's when:, transform: and onError: by
// compiling them as the router will, and reports whether the route is
// conditional (it may pass a topic its pattern matches to later routes).
func (v *validator) routeExpressions(p string, r Route) (conditional bool) {
	for _, x := range []struct {
		key, src string
		kind     router.ExprKind
	}{{"when", r.When, router.WhenExpr}, {"transform", r.Transform, router.TransformExpr}} {
		if !v.set(p + "." + x.key) {
			continue
		}
		if _, err := router.CompileExpr(x.src, x.kind); err != nil {
			v.fail(p+"."+x.key, "%v", err)
		}
	}
	onError, err := router.ParseOnError(r.OnError)
	if err != nil {
		v.fail(p+".onError", "%v%s", err, suggest.DidYouMean(r.OnError, router.OnErrorValues))
	} else if v.set(p+".onError") && r.When == "" && r.Transform == "" {
		v.warn(p+".onError", "has no effect: the route has no when: or transform:")
	}
	return r.When != "" || (r.Transform != "" && onError == router.OnErrorSkip)
}
