package ingest

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The authentication schemes of a source (inbox.sources.*.auth.scheme).
const (
	SchemeStandardWebhooks = "standardWebhooks"
	SchemeGitHub           = "github"
	SchemeStripe           = "stripe"
	SchemeBearer           = "bearer"
	SchemeAPIKey           = "apiKey"
	SchemeNone             = "none"
)

// Schemes lists the schemes, for configuration messages.
var Schemes = []string{SchemeStandardWebhooks, SchemeGitHub, SchemeStripe, SchemeBearer, SchemeAPIKey, SchemeNone}

// DefaultTolerance is how far a signed timestamp may be from the clock.
const DefaultTolerance = 5 * time.Minute

// DefaultAPIKeyHeader is the apiKey scheme's header when none is named.
const DefaultAPIKeyHeader = "X-Api-Key"

// Auth is a source's authentication. Every comparison of a secret or a
// signature takes the same time whatever the input.
type Auth struct {
	Scheme    string
	Secrets   []string            // signing secrets, bearer tokens or API keys; several for rotation
	Header    string              // apiKey: the header that carries the key
	Tolerance time.Duration       // standardWebhooks, stripe: default DefaultTolerance
	keys      [][]byte            // decoded signing keys, or digests of tokens
	public    []ed25519.PublicKey // standardWebhooks: whpk_ keys, verifying v1a signatures
}

// ErrUnauthorized is wrapped by every authentication failure.
var ErrUnauthorized = errors.New("unauthorized")

// compile checks the secrets and prepares the keys.
func (a *Auth) compile() error {
	if a.Tolerance <= 0 {
		a.Tolerance = DefaultTolerance
	}
	if a.Scheme == SchemeAPIKey && a.Header == "" {
		a.Header = DefaultAPIKeyHeader
	}
	if a.Scheme != SchemeNone && len(a.Secrets) == 0 {
		return fmt.Errorf("auth scheme %s needs secrets", a.Scheme)
	}
	a.keys = a.keys[:0]
	for i, s := range a.Secrets {
		switch a.Scheme {
		case SchemeStandardWebhooks:
			if pk, ok := strings.CutPrefix(s, "whpk_"); ok {
				k, err := base64.StdEncoding.DecodeString(pk)
				if err != nil || len(k) != ed25519.PublicKeySize {
					return fmt.Errorf("auth.secrets[%d]: a Standard Webhooks public key is whpk_ followed by the base64 of 32 bytes", i)
				}
				a.public = append(a.public, ed25519.PublicKey(k))
				continue
			}
			k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
			if err != nil || len(k) == 0 {
				return fmt.Errorf("auth.secrets[%d]: a Standard Webhooks secret is whsec_ followed by base64 (or a whpk_ public key)", i)
			}
			a.keys = append(a.keys, k)
		case SchemeGitHub, SchemeStripe:
			a.keys = append(a.keys, []byte(s))
		case SchemeBearer, SchemeAPIKey:
			d := sha256.Sum256([]byte(s))
			a.keys = append(a.keys, d[:])
		case SchemeNone:
		default:
			return fmt.Errorf("unknown auth scheme %q (known: %s)", a.Scheme, strings.Join(Schemes, ", "))
		}
	}
	return nil
}

// Verify authenticates a request with body at time now.
func (a *Auth) Verify(h http.Header, body []byte, now time.Time) error {
	switch a.Scheme {
	case SchemeNone:
		return nil
	case SchemeStandardWebhooks:
		return a.standardWebhooks(h, body, now)
	case SchemeGitHub:
		return a.github(h, body)
	case SchemeStripe:
		return a.stripe(h, body, now)
	case SchemeBearer:
		tok, ok := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
		if !ok {
			return fmt.Errorf("%w: no Authorization: Bearer header", ErrUnauthorized)
		}
		return a.token(strings.TrimSpace(tok))
	case SchemeAPIKey:
		k := h.Get(a.Header)
		if k == "" {
			return fmt.Errorf("%w: no %s header", ErrUnauthorized, a.Header)
		}
		return a.token(k)
	}
	return fmt.Errorf("%w: unknown scheme", ErrUnauthorized)
}

// token compares digests, so that the time taken says nothing about the
// length or the content of a secret.
func (a *Auth) token(got string) error {
	d := sha256.Sum256([]byte(got))
	ok := 0
	for _, k := range a.keys {
		ok |= subtle.ConstantTimeCompare(d[:], k)
	}
	if ok == 1 {
		return nil
	}
	return fmt.Errorf("%w: wrong credentials", ErrUnauthorized)
}

func (a *Auth) timestamp(v string, now time.Time) error {
	sec, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bad signature timestamp", ErrUnauthorized)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > a.Tolerance || d < -a.Tolerance {
		return fmt.Errorf("%w: signature timestamp outside the tolerance of %s", ErrUnauthorized, a.Tolerance)
	}
	return nil
}

func sign(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

var dot = []byte(".")

func (a *Auth) standardWebhooks(h http.Header, body []byte, now time.Time) error {
	id, ts, sigs := h.Get("Webhook-Id"), h.Get("Webhook-Timestamp"), h.Get("Webhook-Signature")
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("%w: missing webhook-id, webhook-timestamp or webhook-signature", ErrUnauthorized)
	}
	if err := a.timestamp(ts, now); err != nil {
		return err
	}
	signed := []byte(id + "." + ts + "." + string(body))
	ok := false
	for _, s := range strings.Fields(sigs) {
		v, sig, found := strings.Cut(s, ",")
		got, err := base64.StdEncoding.DecodeString(sig)
		if !found || err != nil {
			continue
		}
		switch v {
		case "v1":
			for _, k := range a.keys {
				if hmac.Equal(got, sign(k, signed)) {
					ok = true
				}
			}
		case "v1a":
			for _, k := range a.public {
				if ed25519.Verify(k, signed, got) {
					ok = true
				}
			}
		}
	}
	if !ok {
		return fmt.Errorf("%w: no valid v1 or v1a signature", ErrUnauthorized)
	}
	return nil
}

func (a *Auth) github(h http.Header, body []byte) error {
	sig, found := strings.CutPrefix(h.Get("X-Hub-Signature-256"), "sha256=")
	if !found {
		return fmt.Errorf("%w: no X-Hub-Signature-256: sha256=… header", ErrUnauthorized)
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("%w: X-Hub-Signature-256 is not hex", ErrUnauthorized)
	}
	ok := false
	for _, k := range a.keys {
		if hmac.Equal(got, sign(k, body)) {
			ok = true
		}
	}
	if !ok {
		return fmt.Errorf("%w: signature does not match", ErrUnauthorized)
	}
	return nil
}

func (a *Auth) stripe(h http.Header, body []byte, now time.Time) error {
	var ts string
	var sigs [][]byte
	for _, kv := range strings.Split(h.Get("Stripe-Signature"), ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if ts == "" || len(sigs) == 0 {
		return fmt.Errorf("%w: no Stripe-Signature: t=…,v1=… header", ErrUnauthorized)
	}
	if err := a.timestamp(ts, now); err != nil {
		return err
	}
	ok := false
	for _, k := range a.keys {
		want := sign(k, []byte(ts), dot, body)
		for _, s := range sigs {
			if hmac.Equal(s, want) {
				ok = true
			}
		}
	}
	if !ok {
		return fmt.Errorf("%w: no valid v1 signature", ErrUnauthorized)
	}
	return nil
}
