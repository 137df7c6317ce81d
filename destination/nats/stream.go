package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func (d *Destination) ensureStream(ctx context.Context, o Options) error {
	if o.CreateStream && o.Stream == "" {
		return fmt.Errorf("nats destination %q: createStream needs stream (a name)", o.Name)
	}
	if o.Stream == "" {
		return nil
	}
	_, err := d.js.Stream(ctx, o.Stream)
	switch {
	case err == nil:
		if o.CreateStream {
			d.log.Info("nats stream exists; configuration left unchanged", "stream", o.Stream)
		}
		return nil
	case !errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("nats destination %q: stream %q: %w", o.Name, o.Stream, err)
	case !o.CreateStream:
		return fmt.Errorf("nats destination %q: stream %q does not exist: create it (nats stream add %s --subjects ...), or set createStream: true and streamSubjects: %w", o.Name, o.Stream, o.Stream, err)
	}
	subjects := o.StreamSubjects
	if len(subjects) == 0 {
		if !d.subject.Static() {
			return fmt.Errorf("nats destination %q: createStream with a subject template (%q) needs streamSubjects", o.Name, d.subject.String())
		}
		subjects = []string{d.subject.String()}
	}
	if o.CheckOnly {
		d.toCreate = o.Stream
		return nil
	}
	_, err = d.js.CreateStream(ctx, jetstream.StreamConfig{Name: o.Stream, Subjects: subjects, Storage: jetstream.FileStorage})
	switch {
	case err == nil:
		d.log.Info("nats stream created", "stream", o.Stream, "subjects", subjects)
	case errors.Is(err, jetstream.ErrStreamNameAlreadyInUse):
		// It exists with another configuration: leave it alone.
		d.log.Info("nats stream exists; configuration left unchanged", "stream", o.Stream)
	default:
		return fmt.Errorf("nats destination %q: create stream %q %v: %w", o.Name, o.Stream, subjects, err)
	}
	return nil
}

// StreamToCreate is the configured stream that a CheckOnly New found
// missing and a New without CheckOnly creates (createStream: true); "" when
// it exists, or when New ran without CheckOnly.
func (d *Destination) StreamToCreate() string { return d.toCreate }

// StreamWarning says what the destination cannot know about where its
// messages will be stored, and the fix; "" when nothing is in doubt. With
// stream set, New has checked (or created) the stream. Without it, a
// static subject is looked up: no stream covering it means every publish
// fails, each row is retried and then dead. A subject template cannot be
// checked at all: a row whose subject no stream covers fails the same way,
// and only at its first publish. `queuebox check` and the relay's start
// print it.
func (d *Destination) StreamWarning(ctx context.Context) string {
	if d.stream != "" {
		return ""
	}
	if !d.subject.Static() {
		return fmt.Sprintf("nats destination %q: subject %q is a template and no stream is set, so nothing checks that a JetStream stream covers the subjects it renders; a row whose subject no stream covers is retried, then dead. Set stream (and createStream: true with streamSubjects to have the relay create it)", d.name, d.subject.String())
	}
	_, err := d.streamOfSubject(ctx)
	switch {
	case err == nil:
		return ""
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Sprintf("nats destination %q: no JetStream stream covers subject %q: every publish will fail, and each row be retried, then dead. Create a stream for it, or set stream and createStream: true", d.name, d.subject.String())
	}
	return fmt.Sprintf("nats destination %q: could not look up the stream of subject %q: %v", d.name, d.subject.String(), err)
}

// DuplicateWindow returns the duplicate window of the configured stream, or
// of the stream covering the subject when the subject is static. The engine
// warns when it is shorter than lease + longest backoff: a redelivery after
// the window is stored twice.
func (d *Destination) DuplicateWindow(ctx context.Context) (time.Duration, error) {
	name := d.stream
	if name == "" {
		if !d.subject.Static() {
			return 0, fmt.Errorf("nats destination %q: subject %q is a template; set stream to know the duplicate window", d.name, d.subject.String())
		}
		var err error
		name, err = d.streamOfSubject(ctx)
		if err != nil {
			return 0, fmt.Errorf("nats destination %q: stream for subject %q: %w", d.name, d.subject.String(), err)
		}
	}
	s, err := d.js.Stream(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("nats destination %q: stream %q: %w", d.name, name, err)
	}
	return s.CachedInfo().Config.Duplicates, nil
}

// streamOfSubject returns the stream covering the static subject. A stream
// found is remembered; a failed lookup is not, so the next call asks again.
func (d *Destination) streamOfSubject(ctx context.Context) (string, error) {
	d.subjectStreamMu.Lock()
	defer d.subjectStreamMu.Unlock()
	if d.subjectStream != "" {
		return d.subjectStream, nil
	}
	name, err := d.js.StreamNameBySubject(ctx, d.subject.String())
	if err != nil {
		return "", err
	}
	d.subjectStream = name
	return name, nil
}
