package config

import (
	"fmt"
	"net"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/queuebox/queuebox/inbox/intake"
	"github.com/queuebox/queuebox/redact"
	"github.com/queuebox/queuebox/suggest"
)

// Inbox is the receiving service (docs/inbox.md): an HTTP ingest port and
// broker sources that store what they receive in the inbox table. Absent
// or without sources, it is off.
type Inbox struct {
	Listen       string                 `yaml:"listen"`       // the HTTP ingest port; needed by http sources
	Table        string                 `yaml:"table"`        // default inbox; may be schema-qualified
	Columns      map[string]string      `yaml:"columns"`      // logical -> existing column
	MaxBodyBytes int                    `yaml:"maxBodyBytes"` // default 1048576
	MaxConns     int                    `yaml:"maxConns"`     // its own connection pool; default 16
	Retention    RetentionRule          `yaml:"retention"`    // sent and dead rows older than maxAge are deleted; 0 keeps them
	Sources      map[string]InboxSource `yaml:"sources"`
}

// InboxSource is one way messages come in.
type InboxSource struct {
	Type           string      `yaml:"type"`    // http | nats | kafka | amqp
	Handoff        string      `yaml:"handoff"` // push (to the outbox, default) | pull (an inbox.Worker)
	Topic          string      `yaml:"topic"`   // template; default {{ topic }}
	IdempotencyKey *InboxField `yaml:"idempotencyKey"`
	OrderKey       *InboxField `yaml:"orderKey"`
	MaxAttempts    int         `yaml:"maxAttempts"` // of its rows; 0: relay.maxAttempts

	// http
	Auth      *InboxAuth      `yaml:"auth"`
	RateLimit *InboxRateLimit `yaml:"rateLimit"`

	// nats
	Servers  []string `yaml:"servers"`
	Stream   string   `yaml:"stream"`
	Consumer string   `yaml:"consumer"`
	Subjects []string `yaml:"subjects"`

	// kafka
	Brokers []string `yaml:"brokers"`
	Topics  []string `yaml:"topics"`
	Group   string   `yaml:"group"`

	// amqp
	URL      string `yaml:"url"`
	Queue    string `yaml:"queue"`
	Prefetch int    `yaml:"prefetch"`
}

// InboxField is where a value comes from: a header or a JSON path.
type InboxField struct {
	Header   string `yaml:"header"`
	JSONPath string `yaml:"jsonPath"`
}

// InboxAuth is an HTTP source's authentication.
type InboxAuth struct {
	Scheme    string   `yaml:"scheme"`    // standardWebhooks | github | stripe | bearer | apiKey | none
	Secrets   []string `yaml:"secrets"`   // signing secrets, tokens or keys (several while rotating)
	Header    string   `yaml:"header"`    // apiKey: default X-Api-Key
	Tolerance Duration `yaml:"tolerance"` // standardWebhooks, stripe: default 5m
}

// InboxRateLimit bounds an HTTP source's requests.
type InboxRateLimit struct {
	PerSecond float64 `yaml:"perSecond"`
	Burst     int     `yaml:"burst"`
}

// Enabled reports whether any source is configured.
func (in Inbox) Enabled() bool { return len(in.Sources) > 0 }

// Inbox defaults.
const (
	DefaultInboxTable        = "inbox"
	DefaultInboxMaxBodyBytes = 1 << 20
	DefaultInboxMaxConns     = 16
)

var (
	inboxSourceName  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
	inboxSourceTypes = []string{"http", "nats", "kafka", "amqp"}
	inboxSchemes     = []string{"standardWebhooks", "github", "stripe", "bearer", "apiKey", "none"}
	inboxCommonKeys  = []string{"type", "handoff", "topic", "idempotencyKey", "orderKey", "maxAttempts"}
	inboxTypeKeys    = map[string][]string{
		"http":  {"auth", "rateLimit"},
		"nats":  {"servers", "stream", "consumer", "subjects"},
		"kafka": {"brokers", "topics", "group"},
		"amqp":  {"url", "queue", "prefetch"},
	}
	// schemeKeys are the idempotency keys the senders of each scheme put
	// on every message.
	schemeKeys = map[string]InboxField{
		"standardWebhooks": {Header: "webhook-id"},
		"github":           {Header: "X-GitHub-Delivery"},
		"stripe":           {JSONPath: "id"},
	}
)

