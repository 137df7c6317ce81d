package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queuebox/queuebox/dialect"
)

// claimPortal names the portal of the claim statement in turnClaim.
const claimPortal = "qb_claim"

// cancelTimeout bounds the cancel request of a claim whose context ended.
const cancelTimeout = 2 * time.Second

// turnClaim runs a claim that takes the table's claim turn, planning the
// claim before it waits for the turn. With a plan for each execution
// (PlanEachExecution) PostgreSQL plans a statement when it binds its
// parameters, and the claim turn is the path that the claims of every relay
// share: planned after the turn was granted, the planning would add to the
// time every relay waits for the turn. So, in one round trip and one
// implicit transaction:
//
//	Bind claim to portal qb_claim   (plans it)
//	Bind + Execute the turn         (waits for the turn)
//	Execute qb_claim                (runs it on a snapshot taken now)
//	Sync                            (commits: the turn is released)
//
// The turn's statement (sql/turn/queue.sql) answers whether the claim had to
// queue for the turn behind another claim; OnClaimTurn's function hears it.
//
// The snapshot of an UPDATE … RETURNING is taken when its portal first
// runs, not when it is bound, so the claim still sees the rows the last
// claim took. pgx has no call that binds a named portal, so this speaks the
// extended protocol through pgconn (Frontend, ReceiveMessage). A failure to
// read the replies closes the connection, since its protocol state is
// unknown; an error from the server deallocates both statements.
//
// kept says whether query is one of the claim shapes the dialect keeps
// (claimShapes.sqlKept): those stay prepared on the connection; any other
// is deallocated after its claim, so that a caller asking for ever new
// shapes cannot fill the connections with prepared statements.
func (d *Dialect) turnClaim(ctx context.Context, query renderedClaim, kept bool, p dialect.ClaimParams) (dialect.Claimed, error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return dialect.Claimed{}, interpretError("claim", err)
	}
	defer c.Release()
	s := &turnSession{conn: c.Conn()}
	defer s.cleanUp(ctx)

	claim, err := s.conn.Prepare(ctx, query.name, query.sql)
	if err != nil {
		return dialect.Claimed{}, interpretError("claim", err)
	}
	if !kept {
		s.drop = append(s.drop, query.name)
	}
	turn, err := s.conn.Prepare(ctx, d.queueName, d.queueSQL)
	if err != nil {
		return dialect.Claimed{}, interpretError("claim turn", err)
	}
	formats := resultFormats(s.conn, claim)
	if err := ctx.Err(); err != nil {
		return dialect.Claimed{}, interpretError("claim", err) // nothing sent: nothing to cancel
	}
	params, err := d.claimParameters(s.conn, p)
	if err != nil {
		return dialect.Claimed{}, err
	}
	sent, err := s.send(claim, turn, params, formats)
	if err != nil {
		return dialect.Claimed{}, err
	}
	rows := &turnRows{conn: s.conn, fields: claim.Fields, formats: formats}
	claimed, err := s.receive(ctx, rows, p)
	if err != nil {
		// After an error from the server both statements go: they stay
		// prepared until told otherwise, and a claim prepared before the
		// table changed (a column's type: "cached plan must not change
		// result type") or dropped under it (DISCARD ALL) would fail on
		// this connection for good; they are prepared afresh next time.
		s.drop = []string{query.name, d.queueName}
	}
	d.reportTurn(rows, sent)
	switch {
	case rows.turnErr != nil:
		return dialect.Claimed{}, interpretError("claim turn", rows.turnErr)
	case err != nil:
		return dialect.Claimed{}, interpretError("claim", err)
	}
	return claimed, nil
}

// turnSession is turnClaim's hold on its connection: the statements to
// deallocate when the claim is over, and whether the connection is to
// close instead.
type turnSession struct {
	conn *pgx.Conn
	// drop: a shape that is not kept, or every statement after an error
	// from the server. The connection closes when deallocating fails.
	drop []string
	// broken: the replies were not read to the end, so the connection's
	// protocol state is unknown.
	broken bool
}

