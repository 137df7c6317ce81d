package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/queuebox/queuebox/config"
)

// newLogger builds the process logger: flags (or their environment
// variables) win over the config's log section.
func newLogger(w io.Writer, g *globalFlags, cfg *config.Config) (*slog.Logger, error) {
	format, level := "text", "info"
	if cfg != nil {
		if cfg.Log.Format != "" {
			format = cfg.Log.Format
		}
		if cfg.Log.Level != "" {
			level = cfg.Log.Level
		}
	}
	if g.logFormat != "" {
		format = g.logFormat
	}
	if g.logLevel != "" {
		level = g.logLevel
	}
	var lv slog.Level
	switch strings.ToLower(level) {
	case "debug":
		lv = slog.LevelDebug
	case "info":
		lv = slog.LevelInfo
	case "warn", "warning":
		lv = slog.LevelWarn
	case "error":
		lv = slog.LevelError
	default:
		return nil, usagef("log level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, usagef("log format %q: want text or json", format)
	}
}

// loadConfig reads the file named by --config (or QUEUEBOX_CONFIG).
func loadConfig(g *globalFlags) (*config.Config, error) {
	if g.config == "" {
		return nil, usagef("no configuration: pass --config FILE or set QUEUEBOX_CONFIG (see config.example.yaml)")
	}
	cfg, err := config.Load(g.config)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", g.config, err)
	}
	return cfg, nil
}