// inboxDefaults fills the defaults of a configured inbox.
func (v *validator) inboxDefaults() {
	in := &v.cfg.Inbox
	if !v.set("inbox") {
		return
	}
	if in.Table == "" {
		in.Table = DefaultInboxTable
	}
	if in.MaxBodyBytes == 0 {
		in.MaxBodyBytes = DefaultInboxMaxBodyBytes
	}
	if in.MaxConns == 0 {
		in.MaxConns = DefaultInboxMaxConns
	}
	for name, s := range in.Sources {
		if s.Handoff == "" {
			s.Handoff = "push"
		}
		if s.Topic == "" {
			s.Topic = intake.DefaultTopic
		}
		if s.MaxAttempts == 0 {
			s.MaxAttempts = v.cfg.Relay.MaxAttempts
		}
		if s.Type == "http" && s.Auth != nil {
			if s.Auth.Tolerance == 0 && (s.Auth.Scheme == "standardWebhooks" || s.Auth.Scheme == "stripe") {
				s.Auth.Tolerance = Duration(5 * time.Minute)
			}
			if s.Auth.Scheme == "apiKey" && s.Auth.Header == "" {
				s.Auth.Header = "X-Api-Key"
			}
			if f, ok := schemeKeys[s.Auth.Scheme]; ok && s.IdempotencyKey == nil {
				s.IdempotencyKey = &f
			}
		}
		if s.Type == "amqp" && s.Prefetch == 0 {
			s.Prefetch = 64
		}
		in.Sources[name] = s
	}
}

func (v *validator) inbox() {
	v.inboxDefaults()
	in := v.cfg.Inbox
	if !v.set("inbox") {
		return
	}
	if len(in.Sources) == 0 {
		v.fail("inbox.sources", "at least one source is required (or remove inbox)")
		return
	}
	if v.cfg.Database.Type == "sqlserver" {
		v.fail("inbox", "the receiving service runs on database.type postgresql only; the SQL Server inbox table has migrations but no ingest yet: remove inbox")
	}
	if !tableName.MatchString(in.Table) {
		v.fail("inbox.table", "must be a table name, optionally schema-qualified (schema.table), of letters, digits and _, got %q", in.Table)
	}
	for _, k := range sortedKeys(in.Columns) {
		if !identifier.MatchString(in.Columns[k]) {
			v.fail("inbox.columns."+k, "must be a column name of letters, digits and _, got %q", in.Columns[k])
		}
	}
	v.notNegative("inbox.maxBodyBytes", in.MaxBodyBytes)
	v.notNegative("inbox.maxConns", in.MaxConns)
	if in.Retention.MaxAge < 0 {
		v.fail("inbox.retention.maxAge", "must be 0 (keep) or positive, got %v", in.Retention.MaxAge.D())
	}
	hasHTTP := false
	for _, name := range sortedKeys(in.Sources) {
		if in.Sources[name].Type == "http" {
			hasHTTP = true
		}
		v.inboxSource(name, in.Sources[name])
	}
	switch {
	case hasHTTP && in.Listen == "":
		v.fail("inbox.listen", "required by the http sources: host:port of the ingest server, such as 0.0.0.0:8081")
	case in.Listen != "":
		if _, _, err := net.SplitHostPort(in.Listen); err != nil {
			v.fail("inbox.listen", "must be host:port, got %q", in.Listen)
		} else if in.Listen == v.cfg.Server.Listen {
			v.fail("inbox.listen", "is server.listen too; the ingest port is separate from the management port")
		}
	}
}

