package httpdest

import (
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/queuebox/queuebox/address"
)

// checkAllowedHost reports an allowedHosts entry that is not a host name,
// "*." and a domain, or either with ":port".
func checkAllowedHost(h string) error {
	if h == "" || strings.ContainsAny(h, "/?#@ \t") || strings.Contains(h, "://") {
		return fmt.Errorf("%q is not a host name (write hooks.example.com, *.example.com or host:port)", h)
	}
	if strings.Contains(h[1:], "*") || (strings.HasPrefix(h, "*") && !strings.HasPrefix(h, "*.")) {
		return fmt.Errorf("%q: a wildcard is only \"*.\" before a domain (*.example.com)", h)
	}
	return nil
}

// hostAllowed reports whether u's host is one of allowed: the same host
// name (any case) and, for an entry with a port, the same port; "*.d"
// allows any name ending in ".d".
func hostAllowed(u *url.URL, allowed []string) bool {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	for _, a := range allowed {
		ah, ap := a, ""
		if h, p, err := net.SplitHostPort(a); err == nil {
			ah, ap = strings.Trim(h, "[]"), p
		}
		if ap != "" && ap != port {
			continue
		}
		if suffix, ok := strings.CutPrefix(ah, "*"); ok {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
			continue
		}
		if host == ah {
			return true
		}
	}
	return false
}

// staticDialAddr returns host:port of the URL template when its scheme and
// host are literal, and "" when the host is a template (hostTemplate).
func staticDialAddr(src string, hostTemplate bool) (string, error) {
	if hostTemplate {
		return "", nil
	}
	if !strings.Contains(src, "://") {
		return "", fmt.Errorf("%q has no scheme (want http:// or https://)", redactURL(src))
	}
	u, err := url.Parse(strings.ReplaceAll(strings.ReplaceAll(src, "{{", "x"), "}}", "x"))
	if err != nil {
		return "", fmt.Errorf("%q: %v", redactURL(src), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("%q: scheme %q is not http or https", redactURL(src), u.Scheme)
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// urlValue escapes a value for the part of the URL it lands in.
func (d *Destination) urlValue(i int, _, v string) (string, error) {
	return address.EscapeURLValue(d.urlParts[i], v)
}

// sensitiveQuery are query parameter names whose values are hidden in
// errors and logs.
var sensitiveQuery = []string{"token", "secret", "password", "passwd", "key", "sig", "signature", "auth", "code"}

// redactURL hides the password and sensitive query values of a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		if i := strings.LastIndex(s, "@"); i >= 0 {
			if j := strings.Index(s, "://"); j >= 0 && j < i {
				return s[:j+3] + "[REDACTED]" + s[i:]
			}
		}
		return s
	}
	if u.RawQuery != "" {
		q := u.Query()
		for name := range q {
			ln := strings.ToLower(name)
			for _, sq := range sensitiveQuery {
				if strings.Contains(ln, sq) {
					q.Set(name, "REDACTED")
				}
			}
		}
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
