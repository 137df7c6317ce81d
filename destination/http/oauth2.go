package httpdest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	"github.com/queuebox/queuebox/outbox"
	"github.com/queuebox/queuebox/redact"
)

// OAuth2 is the client credentials grant (RFC 6749 §4.4): the destination
// asks TokenURL for an access token and sends it as a bearer token.
type OAuth2 struct {
	TokenURL       string
	ClientID       string
	ClientSecret   string
	Scopes         []string
	EndpointParams map[string]string
}

// tokenEarlyExpiry is how long before its expiry a token is replaced.
const tokenEarlyExpiry = 10 * time.Second

// tokens caches the access token of a destination: one token request
// while it is valid, a new one tokenEarlyExpiry before it expires, and a
// new one when the receiver refused it (drop).
type tokens struct {
	cfg     clientcredentials.Config
	ctx     context.Context // carries the HTTP client of the token requests
	name    string
	secrets []string

	mu sync.Mutex
	ts oauth2.TokenSource
}

func newTokens(name string, o *OAuth2, client *http.Client) (*tokens, error) {
	if o.TokenURL == "" || o.ClientID == "" {
		return nil, errors.New("oauth2: tokenURL and clientID are required")
	}
	u, err := url.Parse(o.TokenURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("oauth2: tokenURL %q is not an http(s) URL", redactURL(o.TokenURL))
	}
	t := &tokens{
		cfg: clientcredentials.Config{ClientID: o.ClientID, ClientSecret: o.ClientSecret, TokenURL: o.TokenURL,
			Scopes: o.Scopes, EndpointParams: url.Values{}},
		ctx:  context.WithValue(context.Background(), oauth2.HTTPClient, client),
		name: name,
	}
	for k, v := range o.EndpointParams {
		t.cfg.EndpointParams.Set(k, v)
	}
	if o.ClientSecret != "" {
		t.secrets = append(t.secrets, o.ClientSecret)
	}
	t.ts = t.fresh()
	return t, nil
}

// fetch asks the token endpoint for a new token each time it is called.
type fetch struct{ t *tokens }

func (f fetch) Token() (*oauth2.Token, error) { return f.t.cfg.Token(f.t.ctx) }

func (t *tokens) fresh() oauth2.TokenSource {
	return oauth2.ReuseTokenSourceWithExpiry(nil, fetch{t}, tokenEarlyExpiry)
}

// token returns the cached token, or a new one.
func (t *tokens) token() (string, error) {
	t.mu.Lock()
	ts := t.ts
	t.mu.Unlock()
	tok, err := ts.Token()
	if err != nil {
		return "", t.tokenError(err)
	}
	return tok.AccessToken, nil
}

// drop forgets the cached token when it is still refused, the one the
// receiver refused: the next token call asks for a new one. Requests that
// were refused the same token drop it once.
func (t *tokens) drop(refused string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, err := t.ts.Token(); err == nil && cur.AccessToken != refused {
		return
	}
	t.ts = t.fresh()
}

// tokenError is a failed token request: the credential of the whole
// destination is missing, so the destination is unavailable. The error
// names the endpoint's answer (status, error code), never its body.
func (t *tokens) tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) && re.Response != nil {
		msg := fmt.Sprintf("http destination %q: oauth2 token request to %s: %s", t.name, redactURL(t.cfg.TokenURL), re.Response.Status)
		if re.ErrorCode != "" {
			msg += ": " + re.ErrorCode
			if re.ErrorDescription != "" {
				msg += " (" + re.ErrorDescription + ")"
			}
		}
		return outbox.Unavailable(errors.New(redact.String(msg, t.secrets...)))
	}
	return outbox.Unavailable(fmt.Errorf("http destination %q: oauth2 token request to %s: %s", t.name, redactURL(t.cfg.TokenURL), redact.String(err.Error(), t.secrets...)))
}
