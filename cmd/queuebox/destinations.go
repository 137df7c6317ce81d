package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/queuebox/queuebox/config"
	"github.com/queuebox/queuebox/destination"
	httpdest "github.com/queuebox/queuebox/destination/http"
	natsdest "github.com/queuebox/queuebox/destination/nats"
)

// openDestination builds the destination of one config entry: an explicit
// switch on its type, the only place that knows the concrete adapters.
func openDestination(ctx context.Context, name string, d config.Destination, cfg *config.Config, log *slog.Logger) (destination.Destination, error) {
	concurrency := d.Concurrency
	if concurrency <= 0 {
		concurrency = cfg.Relay.Concurrency
	}
	switch d.Type {
	case "nats":
		o := natsdest.Options{
			Name:           name,
			Servers:        d.Servers,
			Subject:        d.AddressTemplate(),
			Token:          d.Token,
			CredsFile:      d.CredsFile,
			MaxPending:     d.MaxPending,
			Stream:         d.Stream,
			CreateStream:   d.StreamCreate,
			StreamSubjects: d.StreamSubjects,
			AckTimeout:     d.Timeout.D(),
		}
		if d.TLS != nil {
			o.TLS = &natsdest.TLS{CAFile: d.TLS.CAFile, CertFile: d.TLS.CertFile, KeyFile: d.TLS.KeyFile, InsecureSkipVerify: d.TLS.InsecureSkipVerify}
		}
		return natsdest.New(ctx, o, log)
	case "http":
		o := httpdest.Options{
			Name:        name,
			URL:         d.AddressTemplate(),
			Timeout:     d.Timeout.D(),
			Headers:     d.Headers,
			Concurrency: concurrency,
		}
		if d.Auth != nil {
			o.Auth = &httpdest.Auth{Bearer: d.Auth.Bearer, Username: d.Auth.Username, Password: d.Auth.Password}
		}
		if d.TLS != nil {
			o.TLS = &httpdest.TLS{CAFile: d.TLS.CAFile, CertFile: d.TLS.CertFile, KeyFile: d.TLS.KeyFile, InsecureSkipVerify: d.TLS.InsecureSkipVerify}
		}
		return httpdest.New(ctx, o, log)
	default:
		return nil, fmt.Errorf("destination type %q is not supported by this build", d.Type)
	}
}