// cleanUp deallocates the statements to drop and closes a broken
// connection, on a context of its own: ctx may have ended.
func (s *turnSession) cleanUp(ctx context.Context) {
	if len(s.drop) > 0 && !s.broken {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		for _, n := range s.drop {
			if s.conn.Deallocate(dctx, n) != nil {
				s.broken = true
				break
			}
		}
		cancel()
	}
	if s.broken {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		_ = s.conn.PgConn().Close(cctx)
		cancel()
	}
}

// resultFormats asks for each column in the format pgx itself would: binary
// for the types it knows, text for the rest (an enum topic, say).
func resultFormats(conn *pgx.Conn, claim *pgconn.StatementDescription) []int16 {
	formats := make([]int16, len(claim.Fields))
	for i, f := range claim.Fields {
		formats[i] = conn.TypeMap().FormatCodeForOID(f.DataTypeOID)
	}
	return formats
}

// claimParameters encodes the claim's parameters as text: the token, the
// lease in microseconds, then the window's arguments.
func (d *Dialect) claimParameters(conn *pgx.Conn, p dialect.ClaimParams) ([][]byte, error) {
	params := [][]byte{[]byte(p.Token), strconv.AppendInt(nil, micros(p.Lease), 10)}
	for _, a := range d.claims.windowArgs(shapeOf(p), p) {
		switch v := a.(type) {
		case int64:
			params = append(params, strconv.AppendInt(nil, v, 10))
		case []string:
			// A text[] literal, quoted by pgx's own encoder (keys are row
			// data: any character).
			b, err := conn.TypeMap().Encode(pgtype.TextArrayOID, pgtype.TextFormatCode, v, nil)
			if err != nil {
				return nil, fmt.Errorf("postgres: claim: skip list: %w", err)
			}
			params = append(params, b)
		}
	}
	return params, nil
}

// send writes the exchange in one flush: bind the claim to its portal,
// bind and execute the turn, execute the claim, sync. It returns when it
// was sent.
func (s *turnSession) send(claim, turn *pgconn.StatementDescription, params [][]byte, formats []int16) (time.Time, error) {
	fe := s.conn.PgConn().Frontend()
	fe.SendBind(&pgproto3.Bind{
		DestinationPortal: claimPortal, PreparedStatement: claim.Name,
		ParameterFormatCodes: []int16{pgtype.TextFormatCode},
		Parameters:           params,
		ResultFormatCodes:    formats,
	})
	fe.SendBind(&pgproto3.Bind{PreparedStatement: turn.Name})
	fe.SendExecute(&pgproto3.Execute{})
	fe.SendExecute(&pgproto3.Execute{Portal: claimPortal})
	fe.SendSync(&pgproto3.Sync{})
	sent := time.Now()
	if err := fe.Flush(); err != nil {
		s.broken = true
		return sent, interpretError("claim", err)
	}
	return sent, nil
}

// receive reads the replies and scans the claimed rows. The context is
// watched once for the whole exchange, not for each message (pgconn's
// ReceiveMessage would for every row): when it ends, a read deadline in
// the past stops the next read from the socket. Replies already read into
// the buffer are still taken, so a claim whose answer has arrived in full
// is not dropped.
func (s *turnSession) receive(ctx context.Context, rows *turnRows, p dialect.ClaimParams) (dialect.Claimed, error) {
	pc := s.conn.PgConn()
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = pc.Conn().SetReadDeadline(time.Now())
	})
	claimed, err := scanClaim(rows, p)
	if !stop() {
		<-fired
		if !rows.broken && pc.Conn().SetReadDeadline(time.Time{}) != nil {
			rows.broken = true
		}
	}
	if rows.broken {
		// The server may still be at work on the claim: waiting for the
		// turn, then claiming rows nobody would read (they would wait for
		// their lease to expire). Giving up on the socket alone, as pgx
		// does, leaves it at that; cancel the statement (too late if it
		// has committed already: then they wait).
		s.broken = true
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		_ = pc.CancelRequest(cctx)
		cancel()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
	}
	return claimed, err
}

// reportTurn tells the OnClaimTurn functions how long the claim waited for
// the turn and whether it queued, when the turn was granted.
func (d *Dialect) reportTurn(rows *turnRows, sent time.Time) {
	if rows.granted.IsZero() {
		return
	}
	if d.turnWaited != nil {
		d.turnWaited(rows.granted.Sub(sent))
	}
	if d.turnQueued != nil {
		d.turnQueued(rows.queued)
	}
}

