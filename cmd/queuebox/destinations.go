package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"

	"github.com/queuebox/queuebox/destination/cloudevents"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/destination"
	amqpdest "github.com/queuebox/queuebox/destination/amqp"
	httpdest "github.com/queuebox/queuebox/destination/http"
	kafkadest "github.com/queuebox/queuebox/destination/kafka"
	natsdest "github.com/queuebox/queuebox/destination/nats"
	"github.com/queuebox/queuebox/redact"
)

// tlsConfig builds the client TLS configuration of a destination's tls
// block, the one place every adapter's *tls.Config comes from; nil means
// the library's default (system roots, or no TLS for plain URLs).
func tlsConfig(t *config.TLS) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: t.InsecureSkipVerify} //nolint:gosec // the user's explicit choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls.caFile: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls.caFile %s: no PEM certificate found", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" || t.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls.certFile/keyFile: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// destinationConcurrency is the destinations' own concurrency caps, where
// set (relay.Options.DestinationConcurrency).
func destinationConcurrency(cfg *config.Config) map[string]int {
	out := map[string]int{}
	for name, d := range cfg.Destinations {
		if d.Concurrency > 0 {
			out[name] = d.Concurrency
		}
	}
	return out
}

// hardConcurrency is the most rows in flight to destination d: its own
// concurrency, else relay.concurrency, else relay.maxInflight. The engine's
// adaptive limit stays at or below it.
func hardConcurrency(cfg *config.Config, d config.Destination) int {
	switch {
	case d.Concurrency > 0:
		return d.Concurrency
	case cfg.Relay.Concurrency > 0:
		return cfg.Relay.Concurrency
	}
	return cfg.Relay.MaxInflight
}

// maxLoggedHeaderName bounds a dropped row header's name in the debug log:
// the name is the row's, of any length.
const maxLoggedHeaderName = 128

// droppedHeaders returns the OnDroppedHeader of destination name: a DEBUG
// line naming the destination and the header (never its value), and
// count, when not nil (queuebox_row_headers_dropped_total).
func droppedHeaders(name string, log *slog.Logger, secrets []string, count func(dest string)) func(header string) {
	return func(header string) {
		if count != nil {
			count(name)
		}
		if log.Enabled(context.Background(), slog.LevelDebug) {
			log.Debug("row header dropped by the destination's policy", "destination", name, "header", redact.Bounded(header, maxLoggedHeaderName, secrets...))
		}
	}
}

// openDestination builds the destination of one config entry: an explicit
// switch on its type, the only place that knows the concrete adapters.
// countDropped, when not nil, counts each row header the destination drops.
func openDestination(ctx context.Context, name string, d config.Destination, cfg *config.Config, log *slog.Logger, countDropped func(dest string)) (destination.Destination, error) {
	return openDestinationFor(ctx, name, d, cfg, log, countDropped, false)
}

// openDestinationFor is openDestination; checkOnly opens it without
// changing anything on its server (queuebox check, replay's look at the
// duplicate window): a JetStream stream to create is only reported.
func openDestinationFor(ctx context.Context, name string, d config.Destination, cfg *config.Config, log *slog.Logger, countDropped func(dest string), checkOnly bool) (destination.Destination, error) {
	concurrency := hardConcurrency(cfg, d)
	tc, err := tlsConfig(d.TLS)
	if err != nil {
		return nil, err
	}
	secrets := cfg.Secrets()
	onDropped := droppedHeaders(name, log, secrets, countDropped)
	switch d.Type {
	case "nats":
		o := natsdest.Options{
			Name:            name,
			Servers:         d.Servers,
			Subject:         d.AddressTemplate(),
			SubjectTokens:   d.SubjectTokens == "allow",
			Token:           d.Token,
			CredsFile:       d.CredsFile,
			MaxPending:      d.MaxPending,
			Stream:          d.Stream,
			CreateStream:    d.StreamCreate,
			StreamSubjects:  d.StreamSubjects,
			CheckOnly:       checkOnly,
			AckTimeout:      d.Timeout.D(),
			TLS:             tc,
			AllowHeaders:    d.AllowHeaders,
			OnDroppedHeader: onDropped,
			Secrets:         secrets,
			CloudEvents:     cloudEvents(d.CloudEvents),
		}
		return natsdest.New(ctx, o, log)
	case "http":
		o := httpdest.Options{
			Name:            name,
			URL:             d.AddressTemplate(),
			AllowedHosts:    d.AllowedHosts,
			Timeout:         d.Timeout.D(),
			Headers:         d.Headers,
			Concurrency:     concurrency,
			TLS:             tc,
			AllowHeaders:    d.AllowHeaders,
			OnDroppedHeader: onDropped,
			Secrets:         secrets,
		}
		o.Auth, o.Signing = httpAuth(d.Auth), httpSigning(d.Signing)
		o.CloudEvents = cloudEvents(d.CloudEvents)
		return httpdest.New(ctx, o, log)
	case "kafka":
		o := kafkadest.Options{
			Name:         name,
			Brokers:      d.Brokers,
			Topic:        d.AddressTemplate(),
			Key:          d.Key,
			TLS:          tc,
			CreateTopics: d.CreateTopics,
			WriteTimeout: d.Timeout.D(),

			AllowHeaders:    d.AllowHeaders,
			OnDroppedHeader: onDropped,
			CloudEvents:     cloudEvents(d.CloudEvents),
		}
		if d.SASL != nil {
			o.SASL = &kafkadest.SASL{Mechanism: d.SASL.Mechanism, Username: d.SASL.Username, Password: d.SASL.Password}
		}
		return kafkadest.New(o, log)
	case "amqp":
		return amqpdest.New(ctx, amqpdest.Options{
			Name:            name,
			URL:             d.URL,
			Exchange:        d.AddressTemplate(),
			RoutingKey:      d.RoutingKey,
			ExchangeType:    d.ExchangeType,
			DeclareExchange: d.DeclareExchange,
			TLS:             tc,
			ConfirmTimeout:  d.Timeout.D(),

			RoutingKeyTokens: d.RoutingKeyTokens == "allow",
			AllowHeaders:     d.AllowHeaders,
			OnDroppedHeader:  onDropped,
			Secrets:          secrets,
			CloudEvents:      cloudEvents(d.CloudEvents),
		}, log)
	default:
		return nil, fmt.Errorf("destination type %q is not supported by this build", d.Type)
	}
}

// cloudEvents is the CloudEvents options of a destination; nil when off.
func cloudEvents(c *config.CloudEvents) *cloudevents.Options {
	if c == nil {
		return nil
	}
	return &cloudevents.Options{Mode: c.Mode, Source: c.Source, Type: c.Type}
}

// httpAuth is the credentials of an http destination; nil when none.
func httpAuth(a *config.Auth) *httpdest.Auth {
	if a == nil {
		return nil
	}
	out := &httpdest.Auth{Bearer: a.Bearer, Username: a.Username, Password: a.Password}
	if o := a.OAuth2; o != nil {
		out.OAuth2 = &httpdest.OAuth2{TokenURL: o.TokenURL, ClientID: o.ClientID, ClientSecret: o.ClientSecret,
			Scopes: o.Scopes, EndpointParams: o.EndpointParams}
	}
	return out
}

// httpSigning is the Standard Webhooks signing of an http destination;
// nil when off.
func httpSigning(s *config.Signing) *httpdest.Signing {
	if s == nil {
		return nil
	}
	return &httpdest.Signing{Secrets: s.Secrets, PrivateKeyFile: s.PrivateKeyFile}
}
