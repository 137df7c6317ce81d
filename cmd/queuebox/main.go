// Command queuebox relays outbox rows from PostgreSQL (or SQL Server) to NATS
// JetStream, Kafka, RabbitMQ and HTTP webhooks. It is the only package that
// knows the concrete dialects and destinations: it reads the config, builds
// them with an explicit switch on their type, and hands them to relay.Engine.
//
// Exit status: 0 on success, 1 on failure, 2 on a usage error.
package main

// docs/cli.md describes the commands; its reference part is generated from
// them, and TestCLIReference fails when the two differ.
//go:generate go test -run ^TestCLIReference$ -update .

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/queuebox/queuebox/suggest"
)

// usageError is a mistake in the command line itself (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() { os.Exit(runMain()) }

// runMain runs the command line until SIGINT or SIGTERM and returns the
// exit status; main exits with it once the signals are released.
func runMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return execute(ctx, os.Args[1:])
}

// execute runs the command line args and returns the exit status.
func execute(ctx context.Context, args []string) int {
	root := newRootCmd()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(root.ErrOrStderr(), "queuebox:", err)
	var ue usageError
	if errors.As(err, &ue) {
		path := root.CommandPath()
		if cmd != nil {
			path = cmd.CommandPath() // the usage of the command that refused, e.g. queuebox replay
		}
		fmt.Fprintf(root.ErrOrStderr(), "Run '%s --help' for usage.\n", path)
		return 2
	}
	return 1
}

// globalFlags are the flags every command takes.
type globalFlags struct {
	config     string
	logFormat  string
	logLevel   string
	noProgress bool
	// progressEvery is the interval of the plain progress lines (hidden
	// flag --progress-interval; tests shorten it).
	progressEvery time.Duration
	// inbox: the operator commands act on the inbox table (--inbox).
	inbox bool
}

func newRootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "queuebox",
		Short:         "Relay transactional-outbox rows to NATS JetStream, Kafka, RabbitMQ and HTTP webhooks",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          unknownCommand,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usagef("a command is required")
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVarP(&g.config, "config", "c", os.Getenv("QUEUEBOX_CONFIG"), "configuration file (env QUEUEBOX_CONFIG)")
	pf.StringVar(&g.logFormat, "log-format", os.Getenv("QUEUEBOX_LOG_FORMAT"), "log format: text or json (env QUEUEBOX_LOG_FORMAT; default from config, else text)")
	pf.StringVar(&g.logLevel, "log-level", os.Getenv("QUEUEBOX_LOG_LEVEL"), "log level: debug, info, warn, error (env QUEUEBOX_LOG_LEVEL; default from config, else info)")
	pf.BoolVar(&g.noProgress, "no-progress", false, "no progress on stderr for long operations (replay, migrate, dead list, bench)")
	pf.DurationVar(&g.progressEvery, "progress-interval", time.Second, "interval of the plain progress lines written when stderr is not a terminal")
	_ = pf.MarkHidden("progress-interval")

	root.AddCommand(
		newRunCmd(g),
		newMigrateCmd(g),
		newCheckCmd(g),
		newDeadCmd(g),
		newReplayCmd(g),
		newStatsCmd(g),
		newDemoCmd(g),
		newBenchCmd(g),

		newVersionCmd(),
	)
	for _, c := range root.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	}
	return root
}

// unknownCommand refuses arguments where a subcommand was expected, with
// the nearest command's name when the word looks like a typo of one.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
			names = append(names, c.Aliases...)
		}
	}
	return usagef("unknown command %q for %q%s", args[0], cmd.CommandPath(), suggest.DidYouMean(args[0], names))
}

// noArgs is cobra.NoArgs returning a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, got %q", cmd.CommandPath(), args)
	}
	return nil
}