// preparedName names a statement that turnClaim prepares. Not its SQL
// text: pgx files a statement prepared under its own text by that text and
// hands it to every Query of the text on the connection. A poll (pollClaim)
// runs the same claim shapes through pgx's statement cache, which pgx
// invalidates after an error; sharing turnClaim's statement, which only
// turnClaim repairs, a poll after a column changed type failed on that
// connection for good.
func preparedName(sql string) string {
	sum := sha256.Sum256([]byte(sql))
	return "qb_" + hex.EncodeToString(sum[:16])
}

// turnRows reads the messages of turnClaim up to ReadyForQuery, offering
// the claim's rows to scanClaim (rowScanner).
type turnRows struct {
	conn    *pgx.Conn
	fields  []pgconn.FieldDescription
	formats []int16   // the result format of each field
	values  [][]byte  // the current row, in the read buffer
	binds   int       // BindCompletes seen: the claim's, then the turn's
	done    int       // CommandCompletes seen: the turn's, then the claim's
	err     error     // the first error: the server's, or reading
	turnErr error     // the server's error was the turn's
	broken  bool      // reading failed: the connection's state is unknown
	ended   bool      // ReadyForQuery seen
	granted time.Time // when the turn's statement completed
	queued  bool      // the turn's answer: it had to queue for the turn
}

// Next reads up to the claim's next row; at the end of the rows it reads
// on to ReadyForQuery (the commit).
func (r *turnRows) Next() bool {
	for !r.ended {
		msg, err := r.conn.PgConn().ReceiveMessage(context.Background()) // turnClaim watches the context
		if err != nil {
			// An error the server ends the session with (FATAL) closes
			// the connection in pgconn and arrives here, not as an
			// ErrorResponse.
			var pgErr *pgconn.PgError
			if r.err == nil {
				r.err = err
				if errors.As(err, &pgErr) && r.binds >= 1 && r.done == 0 {
					r.turnErr = err
				}
			}
			r.broken, r.ended = true, true
			return false
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			if r.done == 0 && len(m.Values) == 1 {
				r.queued = string(m.Values[0]) == "t" // text format
			}
			if r.done == 1 && r.err == nil {
				// Valid until the next message is read: Scan (which
				// copies) comes first.
				r.values = m.Values
				return true
			}
		case *pgproto3.BindComplete:
			r.binds++
		case *pgproto3.CommandComplete:
			if r.done++; r.done == 1 {
				r.granted = time.Now()
			}
		case *pgproto3.ErrorResponse:
			if r.err == nil {
				r.err = pgconn.ErrorResponseToPgError(m)
				if r.binds >= 1 && r.done == 0 { // the turn's Bind or Execute
					r.turnErr = r.err
				}
			}
		case *pgproto3.ReadyForQuery:
			r.ended = true
			if r.err == nil && (r.done != 2 || m.TxStatus != 'I') {
				r.err = fmt.Errorf("postgres: claim: unexpected end of the claim's messages (%d commands, transaction status %q)", r.done, m.TxStatus)
			}
		}
	}
	return false
}

// Scan decodes the current row into dest, one value per field.
func (r *turnRows) Scan(dest ...any) error {
	if len(dest) != len(r.values) || len(dest) != len(r.fields) {
		return fmt.Errorf("postgres: claim: %d values, %d fields, %d targets", len(r.values), len(r.fields), len(dest))
	}
	m := r.conn.TypeMap()
	for i, v := range r.values {
		if err := m.Scan(r.fields[i].DataTypeOID, r.formats[i], v, dest[i]); err != nil {
			return fmt.Errorf("postgres: claim: column %s: %w", r.fields[i].Name, err)
		}
	}
	return nil
}

// Err reports the first error, once the messages have been read to the end.
func (r *turnRows) Err() error { return r.err }

// Close reads the remaining messages, so that the connection is ready for
// its next statement (a scan error stops scanClaim before the end).
func (r *turnRows) Close() {
	for r.Next() {
	}
	if r.err == nil && !r.ended {
		r.err = errors.New("postgres: claim: messages not read to the end")
	}
}
