package httpdest

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// Standard Webhooks headers, sent when Signing is set.
const (
	HeaderWebhookID        = "Webhook-Id"
	HeaderWebhookTimestamp = "Webhook-Timestamp"
	HeaderWebhookSignature = "Webhook-Signature"
)

// Prefixes of Standard Webhooks keys.
const (
	SecretPrefix     = "whsec_" // a symmetric secret (v1 signatures)
	PrivateKeyPrefix = "whsk_"  // an ed25519 private key (v1a signatures)
)

// Signing signs every request as Standard Webhooks says: webhook-id is
// the row id, webhook-timestamp the unix seconds at send time, and
// webhook-signature holds one "v1,<base64 HMAC-SHA256 of id.timestamp.body>"
// per secret (so that a receiver holding either the old or the new secret
// verifies during a rotation), then one "v1a,<base64 ed25519 signature>"
// when PrivateKeyFile is set, separated by spaces.
type Signing struct {
	// Secrets are whsec_<base64> keys.
	Secrets []string
	// PrivateKeyFile holds an ed25519 private key: PEM (PKCS #8) or
	// whsk_<base64> of the 32-byte seed or the 64-byte key.
	PrivateKeyFile string
}

// signer computes webhook-signature values.
type signer struct {
	keys [][]byte
	ed   ed25519.PrivateKey
}

// newSigner decodes the keys of s; the returned secrets are the texts to
// redact from errors.
func newSigner(s *Signing) (*signer, []string, error) {
	sg := &signer{}
	var secrets []string
	for i, sec := range s.Secrets {
		key, err := DecodeSecret(sec)
		if err != nil {
			return nil, nil, fmt.Errorf("secrets[%d]: %w", i, err)
		}
		sg.keys = append(sg.keys, key)
		secrets = append(secrets, sec, strings.TrimPrefix(sec, SecretPrefix))
	}
	if s.PrivateKeyFile != "" {
		b, err := os.ReadFile(s.PrivateKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("privateKeyFile: %w", err)
		}
		if sg.ed, err = ParsePrivateKey(b); err != nil {
			return nil, nil, fmt.Errorf("privateKeyFile %s: %w", s.PrivateKeyFile, err)
		}
	}
	if len(sg.keys) == 0 && sg.ed == nil {
		return nil, nil, errors.New("set secrets (whsec_...) or privateKeyFile")
	}
	return sg, secrets, nil
}

// DecodeSecret returns the key of a whsec_<base64> secret (the prefix may
// be left out).
func DecodeSecret(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
	if err != nil {
		return nil, errors.New("not whsec_ followed by base64")
	}
	if len(key) == 0 {
		return nil, errors.New("empty secret")
	}
	return key, nil
}

// ParsePrivateKey reads an ed25519 private key: PEM (PKCS #8), or
// whsk_<base64> of the 32-byte seed or the 64-byte key.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	if block, _ := pem.Decode(b); block != nil {
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM: %w", err)
		}
		ed, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("PEM holds a %T key, not ed25519", k)
		}
		return ed, nil
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(strings.TrimSpace(string(b)), PrivateKeyPrefix))
	if err != nil {
		return nil, errors.New("neither a PEM private key nor whsk_ followed by base64")
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(raw), nil
	}
	return nil, fmt.Errorf("whsk_ key of %d bytes: want a %d-byte seed or a %d-byte key", len(raw), ed25519.SeedSize, ed25519.PrivateKeySize)
}

// sign sets the three Standard Webhooks headers of a request with body,
// for message id at unix time ts.
func (s *signer) sign(h http.Header, id string, ts int64, body []byte) {
	tsText := strconv.FormatInt(ts, 10)
	content := make([]byte, 0, len(id)+len(tsText)+len(body)+2)
	content = append(append(append(append(append(content, id...), '.'), tsText...), '.'), body...)
	var sig strings.Builder
	for _, key := range s.keys {
		mac := hmac.New(sha256.New, key)
		mac.Write(content)
		if sig.Len() > 0 {
			sig.WriteByte(' ')
		}
		sig.WriteString("v1,")
		sig.WriteString(base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	if s.ed != nil {
		if sig.Len() > 0 {
			sig.WriteByte(' ')
		}
		sig.WriteString("v1a,")
		sig.WriteString(base64.StdEncoding.EncodeToString(ed25519.Sign(s.ed, content)))
	}
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, tsText)
	h.Set(HeaderWebhookSignature, sig.String())
}