func (v *validator) inboxSource(name string, s InboxSource) {
	p := "inbox.sources." + name
	if !inboxSourceName.MatchString(name) {
		v.fail(p, "a source name is a URL path segment of letters, digits, _, . and - (it is POST /inbox/%s)", name)
	}
	if !v.oneOf(p+".type", s.Type, inboxSourceTypes...) {
		return
	}
	_, all := yamlFields(inboxSourceStructType)
	allowed := append(append([]string(nil), inboxCommonKeys...), inboxTypeKeys[s.Type]...)
	for _, k := range all {
		if v.set(p+"."+k) && !slices.Contains(allowed, k) {
			v.fail(p+"."+k, "not a key of %s %s source%s (its keys: %s)", article(s.Type), s.Type,
				suggest.DidYouMean(k, inboxTypeKeys[s.Type]), strings.Join(allowed, ", "))
		}
	}
	v.oneOf(p+".handoff", s.Handoff, "push", "pull")
	if _, err := intake.ParseTopic(s.Topic); err != nil {
		v.fail(p+".topic", "%v", err)
	}
	v.inboxField(p+".idempotencyKey", s.IdempotencyKey)
	v.inboxField(p+".orderKey", s.OrderKey)
	v.notNegative(p+".maxAttempts", s.MaxAttempts)
	switch s.Type {
	case "http":
		v.inboxAuth(p, s)
		if s.IdempotencyKey == nil {
			v.fail(p+".idempotencyKey", "required: the header (such as Idempotency-Key) or jsonPath that names each message once")
		}
		if r := s.RateLimit; r != nil && (r.PerSecond <= 0 || r.Burst < 0) {
			v.fail(p+".rateLimit", "perSecond must be positive and burst 0 or positive")
		}
	case "nats":
		v.list(p+".servers", s.Servers, "nats://127.0.0.1:4222")
		v.required(p+".stream", s.Stream, "the JetStream stream to consume")
		v.required(p+".consumer", s.Consumer, "the durable consumer's name")
	case "kafka":
		v.list(p+".brokers", s.Brokers, "127.0.0.1:9092")
		v.list(p+".topics", s.Topics, "orders")
		v.required(p+".group", s.Group, "the consumer group")
	case "amqp":
		if !hasScheme(s.URL, "amqp", "amqps") {
			v.fail(p+".url", "required: an amqp:// or amqps:// URL")
		}
		v.required(p+".queue", s.Queue, "the queue to consume")
		v.notNegative(p+".prefetch", s.Prefetch)
	}
}

func (v *validator) required(path, val, what string) {
	if strings.TrimSpace(val) == "" {
		v.fail(path, "required: %s", what)
	}
}

func (v *validator) inboxField(path string, f *InboxField) {
	if f == nil {
		return
	}
	if _, err := intake.NewField(f.Header, f.JSONPath); err != nil {
		v.fail(path, "%v", err)
	}
}

func (v *validator) inboxAuth(p string, s InboxSource) {
	a := s.Auth
	if a == nil {
		v.fail(p+".auth", "required: scheme %s (none accepts every request)", strings.Join(inboxSchemes, ", "))
		return
	}
	if !v.oneOf(p+".auth.scheme", a.Scheme, inboxSchemes...) {
		return
	}
	if a.Scheme == "none" {
		if len(a.Secrets) > 0 {
			v.fail(p+".auth.secrets", "scheme none takes no secrets")
		}
		return
	}
	if len(a.Secrets) == 0 {
		v.fail(p+".auth.secrets", "required by scheme %s: a list such as [${%s_SECRET}]", a.Scheme, strings.ToUpper(strings.ReplaceAll(a.Scheme, "-", "_")))
	}
	for i, sec := range a.Secrets {
		if strings.TrimSpace(sec) == "" {
			v.fail(fmt.Sprintf("%s.auth.secrets[%d]", p, i), "must not be empty (is the variable set?)")
		}
	}
	if a.Tolerance < 0 {
		v.fail(p+".auth.tolerance", "must be positive, got %v", a.Tolerance.D())
	}
}

// inboxSecrets are the inbox's secrets, for Secrets.
func (in Inbox) secrets() []string {
	var out []string
	for _, name := range sortedKeys(in.Sources) {
		s := in.Sources[name]
		if s.Auth != nil {
			out = append(out, s.Auth.Secrets...)
		}
		out = append(out, urlPassword(s.URL))
		for _, srv := range s.Servers {
			out = append(out, urlPassword(srv))
		}
	}
	return out
}

// redacted is a copy of in with its secrets masked.
func (in Inbox) redacted(secrets []string) Inbox {
	out := in
	if in.Sources == nil {
		return out
	}
	out.Sources = make(map[string]InboxSource, len(in.Sources))
	for name, s := range in.Sources {
		if s.Auth != nil {
			a := *s.Auth
			a.Secrets = slices.Repeat([]string{redactedPlaceholder}, len(a.Secrets))
			s.Auth = &a
		}
		s.URL = redact.String(s.URL, secrets...)
		s.Servers = append([]string(nil), s.Servers...)
		for i := range s.Servers {
			s.Servers[i] = redact.String(s.Servers[i], secrets...)
		}
		out.Sources[name] = s
	}
	return out
}

var inboxSourceStructType = reflect.TypeOf(InboxSource{})
