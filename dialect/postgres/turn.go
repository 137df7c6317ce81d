package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/queuebox/queuebox/dialect"
	"github.com/queuebox/queuebox/outbox"
)

// claimPortal names the portal of the claim statement in turnClaim.
const claimPortal = "qb_claim"

// cancelTimeout bounds the cancel request of a claim whose context ended.
const cancelTimeout = 2 * time.Second

// turnClaim runs a claim that takes the table's claim turn, planning the
// claim before it waits for the turn. With a plan for each execution
// (PlanEachExecution) PostgreSQL plans a statement when it binds its
// parameters, and the claim turn is the path that the claims of every relay
// share: planned after the turn was granted, planning took about an eighth
// of the time the turn was held (docs/performance.md, lesson 26). So, in
// one round trip and one implicit transaction:
//
//	Bind claim to portal qb_claim   (plans it)
//	Bind + Execute the turn         (waits for the turn)
//	Execute qb_claim                (runs it on a snapshot taken now)
//	Sync                            (commits: the turn is released)
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
func (d *Dialect) turnClaim(ctx context.Context, query string, kept bool, p dialect.ClaimParams) (msgs []outbox.Message, err error) {
	c, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, interpretError("claim", err)
	}
	defer c.Release()
	conn := c.Conn()
	claim, err := conn.Prepare(ctx, query, query)
	if err != nil {
		return nil, interpretError("claim", err)
	}
	turn, err := conn.Prepare(ctx, d.turnSQL, d.turnSQL)
	if err != nil {
		return nil, interpretError("claim turn", err)
	}
	// Each column in the format pgx itself would ask for: binary for the
	// types it knows, text for the rest (an enum topic, say).
	formats := make([]int16, len(claim.Fields))
	for i, f := range claim.Fields {
		formats[i] = conn.TypeMap().FormatCodeForOID(f.DataTypeOID)
	}
	pc := conn.PgConn()
	fe := pc.Frontend()
	fe.SendBind(&pgproto3.Bind{
		DestinationPortal: claimPortal, PreparedStatement: claim.Name,
		ParameterFormatCodes: []int16{pgtype.TextFormatCode},
		Parameters:           [][]byte{[]byte(p.Token), strconv.AppendInt(nil, micros(p.Lease), 10)},
		ResultFormatCodes:    formats,
	})
	fe.SendBind(&pgproto3.Bind{PreparedStatement: turn.Name})
	fe.SendExecute(&pgproto3.Execute{})
	fe.SendExecute(&pgproto3.Execute{Portal: claimPortal})
	fe.SendSync(&pgproto3.Sync{})
	sent := time.Now()
	if err := fe.Flush(); err != nil {
		_ = pc.Close(context.WithoutCancel(ctx))
		return nil, interpretError("claim", err)
	}
	rows := &turnRows{ctx: ctx, conn: conn, fields: claim.Fields, formats: formats}
	msgs, err = scanMessages(rows, p.Limit)
	if (err != nil || !kept) && !rows.broken {
		// A shape that is not kept goes. And after an error from the
		// server both go: the statements stay prepared until told
		// otherwise, and a claim prepared before the table changed (a
		// column's type: "cached plan must not change result type") or
		// dropped under it (DISCARD ALL) would fail on this connection
		// for good; they are prepared afresh next time.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		if conn.Deallocate(dctx, query) != nil || (err != nil && conn.Deallocate(dctx, d.turnSQL) != nil) {
			rows.broken = true
		}
		cancel()
	}
	if rows.broken {
		if ctx.Err() != nil {
			// pgx gives up on the socket only: the server would go on
			// waiting for the turn, then claim rows nobody reads (they
			// would wait for their lease to expire). Cancel the statement
			// (too late if it has committed already: then they wait).
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
			_ = pc.CancelRequest(cctx)
			cancel()
		}
		_ = pc.Close(context.WithoutCancel(ctx))
	}
	if !rows.granted.IsZero() && d.turnWaited != nil {
		d.turnWaited(rows.granted.Sub(sent))
	}
	switch {
	case rows.turnErr != nil:
		return nil, interpretError("claim turn", rows.turnErr)
	case err != nil:
		return nil, interpretError("claim", err)
	}
	return msgs, nil
}

// turnRows reads the messages of turnClaim up to ReadyForQuery, offering
// the claim's rows to scanMessages (rowScanner).
type turnRows struct {
	ctx     context.Context
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
}

// Next reads up to the claim's next row; at the end of the rows it reads
// on to ReadyForQuery (the commit).
func (r *turnRows) Next() bool {
	for !r.ended {
		msg, err := r.conn.PgConn().ReceiveMessage(r.ctx)
		if err != nil {
			r.err, r.broken, r.ended = err, true, true
			return false
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
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
// its next statement (a scan error stops scanMessages before the end).
func (r *turnRows) Close() {
	for r.Next() {
	}
	if r.err == nil && !r.ended {
		r.err = errors.New("postgres: claim: messages not read to the end")
	}
}
