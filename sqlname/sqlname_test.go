package sqlname

import "testing"

func TestQuoting(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Postgres(`out"box`), `"out""box"`},
		{SQLServer("out]box"), "[out]]box]"},
		{Literal("it's"), "'it''s'"},
		{Postgres(""), `""`},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}
